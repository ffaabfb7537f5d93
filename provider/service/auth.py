"""Who may call the service: authentication, then authorization, on every request.

**Authentication** -- either of two credentials, each when configured:

* **Client certificates** (``MANIFEST_PROVIDER_CLIENT_CA``). The TLS layer asks
  for one and rejects any the CA did not issue; a connection *without* one gets
  through the handshake (kubelet's probes bring none) and is refused here on
  every route but ``/healthz`` and ``/readyz``. Every request checks the
  certificate again against the clock and the current CA file
  (:mod:`provider.service.clientcerts`), so neither a resumed TLS session nor a
  kept-alive connection outlives the certificate.
* **Bearer tokens** (``MANIFEST_PROVIDER_TOKEN_AUDIENCE``), checked by a
  Kubernetes TokenReview for that audience (:mod:`provider.kube.tokenreview`; Kyverno
  >= 1.17.2 sends a token for ``kyverno-svc.kyverno.io``) by the request's
  review deadline. Accepted tokens are remembered -- by their SHA-256, never
  the token -- until their own ``exp`` or ``token_cache_seconds``; refused ones
  in a separate, small cache for :data:`REFUSED_TTL` seconds, so junk never
  evicts an accepted token. Reviews are rate-limited per process
  (:class:`RateLimit`): a stranger's stream of new tokens costs the API server
  at most ``token_reviews_per_second``, and the stranger gets 503s.

**Authorization** -- an authenticated caller must also be one of the configured
callers (:func:`parse_callers`): ``cert:<name>`` matches a certificate whose
DNS SAN or subject CN is ``<name>``; ``token:<username>`` matches a reviewed
token's user, and for a service account (``system:serviceaccount:<ns>:<sa>``)
the review's groups must include ``system:serviceaccounts:<ns>``. The verify
routes and ``/metrics`` have their own lists. The defaults
(:data:`provider.service.config.GATEKEEPER_CALLER`, :data:`provider.service.config.KYVERNO_CALLER`)
are exactly what the shipped deployments need.

With neither credential configured the service authenticates nobody (fine
behind a NetworkPolicy, as for Kyverno's CEL policies; the app warns). Every
refusal has a stable ``reason`` (for the log line and
``manifest_provider_auth_refusals_total``) and carries no detail to the caller:
401 when no usable credential was presented, 403 when one was refused or its
owner may not call, 503 when the API server could not be asked in time.
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..cache import LRUCache, digest
from ..errors import DataError, TransientError
from ..kube.tokenreview import TokenReviewer, TokenStatus
from ..parsing import load_json
from .clientcerts import ClientCertificates

__all__ = [
    "REFUSAL_REASONS",
    "Authenticator",
    "Callers",
    "Decision",
    "RateLimit",
    "TokenReviewer",
    "TokenStatus",
    "parse_callers",
    "token_expiry",
]

#: Seconds a refused token stays refused without asking the API server again.
REFUSED_TTL = 10.0
#: Refused tokens remembered per process: enough for a misconfigured client's
#: handful, small enough that junk costs little memory; never shared with accepted ones.
REFUSED_ENTRIES = 256
#: Accepted tokens remembered per process (Kyverno's admission controller has one per replica).
ACCEPTED_ENTRIES = 4096
#: A Kubernetes service-account token is a JWT of about 1 KiB; anything far larger is not one.
MAX_TOKEN_BYTES = 16 * 1024
#: The TokenReview burst: this many seconds' worth of reviews may be spent at once.
BURST_SECONDS = 2.0
#: The prefix and group the API server gives every service account (k8s.io/apiserver serviceaccount package).
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
SERVICE_ACCOUNTS_GROUP = "system:serviceaccounts"
#: Every reason a caller is refused for (``manifest_provider_auth_refusals_total{reason}``):
#: :meth:`Authenticator.authenticate`'s own, the client certificate's problems
#: (:class:`~provider.service.clientcerts.PeerCertificate`) and the TokenReview's transient failures.
REFUSAL_REASONS = (
    "no-credentials",
    "certificate-expired",
    "certificate-not-yet-valid",
    "certificate-untrusted",
    "caller-not-allowed",
    "token-refused",
    "token-too-large",
    "token-review-failed",
    "token-review-timeout",
    "token-review-rate-limited",
)


# --- the callers --------------------------------------------------------------------


@dataclass(frozen=True)
class Callers:
    """Identities that may call: certificate names and token usernames, each matched exactly."""

    certificates: frozenset[str]
    tokens: frozenset[str]

    def allows_certificate(self, names: Iterable[str]) -> bool:
        return any(name in self.certificates for name in names)

    def allows_token(self, status: TokenStatus) -> bool:
        if status.username not in self.tokens:
            return False
        if status.username.startswith(SERVICE_ACCOUNT_PREFIX):
            namespace = status.username[len(SERVICE_ACCOUNT_PREFIX) :].split(":")[0]
            return {SERVICE_ACCOUNTS_GROUP, f"{SERVICE_ACCOUNTS_GROUP}:{namespace}"} <= set(status.groups)
        return True


def _check_name(kind: str, name: str) -> None:
    if not name or name != name.strip() or any(c.isspace() for c in name):
        raise ValueError(f"{kind}:{name!r}: a name without blanks is required")
    if "*" in name or "," in name:
        raise ValueError(f"{kind}:{name}: callers are exact names; patterns and lists are not supported")
    if kind == "token" and name.startswith(SERVICE_ACCOUNT_PREFIX):
        parts = name[len(SERVICE_ACCOUNT_PREFIX) :].split(":")
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"token:{name}: a service account is system:serviceaccount:<namespace>:<name>")


def parse_callers(items: Iterable[str]) -> Callers:
    """``cert:<name>`` and ``token:<username>`` entries; raises :class:`ValueError` naming the bad one."""
    certificates: set[str] = set()
    tokens: set[str] = set()
    for item in items:
        kind, colon, name = item.partition(":")
        if not colon or kind not in ("cert", "token"):
            raise ValueError(f"{item!r}: expected cert:<certificate name> or token:<username>")
        _check_name(kind, name)
        (certificates if kind == "cert" else tokens).add(name)
    if not certificates and not tokens:
        raise ValueError(
            "name at least one caller; an empty list would refuse everyone (or, read wrongly, admit everyone)"
        )
    return Callers(frozenset(certificates), frozenset(tokens))


# --- tokens -------------------------------------------------------------------------


def token_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT (seconds since the epoch), read without verifying: the API server did."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        padded = parts[1] + "=" * (-len(parts[1]) % 4)
        # load_json, not json.loads: a deep claims object raised RecursionError, and an ``exp`` of
        # 400 digits made float() raise OverflowError, out of the authentication of the request.
        claims = load_json(base64.urlsafe_b64decode(padded), what="the token's claims")
    except (ValueError, binascii.Error, DataError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


class RateLimit:
    """A token bucket: ``rate`` per second, at most ``burst`` at once; thread-safe."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self._clock = rate, burst, clock
        self._level = burst
        self._last = clock()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            now = self._clock()
            self._level = min(self.burst, self._level + (now - self._last) * self.rate)
            self._last = now
            if self._level < 1:
                return False
            self._level -= 1
            return True


# --- decisions ----------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """``status`` 0 lets the request through; otherwise the HTTP status to answer with."""

    status: int
    #: Who called, for logs: ``cert:<CN>``, ``token:<username>`` or ``anonymous``; never a credential.
    identity: str = "anonymous"
    #: Why a request was refused (a stable code); ``""`` when it was let through.
    reason: str = ""
    #: A detail for the operator's log (an HTTP status, an exception type); never a credential.
    detail: str = ""

    @property
    def allowed(self) -> bool:
        return self.status == 0


def peer_der(environ: Mapping[str, Any]) -> bytes | None:
    """The client certificate (DER) the TLS layer accepted, if any (gunicorn puts the socket in the environ)."""
    sock = environ.get("gunicorn.socket")
    getpeercert = getattr(sock, "getpeercert", None)
    if getpeercert is None:
        return None
    try:
        der = getpeercert(binary_form=True)
    except ValueError:  # the handshake is not complete
        return None
    return der if isinstance(der, bytes) and der else None


class Authenticator:
    """Authentication and authorization of one request; one per worker process, shared by its threads."""

    def __init__(
        self,
        *,
        client_certificates: ClientCertificates | None,
        audience: str | None,
        callers: Callers,
        metrics_callers: Callers | None = None,
        reviewer: Callable[[], TokenReviewer | None] | None = None,
        cache_seconds: float = 300.0,
        reviews_per_second: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client_certificates = client_certificates
        self.audience = audience
        self.callers = callers
        self.metrics_callers = metrics_callers or callers
        self._reviewer_factory = reviewer
        self._reviewer: TokenReviewer | None = None
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._accepted: LRUCache[TokenStatus] = LRUCache(ACCEPTED_ENTRIES)
        self._refused: LRUCache[TokenStatus] = LRUCache(REFUSED_ENTRIES, ttl=REFUSED_TTL)
        self.reviews = RateLimit(reviews_per_second, max(1.0, reviews_per_second * BURST_SECONDS))

    @property
    def enabled(self) -> bool:
        return self.client_certificates is not None or self.audience is not None

    def _reviewer_now(self) -> TokenReviewer:
        if self._reviewer is None:
            reviewer = self._reviewer_factory() if self._reviewer_factory is not None else None
            if reviewer is None:
                raise TransientError("bearer tokens are configured but no cluster is available to review them",
                                     reason="token-review-failed")  # fmt: skip
            self._reviewer = reviewer
        return self._reviewer

    def _review(self, token: str, deadline: float) -> TokenStatus:
        assert self.audience is not None
        key = digest("token", self.audience, token)
        known = self._accepted.get(key) or self._refused.get(key)
        if known is not None:
            return known
        if not self.reviews.take():
            raise TransientError(
                "too many TokenReviews in this process; try again shortly", reason="token-review-rate-limited"
            )
        status = self._reviewer_now().review(token, self.audience, deadline)
        if status.authenticated:
            life = self._cache_seconds
            expiry = token_expiry(token)
            if expiry is not None:
                life = min(life, expiry - self._clock())
            if life > 0:
                self._accepted.put(key, status, ttl=life)
        else:
            self._refused.put(key, status)
        return status

    def authenticate(self, environ: Mapping[str, Any], authorization: str | None, *, metrics: bool = False,
                     review_deadline: float | None = None) -> Decision:  # fmt: skip
        """Who is calling and whether they may: the verify routes' callers, or ``/metrics``'s with ``metrics``."""
        if not self.enabled:
            return Decision(0)
        callers = self.metrics_callers if metrics else self.callers
        if self.client_certificates is not None:
            der = peer_der(environ)
            if der is not None:
                cert = self.client_certificates.check(der)
                identity = f"cert:{cert.common_name}"
                if cert.problem:
                    return Decision(401, identity, cert.problem)
                if not callers.allows_certificate(cert.names):
                    return Decision(403, identity, "caller-not-allowed")
                return Decision(0, identity)
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if self.audience is None or scheme.lower() != "bearer" or not token:
            return Decision(401, reason="no-credentials")
        if len(token) > MAX_TOKEN_BYTES:
            return Decision(403, reason="token-too-large")
        deadline = review_deadline if review_deadline is not None else time.monotonic() + 2.0
        try:
            status = self._review(token, deadline)
        except TransientError as exc:
            return Decision(503, reason=exc.reason, detail=exc.message)
        if not status.authenticated:
            return Decision(403, reason="token-refused")
        identity = f"token:{status.username[:128]}"
        if not callers.allows_token(status):
            return Decision(403, identity, "caller-not-allowed")
        return Decision(0, identity)
