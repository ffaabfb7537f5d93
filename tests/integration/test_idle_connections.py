"""Strangers' sockets cost no thread: authenticated requests keep flowing while idle connections pile up.

The attack (issue "Exactly what was signed", item 8): a caller without a
client certificate completes TLS handshakes and then sends nothing. Stock
gunicorn gthread performs the handshake and reads the request head in a pool
thread with no deadline, so ``workers x threads`` such connections stopped
every authenticated request. :mod:`provider.service.worker` reads handshakes and heads
in the event loop; these tests hold **four times as many idle connections as
the server has threads** -- TCP only, TLS handshake done, half a request head
-- and require every authenticated request to be answered, on fresh
connections (as Gatekeeper makes them) and kept-alive ones. They assert
behaviour with generous bounds, not timing; the figures in docs/security.md
come from :func:`measure` (``python -m tests.integration.test_idle_connections``).

Also here: the head deadline closes idle connections (and counts them), a
full worker makes room by closing strangers' connections but not a caller's
with a verified certificate, a trickled body is cut off at the deadline with
a 400, a refused caller's connection is closed, and a stranger who never
closes its side stalls nobody.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.server import Server, running_server

pytestmark = pytest.mark.integration

GATEKEEPER = "/v1/gatekeeper/verify"
#: The shipped Deployment's gunicorn: two workers of eight threads.
WORKERS, THREADS = 2, 8
IDLE_FACTOR = 4
#: A bound no healthy answer comes near (they take milliseconds); a stalled server never meets it.
ANSWER_WITHIN = 5.0
#: A ProviderRequest with no keys: the cheapest authenticated request that runs the whole app.
EMPTY_REQUEST = json.dumps({"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest",
                            "request": {"keys": []}}).encode()  # fmt: skip
IDLE_KINDS = ("tcp-only", "tls-idle", "half-head")


def open_idle(server: Server, kind: str) -> socket.socket | None:
    """One stranger's connection, left idle at ``kind``; ``None`` when the server did not let it get that far."""
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=ANSWER_WITHIN)
    if kind == "tcp-only":
        return raw
    try:
        tls = server.ssl_context(client_cert=False).wrap_socket(raw, server_hostname="127.0.0.1")
        if kind == "half-head":
            tls.sendall(b"POST /v1/gatekeeper/verify HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n")
        return tls
    except OSError:
        raw.close()
        return None


@contextlib.contextmanager
def idle_connections(server: Server, count: int) -> Iterator[list[socket.socket]]:
    held = [s for s in (open_idle(server, IDLE_KINDS[i % len(IDLE_KINDS)]) for i in range(count)) if s is not None]
    try:
        yield held
    finally:
        for s in held:
            s.close()


def fresh_call(server: Server) -> tuple[int, float]:
    """One Gatekeeper-style call: a new TLS connection with the client certificate, one POST, closed."""
    start = time.monotonic()
    conn = server.connection(timeout=ANSWER_WITHIN)
    try:
        conn.request("POST", GATEKEEPER, EMPTY_REQUEST, {"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status, time.monotonic() - start
    finally:
        conn.close()


def kept_alive_calls(server: Server, n: int) -> list[tuple[int, float]]:
    conn = server.connection(timeout=ANSWER_WITHIN)
    results = []
    try:
        for _ in range(n):
            start = time.monotonic()
            conn.request("POST", GATEKEEPER, EMPTY_REQUEST, {"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            results.append((response.status, time.monotonic() - start))
    finally:
        conn.close()
    return results


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` within ``within`` seconds (EOF or a reset)."""
    sock.settimeout(within)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except TimeoutError:
        return False
    except (ssl.SSLError, OSError):
        return True


def closed_reason_count(server: Server, reason: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    status, _, body = server.get("/metrics")
    assert status == 200
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == "manifest_provider_connections_closed_total" and sample.labels.get("reason") == reason:
                return sample.value
    return 0.0


@pytest.fixture(scope="module")
def shipped() -> Iterator[Server]:
    with running_server(args=("--workers", str(WORKERS), "--threads", str(THREADS))) as server:
        yield server


# --- 4x the threads in idle connections ---------------------------------------------


def test_four_times_as_many_idle_connections_as_threads_leave_authenticated_requests_answered(shipped: Server) -> None:
    idle = IDLE_FACTOR * WORKERS * THREADS
    with idle_connections(shipped, idle) as held:
        assert len(held) == idle, "the server refused strangers' handshakes: the test would prove nothing"
        fresh = [fresh_call(shipped) for _ in range(20)]
        kept = kept_alive_calls(shipped, 20)
        # The strangers' sockets are still open: the answers did not come from killing them.
        assert sum(1 for s in held if not closed_by_server(s, 0.01)) == idle
    assert [status for status, _ in fresh + kept] == [200] * 40
    assert max(seconds for _, seconds in fresh + kept) < ANSWER_WITHIN


def test_idle_connections_and_an_authenticated_burst_at_once(shipped: Server) -> None:
    """Strangers keep connecting while callers call concurrently: nobody waits on a stranger."""
    results: list[tuple[int, float]] = []
    lock = threading.Lock()

    def caller() -> None:
        for _ in range(5):
            outcome = fresh_call(shipped)
            with lock:
                results.append(outcome)

    with idle_connections(shipped, IDLE_FACTOR * WORKERS * THREADS):
        threads = [threading.Thread(target=caller) for _ in range(THREADS)]
        for t in threads:
            t.start()
        with idle_connections(shipped, IDLE_FACTOR * WORKERS * THREADS):  # more strangers arrive meanwhile
            for t in threads:
                t.join(30)
    assert len(results) == 5 * THREADS and all(status == 200 for status, _ in results)


# --- deadlines and room -------------------------------------------------------------


def test_a_connection_without_a_complete_head_is_closed_at_the_head_deadline() -> None:
    with running_server(env={"MANIFEST_PROVIDER_HEAD_TIMEOUT_SECONDS": "1"}) as server:
        before = closed_reason_count(server, "head-timeout")
        held = [s for s in (open_idle(server, kind) for kind in IDLE_KINDS) if s is not None]
        assert len(held) == len(IDLE_KINDS)
        try:
            assert [closed_by_server(s, 4.0) for s in held] == [True] * len(IDLE_KINDS)
        finally:
            for s in held:
                s.close()
        assert closed_reason_count(server, "head-timeout") - before >= len(IDLE_KINDS)
        # Slow, not idle: one byte of the head every 0.3 s never completes it in time either.
        slow = open_idle(server, "tls-idle")
        assert slow is not None
        start = time.monotonic()
        with contextlib.suppress(OSError):
            for byte in b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n":
                slow.sendall(bytes([byte]))
                time.sleep(0.3)
        assert closed_by_server(slow, 3.0) and time.monotonic() - start < 4.0
        slow.close()


def test_a_full_worker_closes_strangers_to_make_room_but_keeps_a_verified_caller() -> None:
    args = ("--workers", "1", "--threads", "2")
    with running_server(
        args=args, env={"MANIFEST_PROVIDER_MAX_CONNECTIONS": "16", "MANIFEST_PROVIDER_HEAD_TIMEOUT_SECONDS": "30"}
    ) as server:
        caller = server.connection(timeout=ANSWER_WITHIN)
        try:
            caller.request("GET", "/readyz")
            assert caller.getresponse().read() and caller.sock is not None
            first = caller.sock
            with idle_connections(server, 80):  # five times what the worker may hold
                assert [status for status, _ in (fresh_call(server) for _ in range(10))] == [200] * 10
                caller.request("POST", GATEKEEPER, EMPTY_REQUEST)
                response = caller.getresponse()
                assert response.status == 200 and response.read()
                assert caller.sock is first  # the kept-alive connection with a certificate was not the one closed
        finally:
            caller.close()
        assert closed_reason_count(server, "evicted") > 0


def test_a_trickled_body_is_cut_off_at_the_deadline_with_a_400(shipped: Server) -> None:
    with running_server(env={"MANIFEST_PROVIDER_DEADLINE_SECONDS": "1"}) as server:
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        tls = server.ssl_context().wrap_socket(raw, server_hostname="127.0.0.1")
        start = time.monotonic()
        tls.sendall(b"POST /v1/kyverno/verify HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{")
        answer = b""
        tls.settimeout(0.2)
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in answer and time.monotonic() - start < 8:
                with contextlib.suppress(TimeoutError):
                    tls.sendall(b" ")
                    answer += tls.recv(4096)
        elapsed = time.monotonic() - start
        tls.close()
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
        assert b"request-invalid" in answer or b"Content-Length" in answer
        assert elapsed < 3.0  # the 1 s deadline, plus the answer; never the 200 s the trickle would take
        assert [fresh_call(server)[0] for _ in range(3)] == [200] * 3


def test_a_refused_caller_gets_its_answer_and_a_closed_connection(shipped: Server) -> None:
    conn = shipped.connection(client_cert=False, timeout=ANSWER_WITHIN)
    try:
        conn.request("POST", GATEKEEPER, EMPTY_REQUEST)
        response = conn.getresponse()
        assert response.status == 401 and json.loads(response.read()) == {"error": "unauthorized"}
        assert response.getheader("Connection") == "close"
        assert conn.sock is None or closed_by_server(conn.sock, 3.0)
    finally:
        conn.close()


def test_strangers_who_never_close_their_side_stall_nobody(shipped: Server) -> None:
    """After an answer the server half-closes and waits for the peer's close; a peer that never closes costs nobody.

    (Stock gunicorn waits for it -- up to 2 s per connection -- in the worker's event loop.)
    """
    held = [open_idle(shipped, "tls-idle") for _ in range(WORKERS * THREADS // 2)]
    try:
        assert all(s is not None for s in held)
        for s in held:
            assert s is not None
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        time.sleep(0.2)  # the answers are written; every one of these connections now waits for its peer
        answers = [fresh_call(shipped) for _ in range(10)]
    finally:
        for s in held:
            if s is not None:
                s.close()
    assert [status for status, _ in answers] == [200] * 10
    assert max(seconds for _, seconds in answers) < 1.5


def test_pipelined_requests_are_both_answered(shipped: Server) -> None:
    raw = socket.create_connection(("127.0.0.1", shipped.port), timeout=ANSWER_WITHIN)
    with shipped.ssl_context().wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(
            b"GET /readyz HTTP/1.1\r\nHost: a\r\n\r\nGET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
        )
        data = b""
        with contextlib.suppress(OSError):
            while chunk := tls.recv(4096):
                data += chunk
    assert data.count(b"HTTP/1.1 200") == 2 and b'"ready"' in data and b'"ok"' in data


# --- the figure in docs/security.md ---------------------------------------------------


@dataclass(frozen=True)
class Figures:
    idle: int
    fresh_p50_ms: float
    fresh_p99_ms: float
    kept_p50_ms: float


def _figures(server: Server, idle: int, calls: int) -> Figures:
    with idle_connections(server, idle):
        fresh = sorted(seconds for _, seconds in (fresh_call(server) for _ in range(calls)))
        kept = sorted(seconds for _, seconds in kept_alive_calls(server, calls))
    return Figures(
        idle,
        1000 * statistics.median(fresh),
        1000 * fresh[int(0.99 * (len(fresh) - 1))],
        1000 * statistics.median(kept),
    )


def measure(calls: int = 300) -> list[Figures]:
    """Latency of authenticated calls with no idle connections and with 4x the threads in idle ones."""
    with running_server(args=("--workers", str(WORKERS), "--threads", str(THREADS))) as server:
        _figures(server, 0, 20)  # warm-up
        return [_figures(server, 0, calls), _figures(server, IDLE_FACTOR * WORKERS * THREADS, calls)]


if __name__ == "__main__":
    for row in measure(int(sys.argv[1]) if len(sys.argv) > 1 else 300):
        print(row)
