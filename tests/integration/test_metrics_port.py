"""The plain-HTTP metrics port as Prometheus uses it, on the real server (gunicorn, TLS, client certificates).

Prometheus in a cluster has no client certificate Gatekeeper's CA issued, so the
service serves ``GET /metrics`` on a port of its own without credentials
(provider/service/scrape.py, docs/operations.md); the API port's ``/metrics``
keeps its callers.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import uuid
from collections.abc import Iterator

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from provider.service.auth import REFUSAL_REASONS
from provider.service.scrape import EXCHANGE_SECONDS
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign
from tests.support.server import Server, running_server

GATEKEEPER = "/v1/gatekeeper/verify"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server(args=("--workers", "2")) as running:
        yield running


def scrape(server: Server, path: str = "/metrics") -> tuple[int, str, bytes]:
    """One plain-HTTP GET on the metrics port, as Prometheus makes it: no TLS, no credentials."""
    conn = http.client.HTTPConnection("127.0.0.1", server.metrics_port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        conn.close()


def samples(body: bytes) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def sample(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def test_the_first_scrape_without_credentials_shows_build_info_and_every_series_at_zero(server: Server) -> None:
    status, content_type, body = scrape(server)  # before any verification
    assert status == 200 and content_type.startswith("text/plain")
    found = samples(body)
    (build,) = [labels for name, labels in found if name == "manifest_provider_build_info"]
    assert found[("manifest_provider_build_info", build)] == 1.0 and dict(build)["version"]
    zeros = [
        sample("manifest_provider_requests_total", route=GATEKEEPER, code="200"),
        sample("manifest_provider_requests_total", route="/v1/kyverno/verify", code="413"),
        sample("manifest_provider_decisions_total",
               route=GATEKEEPER, check="manifest", reason="content-mismatch", **{"class": "invalid-signature"}),
        sample("manifest_provider_decisions_total",
               route="/v1/kyverno/verify", check="manifest", reason="verified", **{"class": "valid-signature"}),
        sample("manifest_provider_key_errors_total", route=GATEKEEPER, reason="request-invalid"),
        sample("manifest_provider_system_errors_total", route=GATEKEEPER, reason="deadline-exceeded"),
        sample("manifest_provider_cache_lookups_total", result="miss"),
        sample("manifest_provider_connections_closed_total", reason="handshake-failed"),
        sample("manifest_provider_verification_duration_seconds_count", check="manifest"),
        sample("manifest_provider_keys_per_request_count"),
        *(sample("manifest_provider_auth_refusals_total", reason=reason) for reason in REFUSAL_REASONS),
    ]  # fmt: skip
    missing = [s for s in zeros if s not in found]
    assert not missing
    assert [found[s] for s in zeros if "gatekeeper" in str(s)] == [0.0] * sum("gatekeeper" in str(s) for s in zeros)


def test_a_verification_shows_on_the_plain_port_within_seconds(server: Server) -> None:
    key = make_key()
    obj = sign(configmap(f"scraped-{uuid.uuid4().hex[:8]}", "team-a", key="value"), key)[0]
    review = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "operation": "CREATE",
        "userInfo": {"username": "alice@example.com"},
        "object": obj,
    }
    keys = [json.dumps({"review": review, "policy": {"keys": [public_key_pem(key)]}})]
    verified = sample(
        "manifest_provider_decisions_total",
        route=GATEKEEPER, check="manifest", reason="verified", **{"class": "valid-signature"},
    )  # fmt: skip
    before = samples(scrape(server)[2])[verified]
    body = json.dumps({"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest",
                       "request": {"keys": keys}}).encode()  # fmt: skip
    status, _, answer = server.post(GATEKEEPER, body)
    assert status == 200 and json.loads(answer)["response"]["items"][0]["value"]["reason"] == "verified"
    deadline = time.monotonic() + 10  # a worker's counts reach the files at most a second later
    while samples(scrape(server)[2])[verified] == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert samples(scrape(server)[2])[verified] == before + 1


@pytest.mark.parametrize("path", ["/", "/metricsx", "/healthz", GATEKEEPER])
def test_the_plain_port_serves_metrics_and_nothing_else(server: Server, path: str) -> None:
    status, _, body = scrape(server, path)
    assert status == 404 and b"manifest_provider" not in body


def test_the_plain_port_refuses_other_methods(server: Server) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.metrics_port, timeout=10)
    try:
        conn.request("POST", "/metrics", body=b"{}")
        assert conn.getresponse().status == 501
    finally:
        conn.close()


def test_the_api_ports_metrics_still_refuses_a_caller_without_credentials(server: Server) -> None:
    status, _, data = server.request("GET", "/metrics", client_cert=False)
    assert status == 401 and b"manifest_provider" not in data
    assert server.get("/metrics")[0] == 200  # the allowed caller still reads it there


def test_a_client_that_trickles_holds_the_port_for_seconds_at_most(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.metrics_port), timeout=10) as slow:
        slow.sendall(b"GET /met")  # and then nothing: the next scrape waits for its deadline, no longer
        started = time.monotonic()
        assert scrape(server)[0] == 200
        assert time.monotonic() - started < EXCHANGE_SECONDS + 2


def listening_ports(server: Server) -> set[int]:
    master = psutil.Process(server.pid)
    ports = set()
    for process in [master, *master.children(recursive=True)]:
        for conn in process.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN:
                ports.add(conn.laddr.port)
    return ports


@pytest.mark.parametrize("args", [("--no-metrics-port",), ("--metrics-port", "0")], ids=["flag", "port-zero"])
def test_the_metrics_port_can_be_turned_off(args: tuple[str, ...]) -> None:
    with running_server(metrics=False, args=args) as server:
        assert listening_ports(server) == {server.port}
        assert server.get("/metrics")[0] == 200  # the API port's, for its callers


def test_the_metrics_port_listens_where_it_is_told() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    args = ("--metrics-port", str(free), "--metrics-bind", "127.0.0.1")
    with running_server(metrics=False, args=args) as server:
        assert listening_ports(server) == {server.port, free}
        server.metrics_port = free
        assert scrape(server)[0] == 200


def _verify_once(server: Server) -> None:
    key = make_key()
    obj = sign(configmap(f"after-{uuid.uuid4().hex[:8]}", "team-a", key="value"), key)[0]
    review = {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
              "operation": "CREATE", "userInfo": {"username": "alice@example.com"}, "object": obj}  # fmt: skip
    keys = [json.dumps({"review": review, "policy": {"keys": [public_key_pem(key)]}})]
    body = json.dumps({"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest",
                       "request": {"keys": keys}}).encode()  # fmt: skip
    status, _, answer = server.post(GATEKEEPER, body)
    assert status == 200 and json.loads(answer)["response"]["items"][0]["value"]["reason"] == "verified"


def test_a_worker_that_exits_leaves_the_masters_metrics_port_and_directory_alone() -> None:
    """gunicorn forks inside serve(): a worker's exit unwinds through it and must not tear down the master's parts.

    Before, a worker leaving gracefully (SIGTERM, max-requests, a reload) removed the shared
    metrics directory and waited forever on the master's metrics thread, which does not
    exist in a worker -- the master then needed its 10 s graceful timeout to stop at all.
    """
    with running_server(metrics=True, args=("--workers", "1")) as server:
        (worker,) = psutil.Process(server.pid).children()
        worker.terminate()
        worker.wait(5)  # it exits by itself (before: it hung until the master killed it)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not [c for c in psutil.Process(server.pid).children() if c != worker]:
            time.sleep(0.1)
        verified = sample(
            "manifest_provider_decisions_total",
            route=GATEKEEPER, check="manifest", reason="verified", **{"class": "valid-signature"},
        )  # fmt: skip
        before = samples(scrape(server)[2]).get(verified, 0.0)
        _verify_once(server)
        deadline = time.monotonic() + 10
        while samples(scrape(server)[2]).get(verified, 0.0) == before and time.monotonic() < deadline:
            time.sleep(0.2)
        assert samples(scrape(server)[2])[verified] == before + 1  # the replacement worker still counts
        assert "Traceback" not in server.log_text()


def test_the_server_stops_promptly_on_sigterm_with_the_metrics_port_on() -> None:
    """Kubernetes sends SIGTERM and waits its grace period; the server must not sit out gunicorn's 10 s timeout."""
    with running_server(metrics=True) as server:
        master = psutil.Process(server.pid)
        started = time.monotonic()
        master.terminate()
        master.wait(15)
        took = time.monotonic() - started
    assert took < 3.0, f"{took:.1f} s"
