"""The parser ``main`` builds for one command says what the whole parser says (docs/cli.md is rendered from that).

``main`` builds only the parser of the command it is asked for, from the
declarations in ``provider.cli.COMMANDS``, so that a command imports no other
command's module: its ``--help``, the top level's, and argparse's errors must
still be exactly those of the parser with every command in it.
"""

from __future__ import annotations

import argparse
import os
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO

import pytest

from provider.cli import COMMANDS, build_parser, command_of, main
from tests.support.cli_docs import render


def run_main(args: list[str]) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    os.environ["COLUMNS"] = "100"  # as render() does, so both wrap alike
    with redirect_stdout(out), redirect_stderr(err), pytest.raises(SystemExit) as exited:
        main(args)
    return int(exited.value.code or 0), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_from_the_declarations_is_the_whole_parsers(command: str) -> None:
    code, out, _ = run_main([command, "--help"] if command else ["--help"])
    assert code == 0
    assert out == render(command)


def test_each_declared_help_is_the_commands_own() -> None:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    assert helps == COMMANDS


def test_help_before_a_command_is_the_top_level_help() -> None:
    code, out, _ = run_main(["-h", "verify"])
    assert code == 0
    assert out == render("")


def test_an_unknown_command_is_refused_with_every_choice() -> None:
    code, _, err = run_main(["verfy", "-f", "x"])
    assert code == 2
    assert "invalid choice: 'verfy'" in err
    for name in COMMANDS:
        assert f"'{name}'" in err


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["verify", "-f", "a.yaml"], "verify"),
        (["--version"], None),
        (["-h"], None),
        (["--", "verify"], None),
        (["-h", "verify"], None),
        ([], None),
    ],
    ids=["command", "version", "help", "after --", "help first", "nothing"],
)
def test_the_command_is_the_first_word_unless_an_option(argv: list[str], command: str | None) -> None:
    assert command_of(argv) == command
