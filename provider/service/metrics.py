"""Prometheus metrics: the families, every known series from the start, a cheap per-process tally, exposition.

Every name starts with ``manifest_provider_``:

* ``build_info{version, python, gunicorn}`` -- always 1; the running release;
* ``requests_total{route, code}`` -- HTTP requests answered;
* ``requests_in_flight`` -- requests being answered now, every worker together;
* ``decisions_total{route, check, reason, class}`` -- every answer about an
  object, allow or deny, by stable reason code and by the paper's six traffic
  classes (:attr:`provider.result.Result.traffic_class`): verdicts, per-key
  errors (Gatekeeper's template and the Kyverno route deny on them) with
  ``check="none"`` when the key did not get as far as naming a known check, and
  on the Kyverno route the whole-request failures too, each of which is that
  object's denial;
* ``key_errors_total{route, reason}`` -- keys answered with a per-key error;
* ``system_errors_total{route, reason}`` -- requests failed as a whole
  (deadline, cluster unavailable, a malformed ProviderRequest, a bug);
* ``request_duration_seconds{route}`` and ``verification_duration_seconds{check}``
  -- latency histograms (a cache hit is not a verification);
* ``keys_per_request`` -- batch sizes;
* ``cache_lookups_total{result="hit"|"miss"}`` -- the verdict cache;
* ``trusted_root_age_seconds`` -- seconds since the keyless trusted root in use
  was last confirmed current by a TUF refresh (the oldest worker's), and
  ``trusted_root_refreshes_total{result="ok"|"failed"}`` (:mod:`provider.service.trustroot`);
* ``auth_refusals_total{reason}`` -- callers refused (401/403/503), by why
  (:data:`provider.service.auth.REFUSAL_REASONS`);
* ``connections_closed_total{reason}`` -- connections closed before they sent a
  complete request (:mod:`provider.service.worker`): ``handshake-failed``,
  ``head-timeout``, ``head-too-large``, ``evicted``;
* ``certificate_expiry_timestamp_seconds{file, role, index, subject}`` -- when each
  certificate of the serving chain and of the client CA bundle expires (Unix
  seconds), read from the files at each scrape (:mod:`provider.service.certificates`);
* the standard ``process_*`` series for the master and its workers together
  (:mod:`provider.service.processes`).

**``route`` is the matched path on every series** (``/v1/gatekeeper/verify``,
``/v1/kyverno/verify``, ``/healthz``, ...; ``unmatched`` when no route matched):
the meaning OpenTelemetry's ``http.route`` gives it, so a ratio of decisions to
requests joins on it. The series about verdicts and errors (``decisions_total``,
``key_errors_total``, ``system_errors_total``) used to carry the engine's name
there (``gatekeeper``, ``kyverno``); docs/operations.md has the upgrade note.

**Every series from the start.** A labelled series exists only once its label set
has been used, so a rate over a reason that has not happened yet would be empty,
not zero, and an alert on it could never fire. :func:`initialise` creates every
label set the service knows -- each route with the statuses it answers, each
route x check x reason of a verdict, each refusal reason, ... -- when the app is
built, so the first scrape shows them all at 0. Label sets nobody can know in
advance (a reason a new check adds) still appear at their first event.

**A cheap hot path.** prometheus_client's multiprocess mode writes every
increment to a memory-mapped file under a lock (1-3 µs each, several per key).
The request path instead adds to :data:`TALLY`, plain dictionaries under one lock,
and :meth:`Tally.flush` moves the sums into the families at most once a second
(the worker's event loop calls it), before every exposition in this process, and
when a worker stops. A scrape therefore sees another worker's last second late,
never lost while the worker lives. Rare events (refusals, closed connections,
whole-request failures) are counted directly.

**Across workers.** gunicorn runs several worker processes; the launcher points
``PROMETHEUS_MULTIPROC_DIR`` at a fresh directory before any worker imports this
module, and :func:`exposition` then sums every worker's values, so one scrape
sees the whole server rather than whichever worker answered. The series created
by :func:`initialise` in the master (the app is preloaded) stay in its file, so
they are present before any worker has counted anything.
"""

from __future__ import annotations

import bisect
import os
import platform
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as distribution_version
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import multiprocess as _multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..version import __version__
from .certificates import expiry_series
from .processes import ServerProcesses

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: Latency buckets from a cache hit (~0.1 ms) to past Gatekeeper's 3 s timeout.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: Keys in one Gatekeeper request (at most ``MANIFEST_PROVIDER_MAX_KEYS``, 128 by default).
KEYS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200)

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
    "manifest_provider_keys_per_request", "Keys in one Gatekeeper request.", buckets=KEYS_BUCKETS
)
CACHE_LOOKUPS = Counter("manifest_provider_cache_lookups_total", "Verdict cache lookups.", ["result"])
AUTH_REFUSALS = Counter("manifest_provider_auth_refusals_total", "Callers refused, by reason.", ["reason"])
CONNECTIONS_CLOSED = Counter(
    "manifest_provider_connections_closed_total", "Connections closed before a complete request, by reason.", ["reason"]
)
#: The admission route (provider/policystore): each held policy's own verdict, and requests no policy matched.
POLICY_VERDICTS = Counter(
    "manifest_provider_policy_verdicts_total",
    "Verdicts of the policies the service holds, one per policy that applied to an admission request.",
    ["scope", "action", "reason"],
)
UNMATCHED_ADMISSIONS = Counter(
    "manifest_provider_admissions_unmatched_total", "Admission requests no held policy matched (allowed)."
)
#: Policies held now, by scope (cluster, namespace) and state (ready, invalid); every worker holds the same.
HELD_POLICIES = Gauge(
    "manifest_provider_held_policies", "Policies the service holds.", ["scope", "state"], multiprocess_mode="livemax"
)
#: Requests being answered, summed over the live workers (a dead worker's count goes with it).
TRUSTED_ROOT_REFRESHES = Counter(
    "manifest_provider_trusted_root_refreshes_total", "Background TUF refreshes of the trusted root.", ["result"]
)
TRUSTED_ROOT_AGE = Gauge(
    "manifest_provider_trusted_root_age_seconds",
    "Seconds since the keyless trusted root in use was last confirmed current by a TUF refresh.",
    multiprocess_mode="max",
)
IN_FLIGHT = Gauge("manifest_provider_requests_in_flight", "Requests being answered now.", multiprocess_mode="livesum")
BUILD_INFO = "manifest_provider_build_info"
CERTIFICATE_EXPIRY = "manifest_provider_certificate_expiry_timestamp_seconds"
#: ``decisions_total{check}`` of an answer that names no known check (an unreadable key, a whole request).
NO_CHECK = "none"

#: Why a connection is closed before it sent a complete request (provider.service.worker).
CLOSE_REASONS = ("handshake-failed", "head-timeout", "head-too-large", "evicted")
#: Whole-request failures (provider.service.routes): an unusable or unreadable request, a deadline,
#: a cluster that did not answer (a dry-run or a Secret read), a bug.
SYSTEM_ERROR_REASONS = ("request-invalid", "deadline-exceeded", "transient-error", "dry-run-failed", "internal-error")
#: A held policy's verdicts known in advance: a verification, the usual denials, a policy that cannot be used.
POLICY_VERDICT_REASONS = ("verified", "unsigned", "content-mismatch", "signature-invalid", "policy-invalid")
#: Per-key errors: a key that is not a usable question, or names an invalid policy or an unknown check.
KEY_ERROR_REASONS = ("request-invalid", "policy-invalid")


# --- build information ------------------------------------------------------------


def _version_of(distribution: str) -> str:
    try:
        return distribution_version(distribution)
    except PackageNotFoundError:
        return ""


class BuildInfo(Collector):
    """``manifest_provider_build_info``: a constant 1 whose labels name the release and its runtime.

    Not a file-backed metric: the collector is added to every registry that is
    exposed, so the master's plain-HTTP port and each worker's ``/metrics`` show it
    alike, without a series per process.
    """

    def __init__(self) -> None:
        self.labels = {"version": __version__, "python": platform.python_version(), "gunicorn": _version_of("gunicorn")}

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(BUILD_INFO, "The running release: always 1.", labels=list(self.labels))
        family.add_metric(list(self.labels.values()), 1.0)
        yield family


BUILD = BuildInfo()
REGISTRY.register(BUILD)


class CertificateExpiry(Collector):
    """``certificate_expiry_timestamp_seconds{file, role, index, subject}``: each certificate of :attr:`files`, now.

    ``file`` is the path as configured (two files at most), ``role`` which one it is
    (``serving``: ``--cert``; ``client-ca``: ``--client-ca``), so an alert tells the
    served certificate from a CA without knowing paths; ``index`` the certificate's
    position in the file (0: the served
    certificate, or the bundle's first CA), ``subject`` its subject (at most 128
    characters) for a person reading an alert. At most 16 certificates a file
    (:data:`provider.service.certificates.MAX_CERTIFICATES_PER_FILE`): the series
    stay few. Read at collection, in whichever process answers the scrape, so the
    master's metrics port follows a rotation as the workers do.
    """

    def __init__(self) -> None:
        #: ``(role, path)`` pairs.
        self.files: tuple[tuple[str, str], ...] = ()

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            CERTIFICATE_EXPIRY, "When each certificate of the TLS files expires, in Unix seconds.",
            labels=["file", "role", "index", "subject"],
        )  # fmt: skip
        for file, role, index, subject, expires in expiry_series(self.files):
            family.add_metric([file, role, index, subject], expires)
        yield family


CERTIFICATES = CertificateExpiry()
REGISTRY.register(CERTIFICATES)
#: The master and its workers' ``process_*``; only in a multiprocess scrape (otherwise the default
#: registry's own ProcessCollector reports this process).
PROCESSES = ServerProcesses()


# --- every known series from the start ----------------------------------------------


def initialise(
    *,
    route_codes: Mapping[str, Iterable[int]],
    decisions: Iterable[tuple[str, str, str, str]],
    families: Iterable[str],
    checks: Iterable[str],
    refusal_reasons: Iterable[str],
) -> None:
    """Create every series whose labels are known, at 0.

    ``route_codes`` maps each route (as ``requests_total`` names it) to the
    statuses it can answer; ``decisions`` is every ``(route, check, reason,
    class)`` a verdict can have; ``families`` the verify routes as
    ``decisions_total`` names them; ``checks`` the check names. Calling it
    again is harmless.
    """
    for route, codes in route_codes.items():
        REQUEST_SECONDS.labels(route)
        for code in codes:
            REQUESTS.labels(route, str(code))
    for labels in decisions:
        DECISIONS.labels(*labels)
    for family in families:
        for reason in KEY_ERROR_REASONS:
            KEY_ERRORS.labels(family, reason)
        for reason in SYSTEM_ERROR_REASONS:
            SYSTEM_ERRORS.labels(family, reason)
    for check in checks:
        VERIFICATION_SECONDS.labels(check)
    for result in ("hit", "miss"):
        CACHE_LOOKUPS.labels(result)
    for reason in refusal_reasons:
        AUTH_REFUSALS.labels(reason)
    for reason in CLOSE_REASONS:
        CONNECTIONS_CLOSED.labels(reason)
    for scope in ("cluster", "namespace"):
        for action in ("Enforce", "Audit"):
            for reason in POLICY_VERDICT_REASONS:
                POLICY_VERDICTS.labels(scope, action, reason)
    UNMATCHED_ADMISSIONS.inc(0)


# --- the per-process tally ----------------------------------------------------------


class Tally:
    """Increments and observations of this process, held in dictionaries until :meth:`flush`.

    Thread-safe: one short lock per call. A histogram observation is kept as a
    count in its bucket and a sum, exactly what prometheus_client's
    ``observe`` would add to its file, so a flushed histogram equals one that
    observed each value itself.
    """

    def __init__(self) -> None:
        self._reset()
        self._bounds: dict[Histogram, tuple[float, ...]] = {}

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[Counter, tuple[str, ...]], float] = {}
        self._observed: dict[tuple[Histogram, tuple[str, ...]], list[float]] = {}

    def observe(self, histogram: Histogram, labels: tuple[str, ...], value: float) -> None:
        """One observation: :meth:`record` with nothing counted."""
        self.record((), ((histogram, labels, value),))

    def record(
        self,
        counts: Iterable[tuple[Counter, tuple[str, ...]]],
        observations: Iterable[tuple[Histogram, tuple[str, ...], float]] = (),
    ) -> None:
        """Several increments by 1 and observations under one lock: what one request counts."""
        placed = []
        for histogram, labels, value in observations:
            bounds = self._bounds.get(histogram)
            if bounds is None:
                bounds = self._bounds[histogram] = tuple(histogram._upper_bounds)
            placed.append(((histogram, labels), len(bounds), bisect.bisect_left(bounds, value), value))
        with self._lock:
            for key in counts:
                self._counts[key] = self._counts.get(key, 0.0) + 1.0
            for where, size, index, value in placed:
                sums = self._observed.get(where)
                if sums is None:
                    sums = self._observed[where] = [0.0] * (size + 1)
                sums[index] += 1
                sums[-1] += value

    def flush(self) -> None:
        """Move everything counted so far into the metric families (their files, under a launcher)."""
        with self._lock:
            counts, observed = self._counts, self._observed
            self._counts, self._observed = {}, {}
        for (counter, labels), amount in counts.items():
            (counter.labels(*labels) if labels else counter).inc(amount)
        for (histogram, labels), sums in observed.items():
            child: Any = histogram.labels(*labels) if labels else histogram
            # prometheus_client keeps one (non-cumulative) value per bucket and the sum: the
            # same values observe() increments (tests/unit/service/test_metrics.py holds it).
            for index, n in enumerate(sums[:-1]):
                if n:
                    child._buckets[index].inc(n)
            child._sum.inc(sums[-1])
        if TRUSTED_ROOT_AGE_SOURCE is not None:  # a gauge of time: set as it is now, at each flush
            TRUSTED_ROOT_AGE.set(TRUSTED_ROOT_AGE_SOURCE())


#: Where this process reads the trusted root's age from (the background refresher's ``age``); None: no series.
TRUSTED_ROOT_AGE_SOURCE: Callable[[], float] | None = None

#: The tally of this process. A forked worker starts with an empty one and a fresh lock.
TALLY = Tally()
os.register_at_fork(after_in_child=TALLY._reset)


# --- exposition ---------------------------------------------------------------------


def registry() -> CollectorRegistry:
    """What a scrape shows: every worker's values under a launcher, else this process's."""
    if os.environ.get(MULTIPROC_ENV):
        collected = CollectorRegistry()
        _multiprocess.MultiProcessCollector(collected)  # type: ignore[no-untyped-call]
        for collector in (BUILD, CERTIFICATES, PROCESSES):
            collected.register(collector)
        return collected
    return REGISTRY


def exposition(flush: bool = True) -> tuple[bytes, str]:
    """The text exposition of every metric, after this process's tally is flushed (unless ``flush=False``)."""
    if flush:
        TALLY.flush()
    return generate_latest(registry()), CONTENT_TYPE_LATEST


def worker_exited(pid: int) -> None:
    """Forget a dead worker's live values (gunicorn's ``child_exit`` hook)."""
    if os.environ.get(MULTIPROC_ENV):
        _multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
