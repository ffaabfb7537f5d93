"""The plain-HTTP metrics port: one thread in the gunicorn master, which no client may hold.

From an attack pass without any signing key (docs/security.md).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from provider.service.scrape import EXCHANGE_SECONDS, MAX_CONNECTIONS, MetricsServer, listen

# --- the plain-HTTP metrics port: one thread in the gunicorn master ------------------------------------------------


@pytest.fixture
def metrics_port() -> Iterator[int]:
    server = MetricsServer(listen("127.0.0.1", 0))
    server.start()
    try:
        yield server.server_address[1]
    finally:
        server.stop()


def _scrape(port: int, request: bytes = b"GET /metrics HTTP/1.0\r\n\r\n") -> tuple[bytes, float]:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer, time.monotonic() - started


def test_a_request_line_over_the_limit_is_refused_without_echoing_it(metrics_port: int) -> None:
    # http.server reads at most 65536 bytes of a request line; the refusal names no part of it.
    answer, _ = _scrape(metrics_port, b"GET /" + b"A" * 70_000 + b" HTTP/1.0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.0 414") and b"AAAA" not in answer


def test_a_scrape_after_a_refused_one_is_answered(metrics_port: int) -> None:
    _scrape(metrics_port, b"\x16\x03\x01\x00\xff" + b"\x00" * 300)  # a TLS hello on the plain port
    answer, _ = _scrape(metrics_port)
    assert answer.startswith(b"HTTP/1.0 200")


def test_idle_connections_ahead_of_a_scrape_do_not_delay_it_past_one_exchange(metrics_port: int) -> None:
    idle = [socket.create_connection(("127.0.0.1", metrics_port), timeout=30) for _ in range(2)]
    try:
        for conn in idle:
            conn.sendall(b"GET /met")
        time.sleep(0.2)  # both accepted or queued before the scrape
        answer, seconds = _scrape(metrics_port)
        assert answer.startswith(b"HTTP/1.0 200")
        assert seconds < EXCHANGE_SECONDS + 2, seconds
    finally:
        for conn in idle:
            conn.close()


def test_past_the_connection_cap_a_connection_is_closed_at_once_and_the_port_recovers(metrics_port: int) -> None:
    idle = [socket.create_connection(("127.0.0.1", metrics_port), timeout=30) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.3)  # every one accepted and holding a thread
        answer, seconds = _scrape(metrics_port)
        assert answer == b"" and seconds < 1.0, (answer[:80], seconds)  # closed, not queued
    finally:
        for conn in idle:
            conn.close()
    deadline = time.monotonic() + EXCHANGE_SECONDS
    while time.monotonic() < deadline:
        answer, _ = _scrape(metrics_port)
        if answer.startswith(b"HTTP/1.0 200"):
            break
        time.sleep(0.1)
    assert answer.startswith(b"HTTP/1.0 200")
