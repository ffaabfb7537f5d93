"""Keep docs/cli.md's help blocks equal to the real ``--help`` output.

``python -m tests.support.cli_docs`` rewrites every ``<!-- help: CMD -->`` block in
docs/cli.md from the parser itself; ``tests/unit/cli/test_docs.py`` fails when
they drift. Help is rendered 100 columns wide so the text is stable.
"""

from __future__ import annotations

import os
import re
import sys
from contextlib import redirect_stdout, suppress
from io import StringIO
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
BLOCK = re.compile(r"<!-- help: (?P<cmd>[\w-]*) -->\n```text\n(?P<body>.*?)```\n<!-- /help -->", re.DOTALL)


def render(command: str) -> str:
    from provider.cli import build_parser

    os.environ["COLUMNS"] = "100"
    parser = build_parser()
    out = StringIO()
    args = [command, "--help"] if command else ["--help"]
    with redirect_stdout(out), suppress(SystemExit):  # --help exits
        parser.parse_args(args)
    return out.getvalue()


def blocks(text: str) -> dict[str, str]:
    return {m["cmd"]: m["body"] for m in BLOCK.finditer(text)}


def rewrite(text: str) -> str:
    return BLOCK.sub(lambda m: f"<!-- help: {m['cmd']} -->\n```text\n{render(m['cmd'])}```\n<!-- /help -->", text)


if __name__ == "__main__":
    DOC.write_text(rewrite(DOC.read_text()))
    print(f"rewrote {len(blocks(DOC.read_text()))} help blocks in {DOC}", file=sys.stderr)
