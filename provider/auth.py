"""Who may call the service: client certificates and Kubernetes bearer tokens.

Two ways to authenticate, either of which suffices when configured:

* **mTLS.** With a client CA (``MANIFEST_PROVIDER_CLIENT_CA``) the TLS layer
  asks every client for a certificate and rejects any that the CA did not
  issue; a connection *without* a certificate is let through the handshake
  (kubelet's HTTPS probes present none) and then refused here on every route
  but ``/healthz`` and ``/readyz``. Gatekeeper presents its webhook
  certificate; its CA is ``ca.crt`` in Secret ``gatekeeper-webhook-server-cert``.
* **Bearer tokens.** With an audience (``MANIFEST_PROVIDER_TOKEN_AUDIENCE``) an
  ``Authorization: Bearer`` token is checked by a Kubernetes TokenReview for
  that audience (Kyverno >= 1.18 sends a token for ``kyverno-svc.kyverno.io``).
  An accepted token is remembered -- by its SHA-256, never the token -- until
  its own ``exp`` or ``token_cache_seconds``, whichever is sooner; a refused
  one for :data:`NEGATIVE_TTL` seconds, so a misbehaving client cannot turn
  every request into an API-server call.

With neither configured the service authenticates nobody (fine behind a
NetworkPolicy on a laptop; the launcher warns). Refusals carry no detail:
401 when no usable credential was presented, 403 when one was presented and
refused, 503 when the API server could not be asked.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .cache import LRUCache, digest
from .errors import TransientError

#: Seconds a refused token stays refused without asking the API server again.
NEGATIVE_TTL = 10.0
#: A Kubernetes service-account token is a JWT of about 1 KiB; anything far larger is not one.
MAX_TOKEN_BYTES = 16 * 1024
#: Seconds a TokenReview may take (it runs inside Gatekeeper's/Kyverno's own timeout).
TOKEN_REVIEW_TIMEOUT = 2.0


@dataclass(frozen=True)
class TokenStatus:
    """What a TokenReview said: accepted for the audience or not, and as whom."""

    authenticated: bool
    username: str = ""


class TokenReviewer(Protocol):
    """Asks the cluster whether a bearer token is valid for an audience.

    Raises :class:`~provider.errors.TransientError` when the cluster cannot be asked.
    """

    def review(self, token: str, audience: str) -> TokenStatus: ...


def api_client(kubeconfig: str | None) -> Any:
    """A kubernetes ``ApiClient`` from a kubeconfig, else in-cluster inside a pod, else ``None``."""
    from kubernetes import client, config

    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration, persist_config=False)  # type: ignore[no-untyped-call]
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        return None
    # No urllib3 retries: they would run past the request's deadline; the caller asks again.
    configuration.retries = False
    return client.ApiClient(configuration)


class KubeTokenReviewer:
    """:class:`TokenReviewer` over the Kubernetes TokenReview API (``authentication.k8s.io/v1``).

    The service account needs ``create`` on ``tokenreviews`` (ClusterRole
    ``system:auth-delegator``).
    """

    def __init__(self, api: Any) -> None:
        self._api = api

    def review(self, token: str, audience: str) -> TokenStatus:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        body = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=[audience]))
        try:
            reply = client.AuthenticationV1Api(self._api).create_token_review(body, _request_timeout=TOKEN_REVIEW_TIMEOUT)
        except ApiException as exc:
            raise TransientError(f"TokenReview failed: HTTP {exc.status}") from exc
        except Exception as exc:  # urllib3 and socket errors: the API server could not be asked
            raise TransientError(f"TokenReview failed: {type(exc).__name__}") from exc
        status = reply.status
        if status is None or not status.authenticated:
            return TokenStatus(False)
        # An audience-aware API server lists the audiences it checked; an empty
        # list would mean "valid for the API server itself", which is not ours.
        if audience not in (status.audiences or []):
            return TokenStatus(False)
        username = status.user.username if status.user is not None else ""
        return TokenStatus(True, username or "")


def token_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT (seconds since the epoch), read without verifying: the API server did."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        padded = parts[1] + "=" * (-len(parts[1]) % 4)
        claims = json.loads(base64.urlsafe_b64decode(padded))
    except (ValueError, binascii.Error):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def peer_certificate(environ: Mapping[str, Any]) -> dict[str, Any] | None:
    """The client certificate the TLS layer verified, if any (gunicorn puts the socket in the environ)."""
    sock = environ.get("gunicorn.socket")
    getpeercert = getattr(sock, "getpeercert", None)
    if getpeercert is None:
        return None
    try:
        cert = getpeercert()
    except ValueError:  # the handshake is not complete
        return None
    # ``{}`` means a certificate was presented but not verified; only a verified one counts.
    return cert if isinstance(cert, dict) and cert else None


def _common_name(cert: dict[str, Any]) -> str:
    for rdn in cert.get("subject", ()):
        for name, value in rdn:
            if name == "commonName":
                return str(value)[:128]
    return "?"


@dataclass(frozen=True)
class Decision:
    """``status`` 0 lets the request through; otherwise the HTTP status to answer with."""

    status: int
    #: Who called, for logs: ``cert:<CN>``, ``token:<username>`` or ``anonymous``; never a credential.
    identity: str = "anonymous"

    @property
    def allowed(self) -> bool:
        return self.status == 0


class Authenticator:
    def __init__(
        self,
        *,
        client_ca: bool,
        audience: str | None,
        reviewer: Callable[[], TokenReviewer | None] | None = None,
        cache_seconds: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client_ca = client_ca
        self.audience = audience
        self._reviewer_factory = reviewer
        self._reviewer: TokenReviewer | None = None
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._tokens: LRUCache[TokenStatus] = LRUCache(4096)

    @property
    def enabled(self) -> bool:
        return self.client_ca or self.audience is not None

    def _review(self, token: str) -> TokenStatus:
        assert self.audience is not None
        key = digest("token", self.audience, token)
        known = self._tokens.get(key)
        if known is not None:
            return known
        if self._reviewer is None:
            reviewer = self._reviewer_factory() if self._reviewer_factory is not None else None
            if reviewer is None:
                raise TransientError("bearer tokens are configured but no cluster is available to review them")
            self._reviewer = reviewer
        status = self._reviewer.review(token, self.audience)
        if status.authenticated:
            life = self._cache_seconds
            expiry = token_expiry(token)
            if expiry is not None:
                life = min(life, expiry - self._clock())
            if life > 0:
                self._tokens.put(key, status, ttl=life)
        else:
            self._tokens.put(key, status, ttl=NEGATIVE_TTL)
        return status

    def authenticate(self, environ: Mapping[str, Any], authorization: str | None) -> Decision:
        if not self.enabled:
            return Decision(0)
        if self.client_ca:
            cert = peer_certificate(environ)
            if cert is not None:
                return Decision(0, f"cert:{_common_name(cert)}")
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if self.audience is None or scheme.lower() != "bearer" or not token:
            return Decision(401)
        if len(token) > MAX_TOKEN_BYTES:
            return Decision(403)
        try:
            status = self._review(token)
        except TransientError:
            return Decision(503)
        if not status.authenticated:
            return Decision(403)
        return Decision(0, f"token:{status.username[:128]}")
