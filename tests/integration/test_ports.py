"""Ports: a port that cannot be bound is one line and exit 2, from ``serve`` and from ``make run``.

docs/cli.md: configuration errors exit 2. gunicorn binding a taken port itself retries
for five seconds, logs ``Can't connect`` and exits 1; the launcher binds both ports
first (provider/service/ports.py). ``make run`` checks both of its ports before
anything else, names only the variables it takes, prints both addresses, and keeps
its metrics port where the API is (127.0.0.1).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from provider.service.devcerts import make_dev_pki
from tests.support.data import REPO
from tests.support.server import command, running_server

pytestmark = pytest.mark.integration


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something listens on, on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MANIFEST_PROVIDER_")}
    env.update(extra)
    return env


def serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    pki = make_dev_pki(tmp_path / "pki")
    return subprocess.run(
        [*command(), "serve", "--cert", str(pki.server_cert), "--key", str(pki.server_key), "--workers", "1", *args],
        capture_output=True, text=True, timeout=60, check=False, env=clean_env(),
    )  # fmt: skip


def test_serve_on_a_taken_api_port_says_so_in_one_line_and_exits_2(busy_port: int, tmp_path: Path) -> None:
    proc = serve(tmp_path, "--bind", "127.0.0.1", "--port", str(busy_port), "--no-metrics-port")
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line == (
        f"manifest-provider serve: the API port cannot listen on 127.0.0.1 port {busy_port} "
        "(Address already in use); stop what uses it, or choose another with --port"
    )
    assert proc.stdout == ""


def test_serve_on_a_taken_metrics_port_says_so_in_one_line_and_exits_2(busy_port: int, tmp_path: Path) -> None:
    args = ("--bind", "127.0.0.1", "--port", str(free_port()), "--metrics-port", str(busy_port))
    proc = serve(tmp_path, *args)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"the metrics port cannot listen on 127.0.0.1 port {busy_port} (Address already in use)" in line
    assert "--metrics-port" in line and "--no-metrics-port" in line and "Errno" not in line


def test_the_metrics_port_listens_where_the_api_does_unless_told() -> None:
    metrics = free_port()
    with running_server(metrics=False, args=("--metrics-port", str(metrics))) as server:
        master = psutil.Process(server.pid)
        listening = {
            (c.laddr.ip, c.laddr.port) for c in master.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN
        }
    assert ("127.0.0.1", metrics) in listening  # the API's inherited socket is on 127.0.0.1
    assert ("0.0.0.0", metrics) not in listening


# --- make run ---------------------------------------------------------------------------------


def make_run(tmp_path: Path, **ports: int) -> subprocess.Popen[str]:
    words = [f"{name}={value}" for name, value in ports.items()]
    return subprocess.Popen(
        ["make", "--no-print-directory", "run", *words, f"PYTHON={sys.executable}"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env=clean_env(MANIFEST_PROVIDER_DEV_DIR=str(tmp_path / "dev")),
    )  # fmt: skip


def test_make_run_with_the_metrics_port_taken_says_so_first_and_names_its_variable(
    busy_port: int, tmp_path: Path
) -> None:
    proc = make_run(tmp_path, RUN_PORT=free_port(), METRICS_PORT=busy_port)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    first = output.strip().splitlines()[0]
    assert first == (
        f"make run: port {busy_port} (metrics) on 127.0.0.1 is not free (Address already in use); "
        f"stop what uses it or pick another: make run METRICS_PORT={busy_port + 1}"
    )
    assert "serving" not in output and "Traceback" not in output and "--metrics-port" not in output
    assert not (tmp_path / "dev").exists()


def test_the_dev_server_takes_the_metrics_port_before_writing_or_printing(busy_port: int, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "provider.service.dev"], capture_output=True, text=True, timeout=60, check=False,
        env=clean_env(MANIFEST_PROVIDER_PORT=str(free_port()), MANIFEST_PROVIDER_METRICS_PORT=str(busy_port),
                      MANIFEST_PROVIDER_DEV_DIR=str(tmp_path / "dev")),
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert f"port {busy_port} (metrics) on 127.0.0.1 is not free" in line and "METRICS_PORT=" in line
    assert not (tmp_path / "dev").exists()


def test_make_run_prints_both_addresses_and_serves_metrics_on_loopback(tmp_path: Path) -> None:
    api, metrics = free_port(), free_port()
    proc = make_run(tmp_path, RUN_PORT=api, METRICS_PORT=metrics)
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        # Up to the "serving" line (make may build the virtualenv first), and the line after it.
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("serving"):
                lines.append(proc.stdout.readline().strip())
                break
        assert f"serving https://127.0.0.1:{api} (client certificates required; Ctrl-C stops)" in lines, lines
        assert (
            f"metrics on http://127.0.0.1:{metrics}/metrics (no credentials; only this machine can reach it)" in lines
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as answer:
                    assert b"manifest_provider_build_info" in answer.read()
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        listening = {
            (c.laddr.ip, c.laddr.port) for c in psutil.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN
        }
        assert ("127.0.0.1", metrics) in listening and ("0.0.0.0", metrics) not in listening
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        proc.stdout.close()
