"""Prometheus metrics for ``GET /metrics``.

Every name starts with ``manifest_provider_``:

* ``requests_total{route, code}`` -- HTTP requests answered;
* ``decisions_total{route, check, reason, class}`` -- verdicts, by stable
  reason code and by the paper's six traffic classes
  (:attr:`provider.result.Result.traffic_class`);
* ``key_errors_total{route, reason}`` -- keys answered with a per-key error;
* ``system_errors_total{route, reason}`` -- requests failed as a whole
  (deadline, cluster unavailable, a malformed ProviderRequest);
* ``request_duration_seconds{route}`` and ``verification_duration_seconds{check}``
  -- latency histograms (a cache hit is not a verification);
* ``keys_per_request`` -- batch sizes;
* ``cache_lookups_total{result="hit"|"miss"}`` -- the verdict cache;
* ``auth_refusals_total{reason}`` -- callers refused (401/403/503), by why:
  ``no-credentials``, ``certificate-expired``, ``certificate-not-yet-valid``,
  ``certificate-untrusted``, ``caller-not-allowed``, ``token-refused``,
  ``token-too-large``, ``token-review-failed``, ``token-review-timeout``,
  ``token-review-rate-limited``;
* ``connections_closed_total{reason}`` -- connections closed before they sent a
  complete request (:mod:`provider.service.worker`): ``handshake-failed``,
  ``head-timeout``, ``head-too-large``, ``evicted``.

gunicorn runs several worker processes; the launcher points
``PROMETHEUS_MULTIPROC_DIR`` at a fresh directory before any worker imports
this module, and :func:`exposition` then sums every worker's values, so one
scrape sees the whole server rather than whichever worker answered.
"""

from __future__ import annotations

import os

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import multiprocess as _multiprocess

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: Latency buckets from a cache hit (~0.1 ms) to past Gatekeeper's 3 s timeout.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

REQUESTS = Counter("manifest_provider_requests_total", "HTTP requests answered.", ["route", "code"])
DECISIONS = Counter(
    "manifest_provider_decisions_total",
    "Verdicts, by reason code and traffic class.",
    ["route", "check", "reason", "class"],
)
KEY_ERRORS = Counter("manifest_provider_key_errors_total", "Keys answered with a per-key error.", ["route", "reason"])
SYSTEM_ERRORS = Counter("manifest_provider_system_errors_total", "Requests failed as a whole.", ["route", "reason"])
REQUEST_SECONDS = Histogram(
    "manifest_provider_request_duration_seconds", "Time to answer a request.", ["route"], buckets=LATENCY_BUCKETS
)
VERIFICATION_SECONDS = Histogram(
    "manifest_provider_verification_duration_seconds",
    "Time to answer one key that was not in the cache.",
    ["check"],
    buckets=LATENCY_BUCKETS,
)
KEYS_PER_REQUEST = Histogram(
    "manifest_provider_keys_per_request", "Keys in one Gatekeeper request.", buckets=(1, 2, 5, 10, 20, 50, 100, 200)
)
CACHE_LOOKUPS = Counter("manifest_provider_cache_lookups_total", "Verdict cache lookups.", ["result"])
AUTH_REFUSALS = Counter("manifest_provider_auth_refusals_total", "Callers refused, by reason.", ["reason"])
CONNECTIONS_CLOSED = Counter(
    "manifest_provider_connections_closed_total", "Connections closed before a complete request, by reason.", ["reason"]
)


def exposition() -> tuple[bytes, str]:
    """The text exposition of every metric (all workers' when running under the launcher)."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        _multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def worker_exited(pid: int) -> None:
    """Forget a dead worker's live values (gunicorn's ``child_exit`` hook)."""
    if os.environ.get(MULTIPROC_ENV):
        _multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
