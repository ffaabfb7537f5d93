"""The Kubernetes API client: the official ``kubernetes`` client's connection and credentials, bounded exchanges.

:class:`KubeClient` is what every module that talks to the API server goes
through: the dry-run runner (:class:`provider.kube.dryrun.KubeDryRunner`, a
subclass), the lister, the writer, the ConfigMap and Secret readers and the
watcher. One client per cluster holds

* the connection: the kubernetes client's ``ApiClient`` and its urllib3 pool,
  built from a kubeconfig or the pod's service account
  (:mod:`provider.kube.credentials`); the client's own ``auth_settings`` add the
  credentials to every request, so a rotated token is reread by its refresh hook;
* :meth:`~KubeClient.exchange`: one request and its whole answer by one
  :class:`Deadline`, the answer's bytes bounded by
  :attr:`Limits.max_api_response_bytes <provider.limits.Limits.max_api_response_bytes>`;
  :meth:`~KubeClient.request` for list pages and writes, :meth:`~KubeClient.open_stream`
  for watches;
* discovery -- ``GET /api/v1`` or ``GET /apis/<group>/<version>`` maps a kind to
  its resource name and scope (the server's answer, never a guessed plural). One
  request per group/version, cached for ``discovery_ttl`` seconds; a kind missing
  from a cached document causes one refetch (at most every
  :data:`MISS_REFETCH_SECONDS`) so a CRD installed since shows up. The client's
  ``DynamicClient`` is not used: with an empty cache it fetches ``/version``,
  ``/apis`` and, for ``v1``, the ``/apis/<g>/v1`` document of *every* group
  (``tests/data/dryrun/discovery/_python-client-requests.json`` records 17
  requests) where this needs one.

The deadline covers every exchange whole: looking up the host name,
connecting, the TLS handshake, sending the request, the response headers and
the *entire* body. urllib3's own timeouts bound each socket operation, not the
exchange (a server that sends its headers and then its body each just under
the timeout, or one byte at a time, would be waited for indefinitely), so the
client has its urllib3 pool open :mod:`provider.deadlines`' sockets -- the
mechanism the TokenReview and registry clients use -- and hands each the
exchange's :class:`~provider.deadlines.Deadline` (:func:`_bound_by_deadlines`):
before every blocking call the socket sets its timeout to the time left, and
past the deadline it refuses to start one. An answer whose last byte arrives
after the deadline is a :class:`TransientError` ``dry-run-failed`` and is never
used -- not returned, not cached. An exchange therefore returns or raises within
its deadline plus :data:`DEADLINE_MARGIN_SECONDS`; the one thread it may start
is a name lookup's (:func:`provider.deadlines.resolve`; in a cluster the API
server is an IP address, which needs none).

Errors: the cluster could not be asked (refused, TLS, an answer not complete by
the deadline, credentials that cannot be refreshed) is a :class:`TransientError`
``dry-run-failed`` (:meth:`~KubeClient.request` relabels it ``transient-error``);
:func:`transport_message` words a 401, 429 or 5xx answer. What an answer's
status means for the caller is the caller's to say.

The ``kubernetes`` package is imported only when a client is built: commands
that never talk to a cluster do not pay for it.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Self

from ..deadlines import Deadline, DeadlineSocket, DeadlineSSLSocket, open_connection, tls_for_deadlines
from ..errors import ConfigError, DataError, PolicyError, TransientError, VerificationFailure
from ..limits import DEFAULT_LIMITS, Limits
from ..objects import split_api_version
from ..parsing import load_json
from ..version import __version__
from . import credentials

#: Seconds a discovery document is trusted (kubectl's disk cache keeps them
#: for 6 hours; a shorter life here bounds how long a removed kind lingers).
DISCOVERY_TTL_SECONDS = 600.0
#: After a kind is missing from a cached document, refetch at most this often.
MISS_REFETCH_SECONDS = 10.0
#: ``fieldManager`` of the dry-run creates and of the writes (shows in the objects' managedFields).
FIELD_MANAGER = "manifest-provider"
#: How long after its deadline an exchange (a dry-run) may still return or raise. Past the
#: deadline no socket operation starts and every one in progress was given the
#: time left as its timeout, so what remains is waking from that one wait,
#: closing the connection and raising -- milliseconds on an idle host; the rest
#: is headroom for a loaded one. The service's request deadline must exceed the
#: dry-run timeout by more than this (2.5 s against 1.5 s by default).
DEADLINE_MARGIN_SECONDS = 0.5


def _failed(message: str) -> TransientError:
    return TransientError(message, reason="dry-run-failed")


class ResponseTooLarge(TransientError):
    """An answer longer than :attr:`Limits.max_api_response_bytes`: a list page asks for fewer objects and retries."""


@dataclass(frozen=True)
class Resource:
    """One entry of a discovery document: what a kind is called in URLs, and its scope."""

    group: str
    version: str
    kind: str
    name: str
    namespaced: bool
    verbs: tuple[str, ...]
    #: The other names kubectl accepts for it (``singularName``, ``shortNames``): provider/kube/lister.py.
    singular: str = ""
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def collection(self, namespace: str | None) -> str:
        root = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        return f"{root}/namespaces/{namespace}/{self.name}" if self.namespaced else f"{root}/{self.name}"

    def describe(self) -> str:
        return f"{self.name}.{self.group}" if self.group else self.name


@dataclass(frozen=True)
class _Discovered:
    kinds: dict[str, Resource]
    fetched: float
    served: bool  # False: the API server does not serve this group/version at all


@dataclass(frozen=True)
class Response:
    status: int
    body: Any  # parsed JSON, or the text of a non-JSON answer

    def status_field(self, name: str) -> str:
        value = self.body.get(name) if isinstance(self.body, dict) else None
        return value if isinstance(value, str) else ""

    @property
    def message(self) -> str:
        text = self.status_field("message") or (self.body.strip() if isinstance(self.body, str) else "")
        return text[:600] or f"HTTP {self.status}"


def _remaining(deadline: Deadline, what: str) -> float:
    left = deadline.left()
    if left <= 0:
        raise _failed(f"the dry-run did not finish within {deadline.seconds:g} s (before {what})")
    return left


#: The deadline of the exchange this thread is in. urllib3 picks a pooled
#: connection, connects it and builds the response inside ``urlopen``, out of the
#: client's reach; all of it happens in the calling thread, which is how the
#: connection classes below find the deadline that applies.
_EXCHANGE = threading.local()


def _exchange_deadline() -> Deadline | None:
    deadline: Deadline | None = getattr(_EXCHANGE, "deadline", None)
    return deadline


def _carry(sock: Any) -> None:
    """Give a pooled connection's socket, new or reused, the deadline of this thread's exchange (none: a watch).

    Every socket of the pool is one of :mod:`provider.deadlines`' (TLS inside TLS,
    through an HTTPS proxy, reads and writes through the proxy's socket, which is).
    One that is not cannot be bounded, and an exchange refuses it: closed, not unbounded.
    """
    from urllib3.util.ssltransport import SSLTransport

    deadline = _exchange_deadline()
    target = sock.socket if isinstance(sock, SSLTransport) else sock
    if isinstance(target, (DeadlineSocket, DeadlineSSLSocket)):
        target.set_deadline(deadline.end if deadline is not None else None)
    elif deadline is not None:
        raise OSError(f"a connection over {type(target).__name__} cannot be held to the exchange's deadline")


def _deadline_tls(connection: Any, cert_reqs: Any) -> ssl.SSLContext:
    """The TLS context urllib3 would make for ``connection``, wrapping :class:`DeadlineSSLSocket`.

    urllib3 builds one per connection when none is given
    (urllib3/connection.py ``_ssl_wrap_socket_and_match_hostname``, 2.x): the same
    call, and the system CAs when the kubeconfig names none, as it does. It still
    loads the client's CA and certificate into it and checks the host name.
    """
    from urllib3.util.ssl_ import create_urllib3_context, resolve_cert_reqs, resolve_ssl_version

    context = create_urllib3_context(
        ssl_version=resolve_ssl_version(connection.ssl_version),
        ssl_minimum_version=connection.ssl_minimum_version,
        ssl_maximum_version=connection.ssl_maximum_version,
        cert_reqs=resolve_cert_reqs(cert_reqs),
    )
    if not (connection.ca_certs or connection.ca_cert_dir or connection.ca_cert_data):
        context.load_default_certs()
    return tls_for_deadlines(context)


def _deadline_connection(base: Any) -> Any:
    """A subclass of urllib3 connection class ``base`` whose sockets are :mod:`provider.deadlines`' sockets.

    Inside an exchange (:data:`_EXCHANGE`) a new connection is opened with
    :func:`provider.deadlines.open_connection` (name lookup and connect by the
    deadline), the TLS handshake runs under what is left, and every later send and
    receive of the socket -- the request, the headers, the whole body -- is armed
    with the time left, by the socket itself. A pooled connection gets the
    deadline of the exchange that takes it (or none: a watch, bounded by urllib3's
    own timeouts) before it sends.
    """
    import urllib3.connection
    from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError

    # SOCKS connections (urllib3.contrib.socks) open theirs through the proxy: theirs is adopted.
    direct = base._new_conn is urllib3.connection.HTTPConnection._new_conn
    https = issubclass(base, urllib3.connection.HTTPSConnection)

    def _new_conn(self: Any) -> Any:
        deadline = _exchange_deadline()
        if deadline is None:
            return base._new_conn(self)
        if direct:
            try:
                sock = open_connection(self._dns_host, self.port, deadline.end)
            except socket.gaierror as exc:
                raise NameResolutionError(self.host, self, exc) from exc
            except TimeoutError as exc:
                raise ConnectTimeoutError(
                    self, f"Connection to {self.host} timed out (the exchange's deadline)"
                ) from exc
            except OSError as exc:
                raise NewConnectionError(self, f"Failed to establish a new connection: {exc}") from exc
        else:
            self.timeout = max(deadline.left(), 0.001)
            sock = DeadlineSocket.adopt(base._new_conn(self))
            sock.set_deadline(deadline.end)
        try:
            for option in self.socket_options or ():
                sock.setsockopt(*option)
            # The TLS handshake urllib3 starts next runs under the socket's timeout as one
            # total (ssl docs, SSLSocket.do_handshake, since 3.5): give it what is left.
            sock.arm()
        except BaseException:
            sock.close()
            raise
        return sock

    def connect(self: Any) -> None:
        if https:
            if getattr(self, "_deadline_tls", None) is None:
                self._deadline_tls = self.ssl_context is None  # the pool's context, if it gave one, is kept
            if self._deadline_tls:
                self.ssl_context = _deadline_tls(self, self.cert_reqs)  # fresh per connection, as urllib3's own
            proxy = self.proxy_config
            https_proxy = self.proxy is not None and self.proxy.scheme == "https" and proxy is not None
            if https_proxy and (proxy.ssl_context is None or getattr(self, "_deadline_proxy_tls", False)):
                self._deadline_proxy_tls = True
                self.proxy_config = proxy._replace(ssl_context=_deadline_tls(self, self.cert_reqs))
        base.connect(self)
        _carry(self.sock)

    def _connect_tls_proxy(self: Any, hostname: str, sock: Any) -> Any:
        # TLS to an HTTPS proxy: the CONNECT that follows goes out over this socket.
        tls = base._connect_tls_proxy(self, hostname, sock)
        _carry(tls)
        return tls

    def _tunnel(self: Any) -> None:
        # Through a proxy: the CONNECT and its answer went over the armed socket; the TLS
        # handshake with the API server that follows must get what is left now.
        base._tunnel(self)
        if isinstance(self.sock, (DeadlineSocket, DeadlineSSLSocket)):
            self.sock.arm()

    def request(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.sock is not None:  # a pooled connection: this exchange's deadline, not the last one's
            _carry(self.sock)
        return base.request(self, *args, **kwargs)

    namespace: dict[str, Any] = {"_new_conn": _new_conn, "connect": connect, "_tunnel": _tunnel, "request": request}
    if https:
        namespace["_connect_tls_proxy"] = _connect_tls_proxy
    return type(f"DeadlineBound{base.__name__}", (base,), namespace)


def _bound_by_deadlines(api_client: Any) -> None:
    """Make every connection of ``api_client``'s urllib3 pool honour the exchange deadline.

    Each pool class the pool manager uses (plain, TLS, a proxy's) is replaced by
    a subclass whose connections are :func:`_deadline_connection`; open pools are
    dropped so that no connection of the old classes is reused.
    """
    manager = api_client.rest_client.pool_manager
    classes = dict(manager.pool_classes_by_scheme)
    for scheme, pool in classes.items():
        if not getattr(pool.ConnectionCls, "_deadline_bound", False):
            connection = _deadline_connection(pool.ConnectionCls)
            connection._deadline_bound = True
            classes[scheme] = type(f"DeadlineBound{pool.__name__}", (pool,), {"ConnectionCls": connection})
    manager.pool_classes_by_scheme = classes
    manager.clear()


class KubeClient:
    """One cluster's API server as one identity: bounded exchanges, cached discovery; thread-safe, one per process."""

    def __init__(
        self,
        api_client: Any,
        *,
        source: str,
        default_namespace: str = "default",
        timeout: float | None = None,
        discovery_ttl: float = DISCOVERY_TTL_SECONDS,
        limits: Limits = DEFAULT_LIMITS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = api_client
        self.source = source
        self.default_namespace = default_namespace
        self.timeout = limits.dry_run_timeout if timeout is None else timeout
        self.discovery_ttl = discovery_ttl
        self.limits = limits
        self._clock = clock
        self._lock = threading.Lock()
        self._discovery: dict[tuple[str, str], _Discovered] = {}
        self._groups: tuple[float, tuple[tuple[str, str], ...]] | None = None
        api_client.user_agent = f"manifest-provider/{__version__}"
        _bound_by_deadlines(api_client)

    # -- construction --

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, *, context: str | None = None, **options: Any) -> Self:
        """A client for the cluster of a kubeconfig (None: ``$KUBECONFIG``, else ``~/.kube/config``)."""
        try:
            identity = credentials.from_kubeconfig(path, context=context)
        except ConfigError as exc:
            raise PolicyError(exc.message) from exc
        return cls.for_identity(identity, **options)

    @classmethod
    def in_cluster(cls, service_account_dir: str | None = None, **options: Any) -> Self:
        """A client for the cluster this pod runs in, as its service account (:mod:`provider.kube.credentials`)."""
        try:
            identity = credentials.in_cluster(service_account_dir)
        except ConfigError as exc:
            raise PolicyError(exc.message) from exc
        return cls.for_identity(identity, **options)

    @classmethod
    def for_identity(cls, identity: credentials.Identity, **options: Any) -> Self:
        """A client that makes its requests as ``identity`` (its cluster's default namespace for namespaced kinds)."""
        return cls(
            api_client(identity.configuration), source=identity.source, default_namespace=identity.namespace, **options
        )

    def close(self) -> None:
        self._client.close()
        self._client.rest_client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- HTTP --

    def request(
        self,
        method: str,
        path: str,
        *,
        timeout: float,
        what: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        limits: Limits | None = None,
    ) -> tuple[int, Any]:
        """One request outside a dry-run (a list page, a PolicyReport write) and its answer: (status, parsed body).

        The same client, connection pool and whole-exchange deadline as the
        dry-runs (``timeout`` seconds for this one); a write names its own
        ``query`` (``fieldManager``). Used by :mod:`provider.kube.lister` and
        :mod:`provider.audit.reports`. ``limits`` replaces the client's for
        this answer (a list page holds many objects).
        """
        if method != "GET" and query is None:
            raise ValueError("a write outside a dry-run must pass its query (fieldManager)")
        try:
            response = self.exchange(
                method, path, Deadline.after(timeout), body=body, what=what, query=query, limits=limits
            )
        except TransientError as exc:
            exc.reason = "transient-error"  # not a dry-run: the cluster could not be asked
            raise
        return response.status, response.body

    def open_stream(
        self, path: str, *, query: list[tuple[str, str]], connect_timeout: float, read_timeout: float, what: str
    ) -> Any:
        """A GET whose answer is read as it comes (a watch): the urllib3 response, its body not read yet.

        The same client, credentials and connection pool as :meth:`request`,
        but no whole-exchange deadline -- a watch lasts minutes: connecting is
        bounded by ``connect_timeout`` and each receive by ``read_timeout`` (a
        stream silent for longer is taken for dead). The caller reads it
        (:mod:`provider.kube.watcher`) and must close it. A failure to connect is
        a :class:`TransientError`.
        """
        import urllib3
        from kubernetes.client.exceptions import ApiException

        params = self._client.param_serialize(
            "GET", path, query_params=query, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
        )
        try:
            return self._client.call_api(*params, _request_timeout=(connect_timeout, read_timeout)).response
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransientError(
                f"{self.source} could not be reached ({what}): {_why(exc)}", reason="transient-error"
            ) from exc

    def get_within(self, path: str, deadline: float, max_bytes: int, *, late: str) -> Response:
        """``GET path`` by ``deadline`` (a :func:`time.monotonic` instant), reading at most ``max_bytes`` of the answer.

        For one named object a check reads under the request's deadline (a signature ConfigMap, a key
        Secret): ``late`` is the :class:`TransientError` when no time is left to ask at all.
        """
        seconds = deadline - time.monotonic()
        if seconds <= 0:
            raise TransientError(late, reason="transient-error")
        limits = replace(self.limits, max_api_response_bytes=min(self.limits.max_api_response_bytes, max_bytes))
        return self.exchange("GET", path, Deadline.after(seconds), what=f"GET {path}", limits=limits)

    def exchange(
        self,
        method: str,
        path: str,
        deadline: Deadline,
        *,
        body: Any = None,
        what: str,
        query: Sequence[tuple[str, str]] | None = None,
        limits: Limits | None = None,
    ) -> Response:
        """One request and its whole answer (JSON parsed, else text) by ``deadline``, or a :class:`TransientError`.

        A method other than GET must name its ``query``: ``dryRun=All`` for a dry-run
        (:data:`provider.kube.dryrun.DRY_RUN_QUERY`), the ``fieldManager`` for a write --
        a POST that forgot it is refused here, never sent as a write. ``limits``
        replaces the client's for this answer (its byte bound and JSON limits).
        An answer over the byte bound is :class:`ResponseTooLarge`; one complete
        only after the deadline is never returned.
        """
        import urllib3
        from kubernetes.client.exceptions import ApiException

        if method != "GET" and query is None:
            raise ValueError(f"{method} {path}: a request that is not a GET must name its query (dryRun, fieldManager)")
        timeout = _remaining(deadline, what)
        try:
            # The client adds its own credentials here (Configuration.auth_settings(),
            # whose refresh hook rereads a rotated token): provider/kube/credentials.py.
            params = self._client.param_serialize(
                method,
                path,
                query_params=list(query or ()),
                header_params={"Accept": "application/json", "Content-Type": "application/json"},
                body=body,
                auth_settings=list(credentials.AUTH_SETTINGS),
            )
        except Exception as exc:  # the refresh hook: a token file gone or empty, a failing exec plugin
            raise _failed(f"{self.source}: the credentials could not be refreshed ({type(exc).__name__})") from exc
        limits = limits or self.limits
        limit = limits.max_api_response_bytes
        _EXCHANGE.deadline = deadline
        try:
            # _request_timeout is urllib3's per-operation bound; the connection
            # classes of _bound_by_deadlines make it one bound for the exchange.
            raw = self._client.call_api(*params, _request_timeout=timeout).response
            complete = False
            try:
                data = raw.read(limit + 1)
                content_type = raw.headers.get("content-type", "")
                complete = len(data) <= limit
            finally:
                if not complete:
                    raw.close()  # an answer not read to its end leaves nothing reusable on the connection
                raw.release_conn()
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            # NewConnectionError (refused, unreachable) subclasses urllib3's
            # TimeoutError for backwards compatibility; it is no timeout.
            timed_out = isinstance(exc, (urllib3.exceptions.TimeoutError, TimeoutError)) and not isinstance(
                exc, urllib3.exceptions.NewConnectionError
            )
            if timed_out or deadline.left() <= 0:
                raise self._late(what, deadline) from exc
            raise _failed(f"{self.source} could not be reached ({what}): {_why(exc)}") from exc
        finally:
            _EXCHANGE.deadline = None
        if len(data) > limit:
            raise ResponseTooLarge(
                f"{self.source} answered {what} with more than {limit} bytes", reason="dry-run-failed"
            )
        if "json" not in content_type:
            response = Response(raw.status, data.decode("utf-8", "replace"))
        else:
            try:
                response = Response(raw.status, load_json(data, limits=limits, what=f"the answer to {what}"))
            except DataError as exc:
                raise _failed(f"{self.source}: {exc.message}") from exc
        # The socket waits end by the deadline, but the last one may return at
        # it, and parsing a large answer takes time on a loaded host: an answer
        # in hand only after the deadline is not used.
        if deadline.left() <= 0:
            raise self._late(what, deadline, complete=True)
        return response

    def _late(self, what: str, deadline: Deadline, *, complete: bool = False) -> TransientError:
        # One wording for every late answer, whether it was cut off or arrived whole too late.
        detail = (
            "its answer was complete only after the deadline and is not used"
            if complete
            else "the answer was not complete by then"
        )
        return _failed(
            f"{self.source} did not answer within {deadline.seconds:g} s, the dry-run deadline ({what}: {detail})"
        )

    # -- discovery --

    def _discover(self, group: str, version: str, deadline: Deadline) -> _Discovered:
        path = f"/api/{version}" if not group else f"/apis/{group}/{version}"
        response = self.exchange("GET", path, deadline, what=f"discovery GET {path}")
        now = self._clock()
        if response.status == 404:
            return _Discovered({}, now, served=False)
        if response.status != 200 or not isinstance(response.body, dict):
            raise _failed(transport_message(response, f"discovery GET {path}", self.source))
        kinds: dict[str, Resource] = {}
        for item in response.body.get("resources") or []:
            if not isinstance(item, dict):
                continue
            name, kind, verbs = item.get("name"), item.get("kind"), item.get("verbs")
            if not isinstance(name, str) or "/" in name or not isinstance(kind, str) or kind in kinds:
                continue  # subresources (pods/status) share their parent's kind
            verb_list = tuple(v for v in verbs if isinstance(v, str)) if isinstance(verbs, list) else ()
            singular, short = item.get("singularName"), item.get("shortNames")
            kinds[kind] = Resource(
                group,
                version,
                kind,
                name,
                item.get("namespaced") is True,
                verb_list,
                singular if isinstance(singular, str) else "",
                tuple(n for n in short if isinstance(n, str)) if isinstance(short, list) else (),
            )
        return _Discovered(kinds, now, served=True)

    def served(self, group: str, version: str, *, timeout: float | None = None) -> tuple[Resource, ...]:
        """Every resource one group/version serves (subresources aside), from the same cache as :meth:`resource_for`."""
        key = (group, version)
        with self._lock:
            entry = self._discovery.get(key)
        if entry is None or self._clock() - entry.fetched >= self.discovery_ttl:
            entry = self._discover(group, version, Deadline.after(timeout or self.timeout))
            with self._lock:
                self._discovery[key] = entry
        return tuple(entry.kinds.values())

    def group_versions(self, *, timeout: float | None = None) -> tuple[tuple[str, str], ...]:
        """(group, preferred version) of every API group, the core group first, in the server's order.

        ``GET /api`` and ``GET /apis``, cached like the group/version
        documents: the order is kubectl's priority when a name is served by
        more than one group (``events``: the core group's).
        """
        with self._lock:
            cached = self._groups
        if cached is not None and self._clock() - cached[0] < self.discovery_ttl:
            return cached[1]
        deadline = Deadline.after(timeout or self.timeout)
        found: list[tuple[str, str]] = []
        core = self.exchange("GET", "/api", deadline, what="discovery GET /api")
        if core.status != 200 or not isinstance(core.body, dict):
            raise _failed(transport_message(core, "discovery GET /api", self.source))
        found += [("", v) for v in (core.body.get("versions") or [])[:1] if isinstance(v, str)]
        groups = self.exchange("GET", "/apis", deadline, what="discovery GET /apis")
        if groups.status != 200 or not isinstance(groups.body, dict):
            raise _failed(transport_message(groups, "discovery GET /apis", self.source))
        for entry in groups.body.get("groups") or []:
            preferred = entry.get("preferredVersion") if isinstance(entry, dict) else None
            name = entry.get("name") if isinstance(entry, dict) else None
            version = preferred.get("version") if isinstance(preferred, dict) else None
            if isinstance(name, str) and isinstance(version, str):
                found.append((name, version))
        result = tuple(found)
        with self._lock:
            self._groups = (self._clock(), result)
        return result

    def resource_for(self, api_version: Any, kind: Any, deadline: Deadline | None = None) -> Resource:
        """The resource serving ``kind`` in ``api_version``, from (cached) discovery."""
        deadline = deadline or Deadline.after(self.timeout)
        group, version = split_api_version(api_version)
        if not version or not isinstance(kind, str) or not kind:
            raise VerificationFailure(
                f"the signed manifest has no usable apiVersion/kind ({str(api_version)[:60]!r}, {str(kind)[:60]!r})",
                reason="dry-run-failed",
            )
        key = (group, version)
        with self._lock:
            entry = self._discovery.get(key)
        now = self._clock()
        stale = entry is None or now - entry.fetched >= self.discovery_ttl
        missing = entry is not None and kind not in entry.kinds and now - entry.fetched >= MISS_REFETCH_SECONDS
        if stale or missing:
            entry = self._discover(group, version, deadline)
            with self._lock:
                self._discovery[key] = entry
        assert entry is not None
        resource = entry.kinds.get(kind)
        if resource is None:
            what = api_version if entry.served else f"{api_version} at all"
            raise VerificationFailure(
                f"the API server does not serve kind {kind} in {what} (discovery), so the signed manifest cannot be "
                "dry-run",
                reason="dry-run-failed",
            )
        return resource

    def forget(self, api_version: Any) -> None:
        """Drop a cached discovery document (it named a resource the server no longer has)."""
        with self._lock:
            self._discovery.pop(split_api_version(api_version), None)


def api_client(configuration: Any) -> Any:
    """A kubernetes ``ApiClient`` for ``configuration`` (a ``kubernetes.client.Configuration``), without retries."""
    from kubernetes import client

    # No urllib3 retries: a retry would run past the deadline, and a
    # request that fails is answered (and retried) by the admission chain.
    configuration.retries = False
    return client.ApiClient(configuration)


def _why(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    text = str(reason if isinstance(reason, BaseException) else exc) or type(exc).__name__
    return text[:300]


def transport_message(response: Response, what: str, source: str) -> str:
    status, reason = response.status, response.status_field("reason")
    if status == 401:
        return f"{source} refused the credentials for {what} (401 Unauthorized): {response.message}"
    if status == 429 or status >= 500:
        return f"{source} failed {what} ({status} {reason or 'error'}): {response.message}"
    return f"{what} failed with HTTP {status}{' ' + reason if reason else ''}: {response.message}"
