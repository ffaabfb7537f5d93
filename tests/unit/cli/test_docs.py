"""docs/cli.md documents every command, with help text equal to the real parser's."""

from __future__ import annotations

import pytest

from provider.cli import COMMANDS
from tests.support.cli_docs import DOC, blocks, render


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_block_is_current(command: str) -> None:
    documented = blocks(DOC.read_text())
    assert command in documented, (
        f"docs/cli.md has no help block for {command or 'the top level'}; run python -m tests.support.cli_docs"
    )
    assert documented[command] == render(command), "docs/cli.md is out of date; run python -m tests.support.cli_docs"
