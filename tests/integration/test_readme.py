"""The README's walkthrough and library snippet run as written, print what they say, and leave nothing to commit.

The shell block "Sign and verify in one minute" runs under bash in a scratch
directory (its ``. .venv/bin/activate`` finds a stand-in that puts this
checkout's CLI on PATH); the Python block then runs in the same directory.
Each ``# ...`` line under a command is output the block promises. The key the
walkthrough writes is one ``.gitignore`` keeps out of ``git add .``, and the
licence the README names is the one in LICENSE and setup.cfg.
"""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.data import REPO
from tests.support.pipelines import tool_bin, tool_env

pytestmark = pytest.mark.integration

README = REPO / "README.md"
BLOCK = re.compile(r"```(?P<lang>sh|python)\n(?P<body>.*?)```", re.DOTALL)


def block(language: str, containing: str) -> str:
    (found,) = [
        m["body"] for m in BLOCK.finditer(README.read_text()) if m["lang"] == language and containing in m["body"]
    ]
    return found


def promised(body: str) -> list[str]:
    """The output lines a block promises: its comment lines that start with an upper-case word or ``exit``."""
    lines = [line.strip().removeprefix("# ") for line in body.splitlines() if line.strip().startswith("# ")]
    return [line for line in lines if re.match(r"(PASS|FAIL|ALLOW) \[|exit \d|True |False ", line)]


def matches(line: str, output: str) -> bool:
    """``line`` appears in ``output``, an ellipsis standing for any run of characters."""
    pattern = ".*?".join(re.escape(part) for part in line.split("…"))
    return re.search(pattern, output) is not None


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    workdir = tmp_path_factory.mktemp("readme")
    activate = workdir / ".venv" / "bin" / "activate"
    activate.parent.mkdir(parents=True)
    activate.write_text(f'PATH="{tool_bin(workdir / ".bin")}:$PATH"\n')
    body = block("sh", "manifest-provider keygen")
    # `set -e` would stop at the tampered verify, which the block runs to show its exit code.
    proc = subprocess.run(["bash", "-u", "-c", body], capture_output=True, text=True, cwd=workdir,
                          env=tool_env(workdir), timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return workdir, proc.stdout


def test_the_walkthrough_prints_what_it_promises(walkthrough: tuple[Path, str]) -> None:
    _, output = walkthrough
    lines = promised(block("sh", "manifest-provider keygen"))
    assert len(lines) == 3, lines  # PASS, FAIL, exit 1
    for line in lines:
        assert matches(line, output), f"{line!r} not in:\n{output}"


def test_the_library_snippet_runs_and_prints_what_it_promises(walkthrough: tuple[Path, str]) -> None:
    workdir, _ = walkthrough
    body = block("python", "from provider import")
    proc = subprocess.run([sys.executable, "-c", body], capture_output=True, text=True, cwd=workdir,
                          env=tool_env(workdir), timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (line,) = promised(body)
    assert matches(line, proc.stdout), (line, proc.stdout)


def test_the_key_the_walkthrough_writes_is_never_committed(walkthrough: tuple[Path, str]) -> None:
    workdir, _ = walkthrough
    written = sorted(p.name for p in workdir.glob("*.key"))
    assert written == ["team.key"]
    for name in (*written, "signing.key", "cosign.key", "deploy/prod/signing.key"):
        check = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", "--no-index", name], check=False)
        assert check.returncode == 0, f"{name} is not ignored by .gitignore"
    kept = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", "--no-index", "team.pub"], check=False)
    assert kept.returncode == 1  # public keys may be committed


def test_the_licence_is_apache_2() -> None:
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    assert setup["metadata"]["license"] == "Apache-2.0"
    assert "Licence: Apache-2.0 ([LICENSE](LICENSE))" in README.read_text()
