"""A minimal OCI distribution client: every exchange ends by one deadline, every answer is bounded.

Why not a library from PyPI: ``oras`` (oras-py) and the other Python
registry clients sit on ``requests``, whose timeouts bound each socket
operation, not an exchange -- a registry that sends one byte just inside
every timeout holds the admission thread as long as it likes -- and they
stream blobs to files. Admission needs the opposite: one absolute deadline
for connect, TLS, request, headers and the whole body, a byte limit checked
before and while reading, nothing on disk. So this speaks the few endpoints
it needs (OCI distribution spec v1.1: ``GET``/``HEAD``/``PUT
/v2/<name>/manifests/<ref>``, ``GET /v2/<name>/blobs/<digest>``, ``POST``
then ``PUT`` a monolithic blob upload) with :mod:`http.client` over
:class:`~provider.deadlines.DeadlineSocket`, the same way
:mod:`provider.kube.tokenreview` talks to the API server.

Transport rules:

* HTTPS, verified against the system CAs (or ``ca_file``); plain HTTP only
  for loopback registries (``localhost``, ``127.0.0.0/8``, ``::1``), as
  go-containerregistry allows them, or hosts the caller lists;
* anonymous access, answering a ``Bearer`` challenge with an anonymous token
  (``WWW-Authenticate``, the distribution token spec) -- or with the basic
  credentials the caller's ``credentials`` callback gives for the host;
* redirects (blob storage behind a registry) followed three times at most,
  HTTPS only, the ``Authorization`` header never sent to another host.
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import math
import re
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..cache import LRUCache, digest
from ..deadlines import DeadlineSSLSocket, connect
from ..errors import DataError
from ..parsing import load_json
from ..version import __version__

#: Media types of an image manifest (OCI image spec, Docker distribution schema 2).
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
#: The config media type cosign writes (go-containerregistry ``types.OCIConfigJSON``).
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
#: A token answer is a few KiB (a JWT); far more is not one.
MAX_TOKEN_BYTES = 64 * 1024
#: http.client's own limits on an answer's head (Lib/http/client.py ``_MAXHEADERS``, ``_MAXLINE``):
#: it refuses more header fields, or a longer status or header line, before we see the answer.
MAX_ANSWER_HEADERS = 100
MAX_ANSWER_LINE = 65536
MAX_REDIRECTS = 3
#: Bearer tokens kept, one per (registry, scope). The scope names a repository, and the object under review
#: chooses its bundle's repository (anything under an allow-listed prefix), so the count must be bounded.
MAX_TOKENS = 256
#: Seconds a token is reused at most, and the lifetime assumed when the token service names none
#: (the distribution token spec's default ``expires_in`` is 60).
MAX_TOKEN_LIFETIME, DEFAULT_TOKEN_LIFETIME = 300.0, 60.0
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')

Credentials = Callable[[str], tuple[str, str] | None]


class RegistryError(Exception):
    """An exchange failed: ``kind`` is ``unavailable`` (down, refused, late, 5xx) or ``invalid`` (a bad answer)."""

    def __init__(self, message: str, kind: str = "unavailable") -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def _over_head_limits(exc: http.client.HTTPException) -> bool:
    """Whether http.client refused an answer by its head limits: LineTooLong for a line, and a
    plain HTTPException "got more than 100 headers" (_read_headers) for the count."""
    return isinstance(exc, http.client.LineTooLong) or str(exc).startswith("got more than")


def is_loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host[1 : host.index("]")]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass
class RegistryClient:
    """Talks to registries; thread-safe (no shared connections; a token cache per registry and scope)."""

    ca_file: str | None = None
    credentials: Credentials | None = None
    plain_http: Sequence[str] = ()
    _tokens: LRUCache[str] = field(default_factory=lambda: LRUCache(MAX_TOKENS), repr=False)
    _tls: ssl.SSLContext | None = field(default=None, repr=False)

    def _scheme(self, registry: str) -> str:
        return "http" if is_loopback(registry) or registry in self.plain_http else "https"

    def _may_go(self, registry: str, target: urllib.parse.SplitResult) -> bool:
        """Whether a redirect or a token realm of ``registry`` may send us to ``target``.

        HTTPS anywhere; plain HTTP only on loopback and only from a registry reached over
        plain HTTP itself (a local test registry): an HTTPS registry must not be able to
        point the service at its own loopback ports.
        """
        if target.scheme == "https":
            return True
        return target.scheme == "http" and self._scheme(registry) == "http" and is_loopback(target.netloc)

    def _context(self) -> ssl.SSLContext:
        """One TLS context per client: reading the CA bundle is not work for every connection of a fetch."""
        if self._tls is None:  # two threads may both build one; either serves
            context = ssl.create_default_context(cafile=self.ca_file)
            context.sslsocket_class = DeadlineSSLSocket
            self._tls = context
        return self._tls

    def _connect(self, scheme: str, host: str, port: int, deadline: float) -> socket.socket:
        return connect(host, port, deadline, context=None if scheme == "http" else self._context())

    def _once(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None, *, deadline: float, max_bytes: int
    ) -> Answer:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        connection = http.client.HTTPConnection(host, port)
        response: http.client.HTTPResponse | None = None
        try:
            connection.sock = self._connect(parts.scheme, host, port, deadline)
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            connection.request(method, target, body, {"User-Agent": f"manifest-provider/{__version__}", **headers})
            response = connection.getresponse()
            answer_headers = {k.lower(): v for k, v in response.getheaders()}
            declared = answer_headers.get("content-length")
            if (
                method != "HEAD"
                and declared
                and declared.isascii()
                and declared.isdigit()
                # By length first: int() refuses more than 4300 digits with a ValueError of its own.
                and (len(declared) > len(str(max_bytes)) or int(declared) > max_bytes)
                and response.status < 300
            ):
                raise RegistryError(f"{method} {parts.path} answered {declared} bytes; at most {max_bytes} are read",
                                    "invalid")  # fmt: skip
            data = b"" if method == "HEAD" else response.read(max_bytes + 1)
        except TimeoutError as exc:
            raise RegistryError(f"{host} did not answer {method} {parts.path} by the deadline") from exc
        except http.client.HTTPException as exc:
            if not _over_head_limits(exc):
                raise RegistryError(f"{host} could not be asked ({method} {parts.path}): {type(exc).__name__}") from exc
            raise RegistryError(
                f"{host} answered {method} {parts.path} with a head over http.client's limits "
                f"({MAX_ANSWER_HEADERS} header fields, lines of {MAX_ANSWER_LINE} bytes)",
                "invalid",
            ) from exc
        except (OSError, ValueError) as exc:
            raise RegistryError(f"{host} could not be asked ({method} {parts.path}): {type(exc).__name__}") from exc
        finally:
            if response is not None:
                response.close()
            connection.close()
        if time.monotonic() > deadline:
            raise RegistryError(f"{host} answered {method} {parts.path} only after the deadline")
        if len(data) > max_bytes and response.status < 300:
            raise RegistryError(f"{method} {parts.path} answered more than {max_bytes} bytes", "invalid")
        return Answer(response.status, answer_headers, data)

    def _token(self, registry: str, challenge: str, scope: str, deadline: float) -> str | None:
        params = dict(_CHALLENGE.findall(challenge))
        realm = params.get("realm", "")
        if not self._may_go(registry, urllib.parse.urlsplit(realm)):
            raise RegistryError(f"{registry} asks for a token from {realm[:80]!r}, which is not an HTTPS URL")
        query = urllib.parse.urlencode({k: v for k, v in (("service", params.get("service")), ("scope", scope)) if v})
        headers = {}
        creds = self.credentials(registry) if self.credentials else None
        if creds:
            headers["Authorization"] = "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
        answer = self._once("GET", f"{realm}?{query}", headers, None, deadline=deadline, max_bytes=MAX_TOKEN_BYTES)
        if answer.status != 200:
            raise RegistryError(f"{registry}'s token service answered HTTP {answer.status}")
        document = _json(answer.body, f"{registry}'s token service answer")
        token = document.get("token") or document.get("access_token")
        if not isinstance(token, str):
            raise RegistryError(f"{registry}'s token service answered no token", "invalid")
        expires = document.get("expires_in", DEFAULT_TOKEN_LIFETIME)
        finite = isinstance(expires, (int, float)) and math.isfinite(expires)  # json reads NaN and Infinity
        lifetime = min(float(expires) if finite else DEFAULT_TOKEN_LIFETIME, MAX_TOKEN_LIFETIME) - 5
        if lifetime > 0:
            self._tokens.put(digest(registry, scope), token, ttl=lifetime)
        return token

    def request(
        self,
        method: str,
        registry: str,
        path: str,
        *,
        scope: str,
        deadline: float,
        max_bytes: int,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> Answer:
        """One exchange with ``registry`` (``host[:port]``), authenticating and following redirects as needed."""
        url = f"{self._scheme(registry)}://{registry}{path}"
        sent = dict(headers or {})
        cached = self._tokens.get(digest(registry, scope))
        if cached is not None:
            sent["Authorization"] = f"Bearer {cached}"
        answer = self._once(method, url, sent, body, deadline=deadline, max_bytes=max_bytes)
        if answer.status == 401:
            challenge = answer.headers.get("www-authenticate", "")
            creds = self.credentials(registry) if self.credentials else None
            if challenge.lower().startswith("bearer"):
                token = self._token(registry, challenge, scope, deadline)
                sent["Authorization"] = f"Bearer {token}"
            elif challenge.lower().startswith("basic") and creds:
                sent["Authorization"] = "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
            else:
                return answer
            answer = self._once(method, url, sent, body, deadline=deadline, max_bytes=max_bytes)
        for _ in range(MAX_REDIRECTS):
            if answer.status not in (301, 302, 303, 307, 308) or method not in ("GET", "HEAD"):
                break
            location = urllib.parse.urljoin(url, answer.headers.get("location", ""))
            target = urllib.parse.urlsplit(location)
            if not self._may_go(registry, target):
                raise RegistryError(f"{registry} redirected to {location[:80]!r}, which is not an HTTPS URL")
            same_host = target.netloc == urllib.parse.urlsplit(url).netloc
            url = location
            answer = self._once(method, url, sent if same_host else {}, body, deadline=deadline, max_bytes=max_bytes)
        return answer


def _json(body: bytes, what: str) -> dict[str, Any]:
    """A registry's JSON object, read within the parser's limits: the registry is whoever the
    reference names, so its answer is hostile input (json.loads alone raised RecursionError on
    a 64 KiB manifest of nested arrays, and int()'s own ValueError on a 5 000-digit number)."""
    try:
        document = load_json(body, what=what)
    except DataError as exc:
        raise RegistryError(exc.message, "invalid") from exc
    if not isinstance(document, dict):
        raise RegistryError(f"{what} is not a JSON object", "invalid")
    return document


def json_document(answer: Answer, what: str) -> dict[str, Any]:
    return _json(answer.body, what)
