"""A fake Kubernetes API server that replays the recordings in ``tests/data/dryrun/``.

There is no API server on the machines the tests run on, so dry-run tests talk
to this one: a standard-library HTTPS server on 127.0.0.1 (ephemeral port,
its own throw-away CA) that answers with the *real* responses a
kube-apiserver v1.36 gave (``tests/data/dryrun/README.md``). The real
``kubernetes`` client reaches it through a generated kubeconfig
(:meth:`FakeApiServer.kubeconfig`), or as a pod does
(:meth:`FakeApiServer.service_account`: ``KUBERNETES_SERVICE_HOST``/``_PORT``
and a token file).

Who may call
------------
As a real API server (the rules and their sources: :mod:`tests.support.apiauth`):
the service's own bearer token (:attr:`FakeApiServer.token`, as
:attr:`FakeApiServer.username`; ``Bearer`` in any case), any other token in
:attr:`FakeApiServer.tokens` (a rotated one; tokens can be added and removed
while serving), or a client certificate issued by the fake's client CA
(:meth:`FakeApiServer.client_certificate`: user = CommonName, groups =
Organizations; the TLS handshake asks every client for one). A request without
credentials is ``system:anonymous`` (``anonymous=False``: 401), which may read
``/version`` and nothing else: 403. An unknown token is 401. A user in
:attr:`FakeApiServer.unprivileged` has no RBAC grants: discovery, then 403.
Each logged request names who made it (:attr:`Logged.user`).

What it answers
---------------
* ``GET`` of a recorded path (discovery: ``/version``, ``/api``, ``/apis``,
  ``/api/v1``, ``/apis/<group>/<version>``; a few recorded objects): the recording.
* ``POST <collection>?dryRun=All``: the recorded response for the same
  request, matched on what stays stable when the client renames objects --

  1. the collection path with the namespace segment taken out,
  2. the body's ``kind``,
  3. the *original* name: ``metadata.name`` (or ``generateName``) with the
     renaming of :mod:`provider.compare.dryrun` undone (a ``-dry-run`` suffix, with
     or without a ``-<token>`` retry suffix; a CRD's ``dry-run[-<token>].``
     group prefix), and
  4. the body itself, compared with the recorded request body after the same
     undoing (name, CRD group) and without ``metadata.namespace`` -- so a
     changed manifest never gets the answer recorded for another.

  The replayed object gets the requested name, namespace and CRD group, and
  fresh server-generated values (the README calls the recorded ones
  examples): a new ``uid`` (also where the recording repeats it, e.g. a Job's
  ``controller-uid`` labels), timestamps, Service ``clusterIP(s)`` and
  ``nodePort``/``healthCheckNodePort`` the request left unset, the
  ``kube-api-access-xxxxx`` volume name, a ``generateName`` suffix.
  Recorded error answers (422, 400) are replayed with the requested name.
* A POST to a namespace that does not exist: the recorded 404 NotFound for
  a missing namespace (``namespaces`` lists the ones that do).
* ``POST /apis/authentication.k8s.io/v1/tokenreviews``: a TokenReview of a
  token in :attr:`FakeApiServer.reviewable`, answered as
  :func:`tests.support.tokenreview.review_answer` does.
* Anything else: a real-shaped 404 -- the plain-text ``404 page not found``
  the server gives for a group/version it does not serve, the JSON ``Status``
  NotFound for an unknown resource of a known one; a dry-run POST without a
  recording also gets the JSON 404, marked with an ``X-Fake-Unrecorded``
  header saying why. A POST without ``dryRun=All`` is never answered with an
  object (a real server would persist it).

Faults (``server.fault = ...``; ``fault_scope`` = "post" (default) or "all"):
``slow`` (sleep ``slow_seconds``, then answer), ``500`` (a Status
InternalError, for dry-runs and TokenReviews; no recording exists, the shape is the API server's),
``403`` (the recorded RBAC denials, re-worded for the resource asked),
``422`` (the recorded Invalid Deployment, re-named), ``conflict-once`` (the
first create of each original name gets the recorded 409 AlreadyExists).
"Down" is :meth:`FakeApiServer.stop`: the port then refuses connections.

Pacing (``server.pace = ...``): how the *right* answer is sent, for the
dry-run deadline's tests; ``pace_scope`` = "post" (default), "all", or
"retry" (only a create renamed after a name clash, ``<name>-dry-run-<token>``;
combine with ``fault = "conflict-once"``). ``pace_seconds`` is the delay,
``trickle_seconds`` the gap between bytes:

* ``late-headers``: the whole answer ``pace_seconds`` late (as ``slow``);
* ``late-body``: the headers at once, the body ``pace_seconds`` later;
* ``late-headers-and-body``: each ``pace_seconds`` late (so the answer takes twice that);
* ``trickle-headers``: the status line and headers one byte at a time, then the body;
* ``trickle-body``: the headers at once, the body one byte at a time;
* ``silent``: the request is read and never answered;
* ``tls-stall``: every new connection is accepted and its TLS handshake
  begins only ``pace_seconds`` later (whatever the scope: the request is not
  known yet).

Every wait ends when the server stops. The server's threads are named
``fakeapi-...`` (:data:`THREAD_PREFIX`), so tests can tell them from the client's.

Live objects (:mod:`tests.support.fakestore`): :meth:`FakeApiServer.add` stores an
object of any served kind (server-set ``uid``, ``resourceVersion``,
``creationTimestamp``), :meth:`~FakeApiServer.change` writes it again (as a
controller would), :meth:`~FakeApiServer.remove` deletes it. ``GET`` of a
collection lists them (pages with ``limit``/``continue``, ``labelSelector``,
one namespace or all), ``GET`` of an object reads one, ``GET <collection>?watch=1``
streams its changes as the API server does (``Transfer-Encoding: chunked``, one
JSON event per line; bookmarks, the 410 of a too-old resourceVersion: see
:meth:`tests.support.fakestore.Store.watch`); :meth:`~FakeApiServer.drop_watches`
cuts every open watch connection mid-stream, as a load balancer or a restarting
API server does.
:meth:`~FakeApiServer.install_crd` serves a CustomResourceDefinition: its
group/version discovery document, its group in ``/apis``, and real creates
and updates of its objects, validated against its schema (the PolicyReport
CRDs in ``tests/assets/policyreport/``). ``forbidden_resources`` answers the
recorded RBAC denial for every request on those resources (plural names);
``store.expire_continue = N`` expires the next N continue tokens (410).

Every request is logged (:attr:`FakeApiServer.requests`);
:meth:`FakeApiServer.admission_request` shows a logged create as the
``AdmissionRequest`` admission webhooks receive for it.

:class:`TokenApi` is the same server holding bootstrap-token Secrets in
``kube-system`` (and refusing to read the ones named in ``forbidden``), for the
cluster-info check.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime
import ipaddress
import json
import random
import re
import secrets
import socket
import ssl
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from provider.compare.dryrun import CRD_GROUP_PREFIX, DRY_RUN_SUFFIX
from tests.support.apiauth import (
    Authentication,
    Caller,
    Unauthorized,
    allowed_without_grants,
    forbidden_path_status,
    forbidden_status,
    unauthorized_status,
)
from tests.support.data import DRYRUN
from tests.support.fakestore import Answer, Kind, Store
from tests.support.tokenreview import REVIEW_PATH, Identity, review_answer

FAULTS = ("slow", "500", "403", "422", "conflict-once")
PACES = ("late-headers", "late-body", "late-headers-and-body", "trickle-headers", "trickle-body", "silent", "tls-stall")
#: The names of the server's threads begin with this.
THREAD_PREFIX = "fakeapi-"
#: Recordings that depend on who asks or on cluster state, served only by fault modes.
_STATEFUL = (
    "rbac-",
    "create-already-exists-409",
    "pod-serviceaccount-missing",
    "create-in-missing-namespace",
    "create-deployment-in-missing-namespace",
)
_RETRY_NAME = re.compile(re.escape(DRY_RUN_SUFFIX) + r"(?:-[a-z0-9]{5})?\Z")
_CRD_GROUP = re.compile(re.escape(CRD_GROUP_PREFIX.rstrip(".")) + r"(?:-[a-z0-9]{5})?\.")
_COLLECTION = re.compile(
    r"/(?:api/(?P<cv>v1)|apis/(?P<g>[^/]+)/(?P<v>[^/]+))(?:/namespaces/(?P<ns>[^/]+))?/(?P<res>[^/]+)\Z"
)
_OBJECT = re.compile(
    r"/(?:api/(?P<cv>v1)|apis/(?P<g>[^/]+)/(?P<v>[^/]+))(?:/namespaces/(?P<ns>[^/]+))?/(?P<res>[^/]+)/(?P<name>[^/]+)\Z"
)
#: A custom resource's status subresource (``.../<plural>/<name>/status``).
_STATUS = re.compile(
    r"/apis/(?P<g>[^/]+)/(?P<v>[^/]+)(?:/namespaces/(?P<ns>[^/]+))?/(?P<res>[^/]+)/(?P<name>[^/]+)/status\Z"
)
#: The shape of the API server's 500 (no recording exists).
_INTERNAL_ERROR = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "InternalError", "code": 500,
                   "message": "Internal error occurred: etcdserver: request timed out", "details": {"causes": [{"message": "etcdserver: request timed out"}]}}  # fmt: skip
_NOT_FOUND = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": "the server could not find the requested resource", "reason": "NotFound", "details": {}, "code": 404}  # fmt: skip


def original_name(name: str) -> str:
    """Undo :mod:`provider.compare.dryrun`'s renaming (documented above)."""
    name = _RETRY_NAME.sub("", name)
    head, dot, rest = name.partition(".")
    return head + dot + _CRD_GROUP.sub("", rest, count=1) if dot and _CRD_GROUP.match(rest) else name


def _undo_renaming(body: Any) -> Any:
    if not isinstance(body, dict):
        return body
    body = copy.deepcopy(body)
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    meta.pop("namespace", None)
    if isinstance(meta.get("name"), str):
        meta["name"] = original_name(meta["name"])
    spec = body.get("spec")
    if body.get("kind") == "CustomResourceDefinition" and isinstance(spec, dict) and isinstance(spec.get("group"), str):
        spec["group"] = _CRD_GROUP.sub("", spec["group"], count=1)
    return body


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], Any]:
    if isinstance(value, dict):
        return {p: v for k, item in value.items() for p, v in _leaves(item, (*path, k)).items()}
    if isinstance(value, list):
        return {p: v for i, item in enumerate(value) for p, v in _leaves(item, (*path, i)).items()}
    return {path: value}


@dataclass(frozen=True)
class Recording:
    stem: str
    method: str
    path: str
    query: str
    request_body: Any
    status: int
    content_type: str
    body: Any

    @classmethod
    def load(cls, file: Path) -> Recording:
        data = json.loads(file.read_text())
        path, _, query = data["request"]["path"].partition("?")
        response = data["response"]
        return cls(f"{file.parent.name}/{file.stem}", data["request"]["method"], path, query, data["request"].get("body"),
                   response["status"], response["headers"].get("content-type", "application/json"), response["body"])  # fmt: skip

    @property
    def collection_key(self) -> tuple[str, str, str] | None:
        """(collection path without namespace, kind, original name) of a create."""
        match = _COLLECTION.match(self.path)
        body = self.request_body if isinstance(self.request_body, dict) else {}
        meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        if not match:
            return None
        name = meta.get("name") or meta.get("generateName") or ""
        return _template(match), str(body.get("kind", "")), original_name(name)


def _template(match: re.Match[str]) -> str:
    root = "/api/v1" if match["cv"] else f"/apis/{match['g']}/{match['v']}"
    return f"{root}/{'namespaces/{ns}/' if match['ns'] else ''}{match['res']}"


#: The exchanges each folder of ``tests/data/dryrun`` holds today (docs/dryrun.md counts the 44 creates):
#: fewer means the data is missing or cut short, and a test looking for recordings would find less than it thinks.
RECORDED = {"discovery": 25, "create": 44, "edge": 39}


@lru_cache(maxsize=1)
def recordings() -> tuple[Recording, ...]:
    files = []
    for folder, least in RECORDED.items():
        found = [f for f in sorted((DRYRUN / folder).glob("*.json")) if not f.name.startswith("_")]
        assert len(found) >= least, f"{DRYRUN / folder}: {len(found)} recordings, expected at least {least}"
        files += found
    return tuple(Recording.load(f) for f in files)


def recording(stem: str) -> Recording:
    """A recording by ``<dir>/<file stem>``; a bare stem means ``create/<stem>``."""
    wanted = stem if "/" in stem else f"create/{stem}"
    return next(r for r in recordings() if r.stem == wanted)


@lru_cache(maxsize=1)
def _tls_material() -> tuple[bytes, bytes, bytes]:
    """(CA certificate PEM, server certificate chain PEM, server key PEM) for 127.0.0.1."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake kube-apiserver CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
          .sign(ca_key, hashes.SHA256()))  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))  # fmt: skip
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return ca.public_bytes(pem), cert.public_bytes(pem), key_pem


@lru_cache(maxsize=1)
def _client_ca() -> tuple[bytes, Any]:
    """(PEM, key) of the CA the fake trusts for client certificates (kube-apiserver's ``--client-ca-file``)."""
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake kube-apiserver client CA")])
    ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
          .sign(key, hashes.SHA256()))  # fmt: skip
    return ca.public_bytes(serialization.Encoding.PEM), key


def issue_client_certificate(
    username: str, groups: tuple[str, ...] = (), ca: tuple[bytes, Any] | None = None
) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) for ``username`` in ``groups`` (CN and O, as kube-apiserver reads them), from ``ca``."""
    ca_pem, ca_key = ca or _client_ca()
    issuer = x509.load_pem_x509_certificate(ca_pem)
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
                        + [x509.NameAttribute(NameOID.COMMON_NAME, username)])  # fmt: skip
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))  # fmt: skip
    pem = serialization.Encoding.PEM
    return cert.public_bytes(pem), key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@dataclass
class Logged:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    status: int = 0
    #: Who the fake took the caller for (``system:anonymous`` without credentials; "" when refused with 401).
    user: str = ""


@dataclass
class FakeApiServer:
    """Start with :meth:`start` (or as a context manager); ``url``, ``token`` and ``kubeconfig()`` to connect."""

    namespaces: set[str] = field(default_factory=lambda: {"default", "kube-system", "kube-public", "kube-node-lease"})
    fault: str | None = None
    fault_scope: str = "post"
    slow_seconds: float = 5.0
    pace: str | None = None
    pace_scope: str = "post"
    pace_seconds: float = 1.2
    trickle_seconds: float = 0.05
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)
    username: str = "system:serviceaccount:manifest-provider:manifest-provider"
    requests: list[Logged] = field(default_factory=list, repr=False)
    forbidden_resources: set[str] = field(default_factory=set)
    #: Other bearer tokens the fake accepts, and as whom (module docstring).
    tokens: dict[str, Caller] = field(default_factory=dict, repr=False)
    #: kube-apiserver's ``--anonymous-auth`` (on by default there too).
    anonymous: bool = True
    #: Users authenticated but granted nothing by RBAC.
    unprivileged: set[str] = field(default_factory=set)
    #: RBAC ``resourceNames`` rules of the service's own user, by resource (plural): on these resources it
    #: may only ``get`` the listed ``(namespace, name)`` objects, and everything else is 403 -- a role rule
    #: with ``resourceNames`` grants a request that names one of them and nothing else (a list or watch
    #: names none: kubernetes pkg/apis/rbac/v1/evaluation_helpers.go ``ResourceNameMatches`` compares the
    #: request's name with the rule's list whenever the list is not empty).
    granted_names: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    #: Tokens a TokenReview finds valid, and for which audiences.
    reviewable: dict[str, Identity] = field(default_factory=dict, repr=False)
    #: The port to listen on (0: an ephemeral one); a server started again on a stopped one's port is "back up".
    listen_port: int = 0

    def __post_init__(self) -> None:
        self.store = Store()
        self._custom: dict[str, dict[str, Any]] = {}  # discovery documents of installed CRDs
        self._gets = {r.path: r for r in recordings() if r.method == "GET" and not r.stem.startswith(("edge/rbac-",))}
        self._creates: dict[tuple[str, str, str], list[Recording]] = {}
        for r in recordings():
            key = r.collection_key if r.method == "POST" and "dryRun=All" in r.query else None
            if key and not r.stem.removeprefix("edge/").startswith(_STATEFUL):
                self._creates.setdefault(key, []).append(r)
        self._served = {
            p
            for p in self._gets
            if p.startswith(("/api/", "/apis/")) and p.count("/") == (2 if p.startswith("/api/") else 3)
        }
        self._conflicted: set[str] = set()
        self._watching: set[socket.socket] = set()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle --

    def start(self) -> FakeApiServer:
        ca, chain, key = _tls_material()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "c.pem").write_bytes(chain)
            Path(tmp, "k.pem").write_bytes(key)
            context.load_cert_chain(Path(tmp, "c.pem"), Path(tmp, "k.pem"))
        # Every client is asked for a certificate and may come without one (apiauth, rule 1).
        context.load_verify_locations(cadata=_client_ca()[0].decode())
        context.verify_mode = ssl.CERT_OPTIONAL
        fake = self

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self) -> tuple[socket.socket, Any]:
                sock, addr = self.socket.accept()
                # Headers and body go out in separate writes: without this, Nagle
                # plus the client's delayed ACK adds ~40 ms to every answer.
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                wrapped = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                with fake._lock:
                    # The TLS socket, not ``sock``: wrapping detaches ``sock`` from its descriptor, and
                    # stop() must cut kept-alive connections too (a client's pool would reuse them).
                    fake._connections.add(wrapped)
                return wrapped, addr

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # clients that time out and hang up are part of the tests

            def process_request(self, request: Any, client_address: Any) -> None:
                # As ThreadingMixIn's (daemon threads are not tracked), with a name.
                name = f"{THREAD_PREFIX}handler"
                threading.Thread(
                    target=self.process_request_thread, args=(request, client_address), name=name, daemon=True
                ).start()

        self._server = Server(("127.0.0.1", self.listen_port), _handler(self))
        serve = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"{THREAD_PREFIX}serve", daemon=True
        )
        serve.start()
        self.ca_pem = ca
        return self

    def stop(self) -> None:
        """Stop serving: from now on the port refuses connections (the API server is down)."""
        self._closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        with self._lock:
            for sock in self._connections:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._connections.clear()

    def drop_watches(self) -> int:
        """Cut every open watch connection without ending its stream; how many were open."""
        with self._lock:
            watching, self._watching = self._watching, set()
        for sock in watching:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return len(watching)

    def watches(self) -> list[Logged]:
        """The watch requests received so far."""
        return [r for r in self.requests if r.method == "GET" and r.query.get("watch", [""])[0] in ("1", "true")]

    def watch(self, logged: Logged) -> tuple[int, Any, dict[str, str]] | Iterator[dict[str, Any]]:
        """The answer to a watch request: an error answer, or the events to stream."""
        match = _COLLECTION.match(logged.path)
        root = ("/api/v1" if match["cv"] else f"/apis/{match['g']}/{match['v']}") if match else ""
        kind = self.kind_of(root, match["res"]) if match else None
        if kind is None or (match and match["ns"] and not kind.namespaced):
            return self._not_found(logged.path)
        if kind.plural in self.forbidden_resources:
            return 403, _forbidden(kind.plural, kind.group, match["ns"] if match else None, "watch"), {}
        return self.store.watch(kind, match["ns"] if match else None, logged.query, self._closing)

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def kubeconfig(self, path: Path, namespace: str = "default", user: dict[str, Any] | None = None) -> Path:
        """Write a kubeconfig for the real client: this server's CA, and ``user`` (default: the service's token)."""
        import yaml

        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake", "preferences": {},
            "clusters": [{"name": "fake", "cluster": {"server": self.url, "certificate-authority-data": base64.b64encode(self.ca_pem).decode()}}],
            "users": [{"name": "fake", "user": user if user is not None else {"token": self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
        }  # fmt: skip
        path.write_text(yaml.safe_dump(config))
        return path

    def client_certificate(
        self, directory: Path, username: str | None = None, groups: tuple[str, ...] = ()
    ) -> dict[str, str]:
        """Issue a client certificate from the fake's client CA into ``directory``: a kubeconfig ``user`` naming its files."""
        cert, key = issue_client_certificate(username or self.username, groups)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "client.crt").write_bytes(cert)
        (directory / "client.key").write_bytes(key)
        return {"client-certificate": str(directory / "client.crt"), "client-key": str(directory / "client.key")}

    def service_account(self, directory: Path, token: str | None = None, namespace: str = "default") -> dict[str, str]:
        """The files the kubelet mounts in a pod (``token``, ``ca.crt``, ``namespace``) in ``directory``.

        Returns the environment that makes this the pod's API server
        (``KUBERNETES_SERVICE_HOST``/``_PORT``) and points the service at the
        files (``MANIFEST_PROVIDER_SERVICE_ACCOUNT_DIR``).
        """
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "token").write_text(token or self.token)
        (directory / "ca.crt").write_bytes(self.ca_pem)
        (directory / "namespace").write_text(namespace)
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.port),
                "MANIFEST_PROVIDER_SERVICE_ACCOUNT_DIR": str(directory)}  # fmt: skip

    def authentication(self) -> Authentication:
        """Who may call now (module docstring)."""
        own = Caller(self.username, ("system:serviceaccounts", "system:authenticated"))
        return Authentication({self.token: own, **self.tokens}, anonymous=self.anonymous)

    def authorize(self, caller: Caller, logged: Logged) -> tuple[int, Any, dict[str, str]] | None:
        """RBAC's refusal of ``logged`` for ``caller`` (403), or None when it may go on."""
        if not (caller.anonymous or caller.username in self.unprivileged):
            return self._by_name(caller, logged)
        if allowed_without_grants(caller, logged.path):
            return None
        match = _OBJECT.match(logged.path) or _COLLECTION.match(logged.path)
        verbs = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
        verb = verbs.get(logged.method, "get")
        if match is None:
            # A non-resource request's verb is its method, lower-cased (apiserver's RequestInfoFactory).
            return 403, forbidden_path_status(caller, logged.method.lower(), logged.path), {}
        named = match.groupdict().get("name") or ""
        if logged.method == "GET" and not named:
            verb = "list"
        return 403, forbidden_status(caller, verb, match["res"], match["g"] or "", match["ns"], name=named), {}

    def _by_name(self, caller: Caller, logged: Logged) -> tuple[int, Any, dict[str, str]] | None:
        """The refusal of a ``granted_names`` rule (403), or None."""
        match = _OBJECT.match(logged.path) or _COLLECTION.match(logged.path)
        if match is None or match["res"] not in self.granted_names:
            return None
        named = match.groupdict().get("name") or ""
        if logged.method == "GET" and named and (match["ns"] or "", named) in self.granted_names[match["res"]]:
            return None
        verbs = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
        verb = verbs.get(logged.method, "get" if named else "list")
        return 403, forbidden_status(caller, verb, match["res"], match["g"] or "", match["ns"], name=named), {}

    def review(self, logged: Logged) -> tuple[int, Any, dict[str, str]]:
        """A TokenReview (``create tokenreviews``; its caller was authorized already); ``fault = "500"`` fails it."""
        if self.fault == "500":
            return 500, copy.deepcopy(_INTERNAL_ERROR), {}
        spec = logged.body.get("spec") if isinstance(logged.body, dict) else None
        if not isinstance(spec, dict):
            return 400, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "BadRequest", "code": 400,
                         "message": "TokenReview: spec is required"}, {}  # fmt: skip
        return 201, review_answer(spec, self.reviewable), {}

    # -- what was asked --

    def creates(self) -> list[Logged]:
        return [r for r in self.requests if r.method == "POST"]

    def paced(self, logged: Logged) -> str | None:
        """The pacing that applies to the answer to ``logged`` (None: at once)."""
        if self.pace is None or self.pace == "tls-stall":
            return None
        name = str(((logged.body if isinstance(logged.body, dict) else {}).get("metadata") or {}).get("name", ""))
        retried = re.search(re.escape(DRY_RUN_SUFFIX) + r"-[a-z0-9]{5}\Z", name) is not None
        applies = {"all": True, "post": logged.method == "POST", "retry": logged.method == "POST" and retried}
        return self.pace if applies.get(self.pace_scope, False) else None

    def admission_request(self, logged: Logged) -> dict[str, Any]:
        """The ``AdmissionRequest`` webhooks see for a logged create."""
        match = _COLLECTION.match(logged.path)
        assert match is not None, logged.path
        group, version = (match["g"] or "", match["v"] or match["cv"])
        body = logged.body if isinstance(logged.body, dict) else {}
        meta = body.get("metadata") or {}
        return {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": body.get("kind")},
            "resource": {"group": group, "version": version, "resource": match["res"]},
            "name": meta.get("name", ""),
            "namespace": match["ns"] or "",
            "operation": "CREATE",
            "userInfo": {"username": self.username, "groups": ["system:serviceaccounts", "system:authenticated"]},
            "object": body,
            "oldObject": None,
            "dryRun": logged.query.get("dryRun") == ["All"],
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "dryRun": logged.query.get("dryRun", []),
                        "fieldManager": (logged.query.get("fieldManager") or [""])[0]},
        }  # fmt: skip

    # -- live objects --

    def _discovery(self, root: str) -> dict[str, Any] | None:
        if root in self._custom:
            return self._custom[root]
        recorded = self._gets.get(root)
        return recorded.body if recorded is not None and root in self._served else None

    def kind_of(self, root: str, plural: str) -> Kind | None:
        """The served resource ``plural`` of ``root`` (``/api/v1``, ``/apis/<g>/<v>``), from discovery."""
        doc = self._discovery(root)
        for entry in (doc or {}).get("resources", []):
            if entry["name"] == plural:
                return Kind(root, plural, entry["kind"], entry["namespaced"], custom=root in self._custom)
        return None

    def _kind_for(self, api_version: str, kind: str) -> Kind:
        root = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        for entry in (self._discovery(root) or {}).get("resources", []):
            if entry["kind"] == kind and "/" not in entry["name"]:
                found = self.kind_of(root, entry["name"])
                assert found is not None
                return found
        raise AssertionError(f"the fake API server does not serve {kind} in {api_version}")

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a new object (as created); returns it as stored."""
        kind = self._kind_for(obj["apiVersion"], obj["kind"])
        if kind.namespaced:
            self.namespaces.add(obj["metadata"]["namespace"])
        return self.store.put(kind, obj, fresh=True)

    def change(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Write an existing object again (a new resourceVersion, same uid): what a controller's update does."""
        return self.store.put(self._kind_for(obj["apiVersion"], obj["kind"]), obj, fresh=False)

    def remove(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self.store.delete(self._kind_for(api_version, kind), namespace, name)

    def stored(self, api_version: str, kind: str) -> list[dict[str, Any]]:
        """Every stored object of a kind (copies)."""
        return self.store.objects(self._kind_for(api_version, kind))

    def writable_configmaps(self) -> None:
        """Real creates, updates and deletes of ConfigMaps (``sign --apply-signature-configmap``).

        Checked as the API server checks a ConfigMap's ``data`` and ``binaryData``: maps of strings
        (k8s.io/api core/v1 types.go ``ConfigMap``); the 1 MiB size limit is not modelled.
        """
        kind = self._kind_for("v1", "ConfigMap")

        def problems(body: dict[str, Any]) -> list[str]:
            return [
                f"{field}: must be a map of strings"
                for field in ("data", "binaryData")
                if field in body
                and not (isinstance(body[field], dict) and all(isinstance(v, str) for v in body[field].values()))
            ]

        crd: dict[str, Any] = {"builtin": problems}
        self.store.writable(kind, crd)

    def install_crd(self, crd: dict[str, Any]) -> None:
        """Serve a CustomResourceDefinition's served versions, and real writes of its objects (module docstring)."""
        spec = crd["spec"]
        names, group = spec["names"], spec["group"]
        for version in spec["versions"]:
            if not version.get("served"):
                continue
            root = f"/apis/{group}/{version['name']}"
            entry = {"name": names["plural"], "singularName": names.get("singular", names["kind"].lower()),
                     "namespaced": spec["scope"] == "Namespaced", "kind": names["kind"],
                     "verbs": ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]}  # fmt: skip
            if names.get("shortNames"):
                entry["shortNames"] = list(names["shortNames"])
            doc = self._custom.setdefault(
                root,
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": f"{group}/{version['name']}",
                    "resources": [],
                },
            )
            doc["resources"] = [r for r in doc["resources"] if r["name"] != names["plural"]] + [entry]
            self._served.add(root)
            kind = self.kind_of(root, names["plural"])
            assert kind is not None
            self.store.writable(kind, crd)

    def _groups(self) -> dict[str, Any]:
        body = copy.deepcopy(self._gets["/apis"].body)
        known = {g["name"] for g in body["groups"]}
        for root in self._custom:
            group, version = root.removeprefix("/apis/").split("/")
            entry = {"groupVersion": f"{group}/{version}", "version": version}
            if group not in known:
                known.add(group)
                body["groups"].append({"name": group, "versions": [entry], "preferredVersion": entry})
        return body

    def _live(self, logged: Logged) -> Answer | None:
        """The answer from live objects and installed CRDs, or None: the recordings answer."""
        if logged.method == "GET" and logged.path in self._custom:
            return 200, self._custom[logged.path], {}
        if logged.method == "GET" and logged.path == "/apis" and self._custom:
            return 200, self._groups(), {}
        status = _STATUS.match(logged.path)
        if status is not None:
            kind = self.kind_of(f"/apis/{status['g']}/{status['v']}", status["res"])
            if kind is None or not kind.custom or (status["ns"] and not kind.namespaced):
                return None
            if kind.plural in self.forbidden_resources:
                verb = "get" if logged.method == "GET" else "update"
                return 403, _forbidden(f"{kind.plural}/status", kind.group, status["ns"], verb), {}
            return self.store.status(kind, status["ns"] or "", status["name"], logged.method, logged.body)
        collection, named = _COLLECTION.match(logged.path), _OBJECT.match(logged.path)
        match = collection or named
        if match is None:
            return None
        root = "/api/v1" if match["cv"] else f"/apis/{match['g']}/{match['v']}"
        kind = self.kind_of(root, match["res"])
        if kind is None or (match["ns"] and not kind.namespaced):
            return None
        namespace = match["ns"]
        if kind.plural in self.forbidden_resources:
            verb = {"GET": "list" if collection else "get", "POST": "create", "PUT": "update", "DELETE": "delete"}.get(
                logged.method, "patch"
            )
            return 403, _forbidden(kind.plural, kind.group, namespace, verb), {}
        if logged.method == "GET" and collection:
            return self.store.list(kind, namespace, logged.query)
        if logged.method == "GET" and named:
            return self.store.read(kind, namespace or "", named["name"])
        if logged.query.get("dryRun"):
            return None  # dry-runs are answered from the recordings
        if logged.method == "POST" and collection:
            return self.store.create(kind, namespace or "", logged.body)
        if logged.method == "PUT" and named:
            return self.store.update(kind, namespace or "", named["name"], logged.body)
        if logged.method == "DELETE" and named:
            return self.store.remove(kind, namespace or "", named["name"], logged.body)
        return None

    # -- answers --

    def answer(self, logged: Logged) -> tuple[int, Any, dict[str, str]]:
        if logged.method == "GET":
            recorded = self._gets.get(logged.path)
            # An installed CRD's documents replace the recorded ones (/apis, a group recorded as unknown).
            replaced = logged.path in self._custom or (logged.path == "/apis" and self._custom)
            if recorded is not None and not replaced:
                return recorded.status, recorded.body, {}
        live = self._live(logged)
        if live is not None:
            return live
        if logged.method == "GET":
            return self._not_found(logged.path)
        if logged.method != "POST":
            return self._not_found(logged.path)
        return self._create(logged)

    def _not_found(self, path: str, why: str = "") -> tuple[int, Any, dict[str, str]]:
        match = _COLLECTION.match(path)
        root = "/api/v1" if match and match["cv"] else (f"/apis/{match['g']}/{match['v']}" if match else path)
        extra = {"X-Fake-Unrecorded": why} if why else {}
        if root not in self._served and path not in ("/version", "/api", "/apis"):
            return 404, recording("edge/unknown-group-get-404").body, extra
        return 404, _NOT_FOUND, extra

    def _create(self, logged: Logged) -> tuple[int, Any, dict[str, str]]:
        match = _COLLECTION.match(logged.path)
        body = logged.body if isinstance(logged.body, dict) else {}
        meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        if match is None:
            return self._not_found(logged.path)
        root = "/api/v1" if match["cv"] else f"/apis/{match['g']}/{match['v']}"
        if root not in self._served:
            return self._not_found(logged.path)
        resources = {r["name"]: r for r in self._gets[root].body.get("resources", [])}
        resource = resources.get(match["res"])
        if resource is None:
            return 404, recording("edge/unknown-resource-post-404").body, {}
        namespace = match["ns"]
        if namespace and namespace not in self.namespaces:
            return (
                404,
                _reword(
                    recording("edge/create-in-missing-namespace").body,
                    {'"does-not-exist"': f'"{namespace}"'},
                    name=namespace,
                ),
                {},
            )
        if logged.query.get("dryRun") != ["All"]:
            return self._not_found(logged.path, "not a dry-run: this fake never persists objects")
        name = meta.get("name") or meta.get("generateName") or ""
        key = (_template(match), str(body.get("kind", "")), original_name(str(name)))
        fault = self._fault_answer(logged, resource, match, body, key)
        if fault is not None:
            return fault
        wanted = _undo_renaming(body)
        for recorded in self._creates.get(key, []):
            if recorded.request_body == wanted:
                return recorded.status, _replay(recorded, body, namespace), {}
        why = (
            "no recording for this collection, kind and name"
            if key not in self._creates
            else "recorded, but with another body"
        )
        return self._not_found(logged.path, why)

    def _fault_answer(
        self,
        logged: Logged,
        resource: dict[str, Any],
        match: re.Match[str],
        body: dict[str, Any],
        key: tuple[str, str, str],
    ) -> tuple[int, Any, dict[str, str]] | None:
        group = match["g"] or ""
        name = (body.get("metadata") or {}).get("name", "")
        if self.fault == "500":
            return 500, copy.deepcopy(_INTERNAL_ERROR), {}
        if self.fault == "403":
            return 403, _forbidden(resource["name"], group, match["ns"]), {}
        if self.fault == "422":
            recorded = recording("edge/create-invalid-deployment-422").body
            kind = f"{body.get('kind')}.{group}" if group else str(body.get("kind"))
            answer = _reword(
                recorded, {'Deployment.apps "Bad_Name"': f'{kind} "{name}"', '"Bad_Name"': f'"{name}"'}, name=name
            )
            answer["details"].update({"group": group, "kind": body.get("kind")})
            return 422, answer, {}
        if self.fault == "conflict-once" and key[2] not in self._conflicted:
            self._conflicted.add(key[2])
            recorded = recording("edge/create-already-exists-409").body
            answer = _reword(recorded, {'configmaps "edge-existing"': f'{resource["name"]} "{name}"'}, name=name)
            answer["details"]["kind"] = resource["name"]
            return 409, answer, {}
        return None


def _reword(status: dict[str, Any], table: dict[str, str], *, name: str) -> dict[str, Any]:
    answer = copy.deepcopy(status)
    for old, new in table.items():
        answer["message"] = answer["message"].replace(old, new)
    if isinstance(answer.get("details"), dict) and "name" in answer["details"]:
        answer["details"]["name"] = name
    return answer


def _forbidden(resource: str, group: str, namespace: str | None, verb: str = "create") -> dict[str, Any]:
    """The recorded RBAC denial, re-worded for another resource and verb (the authorizer's sentence is fixed)."""
    if namespace:
        recorded = recording("edge/rbac-create-forbidden-403").body
        table = {'configmaps is forbidden': f'{resource}{"." + group if group else ""} is forbidden', 'resource "configmaps"': f'resource "{resource}"',
                 'API group ""': f'API group "{group}"', 'namespace "default"': f'namespace "{namespace}"', "cannot create": f"cannot {verb}"}  # fmt: skip
    else:
        recorded = recording("edge/rbac-create-clusterrole-forbidden-403").body
        table = {"clusterroles.rbac.authorization.k8s.io is forbidden": f'{resource}{"." + group if group else ""} is forbidden',
                 'resource "clusterroles"': f'resource "{resource}"', 'API group "rbac.authorization.k8s.io"': f'API group "{group}"',
                 "cannot create": f"cannot {verb}"}  # fmt: skip
    answer = _reword(recorded, table, name="")
    answer["details"] = {"kind": resource, **({"group": group} if group else {})}
    return answer


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rebuild(value: Any, change: Any, path: tuple[Any, ...] = ()) -> Any:
    if isinstance(value, dict):
        return {k: _rebuild(v, change, (*path, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebuild(v, change, (*path, i)) for i, v in enumerate(value)]
    return change(path, value)


def _replay(recorded: Recording, body: dict[str, Any], namespace: str | None) -> Any:
    """The recorded answer for this request: its name, namespace and group, fresh server-generated values.

    A value the client sent differently from the recorded request (the name, a
    CRD's group) is replaced where the client sent it; the old name and uid
    are replaced where the *server* put them (paths absent from the recorded
    request, e.g. a Job's ``job-name`` label), never in values the client
    chose that happen to equal the name (an ``app: test-app`` label).
    """
    answer = copy.deepcopy(recorded.body)
    asked = body.get("metadata") or {}
    if not isinstance(answer, dict) or recorded.status >= 300:
        name = asked.get("name", "")
        old = (recorded.request_body.get("metadata") or {}).get("name", "")
        return _reword(answer, {f'"{old}"': f'"{name}"'}, name=name) if isinstance(answer, dict) and old else answer
    meta = answer.get("metadata") or {}
    sent, was = _leaves(body), _leaves(recorded.request_body)
    random_name = "".join(random.choices("bcdfghjklmnpqrstvwxz2456789", k=5))
    generated = {
        meta.get("name"): asked.get("name") or f"{asked.get('generateName', '')}{random_name}",
        meta.get("uid"): str(uuid.uuid4()),
    }
    for volume in (answer.get("spec") or {}).get("volumes") or []:
        if isinstance(volume, dict) and str(volume.get("name", "")).startswith("kube-api-access-"):
            generated[volume["name"]] = "kube-api-access-" + "".join(random.choices("bcdfghjklmnpqrstvwxz2456789", k=5))
    generated.pop(None, None)

    def change(path: tuple[Any, ...], value: Any) -> Any:
        if path in was:
            return sent.get(path, value) if value == was[path] else value
        return generated.get(value, value) if isinstance(value, str) else value

    answer = _rebuild(answer, change)
    meta = answer["metadata"]
    meta["name"] = generated.get(meta.get("name"), meta.get("name"))
    if namespace:
        meta["namespace"] = namespace
    meta["creationTimestamp"] = _now()
    for entry in meta.get("managedFields") or []:
        entry["time"] = meta["creationTimestamp"]
    if answer.get("kind") == "Service":
        _reallocate(answer.get("spec") or {}, body.get("spec") or {})
    return answer


def _reallocate(spec: dict[str, Any], asked: dict[str, Any]) -> None:
    if not asked.get("clusterIP") and spec.get("clusterIP") not in (None, "None"):
        base = ipaddress.ip_network(f"{spec['clusterIP']}/16", strict=False)
        spec["clusterIP"] = str(base[random.randrange(2, 65000)])
        if spec.get("clusterIPs"):
            spec["clusterIPs"][0] = spec["clusterIP"]
    asked_ports = asked.get("ports") or []
    for i, port in enumerate(spec.get("ports") or []):
        if "nodePort" in port and not (i < len(asked_ports) and asked_ports[i].get("nodePort")):
            port["nodePort"] = random.randrange(30000, 32768)
    if "healthCheckNodePort" in spec and not asked.get("healthCheckNodePort"):
        spec["healthCheckNodePort"] = random.randrange(30000, 32768)


def _handler(fake: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the real server; every answer has a Content-Length
        server_version = "fake-kube-apiserver"

        def setup(self) -> None:
            self.request.settimeout(10)
            if fake.pace == "tls-stall" and fake._closing.wait(fake.pace_seconds):
                raise ConnectionAbortedError("the fake API server stopped during a stalled TLS handshake")
            self.request.do_handshake()
            super().setup()

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            wanted = ("Accept", "Content-Type", "User-Agent", "Authorization")
            logged = Logged(
                self.command,
                parts.path,
                parse_qs(parts.query),
                {h: self.headers[h] for h in wanted if self.headers[h]},
                body,
            )
            fake.requests.append(logged)
            faulty = fake.fault is not None and (fake.fault_scope == "all" or self.command == "POST")
            if faulty and fake.fault == "slow" and fake._closing.wait(fake.slow_seconds):
                return
            pace = fake.paced(logged)
            if pace == "silent":
                self.close_connection = True
                fake._closing.wait()
                return
            answered = self._authorized_answer(logged)
            if not isinstance(answered, tuple):  # a watch: events as they happen
                logged.status = 200
                self._stream(answered)
                return
            status, answer, extra = answered
            logged.status = status
            if isinstance(answer, str):
                data, content_type = answer.encode(), "text/plain; charset=utf-8"
            else:
                data, content_type = json.dumps(answer).encode(), "application/json"
            if pace is not None:
                self._send_paced(pace, status, content_type, data, extra)
                return
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the client gave up (a timeout test)

        def _authorized_answer(self, logged: Logged) -> tuple[int, Any, dict[str, str]] | Iterator[dict[str, Any]]:
            try:
                caller = fake.authentication().caller(self.headers.get("Authorization"), self.request.getpeercert())
            except Unauthorized:
                return 401, unauthorized_status(), {}
            logged.user = caller.username
            refused = fake.authorize(caller, logged)
            if refused is not None:
                return refused
            if logged.method == "POST" and logged.path == REVIEW_PATH:
                return fake.review(logged)
            if logged.method == "GET" and logged.query.get("watch", [""])[0] in ("1", "true"):
                return fake.watch(logged)
            return fake.answer(logged)

        def _stream(self, events: Iterator[dict[str, Any]]) -> None:
            """A watch answer as the API server sends it (k8s.io/apiserver pkg/endpoints/handlers/watch.go
            HandleHTTP): 200, ``Transfer-Encoding: chunked``, each event one JSON document and a newline,
            sent as it happens; the stream ends (the terminating chunk) when the watch does."""
            sock = self.request
            with fake._lock:
                fake._watching.add(sock)
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()
                for event in events:
                    data = json.dumps(event).encode() + b"\n"
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                pass  # cut by drop_watches, or the client went away
            finally:
                with fake._lock:
                    fake._watching.discard(sock)
                self.close_connection = True

        def _send_paced(self, pace: str, status: int, content_type: str, data: bytes, extra: dict[str, str]) -> None:
            phrase = self.responses.get(status, ("",))[0]
            fields = {"Content-Type": content_type, "Content-Length": str(len(data)), **extra}
            head = (
                f"HTTP/1.1 {status} {phrase}\r\n".encode()
                + b"".join(f"{k}: {v}\r\n".encode() for k, v in fields.items())
                + b"\r\n"
            )
            steps: list[tuple[float, bytes]] = {
                "late-headers": [(fake.pace_seconds, head + data)],
                "late-body": [(0.0, head), (fake.pace_seconds, data)],
                "late-headers-and-body": [(fake.pace_seconds, head), (fake.pace_seconds, data)],
                "trickle-headers": [(fake.trickle_seconds, head[i : i + 1]) for i in range(len(head))] + [(0.0, data)],
                "trickle-body": [(0.0, head)] + [(fake.trickle_seconds, data[i : i + 1]) for i in range(len(data))],
            }[pace]
            try:
                for wait, chunk in steps:
                    if wait and fake._closing.wait(wait):
                        break
                    self.wfile.write(chunk)
            except OSError:
                pass  # the client gave up: what the deadline is for
            self.close_connection = True

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    return Handler


def runner_for(fake: FakeApiServer, directory: Path, **options: Any) -> Any:
    """A real :class:`provider.kube.dryrun.KubeDryRunner` for ``fake``, built from a generated kubeconfig."""
    from provider.kube.dryrun import KubeDryRunner

    return KubeDryRunner.from_kubeconfig(str(fake.kubeconfig(directory / "kubeconfig")), **options)


#: Where the API server serves kube-system's Secrets (bootstrap tokens live there).
SECRET_PATH = "/api/v1/namespaces/kube-system/secrets/"


@dataclass
class TokenApi(FakeApiServer):
    """The replaying fake API server, plus bootstrap-token Secrets and per-name refusals."""

    secrets: dict[str, dict[str, Any]] = field(default_factory=dict)
    forbidden: set[str] = field(default_factory=set)

    def answer(self, logged: Logged) -> tuple[int, Any, dict[str, str]]:
        if logged.method == "GET" and logged.path.startswith(SECRET_PATH):
            name = logged.path.removeprefix(SECRET_PATH)
            if name in self.forbidden:
                return 403, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
                             "message": f'secrets "{name}" is forbidden: User cannot get resource "secrets"'}, {}  # fmt: skip
            if name in self.secrets:
                return 200, self.secrets[name], {}
            return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
                         "message": f'secrets "{name}" not found', "details": {"name": name, "kind": "secrets"}}, {}  # fmt: skip
        return super().answer(logged)
