"""The HTTPS service's Flask app: ``create_app(config)``.

Routes (reference: ``docs/api.md``, ``docs/openapi.yaml``):

* ``POST /v1/gatekeeper/verify`` -- Gatekeeper external data
  (:mod:`provider.service.wire.gatekeeper`); always 200 with a ``ProviderResponse``.
* ``POST /v1/kyverno/verify`` -- Kyverno ``apiCall``/``http.Post``
  (:mod:`provider.service.wire.kyverno`); always 200 with a verdict.
* ``GET /healthz``, ``GET /readyz`` -- probes, no authentication.
* ``GET /metrics`` -- Prometheus (:mod:`provider.service.metrics`).

Both verify routes answer 401/403/503 when the caller is not authenticated or
not allowed (:mod:`provider.service.auth`), 413 when the body is larger than
``MAX_BODY_BYTES`` and 400 when the body cannot be read whole (bad chunked
encoding, a client gone mid-body, a body slower than the deadline); nothing
else changes their status. After a refusal or an unreadable body the
connection is closed (:data:`CLOSE_CONNECTION`, honoured by
:mod:`provider.service.worker`): a stranger keeps nothing open, and a stream whose
framing is broken is never read again.

Handlers are thin: read the wire format, hand the keys to
:class:`provider.service.checks.Dispatcher`, shape the answer, count and log it. Each
app holds one :class:`Service`: the verdict cache, the compiled policy cache,
the thread pool, and -- built on first use -- the cluster clients; nothing of
it lives in module globals, so two apps in one process share nothing.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from ..cache import LRUCache
from ..errors import ConfigError, ProviderError, RequestError, TransientError
from ..kube.dryrun import dry_runner_for
from ..kube.tokenreview import KubeTokenReviewer, kube_configuration
from ..kube.tokens import api_client_for
from . import metrics
from .auth import Authenticator, Decision, TokenReviewer, parse_callers
from .checks import Answer, CheckContext, Dispatcher, Job, PolicyCache, Verdict
from .clientcerts import ClientCertificates
from .config import Config, configure_logging, load_config
from .wire import gatekeeper, kyverno

log = logging.getLogger("provider.app")

GATEKEEPER_PATH = "/v1/gatekeeper/verify"
KYVERNO_PATH = "/v1/kyverno/verify"
METRICS_PATH = "/metrics"
#: Routes a kubelet probe must reach without credentials.
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
#: The share of the request's deadline a TokenReview may use: the rest is for the verification.
TOKEN_REVIEW_SHARE = 0.5
#: WSGI environ key: set to True, the server closes the connection after this answer.
CLOSE_CONNECTION = "manifest_provider.close_connection"


# --- cluster clients, built on first use ------------------------------------------


def _cluster_configured(config: Config) -> bool:
    return bool(config.kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST"))


def _preload_kubernetes() -> None:
    """Import the ``kubernetes`` client now, at start-up, not inside the first request's deadline.

    The import takes about 0.4 s (more on a busy node): paid by the first dry-run or
    token lookup of every worker, it would use up most of that request's dry-run
    timeout. With the app preloaded this runs once, in gunicorn's master, before the
    workers fork; it imports modules only (no connections or threads, which must not
    cross a fork). The CLI never builds a :class:`Service`, so it stays fast.
    """
    importlib.import_module("kubernetes.client")
    importlib.import_module("kubernetes.config")


def _token_reviewer(kubeconfig: str | None) -> TokenReviewer | None:
    configuration = kube_configuration(kubeconfig)
    return KubeTokenReviewer(configuration) if configuration is not None else None


class _Lazy:
    """Builds its target on first use; a failure to build is transient (asked again next time)."""

    def __init__(self, build: Callable[[], Any], what: str, reason: str) -> None:
        self._build = build
        self._what = what
        self._reason = reason
        self._target: Any = None
        self._lock = threading.Lock()

    def target(self) -> Any:
        with self._lock:
            if self._target is None:
                try:
                    self._target = self._build()
                except Exception as exc:  # a broken kubeconfig too: the service's problem, not the key's
                    log.error("cannot build the %s", self._what, exc_info=exc)
                    detail = exc.message if isinstance(exc, ProviderError) else type(exc).__name__
                    raise TransientError(f"the {self._what} is not available: {detail}", reason=self._reason) from exc
            return self._target


class LazyDryRunner(_Lazy):
    """A :class:`~provider.verifier.DryRunner` that connects on the first dry-run."""

    def dry_run(self, manifest: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        result: dict[str, Any] = self.target().dry_run(manifest, namespace)
        return result


class LazyClient(_Lazy):
    """Any client object, built on first attribute access."""

    def __getattr__(self, name: str) -> Any:
        # Only attributes this proxy lacks arrive here. Private ones are forwarded
        # too: the kubernetes API classes call their ApiClient's private methods.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.target(), name)


# --- the per-process service ------------------------------------------------------


class Service:
    """Everything the handlers of one worker process share."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.limits = config.effective_limits
        self.cache: LRUCache[Verdict] = LRUCache(config.cache_entries, ttl=config.cache_ttl_seconds)
        self.policies = PolicyCache(config.policy_cache_entries)
        self.dispatcher = Dispatcher(self.cache, config.verify_threads)
        cluster = _cluster_configured(config)
        kubeconfig = config.kubeconfig
        if cluster and (config.dry_runner is None or config.kube_client is None):
            _preload_kubernetes()
        self.dry_runner: Any = config.dry_runner
        if self.dry_runner is None and cluster:
            limits = self.limits
            self.dry_runner = LazyDryRunner(
                lambda: dry_runner_for(kubeconfig, limits, in_cluster=True), "cluster dry-run client", "dry-run-failed"
            )
        self.kube_client: Any = config.kube_client
        if self.kube_client is None and cluster:
            self.kube_client = LazyClient(lambda: api_client_for(kubeconfig), "cluster client", "transient-error")
        reviewer: Callable[[], TokenReviewer | None] | None = None
        if config.token_reviewer is not None:
            given: TokenReviewer = config.token_reviewer
            reviewer = lambda: given  # noqa: E731 - a one-line factory
        elif config.token_audience is not None:
            if not cluster:
                raise ConfigError(
                    "MANIFEST_PROVIDER_TOKEN_AUDIENCE is set but no cluster is configured to review tokens "
                    "(set MANIFEST_PROVIDER_KUBECONFIG or run in a pod)"
                )
            reviewer = lambda: _token_reviewer(kubeconfig)  # noqa: E731
        self.auth = Authenticator(
            client_certificates=ClientCertificates(config.client_ca) if config.client_ca else None,
            audience=config.token_audience,
            callers=parse_callers(config.callers),
            metrics_callers=parse_callers(config.metrics_callers) if config.metrics_callers is not None else None,
            reviewer=reviewer,
            cache_seconds=config.token_cache_seconds,
            reviews_per_second=config.token_reviews_per_second,
        )

    def context(self) -> CheckContext:
        return CheckContext(
            dry_runner=self.dry_runner,
            kube_client=self.kube_client,
            now=self.config.now,
            limits=self.limits,
            policies=self.policies,
        )

    def deadline(self) -> float:
        start: float = g.get("start", time.monotonic())
        return start + self.config.deadline_seconds


# --- answers ----------------------------------------------------------------------

#: Bytes read from the request at a time while looking for the end of a chunked body.
_READ_SIZE = 64 * 1024
#: An oversized body is read and thrown away up to this many times the limit before
#: the 413 goes out (nginx's "lingering close"): closing a connection with unread
#: bytes in it makes the kernel reset it, and the reset can overtake the answer, so
#: the caller would see a broken connection instead of the reason. Past this, the
#: connection is closed unread.
_DRAIN_FACTOR = 4


class BodyUnreadable(RequestError):
    """The request body could not be read whole: broken framing, a client gone, a deadline passed."""


def _discard(stream: Any, most: int) -> None:
    while most > 0:
        part = stream.read(min(_READ_SIZE, most))
        if not part:
            return
        most -= len(part)


def _read(stream: Any, size: int) -> bytes:
    """One read from the WSGI input; whatever the server raises becomes :class:`BodyUnreadable`.

    gunicorn raises its own parse errors for bad chunked encoding (their text
    quotes the offending bytes: only the type is kept), ``NoMoreData`` or an
    ``OSError`` when the client goes, ``TimeoutError`` past the body's deadline.
    """
    try:
        return bytes(stream.read(size))
    except Exception as exc:  # any server's errors, none of them the caller's to see
        raise BodyUnreadable(f"the request body could not be read ({type(exc).__name__})") from None


def _read_body(limit: int) -> bytes:
    """The request body, or 413 beyond ``limit`` bytes -- with or without Content-Length.

    Werkzeug's own limit stops *silently* at the limit for a chunked body (the
    truncated bytes would then fail to parse as JSON), so the body is read
    here, from the WSGI input, one chunk past the limit at most; an oversized
    one is then drained (up to :data:`_DRAIN_FACTOR` times the limit) so the 413 arrives.
    A body that ends before its ``Content-Length``, or that the server cannot
    read, is :class:`BodyUnreadable` (400 ``request-invalid``): never half a body parsed as if whole.
    """
    length = request.content_length
    stream = request.environ["wsgi.input"]
    if length is not None and length > limit:
        if length <= _DRAIN_FACTOR * limit:
            try:
                _discard(stream, length)
            except Exception:  # the 413 goes out anyway; the connection is closed
                request.environ[CLOSE_CONNECTION] = True
        raise RequestEntityTooLarge()
    if length is not None:
        body = _read(stream, length)
        if len(body) != length:
            raise BodyUnreadable(f"the request body ended after {len(body)} of its {length} bytes")
        return body
    if not request.environ.get("wsgi.input_terminated"):
        return b""  # no length and a server that does not end the stream: nothing can be read safely
    parts: list[bytes] = []
    size = 0
    while size <= limit:
        part = _read(stream, min(_READ_SIZE, limit + 1 - size))
        if not part:
            break
        parts.append(part)
        size += len(part)
    if size > limit:
        try:
            _discard(stream, (_DRAIN_FACTOR - 1) * limit)
        except Exception:  # as above
            request.environ[CLOSE_CONNECTION] = True
        raise RequestEntityTooLarge()
    return b"".join(parts)


def _json(body: Any, status: int = 200) -> Response:
    # ensure_ascii keeps keys with lone surrogates encodable; Gatekeeper decodes them to the same string.
    return Response(json.dumps(body, separators=(",", ":")), status=status, mimetype="application/json")


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
                "object": {"kind": verdict.subject.kind, "namespace": verdict.subject.namespace, "name": verdict.subject.name},
                "cached": answer.cached,
                "latency_ms": round(answer.seconds * 1000, 3),
                "caller": g.get("identity", "anonymous"),
            },
        )
    elif answer.error is not None:
        metrics.KEY_ERRORS.labels(route, answer.error.reason).inc()
        log.info(
            "key error",
            extra={"route": route, "decision": "error", "reason": answer.error.reason, "latency_ms": round(answer.seconds * 1000, 3),
                   "caller": g.get("identity", "anonymous")},
        )


def _unreadable(route: str, error: BodyUnreadable) -> None:
    """Count and log a body that could not be read; the message names the cause's type, never the bytes."""
    request.environ[CLOSE_CONNECTION] = True
    metrics.SYSTEM_ERRORS.labels(route, error.reason).inc()
    log.warning("request body unreadable", extra={"route": route, "decision": "error", "reason": error.reason,
                                                  "detail": error.message, "caller": g.get("identity", "anonymous")})


def _refuse(decision: Decision) -> Response:
    """The answer to a caller who may not call, its log line and its count; the connection is closed after it."""
    request.environ[CLOSE_CONNECTION] = True
    metrics.AUTH_REFUSALS.labels(decision.reason).inc()
    route = request.url_rule.rule if request.url_rule is not None else "unmatched"
    log.warning("caller refused", extra={"route": route, "status": decision.status, "reason": decision.reason,
                                         "caller": decision.identity, "detail": decision.detail})
    body: dict[str, str] = {"error": {401: "unauthorized", 403: "forbidden"}.get(decision.status, "unavailable")}
    if decision.status == 503:
        body["reason"] = decision.reason  # the operator's problem, not a secret: say which
    response = _json(body, decision.status)
    if decision.reason == "token-review-rate-limited":
        response.headers["Retry-After"] = "1"
    return response


def _system_error(route: str, error: ProviderError) -> None:
    metrics.SYSTEM_ERRORS.labels(route, error.reason).inc()
    log.warning("request failed", extra={"route": route, "decision": "error", "reason": error.reason, "detail": error.message[:300],
                                         "caller": g.get("identity", "anonymous")})


# --- the app ----------------------------------------------------------------------


def _split_config(config: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Settings of ours, and Flask's own (``TESTING``, ...); anything else is a ConfigError in load_config."""
    ours: dict[str, Any] = {}
    flask_own: dict[str, Any] = {}
    for key, value in (config or {}).items():
        (flask_own if key in Flask.default_config else ours)[key] = value
    return ours, flask_own


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """The service as a WSGI app. ``config`` overrides ``MANIFEST_PROVIDER_*`` (see :mod:`provider.service.config`)."""
    ours, flask_own = _split_config(config)
    cfg = load_config(ours)
    configure_logging(cfg.log_level)
    service = Service(cfg)
    app = Flask("provider")
    app.config.update(flask_own)
    app.config["MAX_CONTENT_LENGTH"] = cfg.max_body_bytes
    app.extensions["manifest_provider"] = service
    if not service.auth.enabled:
        log.warning("no client CA and no token audience configured: every caller is accepted")

    @app.before_request
    def authenticate() -> Response | None:
        g.start = time.monotonic()
        if cfg.unsafe_http:
            log.warning("serving plain HTTP (--unsafe-http): requests and verdicts travel unencrypted")
        if request.path in OPEN_PATHS:
            return None
        decision = service.auth.authenticate(
            request.environ, request.headers.get("Authorization"), metrics=request.path == METRICS_PATH,
            review_deadline=g.start + cfg.deadline_seconds * TOKEN_REVIEW_SHARE,
        )
        if not decision.allowed:
            response = _refuse(decision)
            if decision.status == 401 and service.auth.audience is not None:
                response.headers["WWW-Authenticate"] = "Bearer"
            return response
        g.identity = decision.identity
        return None

    @app.after_request
    def count(response: Response) -> Response:
        route = request.url_rule.rule if request.url_rule is not None else "unmatched"
        metrics.REQUESTS.labels(route, str(response.status_code)).inc()
        if "start" in g:
            metrics.REQUEST_SECONDS.labels(route).observe(time.monotonic() - g.start)
        return response

    @app.post(GATEKEEPER_PATH)
    def gatekeeper_verify() -> Response:
        route = "gatekeeper"
        try:
            keys = gatekeeper.read_request(_read_body(cfg.max_body_bytes), service.limits)
            metrics.KEYS_PER_REQUEST.observe(len(keys))
            jobs = [Job(gatekeeper.cache_key(key), functools.partial(gatekeeper.read_key, key, service.limits)) for key in keys]
            answers = service.dispatcher.run(jobs, service.context(), service.deadline())
        except BodyUnreadable as exc:
            # A whole-request error with its own status: the template reports it, Gatekeeper caches nothing.
            _unreadable(route, exc)
            return _json(gatekeeper.response([], f"{exc.reason}: {exc.message}"), 400)
        except (RequestError, TransientError) as exc:
            _system_error(route, exc)
            return _json(gatekeeper.response([], f"{exc.reason}: {exc.message}"))
        except HTTPException:
            raise
        except Exception as exc:  # fail closed, without a traceback in the answer
            log.error("internal error", exc_info=exc)
            return _json(gatekeeper.response([], "internal-error: see the service's log"))
        items: list[gatekeeper.Item] = []
        for key, answer in zip(keys, answers, strict=True):
            _record(route, answer)
            if answer.verdict is not None:
                items.append(gatekeeper.value_item(key, answer.verdict.result))
            else:
                assert answer.error is not None
                items.append(gatekeeper.error_item(key, answer.error))
        return _json(gatekeeper.response(items))

    @app.post(KYVERNO_PATH)
    def kyverno_verify() -> Response:
        route = "kyverno"
        try:
            question, cache_key = kyverno.read_body(_read_body(cfg.max_body_bytes), service.limits)
            (answer,) = service.dispatcher.run([Job(cache_key, lambda: question)], service.context(), service.deadline())
        except BodyUnreadable as exc:
            _unreadable(route, exc)
            return _json(kyverno.denial(exc.reason, exc.message), 400)
        except RequestError as exc:
            _record(route, Answer(None, exc))
            return _json(kyverno.denial(exc.reason, exc.message))
        except TransientError as exc:
            _system_error(route, exc)
            return _json(kyverno.denial(exc.reason, exc.message))
        except HTTPException:
            raise
        except Exception as exc:
            log.error("internal error", exc_info=exc)
            return _json(kyverno.denial("internal-error", "internal error; see the service's log"))
        _record(route, answer)
        if answer.verdict is None:
            assert answer.error is not None
            return _json(kyverno.denial(answer.error.reason, answer.error.message))
        return _json(kyverno.answer(answer.verdict.result))

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        return _json({"status": "ready"})

    @app.get(METRICS_PATH)
    def prometheus() -> Response:
        body, content_type = metrics.exposition()
        return Response(body, mimetype=None, content_type=content_type)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        if status == 413:
            message = f"request body larger than {cfg.max_body_bytes} bytes"
            if request.path == GATEKEEPER_PATH:
                return _json(gatekeeper.response([], f"request-invalid: {message}"), 413)
            if request.path == KYVERNO_PATH:
                return _json(kyverno.denial("request-invalid", message), 413)
        return _json({"error": (exc.name or "error").lower()}, status)

    @app.errorhandler(Exception)
    def internal_error(exc: Exception) -> Response:
        log.error("internal error", exc_info=exc)
        return _json({"error": "internal error"}, 500)

    return app
