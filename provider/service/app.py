"""The HTTPS service's Flask app: ``create_app(config)``.

Routes (reference: ``docs/api.md``, ``docs/openapi.yaml``; handlers and their
error ladders in :mod:`provider.service.routes`):

* ``POST /v1/gatekeeper/verify`` -- Gatekeeper external data
  (:mod:`provider.service.wire.gatekeeper`); always 200 with a ``ProviderResponse``.
* ``POST /v1/kyverno/verify`` -- Kyverno ``apiCall``/``http.Post``
  (:mod:`provider.service.wire.kyverno`); always 200 with a verdict.
* ``GET /healthz``, ``GET /readyz`` -- probes, no authentication.
* ``GET /metrics`` -- Prometheus (:mod:`provider.service.metrics`).

Both verify routes answer 401/403/503 when the caller is not authenticated or
not allowed (:mod:`provider.service.auth`, checked here before any route runs),
413 when the body is larger than ``MAX_BODY_BYTES`` and 400 when the body
cannot be read whole (:mod:`provider.service.body`); nothing else changes their
status. After a refusal or an unreadable body the connection is closed
(:data:`~provider.service.body.CLOSE_CONNECTION`, honoured by
:mod:`provider.service.worker`): a stranger keeps nothing open, and a stream
whose framing is broken is never read again.

The factory wires four things: the configuration
(:mod:`provider.service.config`), the app's :class:`~provider.service.state.Service`
(caches, thread pool, authenticator, cluster clients), the blueprints, and the
authentication and counting hooks below.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException

from . import metrics
from .auth import REFUSAL_REASONS, Decision
from .body import CLOSE_CONNECTION
from .certificates import ROLES
from .checks import CHECKS
from .config import configure_logging, load_config
from .routes import (
    BLUEPRINTS,
    FAMILIES,
    METRICS_PATH,
    OPEN_PATHS,
    ROUTE_CODES,
    UNMATCHED,
    http_error,
    internal_error,
    json_response,
    known_decisions,
)
from .state import EXTENSION, Service, current_service

log = logging.getLogger("provider.app")

#: The share of the request's deadline a TokenReview may use: the rest is for the verification.
TOKEN_REVIEW_SHARE = 0.5


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """The service as a WSGI app. ``config`` overrides ``MANIFEST_PROVIDER_*`` (see :mod:`provider.service.config`)."""
    ours, flask_own = _split_config(config)
    cfg = load_config(ours)
    configure_logging(cfg.log_level)
    service = Service(cfg)
    # No static folder: the service serves no files, so no /static route either.
    app = Flask(__name__, static_folder=None)
    app.config.update(flask_own)
    app.config["MAX_CONTENT_LENGTH"] = cfg.max_body_bytes
    app.extensions[EXTENSION] = service
    if not service.auth.enabled:
        log.warning("no client CA and no token audience configured: every caller is accepted")
    app.before_request(authenticate)
    app.after_request(count)
    app.teardown_request(finished)
    for blueprint in BLUEPRINTS:
        app.register_blueprint(blueprint)
    app.register_error_handler(HTTPException, http_error)
    app.register_error_handler(Exception, internal_error)
    metrics.CERTIFICATES.files = tuple((role, f) for role, f in zip(ROLES, (cfg.cert, cfg.client_ca), strict=True) if f)
    metrics.initialise(
        route_codes=ROUTE_CODES,
        decisions=known_decisions(),
        families=[family.path for family in FAMILIES],
        checks=CHECKS,
        refusal_reasons=REFUSAL_REASONS,
    )
    return app


def prepare_worker(app: Flask) -> None:
    """What a worker does before it takes its first connection: build the app's cluster clients.

    gunicorn's ``post_worker_init`` hook (:mod:`provider.service.serve`) calls
    it in each worker after the fork; nothing here talks to the cluster
    (:mod:`provider.service.cluster`).
    """
    service: Service = app.extensions[EXTENSION]
    service.prepare()


def _split_config(config: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Settings of ours, and Flask's own (``TESTING``, ...); anything else is a ConfigError in load_config."""
    ours: dict[str, Any] = {}
    flask_own: dict[str, Any] = {}
    for key, value in (config or {}).items():
        (flask_own if key in Flask.default_config else ours)[key] = value
    return ours, flask_own


# --- hooks around every request ------------------------------------------------------


def authenticate() -> Response | None:
    """Start the request's clock; refuse a caller who may not call (the probes need no credentials)."""
    g.start = time.monotonic()
    metrics.IN_FLIGHT.inc()
    g.in_flight = True
    service = current_service()
    if service.config.unsafe_http:
        log.warning("serving plain HTTP (--unsafe-http): requests and verdicts travel unencrypted")
    if request.path in OPEN_PATHS:
        return None
    decision = service.auth.authenticate(
        request.environ, request.headers.get("Authorization"), metrics=request.path == METRICS_PATH,
        review_deadline=g.start + service.config.deadline_seconds * TOKEN_REVIEW_SHARE,
    )  # fmt: skip
    if not decision.allowed:
        response = _refuse(decision)
        if decision.status == 401 and service.auth.audience is not None:
            response.headers["WWW-Authenticate"] = "Bearer"
        return response
    g.identity = decision.identity
    return None


def _refuse(decision: Decision) -> Response:
    """The answer to a caller who may not call, its log line and its count; the connection is closed after it."""
    request.environ[CLOSE_CONNECTION] = True
    metrics.AUTH_REFUSALS.labels(decision.reason).inc()
    route = request.url_rule.rule if request.url_rule is not None else UNMATCHED
    log.warning(
        "caller refused",
        extra={
            "route": route,
            "status": decision.status,
            "reason": decision.reason,
            "caller": decision.identity,
            "detail": decision.detail,
        },
    )
    body: dict[str, str] = {"error": {401: "unauthorized", 403: "forbidden"}.get(decision.status, "unavailable")}
    if decision.status == 503:
        body["reason"] = decision.reason  # the operator's problem, not a secret: say which
    response = json_response(body, decision.status)
    if decision.reason == "token-review-rate-limited":
        response.headers["Retry-After"] = "1"
    return response


def finished(_exc: BaseException | None) -> None:
    """The request is over, answered or not: it is no longer in flight."""
    if g.pop("in_flight", False):
        metrics.IN_FLIGHT.dec()


def count(response: Response) -> Response:
    """Count every answer by route and status, and time it (in the process's tally: no file is written here)."""
    rule = request.url_rule
    route = (rule.rule if rule is not None else UNMATCHED,)
    start = g.get("start")
    metrics.TALLY.record(
        [(metrics.REQUESTS, (*route, str(response.status_code)))],
        [(metrics.REQUEST_SECONDS, route, time.monotonic() - start)] if start is not None else (),
    )
    return response
