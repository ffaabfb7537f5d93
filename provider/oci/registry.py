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
:class:`~provider.deadlines.DeadlineSocket` (:func:`provider.deadlines.connect`),
the same way :mod:`provider.kube.tokenreview` and :mod:`provider.kube.client`
talk to the API server. The deadline covers looking up the registry's name:
the name is the bundle reference's, so its DNS zone is the reference author's.

Transport rules:

* HTTPS, verified against the system CAs (or ``ca_file``); plain HTTP only
  for loopback registries (``localhost``, ``127.0.0.0/8``, ``::1``), as
  go-containerregistry allows them, or hosts the caller lists;
* anonymous access, answering a ``Bearer`` challenge with an anonymous token
  (``WWW-Authenticate``, the distribution token spec) -- or with the basic
  credentials the caller's ``credentials`` callback gives for the host;
* redirects (blob storage behind a registry) followed three times at most,
  HTTPS only;
* where a registry may send the client -- a redirect's ``Location``, a token
  ``realm`` -- is pinned: to the registry's own host and port, or to a host the
  operator lists (``hosts``; the service's ``MANIFEST_PROVIDER_REGISTRY_HOSTS``,
  none by default). Without the pin an allow-listed registry could send the
  service to any host and port, cluster-internal names included. ``hosts=None``
  follows any HTTPS host, as docker and cosign do: the CLI, whose user chose
  the registry;
* credentials (the registry's bearer token, basic credentials) go to the
  registry's own scheme, host and port only -- every hop of a redirect chain is
  compared with the registry, not with the hop before it;
* everything a registry sends that is a URL is parsed inside the exchange: a
  broken IPv6 literal or a port of 99999 is a :class:`RegistryError`
  (``invalid``) for this fetch, never a ``ValueError`` out of the verifier.
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
from ..deadlines import connect, tls_for_deadlines
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
    name = (host[1 : host.find("]")] if "]" in host else "") if host.startswith("[") else host.rsplit(":", 1)[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Target:
    """Where a URL points: scheme, host (lower case, no brackets) and port (the scheme's default filled in)."""

    scheme: str
    host: str
    port: int
    #: The path and query, as sent in the request line.
    target: str = "/"

    @property
    def netloc(self) -> str:
        """``host:port``, brackets around an IPv6 address: the form hosts are compared in."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        return is_loopback(self.netloc)


def parse_url(url: str, what: str) -> Target:
    """``url`` as a :class:`Target`, or :class:`RegistryError` ``invalid`` (a broken IPv6 literal, a bad port)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname, parts.port  # .port raises ValueError for 99999 or "x"
    except ValueError:
        raise RegistryError(f"{what} is not a usable URL: {url[:80]!r}", "invalid") from None
    if parts.scheme not in ("http", "https") or not host:
        raise RegistryError(f"{what} is not an HTTP(S) URL with a host: {url[:80]!r}", "invalid")
    target = parts.path or "/"
    if parts.query:
        target += f"?{parts.query}"
    return Target(parts.scheme, host, port or (443 if parts.scheme == "https" else 80), target)


def host_key(text: str) -> str:
    """A configured host (``host`` or ``host:port``; HTTPS's 443 when no port) in :attr:`Target.netloc` form."""
    return parse_url(f"https://{text}/", f"the host {text[:80]!r}").netloc


@dataclass
class RegistryClient:
    """Talks to registries; thread-safe (no shared connections; a token cache per registry and scope)."""

    ca_file: str | None = None
    credentials: Credentials | None = None
    plain_http: Sequence[str] = ()
    #: Hosts (``host[:port]``, 443 when no port) a registry may send this client to besides itself, by a
    #: redirect or a token realm; ``None``: any (module docstring).
    hosts: Sequence[str] | None = None
    _tokens: LRUCache[str] = field(default_factory=lambda: LRUCache(MAX_TOKENS), repr=False)
    _tls: ssl.SSLContext | None = field(default=None, repr=False)
    _allowed: frozenset[str] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._allowed = None if self.hosts is None else frozenset(host_key(h) for h in self.hosts)

    def _scheme(self, registry: str) -> str:
        return "http" if is_loopback(registry) or registry in self.plain_http else "https"

    def _origin(self, registry: str) -> Target:
        return parse_url(f"{self._scheme(registry)}://{registry}/", f"the registry {registry[:80]!r}")

    def _refusal(self, origin: Target, target: Target) -> str:
        """Why a redirect or a token realm of the registry at ``origin`` may not send us to ``target`` ('' if it may).

        The scheme: HTTPS anywhere; plain HTTP only on loopback and only from a registry reached
        over plain HTTP itself (a local test registry): an HTTPS registry must not be able to point
        the service at its own loopback ports. The host: the registry's own, or one the operator lists.
        """
        if target.scheme != "https" and not (target.scheme == "http" and origin.scheme == "http" and target.loopback):
            return "which is not an HTTPS URL"
        if self._allowed is None or target.netloc == origin.netloc or target.netloc in self._allowed:
            return ""
        return (
            f"a host the operator does not let registries send the service to ({target.netloc[:80]}; "
            "MANIFEST_PROVIDER_REGISTRY_HOSTS)"
        )

    def _context(self) -> ssl.SSLContext:
        """One TLS context per client: reading the CA bundle is not work for every connection of a fetch."""
        if self._tls is None:  # two threads may both build one; either serves
            self._tls = tls_for_deadlines(ssl.create_default_context(cafile=self.ca_file))
        return self._tls

    def _connect(self, scheme: str, host: str, port: int, deadline: float) -> socket.socket:
        return connect(host, port, deadline, context=None if scheme == "http" else self._context())

    def _once(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None, *, deadline: float, max_bytes: int
    ) -> Answer:
        parts = parse_url(url, f"{method} {url[:80]}")
        host, port, target = parts.host, parts.port, parts.target
        connection = http.client.HTTPConnection(host, port)
        response: http.client.HTTPResponse | None = None
        try:
            connection.sock = self._connect(parts.scheme, host, port, deadline)
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
                raise RegistryError(f"{method} {target[:80]} answered {declared} bytes; at most {max_bytes} are read",
                                    "invalid")  # fmt: skip
            data = b"" if method == "HEAD" else response.read(max_bytes + 1)
        except TimeoutError as exc:
            raise RegistryError(f"{host} did not answer {method} {target[:80]} by the deadline") from exc
        except http.client.HTTPException as exc:
            if not _over_head_limits(exc):
                raise RegistryError(
                    f"{host} could not be asked ({method} {target[:80]}): {type(exc).__name__}"
                ) from exc
            raise RegistryError(
                f"{host} answered {method} {target[:80]} with a head over http.client's limits "
                f"({MAX_ANSWER_HEADERS} header fields, lines of {MAX_ANSWER_LINE} bytes)",
                "invalid",
            ) from exc
        except (OSError, ValueError) as exc:
            raise RegistryError(f"{host} could not be asked ({method} {target[:80]}): {type(exc).__name__}") from exc
        finally:
            if response is not None:
                response.close()
            connection.close()
        if time.monotonic() > deadline:
            raise RegistryError(f"{host} answered {method} {parts.target[:80]} only after the deadline")
        if len(data) > max_bytes and response.status < 300:
            raise RegistryError(f"{method} {parts.target[:80]} answered more than {max_bytes} bytes", "invalid")
        return Answer(response.status, answer_headers, data)

    def _token(
        self, registry: str, challenge: str, scope: str, deadline: float, credentials: Credentials | None = None
    ) -> str | None:
        params = dict(_CHALLENGE.findall(challenge))
        realm = params.get("realm", "")
        origin = self._origin(registry)
        refusal = self._refusal(origin, parse_url(realm, f"{registry}'s token realm"))
        if refusal:
            raise RegistryError(f"{registry} asks for a token from {realm[:80]!r}, {refusal}")
        query = urllib.parse.urlencode({k: v for k, v in (("service", params.get("service")), ("scope", scope)) if v})
        headers = {}
        given = credentials or self.credentials
        creds = given(registry) if given else None
        if creds:
            headers["Authorization"] = "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
        url = f"{realm}{'&' if '?' in realm else '?'}{query}"
        answer = self._once("GET", url, headers, None, deadline=deadline, max_bytes=MAX_TOKEN_BYTES)
        if answer.status != 200:
            raise RegistryError(f"{registry}'s token service answered HTTP {answer.status}")
        document = _json(answer.body, f"{registry}'s token service answer")
        token = document.get("token") or document.get("access_token")
        if not isinstance(token, str):
            raise RegistryError(f"{registry}'s token service answered no token", "invalid")
        self._keep(_token_key(registry, scope, creds), token, document.get("expires_in", DEFAULT_TOKEN_LIFETIME))
        return token

    def _keep(self, key: bytes, token: str, expires: Any) -> None:
        """Cache ``token`` for its lifetime, at most :data:`MAX_TOKEN_LIFETIME`, less a margin.

        ``expires_in`` is the token service's to write: json reads NaN, Infinity and integers of
        any length, and ``float()`` of a 400-digit integer raises OverflowError.
        """
        lifetime = DEFAULT_TOKEN_LIFETIME
        number = (type(expires) is int) or (isinstance(expires, float) and not math.isnan(expires))
        if number:
            lifetime = float(max(0, min(expires, MAX_TOKEN_LIFETIME)))  # clamped before float(): no overflow
        lifetime -= 5
        if lifetime > 0:
            self._tokens.put(key, token, ttl=lifetime)

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
        credentials: Credentials | None = None,
    ) -> Answer:
        """One exchange with ``registry`` (``host[:port]``), authenticating and following redirects as needed.

        ``credentials`` replaces the client's own for this exchange (a policy's pull Secret). A token is
        reused only for the same registry, scope and credentials: one obtained with a tenant's
        credentials never serves an exchange made with other credentials or none.
        """
        origin = self._origin(registry)
        url = f"{origin.scheme}://{registry}{path}"
        sent = dict(headers or {})
        given = credentials or self.credentials
        creds = given(registry) if given else None
        cached = self._tokens.get(_token_key(registry, scope, creds))
        if cached is not None:
            sent["Authorization"] = f"Bearer {cached}"
        answer = self._once(method, url, sent, body, deadline=deadline, max_bytes=max_bytes)
        if answer.status == 401:
            challenge = answer.headers.get("www-authenticate", "")
            if challenge.lower().startswith("bearer"):
                token = self._token(registry, challenge, scope, deadline, given)
                sent["Authorization"] = f"Bearer {token}"
            elif challenge.lower().startswith("basic") and creds:
                sent["Authorization"] = "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
            else:
                return answer
            answer = self._once(method, url, sent, body, deadline=deadline, max_bytes=max_bytes)
        anonymous = {k: v for k, v in sent.items() if k.lower() != "authorization"}
        for _ in range(MAX_REDIRECTS):
            if answer.status not in (301, 302, 303, 307, 308) or method not in ("GET", "HEAD"):
                break
            location = answer.headers.get("location", "")
            try:
                url = urllib.parse.urljoin(url, location)
            except ValueError:  # a broken IPv6 literal in the Location
                raise RegistryError(f"{registry} redirected to {location[:80]!r}: not a URL", "invalid") from None
            target = parse_url(url, f"{registry}'s redirect")
            refusal = self._refusal(origin, target)
            if refusal:
                raise RegistryError(f"{registry} redirected to {url[:80]!r}, {refusal}")
            # Credentials are the registry's: every hop is compared with the registry, not with the hop
            # before it, so a chain A -> B -> B never hands A's token to B.
            own = (target.scheme, target.netloc) == (origin.scheme, origin.netloc)
            answer = self._once(method, url, sent if own else anonymous, body, deadline=deadline, max_bytes=max_bytes)
        return answer


def _token_key(registry: str, scope: str, creds: tuple[str, str] | None) -> bytes:
    """A token's cache key: its registry, its scope, and who obtained it (a digest, never the password)."""
    who = digest(*creds) if creds else b""
    return digest(registry, scope, who)


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
