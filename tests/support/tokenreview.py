"""A TokenReview endpoint on loopback that answers as an audience-aware kube-apiserver does -- or slowly.

``POST /apis/authentication.k8s.io/v1/tokenreviews`` (``authentication.k8s.io/v1``):
a token in :attr:`TokenReviewApi.tokens` is authenticated for the audiences it
lists, as its user and groups; a token listed with no audiences is one for the
API server itself (authenticated, ``audiences: []``), which an audience-aware
server returns when asked for another audience it does not carry. Anything
else is ``authenticated: false``. The answer is 201 Created, as the real server gives
(:func:`review_answer`; :class:`~tests.support.fakeapi.FakeApiServer` answers
TokenReviews with it too).

Like the real server it asks who is calling first (:mod:`tests.support.apiauth`):
only the service's own token (:data:`PROVIDER_TOKEN`, the one ``kubeconfig()``
writes) may create TokenReviews; a request without credentials is
``system:anonymous`` and gets 403 Forbidden, one with another token 401.

Faults for the deadline tests: ``late_headers`` (seconds before the status
line), ``late_body`` (seconds between the headers and the body), ``trickle``
(seconds between each byte of the body), ``status`` (an error status instead).
:class:`StalledTls` accepts TCP connections and never answers a ClientHello.

``kubeconfig(path)`` writes a kubeconfig that points the real ``kubernetes``
client at it, with the service's own token. With ``tls`` (a
:class:`~provider.service.devcerts.DevPki`) it serves HTTPS with the dev server
certificate, and the kubeconfig trusts the dev CA.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from provider.service.devcerts import DevPki
from tests.support.apiauth import Authentication, Caller, Unauthorized, forbidden_status, unauthorized_status

AUDIENCE = "kyverno-svc.kyverno.io"
KYVERNO_USER = "system:serviceaccount:kyverno:kyverno-admission-controller"
#: The groups the API server gives a service account (k8s.io/apiserver pkg/authentication/serviceaccount).
KYVERNO_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:kyverno", "system:authenticated"]
#: The service's own credential in the kubeconfig ``TokenReviewApi.kubeconfig`` writes, and its user.
PROVIDER_TOKEN = "the-provider's-own-token"
PROVIDER_USER = "system:serviceaccount:manifest-provider:manifest-provider"
#: The collection TokenReviews are created in.
REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"


@dataclass
class Identity:
    audiences: list[str]
    username: str = KYVERNO_USER
    groups: list[str] = field(default_factory=lambda: list(KYVERNO_GROUPS))


def review_answer(spec: dict[str, Any], tokens: dict[str, Identity]) -> dict[str, Any]:
    """The TokenReview an audience-aware API server answers for ``spec`` (module docstring)."""
    identity = tokens.get(spec.get("token", ""))
    asked = spec.get("audiences") or []
    status: dict[str, Any] = {"authenticated": False, "error": "invalid bearer token"}
    if identity is not None:
        user = {"username": identity.username, "groups": identity.groups}
        if not identity.audiences:
            status = {"authenticated": True, "user": user, "audiences": []}
        elif set(asked) & set(identity.audiences):
            status = {"authenticated": True, "user": user, "audiences": sorted(set(asked) & set(identity.audiences))}
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec, "status": status}


@dataclass
class TokenReviewApi:
    tokens: dict[str, Identity] = field(default_factory=dict)
    status: int = 201
    late_headers: float = 0.0
    late_body: float = 0.0
    trickle: float = 0.0
    reviews: list[dict[str, Any]] = field(default_factory=list)
    tls: DevPki | None = None
    #: Who may call (the service's own token); ``callers_seen`` lists every authenticated caller in turn.
    callers: Authentication = field(default_factory=lambda: Authentication({PROVIDER_TOKEN: Caller(PROVIDER_USER)}))
    callers_seen: list[str] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = field(default=None, repr=False)

    def __enter__(self) -> TokenReviewApi:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                try:
                    caller = api.callers.caller(self.headers.get("Authorization"), None)
                except Unauthorized:
                    self._refuse(401, unauthorized_status())
                    return
                api.callers_seen.append(caller.username)
                if caller.anonymous:  # RBAC: only the service's own account may create TokenReviews
                    self._refuse(403, forbidden_status(caller, "create", "tokenreviews", "authentication.k8s.io", None))
                    return
                api.reviews.append(body)
                spec = body["spec"]
                answer = review_answer(spec, api.tokens) if self.path == REVIEW_PATH else {}
                data = json.dumps(answer if api.status == 201 else {"kind": "Status", "code": api.status}).encode()
                time.sleep(api.late_headers)
                self.send_response(api.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.flush()
                time.sleep(api.late_body)
                try:
                    if api.trickle:
                        for i in range(len(data)):
                            self.wfile.write(data[i : i + 1])
                            self.wfile.flush()
                            time.sleep(api.trickle)
                    else:
                        self.wfile.write(data)
                except OSError:
                    pass  # the client gave up: that is the point of the slow modes

            def _refuse(self, status: int, answer: dict[str, Any]) -> None:
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if self.tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(str(self.tls.server_cert), str(self.tls.server_key))
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self._server.server_address[1]}"

    def kubeconfig(self, path: Path, server: str | None = None, ca: Path | None = None) -> Path:
        cluster: dict[str, Any] = {"server": server or self.url}
        ca = ca or (self.tls.ca_cert if self.tls is not None else None)
        if ca is not None:
            cluster["certificate-authority"] = str(ca)
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "k", "cluster": cluster}],
            "users": [{"name": "u", "user": {"token": PROVIDER_TOKEN}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        }))  # fmt: skip
        return path


class StalledTls:
    """Accepts TCP connections on loopback and never says a word: a TLS handshake to it stalls."""

    def __enter__(self) -> StalledTls:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        self._listener.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                continue
            self._held.append(conn)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for conn in self._held:
            conn.close()
        self._listener.close()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._listener.getsockname()[1]}"
