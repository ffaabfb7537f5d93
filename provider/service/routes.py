"""The service's routes, one blueprint per route family, each with one error ladder.

* :data:`gatekeeper_routes` -- ``POST /v1/gatekeeper/verify``
  (:mod:`provider.service.wire.gatekeeper`); always 200 with a ``ProviderResponse``.
* :data:`kyverno_routes` -- ``POST /v1/kyverno/verify``
  (:mod:`provider.service.wire.kyverno`); always 200 with a verdict.
* :data:`admission_routes` -- ``POST /v1/admission/validate``
  (:mod:`provider.service.wire.admission`): the API server's own call, decided by
  the policies the service holds (:mod:`provider.service.heldpolicies`); always
  200 with an ``AdmissionReview``.
* :data:`probe_routes` -- ``GET /healthz``, ``GET /readyz`` and ``GET /metrics``.

A verify handler is the happy path only: read the body (:mod:`provider.service.body`),
read the wire format, hand the jobs to the :class:`~provider.service.checks.Dispatcher`,
shape the answer, count and log it. Everything that is not a verdict -- an unreadable or
oversized body, an unusable request, a deadline, a cluster that did not answer, a bug --
is raised and mapped once, by the blueprint's :func:`_ladder`, into that family's own
answer (Gatekeeper: ``systemError``; Kyverno: a denial with a reason), its status
(400 unreadable, 413 too large, else 200), its count and its log line. Only the
statuses ``docs/api.md`` lists ever leave a verify route.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from flask import Blueprint, Response, g, request
from prometheus_client import Counter, Histogram
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from ..errors import ProviderError, RequestError, TransientError
from ..result import ALLOWING_REASONS, AllowedBy, Reason, Result
from . import metrics
from .body import CLOSE_CONNECTION, BodyUnreadable, read_body
from .certificates import readiness_problem
from .checks import CHECK_REASONS, DEFAULT_CHECK, Answer, Job, Subject
from .state import Service, current_service
from .wire import admission, gatekeeper, kyverno

#: The decision log keeps the name it has always had: operators filter on it.
log = logging.getLogger("provider.app")

GATEKEEPER_PATH = "/v1/gatekeeper/verify"
KYVERNO_PATH = "/v1/kyverno/verify"
ADMISSION_PATH = "/v1/admission/validate"
METRICS_PATH = "/metrics"
#: Routes a kubelet probe must reach without credentials.
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
_HIT, _MISS = "hit", "miss"


def json_response(body: Any, status: int = 200) -> Response:
    # ensure_ascii keeps keys with lone surrogates encodable; Gatekeeper decodes them to the same string.
    return json_text_response(json.dumps(body, separators=(",", ":")), status)


def json_text_response(text: str, status: int = 200) -> Response:
    """An answer whose JSON is already encoded (a verdict's :attr:`~provider.service.checks.Verdict.value`)."""
    return Response(text, status=status, mimetype="application/json")


def _deadline(service: Service) -> float:
    start: float = g.get("start", time.monotonic())
    return start + service.config.deadline_seconds


# --- counting and logging ---------------------------------------------------------


def _account(family: RouteFamily, answers: Sequence[Answer]) -> None:
    """Count the answers of one request and log each: decision, reason, object identity, latency; nothing else.

    Every answer is a decision (``decisions_total``): a verdict by its reason, a
    per-key error too -- both routes deny on one -- with the check it named, or
    ``none``. Per-key errors are also counted on their own (``key_errors_total``).

    The counts of a whole request go to :data:`provider.service.metrics.TALLY` under
    one lock, however many keys it holds. Each key still gets its own log line
    (``decision`` or ``key error``, as operators' queries and the log tests expect),
    built from a small dict: no object content, no key text.
    """
    route, path = family.route, family.path
    counts: list[tuple[Counter, tuple[str, ...]]] = []
    observations: list[tuple[Histogram, tuple[str, ...], float]] = []
    logged = log.isEnabledFor(logging.INFO)
    caller = g.get("identity", "anonymous") if logged else ""
    for answer in answers:
        counts.append((metrics.CACHE_LOOKUPS, (_HIT if answer.cached else _MISS,)))
        if answer.verdict is not None:
            verdict, result = answer.verdict, answer.verdict.result
            counts.append((metrics.DECISIONS, (path, verdict.check, result.reason, result.traffic_class)))
            if not answer.cached:
                observations.append((metrics.VERIFICATION_SECONDS, (verdict.check,), answer.seconds))
            if logged:
                subject = verdict.subject
                log.info(
                    "decision",
                    extra={
                        "route": route,
                        "check": verdict.check,
                        "decision": "allow" if result.allowed else "deny",
                        "reason": result.reason,
                        "class": result.traffic_class,
                        "object": {"kind": subject.kind, "namespace": subject.namespace, "name": subject.name},
                        "cached": answer.cached,
                        "latency_ms": round(answer.seconds * 1000, 3),
                        "caller": caller,
                    },
                )
        elif answer.error is not None:
            reason = answer.error.reason
            counts.append((metrics.KEY_ERRORS, (path, reason)))
            counts.append((metrics.DECISIONS, (path, answer.check or metrics.NO_CHECK, reason, _denial_class(reason))))
            if logged:
                log.info(
                    "key error",
                    extra={
                        "route": route,
                        "decision": "error",
                        "reason": answer.error.reason,
                        "latency_ms": round(answer.seconds * 1000, 3),
                        "caller": caller,
                    },
                )
    metrics.TALLY.record(counts, observations)


def _denial_class(reason: str) -> str:
    """The traffic class of a denial that is not a verdict (a key error, a failed request)."""
    return Result(False, False, cast(Reason, reason), "").traffic_class


def _failed(family: RouteFamily, reason: str) -> None:
    """Count a request that failed as a whole; on a route whose every answer is a verdict, also that denial."""
    metrics.SYSTEM_ERRORS.labels(family.path, reason).inc()
    if family.every_answer_is_a_verdict:
        metrics.DECISIONS.labels(family.path, metrics.NO_CHECK, reason, _denial_class(reason)).inc()


def _unreadable(family: RouteFamily, error: BodyUnreadable) -> None:
    """Count and log a body that could not be read; the message names the cause's type, never the bytes."""
    request.environ[CLOSE_CONNECTION] = True
    route = family.route
    _failed(family, error.reason)
    log.warning(
        "request body unreadable",
        extra={
            "route": route,
            "decision": "error",
            "reason": error.reason,
            "detail": error.message,
            "caller": g.get("identity", "anonymous"),
        },
    )


def _system_error(family: RouteFamily, error: ProviderError) -> None:
    route = family.route
    _failed(family, error.reason)
    log.warning(
        "request failed",
        extra={
            "route": route,
            "decision": "error",
            "reason": error.reason,
            "detail": error.message[:300],
            "caller": g.get("identity", "anonymous"),
        },
    )


# --- errors: one ladder, one answer shape per family --------------------------------


def http_error(exc: HTTPException) -> Response:
    """Any other HTTP error (404, 405, ...), on any route: a short JSON body."""
    return json_response({"error": (exc.name or "error").lower()}, exc.code or 500)


def internal_error(exc: Exception) -> Response:
    """A bug outside the verify routes: logged, answered without detail."""
    log.error("internal error", exc_info=exc)
    return json_response({"error": "internal error"}, 500)


@dataclass(frozen=True)
class RouteFamily:
    """What differs between the verify routes when the answer is not a verdict."""

    #: The ``route`` field of log lines.
    route: str
    #: The path: the ``route`` label of every metric.
    path: str
    #: The answer for ``(reason, message)``.
    answer: Callable[[str, str], Any]
    #: A Kyverno body asks about one object, so an unusable one is that object's answer
    #: (a key error); an unusable ProviderRequest fails the whole batch.
    request_error_is_a_key_error: bool
    #: What a bug says (``docs/api.md`` quotes Gatekeeper's).
    internal_message: str
    #: Whether every answer, failures included, is a verdict about the object (Kyverno: a denial
    #: with the reason) rather than a whole-request error (Gatekeeper's ``systemError``).
    every_answer_is_a_verdict: bool = False
    #: The checks a request may name (None: every registered one).
    checks: tuple[str, ...] | None = None


def _ladder(family: RouteFamily, exc: Exception) -> Response:
    """The one mapping from what a verify request raised to its answer, status, count and log line."""
    if isinstance(exc, HTTPException) and not isinstance(exc, RequestEntityTooLarge):
        # Flask prefers a blueprint's handler for Exception to the app's for HTTPException:
        # hand every HTTP error but the 413 back to the app's shape.
        return http_error(exc)
    status = 200
    if isinstance(exc, RequestEntityTooLarge):
        limit = current_service().config.max_body_bytes
        status, reason, message = 413, "request-invalid", f"request body larger than {limit} bytes"
        if family.every_answer_is_a_verdict:  # counted as a request by its status, and here as this denial
            metrics.DECISIONS.labels(family.path, metrics.NO_CHECK, reason, _denial_class(reason)).inc()
    elif isinstance(exc, BodyUnreadable):
        # A whole-request error with its own status: the template reports it, Gatekeeper caches nothing.
        _unreadable(family, exc)
        status, reason, message = 400, exc.reason, exc.message
    elif isinstance(exc, RequestError) and family.request_error_is_a_key_error:
        _account(family, [Answer(None, exc)])
        reason, message = exc.reason, exc.message
    elif isinstance(exc, (RequestError, TransientError)):
        _system_error(family, exc)
        reason, message = exc.reason, exc.message
    else:  # fail closed, without a traceback in the answer
        log.error("internal error", exc_info=exc)
        _failed(family, "internal-error")
        reason, message = "internal-error", family.internal_message
    return json_response(family.answer(reason, message), status)


def _blueprint(name: str, family: RouteFamily) -> Blueprint:
    blueprint = Blueprint(name, __name__)
    blueprint.register_error_handler(Exception, functools.partial(_ladder, family))
    return blueprint


# --- Gatekeeper -------------------------------------------------------------------

GATEKEEPER = RouteFamily(
    route="gatekeeper",
    path=GATEKEEPER_PATH,
    answer=lambda reason, message: gatekeeper.response([], f"{reason}: {message}"),
    request_error_is_a_key_error=False,
    internal_message="see the service's log",
)
gatekeeper_routes = _blueprint("gatekeeper", GATEKEEPER)


@gatekeeper_routes.post(GATEKEEPER_PATH)
def gatekeeper_verify() -> Response:
    service = current_service()
    keys = gatekeeper.read_request(read_body(service.config.max_body_bytes), service.limits)
    metrics.TALLY.observe(metrics.KEYS_PER_REQUEST, (), len(keys))
    jobs = [Job(gatekeeper.cache_key(key), functools.partial(gatekeeper.read_key, key, service.limits)) for key in keys]
    answers = service.dispatcher.run(jobs, service.context(), _deadline(service))
    _account(GATEKEEPER, answers)
    return json_text_response(gatekeeper.encode_response(keys, answers))


# --- Kyverno ----------------------------------------------------------------------

KYVERNO = RouteFamily(
    route="kyverno",
    path=KYVERNO_PATH,
    answer=kyverno.denial,
    request_error_is_a_key_error=True,
    internal_message="internal error; see the service's log",
    every_answer_is_a_verdict=True,
)
kyverno_routes = _blueprint("kyverno", KYVERNO)


@kyverno_routes.post(KYVERNO_PATH)
def kyverno_verify() -> Response:
    service = current_service()
    question, cache_key = kyverno.read_body(read_body(service.config.max_body_bytes), service.limits)
    (answer,) = service.dispatcher.run([Job(cache_key, lambda: question)], service.context(), _deadline(service))
    _account(KYVERNO, [answer])
    if answer.verdict is None:
        assert answer.error is not None
        return json_response(kyverno.denial(answer.error.reason, answer.error.message))
    return json_text_response(kyverno.encode_answer(answer.verdict))


# --- the API server: the service as its own admission webhook ----------------------------

ADMISSION = RouteFamily(
    route="admission",
    path=ADMISSION_PATH,
    answer=lambda reason, message: admission.denial(g.get("admission_uid", ""), reason, message),
    request_error_is_a_key_error=True,
    internal_message="internal error; see the service's log",
    every_answer_is_a_verdict=True,
    checks=(DEFAULT_CHECK,),
)
admission_routes = _blueprint("admission", ADMISSION)
#: The API server's own deadline for the call, sent as ``?timeout=<n>s`` (k8s.io/apiserver
#: ``webhook/validating/dispatcher.go`` ``callHook``: the webhook's timeoutSeconds, rounded up to whole
#: seconds); the service answers this much before it, whatever its own deadline says.
API_SERVER_MARGIN_SECONDS = 0.5


def _admission_deadline(service: Service) -> float:
    deadline = _deadline(service)
    text = request.args.get("timeout", "")
    if text.endswith("s") and text[:-1].isdigit():
        start: float = g.get("start", time.monotonic())
        deadline = min(deadline, start + max(0.1, int(text[:-1]) - API_SERVER_MARGIN_SECONDS))
    return deadline


@admission_routes.post(ADMISSION_PATH)
def admission_validate() -> Response:
    service = current_service()
    uid, review = admission.read_review(
        read_body(service.config.max_body_bytes), service.limits, seen_uid=lambda u: setattr(g, "admission_uid", u)
    )
    start = time.perf_counter()
    decided = service.dispatcher.call(
        lambda ctx: service.held.admit(review, ctx), service.context(), _admission_deadline(service)
    )
    _account_admission(review, decided, time.perf_counter() - start)
    return json_response(admission.response(uid, decided))


def _account_admission(review: Any, decided: Any, seconds: float) -> None:
    """Count and log one admission answer: the decision, each held policy's verdict, no policy at all."""
    result = decided.result
    counts: list[tuple[Counter, tuple[str, ...]]] = [
        (metrics.DECISIONS, (ADMISSION_PATH, DEFAULT_CHECK, result.reason, result.traffic_class))
    ]
    for verdict in decided.verdicts:
        held = verdict.policy
        counts.append((metrics.POLICY_VERDICTS, (held.scope, held.action, verdict.result.reason)))
    if not decided.matched and result.reason == "out-of-scope":
        counts.append((metrics.UNMATCHED_ADMISSIONS, ()))
    metrics.TALLY.record(counts, [(metrics.VERIFICATION_SECONDS, (DEFAULT_CHECK,), seconds)])
    if log.isEnabledFor(logging.INFO):
        subject = Subject.of(review)
        log.info(
            "decision",
            extra={
                "route": ADMISSION.route,
                "check": DEFAULT_CHECK,
                "decision": "allow" if decided.allowed else "deny",
                "reason": result.reason,
                "class": result.traffic_class,
                "object": {"kind": subject.kind, "namespace": subject.namespace, "name": subject.name},
                "policy": decided.decided_by.ref if decided.decided_by is not None else "",
                "policies": len(decided.verdicts),
                "warnings": len(decided.warnings),
                "cached": False,
                "latency_ms": round(seconds * 1000, 3),
                "caller": g.get("identity", "anonymous"),
            },
        )


# --- probes and metrics -----------------------------------------------------------

#: Errors here are the app's own (:func:`http_error`, :func:`internal_error`).
probe_routes = Blueprint("probes", __name__)


@probe_routes.get("/healthz")
def healthz() -> Response:
    return json_response({"status": "ok"})


@probe_routes.get("/readyz")
def readyz() -> Response:
    """Ready unless the certificate this process presents is outside its validity period (every caller refuses it),
    or the held policies have not been read once (every admission request would be denied)."""
    service = current_service()
    tls = service.config.serving_certificates
    if tls is not None:
        served = tls.served()
        problem = readiness_problem(served, service.config.now or datetime.now(UTC)) if served else None
        if problem is not None:
            reason, message = problem
            log.warning("not ready", extra={"reason": reason, "detail": message})
            return json_response({"status": "not ready", "reason": reason}, 503)
    held = service.held
    if held.enabled:
        problem = held.problem()
        if problem is not None and problem[0] == "transient-error":
            # Not read yet: every admission request would be denied. Kept out of the Service's endpoints.
            log.warning("not ready", extra={"reason": "policies-not-read", "detail": problem[1][:300]})
            return json_response({"status": "not ready", "reason": "policies-not-read"}, 503)
    return json_response({"status": "ready"})


@probe_routes.get(METRICS_PATH)
def prometheus() -> Response:
    body, content_type = metrics.exposition()
    return Response(body, mimetype=None, content_type=content_type)


BLUEPRINTS = (gatekeeper_routes, kyverno_routes, admission_routes, probe_routes)
FAMILIES = (GATEKEEPER, KYVERNO, ADMISSION)

# --- the series every scrape shows from the start (provider.service.metrics.initialise) ---

#: ``requests_total{route}`` of a request no route matched (404, or 405 for a known path).
UNMATCHED = "unmatched"
#: Each route and the statuses it answers (docs/api.md): a verify route 200, or 400/413 for a
#: body, 401/403/503 for a caller; ``/metrics`` 200 or a caller's refusal.
ROUTE_CODES: dict[str, tuple[int, ...]] = {
    GATEKEEPER_PATH: (200, 400, 401, 403, 413, 503),
    KYVERNO_PATH: (200, 400, 401, 403, 413, 503),
    ADMISSION_PATH: (200, 400, 401, 403, 413, 503),
    "/healthz": (200,),
    "/readyz": (200, 503),
    METRICS_PATH: (200, 401, 403, 503),
    UNMATCHED: (404, 405),
}


def known_decisions() -> list[tuple[str, str, str, str]]:
    """Every ``(route, check, reason, class)`` of ``decisions_total`` an answer is known to have.

    Each check's verdicts; per-key errors under each check and under ``none``; on a
    route whose every answer is a verdict, its whole-request failures under ``none``.
    """
    series: list[tuple[str, str, str, str]] = []
    for family in FAMILIES:
        for check, reasons in CHECK_REASONS.items():
            if family.checks is not None and check not in family.checks:
                continue
            for reason in reasons:
                profiles: tuple[AllowedBy | None, ...] = (
                    ("common", "policy")
                    if reason in ("skipped-user", "skipped-object")
                    else ("common",)
                    if reason == "control-plane-object"  # only the built-in common profile lists such objects
                    else (None,)
                )
                for profile in profiles:
                    result = Result(reason in ALLOWING_REASONS, reason == "verified", reason, "", profile=profile)
                    series.append((family.path, check, reason, result.traffic_class))
        for named in (*(family.checks or CHECK_REASONS), metrics.NO_CHECK):
            for error in metrics.KEY_ERROR_REASONS:
                series.append((family.path, named, error, _denial_class(error)))
        if family.every_answer_is_a_verdict:
            for failure in metrics.SYSTEM_ERROR_REASONS:
                series.append((family.path, metrics.NO_CHECK, failure, _denial_class(failure)))
        if family is ADMISSION:  # held policies that cannot be used or read yet, as the admission's verdict
            for reason in ("policy-invalid", "transient-error"):
                series.append((family.path, DEFAULT_CHECK, reason, _denial_class(reason)))
    return sorted(set(series))
