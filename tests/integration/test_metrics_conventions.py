"""Metrics in Prometheus conventions, on the real server (gunicorn master and two workers, multiprocess metrics).

* ``route`` is the matched path on every series that has it;
* every denial is a decision: ``policy-invalid`` on the Kyverno route counts in
  ``decisions_total`` (it denies every object the policy matches);
* ``process_*`` add up the master and its workers: compared here with what
  psutil reads for the same processes;
* ``requests_in_flight`` counts a request the app is answering;
* the new series are there, at their values, from the first scrape.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.server import Server, running_server

pytestmark = pytest.mark.integration

KYVERNO = "/v1/kyverno/verify"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server(args=("--workers", "2")) as running:
        master = psutil.Process(running.pid)
        deadline = time.monotonic() + 30
        while len(master.children()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        yield running


def scrape(server: Server) -> Samples:
    conn = http.client.HTTPConnection("127.0.0.1", server.metrics_port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_route_is_the_matched_path_on_every_series(server: Server) -> None:
    routes = {dict(labels)["route"] for (_, labels) in scrape(server) if "route" in dict(labels)}
    assert {"/v1/gatekeeper/verify", KYVERNO, "/healthz", "/readyz", "/metrics"} <= routes
    assert {r for r in routes if not r.startswith("/")} == {"unmatched"}  # no engine names any more


def test_the_first_scrape_has_every_denial_reason_and_the_new_series_at_zero(server: Server) -> None:
    found = scrape(server)
    for reason in ("policy-invalid", "request-invalid", "deadline-exceeded", "internal-error"):
        key = ("manifest_provider_decisions_total",
               tuple(sorted({"route": KYVERNO, "check": "none", "reason": reason, "class": "invalid-signature"}.items())))  # fmt: skip
        assert key in found, reason
    assert value(found, "manifest_provider_requests_total", route="/readyz", code="503") == 0
    assert value(found, "manifest_provider_requests_in_flight") == 0
    assert value(found, "manifest_provider_processes") == 3


def test_policy_invalid_on_the_kyverno_route_is_a_decision(server: Server) -> None:
    invalid = {"route": KYVERNO, "check": "manifest", "reason": "policy-invalid", "class": "invalid-signature"}
    before = value(scrape(server), "manifest_provider_decisions_total", **invalid)
    answer = server.post_json(KYVERNO, {"request": {"object": {}}, "policy": {"keys": []}})
    assert answer["allowed"] is False and answer["reason"] == "policy-invalid"
    deadline = time.monotonic() + 10  # a worker's counts reach the files within a second
    while value(scrape(server), "manifest_provider_decisions_total", **invalid) == before:
        assert time.monotonic() < deadline, "policy-invalid never counted as a decision"
        time.sleep(0.2)
    assert value(scrape(server), "manifest_provider_decisions_total", **invalid) == before + 1


def processes(server: Server) -> list[psutil.Process]:
    master = psutil.Process(server.pid)
    return [master, *master.children()]


def test_process_series_add_up_the_master_and_its_workers(server: Server) -> None:
    server.get("/readyz")  # some work in a worker
    group = processes(server)
    cpu_before = sum(p.cpu_times().user + p.cpu_times().system for p in group)
    found = scrape(server)
    cpu_after = sum(p.cpu_times().user + p.cpu_times().system for p in group)
    cpu = value(found, "process_cpu_seconds_total")
    # At least what the three use (psutil reads the same /proc), never less; a tick's rounding aside.
    assert cpu_before - 0.05 <= cpu <= cpu_after + sum(p.cpu_times().children_user for p in group) + 0.05
    assert value(found, "process_start_time_seconds") == pytest.approx(group[0].create_time(), abs=1.0)
    pss = sum(p.memory_full_info().pss for p in group)
    rss = sum(p.memory_info().rss for p in group)
    resident = value(found, "process_resident_memory_bytes")
    assert resident == pytest.approx(pss, rel=0.2)
    assert resident < rss  # the workers share the preloaded app's pages with the master: counted once
    fds = sum(p.num_fds() for p in group)
    assert abs(value(found, "process_open_fds") - fds) <= 6  # a scrape's own socket and files come and go


def test_a_worker_that_exits_does_not_take_its_cpu_seconds_with_it(server: Server) -> None:
    """Counters never go down: a reaped worker's time moves to the master's children time."""
    for _ in range(20):
        server.get("/readyz")
    before = value(scrape(server), "process_cpu_seconds_total")
    old = set(psutil.Process(server.pid).children())
    worker = next(iter(old))
    worker.terminate()
    worker.wait(15)
    deadline = time.monotonic() + 30
    while len(set(psutil.Process(server.pid).children()) - old) < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert value(scrape(server), "process_cpu_seconds_total") >= before
    server.close_connections()


def test_a_request_being_answered_is_in_flight(server: Server) -> None:
    body = json.dumps({"request": {"object": {}}, "policy": {"keys": []}}).encode()
    context = server.ssl_context()
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        head = (f"POST {KYVERNO} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
        tls.sendall(head + body[:5])  # the app is reading the body: the request is being answered
        deadline = time.monotonic() + 10
        while value(scrape(server), "manifest_provider_requests_in_flight") != 1:
            assert time.monotonic() < deadline, "the request never showed as in flight"
            time.sleep(0.05)
        tls.sendall(body[5:])
        assert tls.recv(64).startswith(b"HTTP/1.1 200")
    deadline = time.monotonic() + 10
    while value(scrape(server), "manifest_provider_requests_in_flight") != 0:
        assert time.monotonic() < deadline, "the request stayed in flight"
        time.sleep(0.05)
