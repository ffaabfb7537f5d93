"""Faults under load: the API server killed, slowed, answering 500; a gunicorn worker killed.

The real server (two gunicorn workers, TLS, client certificates) runs against the fake
API server (``tests.support.fakeapi``) through a TCP proxy that can "kill" it (the port then
refuses connections, live connections are reset) and bring it back on the same port.
Background traffic runs throughout, on both routes: Deployments that verify only
through a server-side dry-run ("cluster"), and ConfigMaps that verify without the
cluster ("local"). For each fault:

* every answer comes within the deadline (2.5 s, plus slack for TLS on a busy machine);
* nothing is allowed that did not verify: during the fault a cluster request is a
  ``dry-run-failed`` or ``deadline-exceeded`` error or denial -- fail closed;
* when the fault ends the service recovers by itself -- no restart, no intervention.

A killed worker takes the requests it was serving with it (their connections reset:
what Gatekeeper and Kyverno treat as a failed call, so fail closed); gunicorn starts
a new worker and everything after is answered.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import http.client
import json
import os
import signal
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from tests.support.fakeapi import FakeApiServer, recording
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign
from tests.support.server import Server, running_server

#: One fake API server for the module's real server and proxy (tests/conftest.py); "slow" answers after 5 s.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.fake_api(per="module", make=functools.partial(FakeApiServer, slow_seconds=5.0)),
]

GATEKEEPER = "/v1/gatekeeper/verify"
KYVERNO = "/v1/kyverno/verify"
#: The service's deadline plus slack for TLS and a loaded two-core machine.
ANSWER_WITHIN = 2.5 + 1.0
#: Seconds the service may take to verify cluster requests again once a fault ends
#: (in-flight dry-runs of a slow server end at the 1.5 s dry-run timeout).
RECOVERY_WITHIN = 3.0
#: Seconds of traffic before, during and after each fault.
BEFORE, DURING, AFTER = 1.5, 3.0, 4.5
KEY = make_key("ecdsa-p256", 7)
LOCAL_POLICY = {"keys": [public_key_pem(KEY)]}
CLUSTER_POLICY = {"keys": [public_key_pem(KEY)], "dryRun": {"enabled": True}}
FAIL_CLOSED = ("dry-run-failed", "deadline-exceeded")


# --- a proxy in front of the fake API server, to kill it and bring it back ---------------


class Proxy:
    """Forwards TCP to the fake API server; :meth:`kill` makes its port refuse, :meth:`revive` listens again."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._listener: socket.socket | None = None
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()

    def revive(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def kill(self) -> None:
        """Close the port and reset every live connection: the API server process is gone."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            for conn in self._connections:
                with contextlib.suppress(OSError):
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset on close
                    conn.shutdown(socket.SHUT_RDWR)  # wakes the pump blocked in recv(); close() alone would not
                conn.close()
            self._connections.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # killed while this one was being connected: it must not survive
                    client.close()
                    upstream.close()
                    continue
                self._connections.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


# --- traffic ----------------------------------------------------------------------------


def figure1() -> dict[str, Any]:
    """The seed paper's Figure 1 Deployment, signed, admitted as the API server made it: verifies only by dry-run."""
    rec = recording("deployment-seed-paper-figure1")
    (signed,) = sign(rec.request_body, KEY)
    admitted = copy.deepcopy(rec.body)
    admitted["metadata"]["annotations"] = signed["metadata"]["annotations"]
    return admitted


FIGURE1 = figure1()
LOCAL = sign(configmap("local", "default", mode="production"), KEY)[0]


def admission(obj: dict[str, Any]) -> dict[str, Any]:
    return {"uid": str(uuid.uuid4()), "operation": "CREATE", "namespace": obj["metadata"].get("namespace", "default"),
            "name": obj["metadata"].get("name"), "userInfo": {"username": f"u-{uuid.uuid4()}@example.com", "groups": []},
            "object": obj}  # fmt: skip


def request_body(kind: str, route: str) -> bytes:
    obj, policy = (FIGURE1, CLUSTER_POLICY) if kind == "cluster" else (LOCAL, LOCAL_POLICY)
    review = admission(obj)
    if route == KYVERNO:
        return json.dumps({"request": review, "policy": policy}).encode()
    key = json.dumps({"review": review, "policy": policy})
    return json.dumps(
        {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest", "request": {"keys": [key]}}
    ).encode()


@dataclass(frozen=True)
class Answer:
    kind: str
    route: str
    sent: float
    seconds: float
    outcome: str  # "allowed:<reason>", "denied:<reason>", "error:<reason>", "transport:<exception>"


def outcome_of(route: str, status: int, data: bytes) -> str:
    if status != 200:
        return f"http:{status}"
    answer = json.loads(data)
    if route == GATEKEEPER:
        response = answer["response"]
        if response["systemError"]:
            return "error:" + response["systemError"].split(":", 1)[0]
        item = response["items"][0]
        if "error" in item:
            return "error:" + item["error"].split(":", 1)[0]
        answer = item["value"]
    return ("allowed:" if answer["allowed"] else "denied:") + answer["reason"]


@dataclass
class Load:
    """Background traffic: ``senders`` connections, each sending a request every ``interval`` seconds."""

    server: Server
    senders: int = 4
    interval: float = 0.1
    answers: list[Answer] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Load:
        for n in range(self.senders):
            thread = threading.Thread(target=self._run, args=(n,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _run(self, n: int) -> None:
        conn: http.client.HTTPSConnection | None = None
        count = 0
        while not self._stop.is_set():
            kind = "cluster" if count % 2 == 0 else "local"
            route = GATEKEEPER if (count + n) % 3 else KYVERNO
            count += 1
            body = request_body(kind, route)
            sent = time.monotonic()
            try:
                conn = conn or self.server.connection(timeout=30)
                conn.request("POST", route, body=body)
                response = conn.getresponse()
                outcome = outcome_of(route, response.status, response.read())
            except (OSError, http.client.HTTPException) as exc:
                outcome = f"transport:{type(exc).__name__}"
                if conn is not None:
                    conn.close()
                conn = None
            self.answers.append(Answer(kind, route, sent, time.monotonic() - sent, outcome))
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - sent)))
        if conn is not None:
            conn.close()

    def between(self, start: float, end: float, kind: str | None = None) -> list[Answer]:
        return [a for a in self.answers if start <= a.sent < end and (kind is None or a.kind == kind)]


# --- fixtures ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def proxy(fake: FakeApiServer) -> Iterator[Proxy]:
    front = Proxy(fake.port)
    front.revive()
    yield front
    front.kill()


@pytest.fixture(scope="module")
def server(fake: FakeApiServer, proxy: Proxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    path = fake.kubeconfig(Path(tmp_path_factory.mktemp("kube")) / "kubeconfig")
    config = yaml.safe_load(path.read_text())
    config["clusters"][0]["cluster"]["server"] = (
        f"https://127.0.0.1:{proxy.port}"  # the fake's certificate names 127.0.0.1
    )
    path.write_text(yaml.safe_dump(config))
    with running_server(env={"MANIFEST_PROVIDER_KUBECONFIG": str(path)}, args=("--workers", "2")) as started:
        deadline = time.monotonic() + 30
        while len(psutil.Process(started.pid).children()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        yield started


@pytest.fixture(autouse=True)
def healthy(fake: FakeApiServer, proxy: Proxy) -> Iterator[None]:
    fake.fault = None
    yield
    fake.fault = None
    if proxy._listener is None:
        proxy.revive()


# --- the checks -------------------------------------------------------------------------


def check_fault(load: Load, fault_start: float, fault_end: float) -> dict[str, Any]:
    answers = load.answers
    assert answers, "no traffic"
    transport = [a for a in answers if a.outcome.startswith(("transport:", "http:"))]
    assert not transport, transport[:5]
    slow = [a for a in answers if a.seconds > ANSWER_WITHIN]
    assert not slow, [(a.kind, a.route, round(a.seconds, 2), a.outcome) for a in slow[:5]]
    # Nothing is allowed that did not verify; a local object verifies or fails closed.
    for a in answers:
        assert a.outcome in ("allowed:verified", *(f"{k}:{r}" for k in ("error", "denied") for r in FAIL_CLOSED)), a
    before = [a for a in answers if a.sent + a.seconds < fault_start]  # answered before the fault began
    assert before and all(a.outcome == "allowed:verified" for a in before), [
        a for a in before if a.outcome != "allowed:verified"
    ][:5]
    # Sent once the fault had taken hold and answered before it ended. A request sent before the
    # end but answered after it may have waited in the service's queue (a loaded two-core machine)
    # and reached the API server once it was back: verifying it then is right.
    during = [a for a in load.between(fault_start + 0.2, fault_end, "cluster") if a.sent + a.seconds < fault_end]
    assert during and all(a.outcome != "allowed:verified" for a in during), [
        a for a in during if a.outcome == "allowed:verified"
    ][:5]
    # Recovery: once the fault ends, every cluster request verifies again, by itself.
    recovered = load.between(fault_end + RECOVERY_WITHIN, float("inf"))
    assert len(recovered) >= 4 and all(a.outcome == "allowed:verified" for a in recovered), recovered[:5]
    local_during = load.between(fault_start, fault_end, "local")
    return {
        "during": len(during),
        "local_verified_during": sum(a.outcome == "allowed:verified" for a in local_during),
        "local_during": len(local_during),
    }


def run_fault(server: Server, start_fault: Any, end_fault: Any) -> tuple[Load, float, float]:
    with Load(server) as load:
        time.sleep(BEFORE)
        fault_start = time.monotonic()
        start_fault()
        time.sleep(DURING)
        fault_end = time.monotonic()
        end_fault()
        time.sleep(AFTER)
    return load, fault_start, fault_end


def test_the_api_server_killed_during_load_fails_closed_and_the_service_recovers_when_it_is_back(
    server: Server, proxy: Proxy
) -> None:
    load, start, end = run_fault(server, proxy.kill, proxy.revive)
    summary = check_fault(load, start, end)
    # A refused connection fails fast: the service keeps verifying what needs no cluster.
    assert summary["local_verified_during"] == summary["local_during"] > 0, summary


def test_a_slow_api_server_during_load_fails_closed_within_the_deadline_and_the_service_recovers(
    server: Server, fake: FakeApiServer
) -> None:
    load, start, end = run_fault(server, lambda: setattr(fake, "fault", "slow"), lambda: setattr(fake, "fault", None))
    check_fault(load, start, end)


def test_an_api_server_answering_500_during_load_fails_closed_and_the_service_recovers(
    server: Server, fake: FakeApiServer
) -> None:
    load, start, end = run_fault(server, lambda: setattr(fake, "fault", "500"), lambda: setattr(fake, "fault", None))
    summary = check_fault(load, start, end)
    assert summary["local_verified_during"] == summary["local_during"] > 0, summary


def test_a_killed_worker_loses_only_its_own_requests_and_gunicorn_replaces_it(server: Server) -> None:
    master = psutil.Process(server.pid)
    before = sorted(p.pid for p in master.children())
    assert len(before) == 2
    with Load(server, senders=6) as load:
        time.sleep(BEFORE)
        killed_at = time.monotonic()
        os.kill(before[0], signal.SIGKILL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            after = sorted(p.pid for p in master.children())
            if len(after) == 2 and before[0] not in after:
                break
            time.sleep(0.05)
        replaced_at = time.monotonic()
        time.sleep(AFTER)
    after = sorted(p.pid for p in master.children())
    assert len(after) == 2 and before[0] not in after and before[1] in after, (before, after)
    assert replaced_at - killed_at < 10
    answers = load.answers
    # Requests that were on the killed worker's connections fail at once (a reset), and only those.
    lost = [a for a in answers if a.outcome.startswith("transport:")]
    assert all(killed_at - ANSWER_WITHIN <= a.sent <= killed_at + 1.0 for a in lost), lost
    assert len(lost) <= load.senders
    for a in answers:
        if not a.outcome.startswith("transport:"):
            assert a.outcome == "allowed:verified" and a.seconds < ANSWER_WITHIN, a
    assert len(load.between(replaced_at + 1.0, float("inf"))) >= 10
