"""The Kubernetes TokenReview exchange, ended by a deadline that covers the whole answer.

:class:`KubeTokenReviewer` asks ``POST /apis/authentication.k8s.io/v1/tokenreviews``
whether a bearer token is valid for an audience. The kubernetes client's
``_request_timeout`` bounds each socket read only: an API server (or a proxy in
front of it) that sends its headers late and its body a byte at a time keeps
the request thread for as long as it trickles. So the exchange is made here,
with :mod:`http.client` over a :class:`~provider.deadlines.DeadlineSocket`
(:func:`provider.deadlines.connect`, the mechanism every bounded exchange uses):
name lookup, connect, TLS handshake, request, headers and body all end by one deadline. An
answer that completes after it is never used: the caller gets
:class:`~provider.errors.TransientError` ``token-review-timeout`` (a 503).

Where to connect and how to authenticate come from the kubernetes client's own
configuration (a kubeconfig, or the pod's service account: host, CA, client
certificate, bearer token with its refresh hook), read through its public API
(:mod:`provider.kube.credentials`: the ``Authorization`` header the client
itself would send, asked anew for every review so a rotated token is used),
so nothing about the cluster is read twice. Proxies are not supported (a
kubeconfig ``proxy-url`` is a :class:`~provider.errors.ConfigError`).

Every failure is a :class:`~provider.errors.TransientError` whose ``reason`` is
``token-review-failed`` or ``token-review-timeout`` and whose message names the
cause (an HTTP status, an exception type), never the token.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Protocol

from ..deadlines import connect, tls_for_deadlines
from ..errors import ConfigError, TransientError
from ..version import __version__
from .credentials import auth_headers, cluster_identity, server_name, tls_context

#: The TokenReview collection (``authentication.k8s.io/v1``).
REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
#: A TokenReview answer is a few hundred bytes (user, groups, audiences); far more is not one.
MAX_ANSWER_BYTES = 64 * 1024


@dataclass(frozen=True)
class TokenStatus:
    """What a TokenReview said: accepted for the audience or not, and as whom."""

    authenticated: bool
    username: str = ""
    groups: tuple[str, ...] = ()


class TokenReviewer(Protocol):
    """Asks the cluster whether a bearer token is valid for an audience, by ``deadline`` (``time.monotonic()``).

    Raises :class:`~provider.errors.TransientError` when the cluster could not be asked in time.
    """

    def review(self, token: str, audience: str, deadline: float) -> TokenStatus: ...


def _failed(message: str) -> TransientError:
    return TransientError(message, reason="token-review-failed")


def status_from_answer(answer: Any, audience: str) -> TokenStatus:
    """The verdict in a TokenReview answer; anything but a clear "yes, for this audience" is a "no"."""
    status = answer.get("status") if isinstance(answer, dict) else None
    if not isinstance(status, dict) or status.get("authenticated") is not True:
        return TokenStatus(False)
    # An audience-aware API server lists the audiences it checked; an empty
    # list would mean "valid for the API server itself", which is not ours.
    audiences = status.get("audiences")
    if not isinstance(audiences, list) or audience not in audiences:
        return TokenStatus(False)
    user = status.get("user")
    username = user.get("username") if isinstance(user, dict) else None
    groups = user.get("groups") if isinstance(user, dict) else None
    if not isinstance(username, str) or not username:
        return TokenStatus(False)
    if groups is None:
        groups = []
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        return TokenStatus(False)
    return TokenStatus(True, username, tuple(groups))


class KubeTokenReviewer:
    """:class:`TokenReviewer` over a kubernetes client ``Configuration``.

    The service account needs ``create`` on ``tokenreviews`` (the Kyverno
    overlay's ClusterRole, or ``system:auth-delegator``).
    """

    def __init__(self, configuration: Any) -> None:
        if getattr(configuration, "proxy", None):
            raise ConfigError("TokenReview: a proxy in the kubeconfig is not supported")
        self._config = configuration
        target = urllib.parse.urlsplit(str(configuration.host))
        if target.scheme not in ("http", "https") or not target.hostname:
            raise ConfigError(f"TokenReview: the cluster address is not an http(s) URL ({target.scheme or '?'}://)")
        self._https = target.scheme == "https"
        self._host = target.hostname
        self._port = target.port or (443 if self._https else 80)
        self._path = target.path.rstrip("/") + REVIEW_PATH

    def _context(self) -> ssl.SSLContext:
        # Built per review (reviews are rare: accepted tokens are cached and
        # reviews rate-limited), so a rotated CA or client certificate is read anew.
        return tls_for_deadlines(tls_context(self._config))

    def _connect(self, deadline: float) -> socket.socket:
        context = self._context() if self._https else None
        name = server_name(self._config, self._host)
        sock = connect(self._host, self._port, deadline, context=context, server_name=name)
        # http.client writes the head and the body in two sends: with Nagle's algorithm the body
        # waits for the server's delayed ACK of the head, 40 ms on Linux -- on every review, each
        # on a new connection. urllib3 (the client's other requests) and Go turn it off too.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def review(self, token: str, audience: str, deadline: float) -> TokenStatus:
        started = time.monotonic()
        body = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                           "spec": {"token": token, "audiences": [audience]}}).encode()  # fmt: skip
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   "User-Agent": f"manifest-provider/{__version__}"}  # fmt: skip
        try:
            # The client's own header (its refresh hook rereads a rotated token), asked for per review.
            headers.update(auth_headers(self._config))
        except TransientError as exc:
            raise _failed(f"TokenReview failed: {exc.message}") from exc
        connection = http.client.HTTPConnection(self._host, self._port)
        response: http.client.HTTPResponse | None = None
        try:
            connection.sock = self._connect(deadline)
            connection.request("POST", self._path, body, headers)
            response = connection.getresponse()
            data = response.read(MAX_ANSWER_BYTES + 1)
        except TimeoutError as exc:
            raise TransientError(f"TokenReview did not answer within {deadline - started:.2g} s",
                                 reason="token-review-timeout") from exc  # fmt: skip
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise _failed(f"TokenReview failed: {type(exc).__name__}") from exc
        finally:
            if response is not None:
                response.close()
            connection.close()
        assert response is not None
        if time.monotonic() > deadline:  # complete, but late: never used
            raise TransientError(
                f"TokenReview answered after its {deadline - started:.2g} s", reason="token-review-timeout"
            )
        if response.status not in (200, 201):
            raise _failed(f"TokenReview failed: HTTP {response.status}")
        if len(data) > MAX_ANSWER_BYTES:
            raise _failed(f"TokenReview failed: an answer over {MAX_ANSWER_BYTES} bytes")
        try:
            answer = json.loads(data)
        except ValueError as exc:
            raise _failed("TokenReview failed: the answer is not JSON") from exc
        return status_from_answer(answer, audience)


def kube_configuration(kubeconfig: str | None, service_account_dir: str | None = None) -> Any:
    """A kubernetes client ``Configuration`` from a kubeconfig, else in-cluster inside a pod, else ``None``.

    :func:`provider.kube.credentials.cluster_identity`'s rule; a
    :class:`~provider.errors.ConfigError` when the one that applies cannot be loaded.
    """
    identity = cluster_identity(kubeconfig, service_account_dir)
    return identity.configuration if identity is not None else None
