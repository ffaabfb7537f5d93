"""``classify`` without a policy (the profiles alone), its progress line on a terminal, and a reader gone away."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provider.cli.classify import REFRESH_PER_SECOND, CountingReader, Progress
from tests.support.audit import REAL_LOG, event
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign

pytestmark = pytest.mark.integration

#: The real log's table with a key nobody holds and no skipUsers: docs/classify.md, "The table for a real install".
TABLE = {
    "out-of-scope": 655,
    "common-profile": 459,
    "app-profile": 0,
    "valid-signature": 0,
    "invalid-signature": 1,
    "unprocessed": 22,
}


def classify(
    *args: str | Path, stderr: int | None = None, stdin: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = subprocess.run(
        [sys.executable, "-m", "provider.cli", "classify", *map(str, args)],
        stdout=subprocess.PIPE, stderr=stderr if stderr is not None else subprocess.PIPE,
        env={**env, "COLUMNS": "100"}, input=stdin, timeout=120, check=False,
    )  # fmt: skip
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), (proc.stderr or b"").decode())


def test_the_profiles_alone_need_no_policy_and_give_the_documented_table() -> None:
    proc = classify("-f", REAL_LOG, "-o", "json")
    assert proc.returncode == 1, proc.stderr  # the person's unsigned writes would be stopped
    assert json.loads(proc.stdout)["classes"] == TABLE
    assert "profiles only (no -c, -k or --signer): no signature was checked" in proc.stderr


def test_a_signed_write_reads_as_class_5_without_keys_and_class_4_with_its_key(tmp_path: Path) -> None:
    key = make_key()
    (signed,) = sign(configmap("app", "shop"), key)
    log = tmp_path / "audit.jsonl"
    log.write_text(json.dumps(event(body=signed, namespace="shop", name="app")) + "\n")
    alone = classify("-f", log, "--events")
    (line,) = alone.stdout.splitlines()
    assert json.loads(line)["class"] == "invalid-signature"
    assert json.loads(line)["reason"] == "signature-invalid"
    pub = tmp_path / "team.pub"
    pub.write_text(public_key_pem(key))
    with_key = classify("-f", log, "--events", "-k", pub)
    assert json.loads(with_key.stdout)["class"] == "valid-signature"
    assert "profiles only" not in with_key.stderr
    config = tmp_path / "policy.yaml"
    config.write_text(yaml.safe_dump({"keys": [public_key_pem(key)]}))
    assert json.loads(classify("-f", log, "--events", "-c", config).stdout)["class"] == "valid-signature"


def test_progress_is_shown_on_a_terminal_only() -> None:
    master, slave = os.openpty()
    try:
        proc = classify("-f", REAL_LOG, "-o", "json", stderr=slave)
        os.close(slave)
        screen = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            screen += chunk
    finally:
        os.close(master)
    assert proc.returncode == 1
    text = screen.decode()
    assert "classify: 1,137 lines, " in text and " MB/s), 1,137 events classified in " in text
    assert ", 100 % (" in text  # a plain file: the share read
    assert json.loads(proc.stdout)["classes"] == TABLE  # standard output untouched
    piped = classify("-f", REAL_LOG, "-o", "json")
    assert "lines," not in piped.stderr and "\r" not in piped.stderr


def test_the_progress_line_is_redrawn_at_most_a_few_times_a_second(tmp_path: Path) -> None:
    """A fake clock: 10,000 events over 5 seconds redraw at most 5 * REFRESH_PER_SECOND + 1 times."""
    now = [0.0]

    class Screen:
        text = ""

        def write(self, text: str) -> None:
            self.text += text

        def flush(self) -> None:
            pass

    reader = CountingReader(open(REAL_LOG, "rb"))  # noqa: SIM115 - closed below
    screen = Screen()
    progress = Progress(reader, screen, None, clock=lambda: now[0])  # type: ignore[arg-type]
    try:
        for i in range(10_000):
            reader.readline()
            now[0] = i * 5 / 10_000
            progress.tick(True)
    finally:
        reader.stream.close()  # type: ignore[attr-defined]
    assert 5 * REFRESH_PER_SECOND - 2 <= progress.shown <= 5 * REFRESH_PER_SECOND + 1
    assert screen.text.count("\r\x1b[K") == progress.shown
    progress.finish()
    assert screen.text.endswith("10,000 events classified in 5.0 s\n")


def test_a_closed_pipe_ends_the_event_stream_quietly() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "provider.cli", "classify", "-f", str(REAL_LOG), "--events"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err and "Broken pipe" not in err
