"""The metrics module: the per-process tally adds up as prometheus_client would, every series exists from the start."""

from __future__ import annotations

from flask.testing import FlaskClient
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from provider.service import metrics
from provider.service.app import create_app
from provider.service.auth import REFUSAL_REASONS

#: Values on, between, below and beyond the latency buckets' bounds.
VALUES = (0.0, 0.0005, 0.0004999, 0.0005001, 0.005, 0.02, 2.5, 5.0, 5.0001, 60.0, 0.0005, 1e-9)


def families(registry: CollectorRegistry) -> tuple[Counter, Histogram]:
    counter = Counter("tally_test_total", "test", ["route"], registry=registry)
    histogram = Histogram("tally_test_seconds", "test", ["route"], buckets=metrics.LATENCY_BUCKETS, registry=registry)
    return counter, histogram


def counted(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample but the ``_created`` timestamps, which differ between two registries."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
        if not s.name.endswith("_created")
    }


def test_a_flushed_tally_equals_counting_each_event_directly() -> None:
    direct, tallied = CollectorRegistry(), CollectorRegistry()
    counter, histogram = families(direct)
    tally_counter, tally_histogram = families(tallied)
    tally = metrics.Tally()
    for index, value in enumerate(VALUES):
        route = ("a", "b")[index % 2]
        counter.labels(route).inc()
        histogram.labels(route).observe(value)
        if index % 3:
            tally.record([(tally_counter, (route,))], [(tally_histogram, (route,), value)])
        else:
            tally.record([(tally_counter, (route,))])
            tally.observe(tally_histogram, (route,), value)
    assert counted(direct) != counted(tallied)  # nothing reaches the families before a flush
    tally.flush()
    assert len(counted(direct)) > 2 * len(metrics.LATENCY_BUCKETS)
    assert counted(direct) == counted(tallied)
    tally.flush()  # a second flush adds nothing
    assert counted(direct) == counted(tallied)


def samples(client: FlaskClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = client.get("/metrics").data.decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_every_known_series_is_on_the_first_scrape_and_build_info_names_the_release() -> None:
    app = create_app({"TESTING": True, "LOG_LEVEL": "warning", "METRICS_CALLERS": ""})
    found = samples(app.test_client())
    names = {name for name, _ in found}
    (build,) = [labels for name, labels in found if name == metrics.BUILD_INFO]
    assert dict(build)["version"] and found[(metrics.BUILD_INFO, build)] == 1.0
    expected = [
        ("manifest_provider_requests_total", {"route": "/v1/gatekeeper/verify", "code": "503"}),
        ("manifest_provider_requests_total", {"route": "unmatched", "code": "404"}),
        ("manifest_provider_decisions_total",
         {"route": "/v1/gatekeeper/verify", "check": "manifest", "reason": "content-mismatch", "class": "invalid-signature"}),
        ("manifest_provider_decisions_total",
         {"route": "/v1/kyverno/verify", "check": "cluster-info", "reason": "token-expired", "class": "invalid-signature"}),
        ("manifest_provider_key_errors_total", {"route": "/v1/gatekeeper/verify", "reason": "policy-invalid"}),
        ("manifest_provider_system_errors_total", {"route": "/v1/kyverno/verify", "reason": "deadline-exceeded"}),
        ("manifest_provider_cache_lookups_total", {"result": "hit"}),
        ("manifest_provider_connections_closed_total", {"reason": "head-timeout"}),
        ("manifest_provider_verification_duration_seconds_count", {"check": "kubelet-serving-csr"}),
        ("manifest_provider_keys_per_request_count", {}),
        *(("manifest_provider_auth_refusals_total", {"reason": reason}) for reason in REFUSAL_REASONS),
    ]  # fmt: skip
    assert len(expected) > 10
    for name, labels in expected:
        assert name in names, name
        key = (name, tuple(sorted(labels.items())))
        assert key in found, (name, labels)
