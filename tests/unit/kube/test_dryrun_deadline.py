"""provider.kube.dryrun: a dry-run's deadline covers every exchange whole, and a late answer is never used.

The API server here is ``tests.support.fakeapi.FakeApiServer`` on loopback (real TLS,
the real ``kubernetes`` client), sending its recorded answers *paced*: late
headers, a late body, both late, headers or a body trickled a byte at a time,
a request never answered, a TLS handshake that stalls. Each dry-run runs in
its own thread, as in a service worker, and must be over -- a
``dry-run-failed`` TransientError, no answer -- within its deadline plus
:data:`provider.kube.client.DEADLINE_MARGIN_SECONDS`, with no thread of the client
left behind. Bounds are upper bounds only: a loaded machine makes the client
slower, never the fake server faster.
"""

from __future__ import annotations

import contextlib
import copy
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider import Policy, Review, decide
from provider.compare.dryrun import plan_dry_run
from provider.errors import TransientError
from provider.kube import client as kube
from provider.kube.client import DEADLINE_MARGIN_SECONDS
from provider.kube.dryrun import KubeDryRunner
from tests.support.fakeapi import PACES, THREAD_PREFIX, FakeApiServer, recording, runner_for
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import sign
from tests.support.resolver import StuckResolver

#: Short, so the tests are fast; long enough for a handshake and discovery on a loaded 2-core machine.
DEADLINE = 0.6
#: Latest a dry-run may end: the promise under test.
BOUND = DEADLINE + DEADLINE_MARGIN_SECONDS
#: How long a test waits for a dry-run thread before calling it stuck (the old client took 28.8 s on a trickle).
PATIENCE = BOUND + 1.5

CONFIGMAP = "configmap"
DISCOVERY = "discovery GET /api/v1"
CREATE = "dry-run POST /api/v1/namespaces/default/configmaps"
RETRY = f"{CREATE} (renamed after a name clash)"


@pytest.fixture
def runner(fake: FakeApiServer, tmp_path: Path) -> Iterator[KubeDryRunner]:
    with runner_for(fake, tmp_path, timeout=DEADLINE) as r:
        yield r


def manifest(stem: str = CONFIGMAP) -> dict[str, Any]:
    return plan_dry_run(recording(stem).request_body, "default").manifest


def client_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if not t.name.startswith(THREAD_PREFIX)}


@dataclass
class Attempt:
    answer: dict[str, Any] | None = None
    error: BaseException | None = None
    elapsed: float = float("inf")
    finished: bool = False


def attempt(run: Any, patience: float = PATIENCE) -> Attempt:
    """``run()`` in a thread of its own; waited for at most ``patience`` seconds."""
    outcome = Attempt()

    def work() -> None:
        start = time.monotonic()
        try:
            outcome.answer = run()
        except Exception as exc:  # the test inspects whatever it was
            outcome.error = exc
        outcome.elapsed = time.monotonic() - start

    thread = threading.Thread(target=work, name="dry-run-under-test", daemon=True)
    thread.start()
    thread.join(patience)
    outcome.finished = not thread.is_alive()
    return outcome


def assert_failed_in_time(outcome: Attempt, what: str, deadline: float = DEADLINE) -> TransientError:
    assert outcome.finished, f"the dry-run was still running {PATIENCE:g} s after it began (deadline {deadline:g} s)"
    assert outcome.answer is None, "a late answer was used"
    assert isinstance(outcome.error, TransientError), outcome.error
    assert outcome.error.reason == "dry-run-failed"
    assert what in outcome.error.message and f"within {deadline:g} s" in outcome.error.message, outcome.error.message
    assert outcome.elapsed < deadline + DEADLINE_MARGIN_SECONDS, (
        f"{outcome.elapsed:.2f} s: past the deadline by more than the margin"
    )
    return outcome.error


# --- every pace, every exchange ---------------------------------------------------


@dataclass(frozen=True)
class Case:
    """The server's pace, which requests it applies to, its delay, and the exchange the message must name."""

    pace: str
    scope: str
    seconds: float
    what: str

    @property
    def id(self) -> str:
        return f"{self.pace}-{'discovery' if self.scope == 'all' else 'create'}"


#: The delays are either far beyond the deadline, or -- where each step alone
#: is within it and only their sum is not (urllib3's per-read timeout lets
#: that through) -- more than half of it.
CASES = [
    Case("late-headers", "all", 5.0, DISCOVERY),
    Case("late-headers", "post", 5.0, CREATE),
    Case("late-body", "post", 5.0, CREATE),
    Case("late-headers-and-body", "all", 0.4, DISCOVERY),
    Case("late-headers-and-body", "post", 0.4, CREATE),
    Case("trickle-headers", "post", 0.0, CREATE),
    Case("trickle-body", "all", 0.0, DISCOVERY),
    Case("trickle-body", "post", 0.0, CREATE),
    Case("silent", "all", 0.0, DISCOVERY),
    Case("silent", "post", 0.0, CREATE),
    Case("tls-stall", "all", 5.0, DISCOVERY),
]


def test_every_pace_is_tested() -> None:
    assert {case.pace for case in CASES} == set(PACES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_a_slow_answer_is_dry_run_failed_within_the_deadline(
    fake: FakeApiServer, runner: KubeDryRunner, case: Case
) -> None:
    before = client_threads()
    fake.pace, fake.pace_scope, fake.pace_seconds = case.pace, case.scope, case.seconds
    outcome = attempt(lambda: runner.dry_run(manifest(), "default"))
    assert_failed_in_time(outcome, case.what)
    assert client_threads() == before


def test_a_late_answer_to_the_retry_after_a_name_clash_is_not_used(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    fake.fault = "conflict-once"
    fake.pace, fake.pace_scope, fake.pace_seconds = "late-headers-and-body", "retry", 0.4
    before = client_threads()
    outcome = attempt(lambda: runner.dry_run(manifest(), "default"))
    assert_failed_in_time(outcome, RETRY)
    assert [r.status for r in fake.creates()] == [409, 201]  # the server made the object; the runner did not take it
    assert client_threads() == before


def test_headers_and_body_each_within_the_deadline_but_together_past_it_are_not_used(
    fake: FakeApiServer, runner: KubeDryRunner
) -> None:
    # The issue's case (1.2 s + 1.2 s under 1.5 s): urllib3's per-read timeout let it through.
    fake.pace, fake.pace_seconds = "late-headers-and-body", 0.4
    error = assert_failed_in_time(attempt(lambda: runner.dry_run(manifest(), "default")), CREATE)
    assert "the answer was not complete by then" in error.message
    (post,) = fake.creates()
    assert post.status == 201


def test_an_answer_in_hand_only_after_the_deadline_is_not_used(
    fake: FakeApiServer, runner: KubeDryRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The last receive may return right at the deadline, and parsing takes time on a loaded host:
    # parsing is made to end past the deadline here, the one way to land there deterministically.
    runner.resource_for("v1", "ConfigMap")
    real = kube.load_json

    def slow_parse(*args: Any, **kwargs: Any) -> Any:
        parsed = real(*args, **kwargs)
        time.sleep(DEADLINE)
        return parsed

    monkeypatch.setattr(kube, "load_json", slow_parse)
    error = assert_failed_in_time(attempt(lambda: runner.dry_run(manifest(), "default")), CREATE)
    assert "its answer was complete only after the deadline and is not used" in error.message
    assert fake.creates()[0].status == 201


def test_a_late_discovery_document_is_not_cached(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    fake.pace, fake.pace_scope = "trickle-body", "all"
    assert_failed_in_time(attempt(lambda: runner.dry_run(manifest(), "default")), DISCOVERY)
    fake.pace = None
    assert runner.dry_run(manifest(), "default")["kind"] == "ConfigMap"
    assert [r.path for r in fake.requests if r.method == "GET"] == ["/api/v1", "/api/v1"]


def test_after_a_late_answer_the_runner_answers_on_time_again(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    runner.dry_run(manifest(), "default")  # discovery cached, a kept-alive connection in the pool
    fake.pace = "trickle-body"
    assert_failed_in_time(attempt(lambda: runner.dry_run(manifest(), "default")), CREATE)
    fake.pace = None
    outcome = attempt(lambda: runner.dry_run(manifest(), "default"))
    assert outcome.answer is not None and outcome.answer["metadata"]["name"] == "test-app-config-dry-run"
    assert outcome.elapsed < BOUND


def test_concurrent_dry_runs_against_a_trickling_server_all_end_in_time(
    fake: FakeApiServer, runner: KubeDryRunner
) -> None:
    # The service's case: each request holds a worker thread; none may stay after its deadline.
    runner.resource_for("v1", "ConfigMap")
    before = client_threads()
    fake.pace = "trickle-body"
    outcomes: list[Attempt] = [Attempt() for _ in range(6)]
    threads = [
        threading.Thread(
            target=lambda i=i: outcomes.__setitem__(i, attempt(lambda: runner.dry_run(manifest(), "default")))
        )
        for i in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(PATIENCE + 1)
    for outcome in outcomes:
        assert_failed_in_time(outcome, CREATE)
    assert client_threads() == before


def test_the_deadline_covers_connecting_again_after_a_dropped_connection(
    fake: FakeApiServer, runner: KubeDryRunner
) -> None:
    runner.dry_run(manifest(), "default")
    fake.pace, fake.pace_scope, fake.pace_seconds = "tls-stall", "all", 5.0
    runner.close()  # the next exchange needs a new connection, so a new handshake
    assert_failed_in_time(attempt(lambda: runner.dry_run(manifest(), "default")), CREATE)


# --- through an HTTP proxy ---------------------------------------------------------


class ConnectProxy:
    """An HTTP CONNECT proxy on loopback (as kubeconfig ``proxy-url`` names) that answers ``delay`` seconds late."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.tunnels = 0
        self._closing = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._thread = threading.Thread(target=self._accept, name=f"{THREAD_PREFIX}proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> ConnectProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._thread.join(5)
        self._listener.close()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            threading.Thread(
                target=self._tunnel, args=(client,), name=f"{THREAD_PREFIX}proxy-tunnel", daemon=True
            ).start()

    def _tunnel(self, client: socket.socket) -> None:
        with contextlib.ExitStack() as stack:
            stack.enter_context(client)
            request = b""
            while b"\r\n\r\n" not in request and len(request) < 8192:
                request += client.recv(1024) or b"\r\n\r\n"
            host, _, port = request.split(b" ")[1].decode().rpartition(":")
            if self._closing.wait(self.delay):
                return
            upstream = stack.enter_context(socket.create_connection((host, int(port))))
            self.tunnels += 1
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            with selectors.DefaultSelector() as selector:
                selector.register(client, selectors.EVENT_READ, upstream)
                selector.register(upstream, selectors.EVENT_READ, client)
                while not self._closing.is_set():
                    for key, _ in selector.select(0.05):
                        data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                        if not data:
                            return
                        key.data.sendall(data)


def proxied_runner(fake: FakeApiServer, proxy: ConnectProxy, directory: Path) -> KubeDryRunner:
    path = fake.kubeconfig(directory / "kubeconfig")
    config = yaml.safe_load(path.read_text())
    config["clusters"][0]["cluster"]["proxy-url"] = proxy.url
    path.write_text(yaml.safe_dump(config))
    return KubeDryRunner.from_kubeconfig(str(path), timeout=PROXY_DEADLINE)


#: Longer than DEADLINE: a proxy that answers CONNECT just within it leaves
#: the old client's handshake a whole fresh timeout, an overrun the margin must not hide.
PROXY_DEADLINE = 1.0


@pytest.mark.parametrize(
    ("delay", "pace"),
    [(0.0, None), (5.0, None), (0.8, "tls-stall")],
    ids=["on-time", "late-connect-answer", "connect-answer-then-stalled-handshake"],
)
def test_through_a_proxy_the_connect_and_the_handshake_are_inside_the_deadline(
    fake: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, delay: float, pace: str | None
) -> None:
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    fake.pace, fake.pace_seconds = pace, 5.0
    before = client_threads()
    with ConnectProxy(delay) as proxy, proxied_runner(fake, proxy, tmp_path) as runner:
        outcome = attempt(lambda: runner.dry_run(manifest(), "default"), PROXY_DEADLINE + PATIENCE)
        if delay == 0.0:
            assert outcome.answer is not None and outcome.answer["kind"] == "ConfigMap", outcome
            assert proxy.tunnels == 1  # it did go through the proxy
        else:
            assert_failed_in_time(outcome, DISCOVERY, PROXY_DEADLINE)
    assert client_threads() == before


# --- the verifier never uses a late answer ----------------------------------------

KEY = make_key()


def test_the_verifier_denies_on_a_late_dry_run_answer_and_never_allows(
    fake: FakeApiServer, runner: KubeDryRunner
) -> None:
    rec = recording("deployment-seed-paper-figure1")
    (signed,) = sign(rec.request_body, KEY)
    admitted = copy.deepcopy(rec.body)  # what the cluster made of it (defaults): verifies only through the dry-run
    admitted["metadata"].setdefault("annotations", {}).update(signed["metadata"]["annotations"])
    policy = Policy.from_dict({"keys": [public_key_pem(KEY)], "dryRun": {"enabled": True}})
    review = Review.from_admission({"uid": "u", "operation": "CREATE", "object": admitted, "namespace": "default",
                                    "userInfo": {"username": "jane@example.com", "groups": ["system:authenticated"]}})  # fmt: skip
    on_time = decide(review, policy, dry_runner=runner)
    assert (on_time.allowed, on_time.used_cluster) == (True, True)
    fake.pace, fake.pace_seconds = "late-headers-and-body", 0.4
    outcome = attempt(lambda: decide(review, policy, dry_runner=runner))
    assert outcome.finished and outcome.elapsed < BOUND
    assert isinstance(outcome.error, TransientError) and outcome.error.reason == "dry-run-failed", outcome
    assert fake.creates()[-1].status == 201  # the answer came, late


def test_an_api_server_name_that_never_resolves_costs_the_deadline_not_more(
    fake: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A kubeconfig may name the API server by a host name (``server: https://api.example:6443``);
    # its lookup is part of the exchange (tests/support/resolver.py: a resolver that never answers).
    path = fake.kubeconfig(tmp_path / "kubeconfig")
    config = yaml.safe_load(path.read_text())
    server = config["clusters"][0]["cluster"]["server"]
    config["clusters"][0]["cluster"]["server"] = server.replace("127.0.0.1", "api.stuck.example")
    path.write_text(yaml.safe_dump(config))
    resolver = StuckResolver()
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    try:
        with (
            KubeDryRunner.from_kubeconfig(str(path), timeout=DEADLINE) as runner,
            pytest.raises(TransientError) as caught,
        ):
            runner.dry_run(manifest(), "default")
        returned_while_stuck = not resolver.gave_up.is_set()
    finally:
        resolver.release()
    assert resolver.asked == ["api.stuck.example"]
    assert returned_while_stuck
    assert caught.value.reason == "dry-run-failed"
    assert f"did not answer within {DEADLINE:g} s" in caught.value.message, caught.value.message
