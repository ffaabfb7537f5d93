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

    def until(self, done: Any, timeout: float = 60) -> list[dict[str, Any]]:
        """The log lines up to the first point where ``done(lines)`` holds."""
        seen: list[dict[str, Any]] = []
        while not done(seen):
            seen.append(self.lines.get(timeout=timeout))
        return seen

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


def test_a_policy_file_that_drops_the_default_profiles_is_a_warning_once(observe: Observe) -> None:
    (observe.tmp / "policy.yaml").write_text("defaults: [argocd]\n")
    code, log = observe.once("-c", str(observe.tmp / "policy.yaml"))
    assert code == 0, log
    (warning,) = [e for e in log if e["event"] == "warning"]
    assert "leaves out the default profiles k8s-manifest-sigstore, common" in warning["message"]


# --- --watch: each change as it happens ----------------------------------------------------------------


@pytest.fixture
def following(observe: Observe) -> Iterator[Running]:
    """``observe --watch`` with an interval no test waits for: what it does, the watch did."""
    observe.fake.store.bookmark_seconds = 0.5
    run = Running(observe.command("--watch", "--interval", "3600", "--metrics-port", "0"))
    try:
        listed = {run.next("listed")["target"] for _ in range(3)}
        assert listed == {
            "deployments.apps in namespace shop",
            "configmaps in namespace shop",
            "configmaps in namespace bank",
        }
        yield run
    finally:
        if run.proc.poll() is None:
            run.proc.send_signal(signal.SIGTERM)
            try:
                run.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                run.proc.kill()
        run.proc.wait(timeout=30)
        run.reader.join(timeout=30)
        assert run.proc.stderr is not None
        run.proc.stderr.close()


def test_watch_verifies_a_change_when_it_happens(observe: Observe, following: Running) -> None:
    assert sorted(reports(observe.fake)) == ["bad", "ledger", "settings", "web"]
    (web,) = [d for d in observe.fake.stored("apps/v1", "Deployment") if d["metadata"]["name"] == "web"]
    changed = observe.fake.change(reimaged(web))
    checked = following.next("checked")
    assert checked["object"] == "Deployment.apps shop/web"
    assert checked["resourceVersion"] == changed["metadata"]["resourceVersion"]
    assert (checked["result"], checked["reason"], checked["report"]) == ("fail", "content-mismatch", "updated")
    assert reports(observe.fake)["web"]["result"] == "fail"
    following.proc.send_signal(signal.SIGTERM)
    assert following.next("stopped")["event"] == "stopped"
    assert following.proc.wait(timeout=60) == 0


def test_watch_deletes_the_report_of_a_deleted_object(observe: Observe, following: Running) -> None:
    observe.fake.remove("apps/v1", "Deployment", "shop", "bad")
    deleted = following.next("deleted")
    assert (deleted["object"], deleted["report"]) == ("Deployment.apps shop/bad", "deleted")
    assert sorted(reports(observe.fake)) == ["ledger", "settings", "web"]


def test_watch_resumes_a_dropped_connection_from_the_last_version(observe: Observe, following: Running) -> None:
    lists_before = len(
        [
            r
            for r in observe.fake.requests
            if "watch" not in r.query and r.path.endswith(("/configmaps", "/deployments"))
        ]
    )
    last = {w.path: w.query["resourceVersion"][0] for w in observe.fake.watches()}
    assert observe.fake.drop_watches() == 3
    seen = following.until(lambda log: len([e for e in log if e["event"] == "resumed"]) == 3)
    assert len({e["target"] for e in seen if e["event"] == "resumed"}) == 3
    assert not [e for e in seen if e["event"] in ("relist", "listed")]
    again = [w for w in observe.fake.watches() if w.status == 200][3:]
    # Each resumed from at least where its last watch began (bookmarks may have moved it on), none listed again.
    assert all(int(w.query["resourceVersion"][0]) >= int(last[w.path]) for w in again)
    lists_after = len(
        [
            r
            for r in observe.fake.requests
            if "watch" not in r.query and r.path.endswith(("/configmaps", "/deployments"))
        ]
    )
    assert lists_after == lists_before


def test_watch_lists_again_after_a_410_and_deletes_what_it_missed(observe: Observe, following: Running) -> None:
    fake = observe.fake
    fake.store.watch_failures = 10**6  # while the watches are down ...
    fake.drop_watches()
    fake.remove("v1", "ConfigMap", "shop", "settings")  # ... an object is deleted, unseen,
    fake.add(signed_configmap("fresh"))  # another is created,
    fake.store.compact()  # and the server forgets those versions.
    fake.store.watch_failures = 0
    seen = following.until(
        lambda log: len([e for e in log if e["event"] == "relist"]) == 3 and any(e["event"] == "deleted" for e in log)
    )
    assert {e["target"] for e in seen if e["event"] == "relist"} == {
        "deployments.apps in namespace shop",
        "configmaps in namespace shop",
        "configmaps in namespace bank",
    }
    assert all("too old resource version" in e["why"] for e in seen if e["event"] == "relist")
    (deleted,) = [e for e in seen if e["event"] == "deleted"]
    assert (deleted["object"], deleted["report"], deleted["seen"]) == ("ConfigMap shop/settings", "deleted", "list")
    assert sorted(reports(fake)) == ["bad", "fresh", "ledger", "web"]


def test_watch_waits_for_a_policy_it_can_read(observe: Observe) -> None:
    """As passes do: an unreadable policy is said, and read again every interval, before anything is watched."""
    policy = observe.tmp / "policy.yaml"
    policy.write_text("keyz: []\n")
    run = Running(observe.command("-c", str(policy), "--watch", "--interval", "0.5", "--metrics-port", "0"))
    try:
        assert "unknown field 'keyz'" in run.next("policy-invalid")["message"]
        assert observe.fake.watches() == []
        policy.write_text("defaults: [k8s-manifest-sigstore, common]\n")
        run.next("listed")
    finally:
        run.proc.kill()
        run.proc.wait(timeout=30)
        run.reader.join(timeout=30)
        assert run.proc.stderr is not None
        run.proc.stderr.close()
