"""``manifest-provider observe``, the real command against the fake API server: passes, reports, metrics.

Each pass is one JSON line on standard error; the metrics are scraped over plain
HTTP as Prometheus would. Between passes the tests change the cluster (a write to
an object) or the trust material (the key file), and read what the next pass did.
"""

from __future__ import annotations

import json
import queue
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.data import REPO, load_yaml
from tests.support.fakeapi import FakeApiServer
from tests.support.keys import make_key, public_key_pem
from tests.support.live import PUBLIC_KEY, deployment, reimaged, scaled, signed, signed_configmap

pytestmark = pytest.mark.integration

ASSETS = REPO / "tests" / "assets" / "policyreport"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Observe:
    fake: FakeApiServer
    tmp: Path

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "provider.cli", "observe", "--targets", str(self.tmp / "targets.yaml"),
                "-k", str(self.tmp / "key.pub"), "--kubeconfig", str(self.fake.kubeconfig(self.tmp / "kubeconfig")), *args]  # fmt: skip

    def once(self, *args: str) -> tuple[int, list[dict[str, Any]]]:
        proc = subprocess.run(
            self.command("--once", "--metrics-port", "0", *args),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return proc.returncode, [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]


@pytest.fixture
def observe(fake: FakeApiServer, tmp_path: Path) -> Observe:
    for path in sorted(ASSETS.glob("*.yaml")):
        fake.install_crd(load_yaml(path)[0])
    (tmp_path / "key.pub").write_text(PUBLIC_KEY)
    targets = {
        "targets": [
            {"resource": "deployments.apps", "namespaces": ["shop"]},
            {"resource": "cm", "namespaces": ["shop", "bank"]},
        ]
    }
    (tmp_path / "targets.yaml").write_text(yaml.safe_dump(targets))
    fake.add(scaled(signed(deployment("web"))))
    fake.add(reimaged(signed(deployment("bad"))))
    fake.add(signed_configmap("settings"))
    fake.add(signed_configmap("ledger", "bank"))
    fake.add(signed_configmap("elsewhere", "other"))  # not a target's namespace
    return Observe(fake, tmp_path)


def reports(fake: FakeApiServer) -> dict[str, dict[str, Any]]:
    return {r["scope"]["name"]: r["results"][0] for r in fake.stored("wgpolicyk8s.io/v1alpha2", "PolicyReport")}


def test_one_pass_reports_every_object_of_every_target(observe: Observe) -> None:
    code, log = observe.once()
    assert code == 0, log
    (done,) = [e for e in log if e["event"] == "pass"]
    assert (done["objects"], done["verified"], done["results"]) == (4, 4, {"pass": 3, "fail": 1})
    assert done["failing"] == {"content-mismatch": 1} and done["reports"] == {"created": 4}
    found = reports(observe.fake)
    assert sorted(found) == ["bad", "ledger", "settings", "web"]
    assert found["web"]["result"] == "pass" and "spec.replicas" in found["web"]["message"]
    assert found["bad"]["result"] == "fail"
    code, log = observe.once()  # a new process: verifies again, and finds every report already saying so
    assert [e["reports"] for e in log if e["event"] == "pass"] == [{"unchanged": 4}]


def test_a_target_that_cannot_be_read_fails_the_pass_and_the_others_are_reported(observe: Observe) -> None:
    observe.fake.forbidden_resources = {"deployments"}
    code, log = observe.once()
    (done,) = [e for e in log if e["event"] == "pass"]
    assert code == 1 and done["objects"] == 2
    assert 'cannot list resource "deployments"' in done["failedTargets"][0]["error"]
    assert sorted(reports(observe.fake)) == ["ledger", "settings"]


class Running:
    """The command running in the background, its log lines in a queue."""

    def __init__(self, command: list[str]) -> None:
        self.proc = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if line.startswith("{"):
                self.lines.put(json.loads(line))

    def next(self, event: str, timeout: float = 60) -> dict[str, Any]:
        while True:
            entry = self.lines.get(timeout=timeout)
            if entry["event"] == event:
                return entry


@pytest.fixture
def running(observe: Observe) -> Iterator[tuple[Running, int]]:
    port = free_port()
    run = Running(observe.command("--interval", "1", "--metrics-port", str(port), "--metrics-address", "127.0.0.1"))
    try:
        yield run, port
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
        run.proc.wait(timeout=30)
        run.reader.join(timeout=30)
        assert run.proc.stderr is not None
        run.proc.stderr.close()


def metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("manifest_provider_observer_"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def test_passes_reverify_only_what_changed_and_keep_reports_and_metrics_current(
    observe: Observe, running: tuple[Running, int]
) -> None:
    run, port = running
    first = run.next("pass")
    assert (first["objects"], first["verified"], first["cached"]) == (4, 4, 0)
    scraped = metrics(port)
    assert scraped['manifest_provider_observer_objects{result="pass"}'] == 3
    assert scraped['manifest_provider_observer_failures{reason="content-mismatch"}'] == 1
    assert scraped["manifest_provider_observer_last_full_pass_timestamp_seconds"] > 0
    assert scraped['manifest_provider_observer_report_writes_total{result="created"}'] == 4

    quiet = run.next("pass")
    assert (quiet["verified"], quiet["cached"], quiet["reports"]) == (0, 4, {})

    (web,) = [d for d in observe.fake.stored("apps/v1", "Deployment") if d["metadata"]["name"] == "web"]
    observe.fake.change(reimaged(web))  # someone changes the image of a running Deployment
    changed = run.next("pass")
    while changed["verified"] == 0:  # the write may have landed after a pass began
        changed = run.next("pass")
    assert (changed["verified"], changed["cached"], changed["reports"]) == (1, 3, {"updated": 1})
    assert reports(observe.fake)["web"]["result"] == "fail"
    assert metrics(port)['manifest_provider_observer_failures{reason="content-mismatch"}'] == 2

    (observe.tmp / "key.pub").write_text(public_key_pem(make_key("ecdsa-p256", 152)))  # the key is rotated
    rotated = run.next("pass")
    while rotated["verified"] == 0:
        rotated = run.next("pass")
    assert rotated["verified"] == 4 and rotated["results"] == {"fail": 4}

    run.proc.send_signal(signal.SIGTERM)
    assert run.next("stopped")["event"] == "stopped"
    assert run.proc.wait(timeout=30) == 0


def test_an_unusable_targets_file_is_a_usage_error(observe: Observe) -> None:
    (observe.tmp / "targets.yaml").write_text("targets: []\n")
    proc = subprocess.run(observe.command("--once"), capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "non-empty list 'targets'" in proc.stderr
