"""Every example in docs/cli.md runs, against the shipped samples, and ends as the page says.

The ``sh`` blocks run in document order as one bash script, in a scratch
directory holding the repository's ``policies/`` and, as ``audit.jsonl``, the
real audit log (``tests/data/audit``). After each line the script checks its status:
``# exit N`` at the end of the line, else 0. Lines marked ``# needs a cluster`` or
``# serves until stopped`` cannot run here: the ``manifest-provider`` part of each is
parsed by the real parser instead, so its flags at least exist.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from provider.cli import COMMANDS, build_parser
from tests.support.audit import REAL_LOG
from tests.support.cli_docs import DOC
from tests.support.data import KYVERNO, REPO

pytestmark = pytest.mark.integration

SH_BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.DOTALL | re.MULTILINE)
EXPECTED = re.compile(r"#\s*exit (\d+)")
NOT_HERE = ("# needs a cluster", "# serves until stopped")


def example_lines(text: str) -> list[str]:
    return [line for block in SH_BLOCK.findall(text) for line in block.splitlines() if line.strip()]


def manifest_provider_words(line: str) -> list[str]:
    """The arguments of the ``manifest-provider`` command in a line (its part of a pipeline, before a redirect)."""
    command = line.split(" #", 1)[0]
    part = next(p for p in command.split("|") if "manifest-provider " in p).split(" > ", 1)[0]
    words = shlex.split(part)
    return words[words.index("manifest-provider") + 1 :]


def script(lines: list[str]) -> str:
    out = ["set -u"]
    for number, line in enumerate(lines, start=1):
        if line.lstrip().startswith("#"):
            continue
        if any(marker in line for marker in NOT_HERE):
            continue
        expected = EXPECTED.search(line)
        want = int(expected.group(1)) if expected else 0
        out.append(line)
        out.append(
            f'rc=$?; if [ "$rc" -ne {want} ]; then echo "example {number} ended with $rc, not {want}" >&2; exit 99; fi'
        )
    out.append("echo all-examples-ran")
    return "\n".join(out) + "\n"


def test_the_page_has_examples_for_every_command() -> None:
    lines = example_lines(DOC.read_text())
    commands = {manifest_provider_words(line)[0] for line in lines if "manifest-provider " in line}
    assert commands == set(COMMANDS)


def test_lines_that_cannot_run_here_still_parse() -> None:
    parser = build_parser()
    checked = 0
    for line in example_lines(DOC.read_text()):
        if any(marker in line for marker in NOT_HERE):
            parser.parse_args(manifest_provider_words(line))  # SystemExit(2) on an unknown flag
            checked += 1
    assert checked >= 5


def test_every_example_runs_and_ends_as_documented(tmp_path: Path) -> None:
    lines = example_lines(DOC.read_text())
    assert len(lines) >= 30
    (tmp_path / "policies").symlink_to(REPO / "policies")
    shutil.copy(REAL_LOG, tmp_path / "audit.jsonl")
    # A Kyverno validate.manifests policy for convert-policy's examples (the upstream interop fixture).
    shutil.copy(KYVERNO / "policies" / "cpol-count1-two-keys.yaml", tmp_path / "kyverno-policy.yaml")
    env = {k: v for k, v in os.environ.items() if k not in ("MANIFEST_PROVIDER_PASSWORD", "COSIGN_PASSWORD")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        ["bash", "-c", script(lines)], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    failed = re.search(r"example (\d+) ended", proc.stderr)
    assert proc.returncode == 0, (lines[int(failed.group(1)) - 1] if failed else "", proc.stderr[-3000:])
    assert proc.stdout.rstrip().endswith("all-examples-ran")
    assert (tmp_path / "app.yaml.signed").exists() and (tmp_path / "constraint.yaml").exists()


def test_the_script_catches_a_wrong_status(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", "-c", script(["false   # exit 0", "true"])], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 99 and "example 1 ended with 1, not 0" in proc.stderr


QUICKSTARTS = sorted((REPO / "docs").glob("quickstart-*.md"))


@pytest.mark.parametrize("page", QUICKSTARTS, ids=lambda p: p.stem)
def test_the_quickstarts_commands_parse_and_generate_their_policies(page: Path) -> None:
    """Their ``manifest-provider`` lines use flags that exist; each ``policy`` line needs only a cluster's CA
    (``kyverno-cel`` none: Kyverno's CEL http.Client(ca) cannot call, so Kyverno trusts the CA itself;
    ``webhook`` none: the API server's webhook configuration carries it), and enforces with the key the
    page made (a tenant's ``webhook --namespace`` policy: the tenant's own)."""
    parser = build_parser()
    lines = [
        text
        for text in (line.lstrip("# ").strip() for line in example_lines(page.read_text()))
        if text.startswith("manifest-provider ") or "| manifest-provider " in text
    ]
    policies = [line for line in lines if manifest_provider_words(line)[0] == "policy"]
    assert policies, page.name
    for line in lines:
        parser.parse_args(manifest_provider_words(line))
    for line in policies:
        args = parser.parse_args(manifest_provider_words(line))
        assert args.ca_from_cluster is (args.engine in ("gatekeeper", "kyverno")), line
        assert args.enforce and (args.key == ["team.pub"] or (args.engine == "webhook" and args.namespace)), line
