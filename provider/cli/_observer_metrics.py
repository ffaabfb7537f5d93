"""The observer's Prometheus metrics, on a plain-HTTP port of their own (``manifest-provider observe --metrics-port``).

Every name starts with ``manifest_provider_observer_``:

* ``checks_total{kind, result, cached}`` -- objects checked, by PolicyReport
  result (pass, fail, skip, error); ``cached="true"``: the verdict came from
  the cache (the object, policy and trust material were unchanged);
* ``objects{result}`` and ``failures{reason}`` -- what the last pass found:
  objects in scope by result, and the failing ones (fail or error) by reason
  (``unsigned``, ``content-mismatch``, ``dry-run-failed``, ...);
* ``last_full_pass_timestamp_seconds`` -- when the last pass that read every
  target ended (alert when it grows old: RBAC, the API server);
  ``last_pass_duration_seconds``;
* ``report_writes_total{result}`` -- PolicyReports created, updated,
  unchanged, failed;
* ``target_errors_total{reason}`` -- a target that could not be read in a pass.

A registry of its own, not the process-global one, so the service's metrics
(``provider/service/metrics.py``) and these never mix, in one process or a test.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from ..audit.live import Checked
from ..audit.observer import PassStats, Target
from ..audit.reports import outcome

PREFIX = "manifest_provider_observer_"


class PrometheusObserverMetrics:
    """An :class:`~provider.audit.observer.ObserverMetrics` that Prometheus scrapes."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.checks = Counter(PREFIX + "checks_total", "Objects checked.", ["kind", "result", "cached"], registry=r)
        self.objects = Gauge(
            PREFIX + "objects", "Objects in scope at the last pass, by result.", ["result"], registry=r
        )
        self.failures = Gauge(
            PREFIX + "failures", "Objects failing at the last pass (fail or error), by reason.", ["reason"], registry=r
        )
        self.last_full_pass = Gauge(
            PREFIX + "last_full_pass_timestamp_seconds", "When the last pass that read every target ended.", registry=r
        )
        self.pass_duration = Gauge(PREFIX + "last_pass_duration_seconds", "How long the last pass took.", registry=r)
        self.report_writes = Counter(PREFIX + "report_writes_total", "PolicyReport writes.", ["result"], registry=r)
        self.target_errors = Counter(
            PREFIX + "target_errors_total", "Targets that could not be read in a pass.", ["reason"], registry=r
        )

    def checked(self, checked: Checked, *, cached: bool) -> None:
        kind = f"{checked.ref.kind}.{checked.ref.group}" if checked.ref.group else checked.ref.kind
        self.checks.labels(kind, outcome(checked), str(cached).lower()).inc()

    def report_written(self, result: str) -> None:
        self.report_writes.labels(result).inc()

    def target_failed(self, target: Target, reason: str) -> None:
        self.target_errors.labels(reason).inc()

    def pass_finished(self, stats: PassStats) -> None:
        # Replaced whole: a reason that no object fails for any more must not linger.
        self.objects.clear()
        for result, count in stats.by_outcome.items():
            self.objects.labels(result).set(count)
        self.failures.clear()
        for reason, count in stats.failing_reasons.items():
            self.failures.labels(reason).set(count)
        self.pass_duration.set(stats.finished - stats.started)
        if stats.complete:
            self.last_full_pass.set(stats.finished)

    def serve(self, port: int, address: str) -> Any:
        """Start the plain-HTTP ``/metrics`` server in a daemon thread; returns (server, thread)."""
        return start_http_server(port, addr=address, registry=self.registry)
