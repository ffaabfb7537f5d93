"""The service's routes, one blueprint per route family, each with one error ladder.

* :data:`gatekeeper_routes` -- ``POST /v1/gatekeeper/verify``
  (:mod:`provider.service.wire.gatekeeper`); always 200 with a ``ProviderResponse``.
* :data:`kyverno_routes` -- ``POST /v1/kyverno/verify``
  (:mod:`provider.service.wire.kyverno`); always 200 with a verdict.
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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, Response, g, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from ..errors import ProviderError, RequestError, TransientError
from . import metrics
from .body import CLOSE_CONNECTION, BodyUnreadable, read_body
from .checks import Answer, Job
from .state import Service, current_service
from .wire import gatekeeper, kyverno

#: The decision log keeps the name it has always had: operators filter on it.
log = logging.getLogger("provider.app")

GATEKEEPER_PATH = "/v1/gatekeeper/verify"
KYVERNO_PATH = "/v1/kyverno/verify"
METRICS_PATH = "/metrics"
#: Routes a kubelet probe must reach without credentials.
OPEN_PATHS = frozenset({"/healthz", "/readyz"})


def json_response(body: Any, status: int = 200) -> Response:
    # ensure_ascii keeps keys with lone surrogates encodable; Gatekeeper decodes them to the same string.
    return Response(json.dumps(body, separators=(",", ":")), status=status, mimetype="application/json")


def _deadline(service: Service) -> float:
    start: float = g.get("start", time.monotonic())
    return start + service.config.deadline_seconds


# --- counting and logging ---------------------------------------------------------


def _record(route: str, answer: Answer) -> None:
    """Count and log one key's answer: decision, reason, object identity, latency; nothing else."""
    metrics.CACHE_LOOKUPS.labels("hit" if answer.cached else "miss").inc()
    if answer.verdict is not None:
        verdict, result = answer.verdict, answer.verdict.result
        metrics.DECISIONS.labels(route, verdict.check, result.reason, result.traffic_class).inc()
        if not answer.cached:
            metrics.VERIFICATION_SECONDS.labels(verdict.check).observe(answer.seconds)
        log.info(
            "decision",
            extra={
                "route": route,
                "check": verdict.check,
                "decision": "allow" if result.allowed else "deny",
                "reason": result.reason,
                "class": result.traffic_class,
                "object": {
                    "kind": verdict.subject.kind,
                    "namespace": verdict.subject.namespace,
                    "name": verdict.subject.name,
                },
                "cached": answer.cached,
                "latency_ms": round(answer.seconds * 1000, 3),
                "caller": g.get("identity", "anonymous"),
            },
        )
    elif answer.error is not None:
        metrics.KEY_ERRORS.labels(route, answer.error.reason).inc()
        log.info(
            "key error",
            extra={
                "route": route,
                "decision": "error",
                "reason": answer.error.reason,
                "latency_ms": round(answer.seconds * 1000, 3),
                "caller": g.get("identity", "anonymous"),
            },
        )


def _unreadable(route: str, error: BodyUnreadable) -> None:
    """Count and log a body that could not be read; the message names the cause's type, never the bytes."""
    request.environ[CLOSE_CONNECTION] = True
    metrics.SYSTEM_ERRORS.labels(route, error.reason).inc()
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


def _system_error(route: str, error: ProviderError) -> None:
    metrics.SYSTEM_ERRORS.labels(route, error.reason).inc()
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

    #: The ``route`` label of metrics and log lines.
    route: str
    #: The answer for ``(reason, message)``.
    answer: Callable[[str, str], Any]
    #: A Kyverno body asks about one object, so an unusable one is that object's answer
    #: (a key error); an unusable ProviderRequest fails the whole batch.
    request_error_is_a_key_error: bool
    #: What a bug says (``docs/api.md`` quotes Gatekeeper's).
    internal_message: str


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
    elif isinstance(exc, BodyUnreadable):
        # A whole-request error with its own status: the template reports it, Gatekeeper caches nothing.
        _unreadable(family.route, exc)
        status, reason, message = 400, exc.reason, exc.message
    elif isinstance(exc, RequestError) and family.request_error_is_a_key_error:
        _record(family.route, Answer(None, exc))
        reason, message = exc.reason, exc.message
    elif isinstance(exc, (RequestError, TransientError)):
        _system_error(family.route, exc)
        reason, message = exc.reason, exc.message
    else:  # fail closed, without a traceback in the answer
        log.error("internal error", exc_info=exc)
        reason, message = "internal-error", family.internal_message
    return json_response(family.answer(reason, message), status)


def _blueprint(name: str, family: RouteFamily) -> Blueprint:
    blueprint = Blueprint(name, __name__)
    blueprint.register_error_handler(Exception, functools.partial(_ladder, family))
    return blueprint


# --- Gatekeeper -------------------------------------------------------------------

GATEKEEPER = RouteFamily(
    route="gatekeeper",
    answer=lambda reason, message: gatekeeper.response([], f"{reason}: {message}"),
    request_error_is_a_key_error=False,
    internal_message="see the service's log",
)
gatekeeper_routes = _blueprint("gatekeeper", GATEKEEPER)


@gatekeeper_routes.post(GATEKEEPER_PATH)
def gatekeeper_verify() -> Response:
    service = current_service()
    keys = gatekeeper.read_request(read_body(service.config.max_body_bytes), service.limits)
    metrics.KEYS_PER_REQUEST.observe(len(keys))
    jobs = [Job(gatekeeper.cache_key(key), functools.partial(gatekeeper.read_key, key, service.limits)) for key in keys]
    answers = service.dispatcher.run(jobs, service.context(), _deadline(service))
    items: list[gatekeeper.Item] = []
    for key, answer in zip(keys, answers, strict=True):
        _record(GATEKEEPER.route, answer)
        if answer.verdict is not None:
            items.append(gatekeeper.value_item(key, answer.verdict.result))
        else:
            assert answer.error is not None
            items.append(gatekeeper.error_item(key, answer.error))
    return json_response(gatekeeper.response(items))


# --- Kyverno ----------------------------------------------------------------------

KYVERNO = RouteFamily(
    route="kyverno",
    answer=kyverno.denial,
    request_error_is_a_key_error=True,
    internal_message="internal error; see the service's log",
)
kyverno_routes = _blueprint("kyverno", KYVERNO)


@kyverno_routes.post(KYVERNO_PATH)
def kyverno_verify() -> Response:
    service = current_service()
    question, cache_key = kyverno.read_body(read_body(service.config.max_body_bytes), service.limits)
    (answer,) = service.dispatcher.run([Job(cache_key, lambda: question)], service.context(), _deadline(service))
    _record(KYVERNO.route, answer)
    if answer.verdict is None:
        assert answer.error is not None
        return json_response(kyverno.denial(answer.error.reason, answer.error.message))
    return json_response(kyverno.answer(answer.verdict.result))


# --- probes and metrics -----------------------------------------------------------

#: Errors here are the app's own (:func:`http_error`, :func:`internal_error`).
probe_routes = Blueprint("probes", __name__)


@probe_routes.get("/healthz")
def healthz() -> Response:
    return json_response({"status": "ok"})


@probe_routes.get("/readyz")
def readyz() -> Response:
    return json_response({"status": "ready"})


@probe_routes.get(METRICS_PATH)
def prometheus() -> Response:
    body, content_type = metrics.exposition()
    return Response(body, mimetype=None, content_type=content_type)


BLUEPRINTS = (gatekeeper_routes, kyverno_routes, probe_routes)
