"""Sockets whose reads and writes end by one absolute deadline.

A socket timeout bounds each ``recv``/``send`` call, not an exchange: a peer
that sends one byte just inside every timeout keeps a reader busy for as long
as it likes (urllib3's ``read`` timeout and gunicorn's body reads both behave
so). The classes here carry a deadline (``time.monotonic()`` seconds) and,
before every blocking call, set the socket's timeout to what is left of it;
once it has passed, the call raises :class:`TimeoutError` without touching the
socket. A socket without a deadline behaves exactly like its base class (the
server's non-blocking handshake and head reads use that).

* :class:`DeadlineSocket` -- a plain TCP socket (``http://`` API servers in
  tests, ``--unsafe-http``);
* :class:`DeadlineSSLSocket` -- set as an :class:`ssl.SSLContext`'s
  ``sslsocket_class`` so every socket the context wraps is one. A single
  ``SSLSocket`` call already runs under one deadline inside CPython's ``_ssl``
  (the handshake's internal retries included), so arming each call suffices.

The one mechanism for every exchange with a deadline this project makes:

* the server's worker (:mod:`provider.service.worker`: request bodies and responses)
  arms the sockets it accepts;
* the TokenReview client (:mod:`provider.kube.tokenreview`) and the registry client
  (:mod:`provider.oci.registry`) open theirs with :func:`connect`;
* the API client (:mod:`provider.kube.client`) has urllib3 open them: its pool's
  connections connect with :func:`connect`, wrap TLS with a context whose
  ``sslsocket_class`` is :class:`DeadlineSSLSocket`, and carry the exchange's
  :class:`Deadline` on the socket.

:func:`connect` bounds the lookup of a host *name* too. ``getaddrinfo`` cannot be
interrupted, so a name is resolved in a thread of its own (at most
:data:`MAX_LOOKUPS` at once per process) that the caller stops waiting for at the
deadline: a resolver that never answers costs the caller its deadline and a slot
until the resolver gives up, never more. Callers asking for a name already being
looked up wait for that lookup: a name that never resolves (a registry whose DNS
is down, which every admission a bundle policy matches asks for) holds one slot,
and other names -- another registry, an API server named by host name -- keep the
rest. With every slot taken, a lookup fails at its deadline (closed). An IP
address is used as it is, without a thread.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Host-name lookups running at once in one process. A lookup the caller stopped waiting for
#: keeps its slot until ``getaddrinfo`` returns (the resolver's own timeout, seconds); lookups of
#: one name share one slot; with every slot taken, a further lookup fails at its deadline --
#: closed, never unbounded.
MAX_LOOKUPS = 8
_LOOKUP_SLOTS = threading.BoundedSemaphore(MAX_LOOKUPS)

AddressInfo = tuple[int, int, int, str, Any]


@dataclass(frozen=True)
class Deadline:
    """One exchange's deadline: ``end`` on the monotonic clock (socket timeouts are real seconds), and the
    ``seconds`` it was given, for messages."""

    end: float
    seconds: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds, seconds)

    def left(self) -> float:
        return self.end - time.monotonic()


class _Armed:
    """The mixin: ``deadline`` and the arming of every blocking call."""

    deadline: float | None = None

    def set_deadline(self, deadline: float | None) -> None:
        """Every later read or write must end by ``deadline`` (``None``: no deadline)."""
        self.deadline = deadline

    def arm(self) -> None:
        """Set the socket's timeout to what is left of the deadline (nothing without one).

        Every blocking call of these classes does it first; a caller arms by hand
        before a call the socket cannot see, such as a TLS handshake that
        ``SSLContext.wrap_socket`` starts on a wrapper that has no deadline yet.
        """
        if self.deadline is None:
            return
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the exchange's deadline passed")
        socket.socket.settimeout(self, left)  # type: ignore[arg-type]


class DeadlineSocket(_Armed, socket.socket):
    """A TCP socket with a deadline for the whole exchange."""

    @classmethod
    def adopt(cls, sock: socket.socket) -> DeadlineSocket:
        """This class around ``sock``'s file descriptor (``sock`` is detached)."""
        adopted = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        return adopted

    def connect(self, address: Any) -> None:
        self.arm()
        super().connect(address)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        self.arm()
        return super().recv(bufsize, flags)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self.arm()
        return super().recv_into(buffer, nbytes, flags)

    def send(self, data: Any, flags: int = 0) -> int:
        self.arm()
        return super().send(data, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        # For a plain socket, the timeout bounds sendall as a whole (Python >= 3.5).
        self.arm()
        super().sendall(data, flags)


class DeadlineSSLSocket(_Armed, ssl.SSLSocket):
    """An :class:`ssl.SSLSocket` with a deadline for the whole exchange (``SSLContext.sslsocket_class``)."""

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        self.arm()
        return super().recv(buflen, flags)

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        self.arm()
        return super().recv_into(buffer, nbytes, flags)

    def send(self, data: Any, flags: int = 0) -> int:
        self.arm()
        return super().send(data, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        # SSLSocket.sendall loops over send(), which arms itself each time.
        super().sendall(data, flags)

    def do_handshake(self, block: bool = False) -> None:
        self.arm()
        super().do_handshake(block)


class _Lookup:
    """One ``getaddrinfo`` in progress, which every caller asking for the same name and port waits for."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.found: Sequence[AddressInfo] = ()
        self.failed: BaseException | None = None


#: Lookups in progress by (host, port): a name that never resolves holds one slot, however many wait for it.
_IN_FLIGHT: dict[tuple[str, int], _Lookup] = {}
_IN_FLIGHT_LOCK = threading.Lock()


def resolve(host: str, port: int, deadline: float) -> Sequence[AddressInfo]:
    """The addresses of ``host`` (TCP), looked up by ``deadline`` or :class:`TimeoutError`.

    An IP address needs no lookup. A name is looked up in a daemon thread the
    caller waits for until the deadline (module docstring); a caller asking for a
    name already being looked up waits for that lookup rather than starting another,
    so a name that never resolves holds one slot, not all of them. A failure is
    the :class:`socket.gaierror` the lookup raised.
    """
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        pass  # a name, not an address
    key = (host, port)
    with _IN_FLIGHT_LOCK:
        lookup = _IN_FLIGHT.get(key)
    if lookup is None:
        left = deadline - time.monotonic()
        if left <= 0 or not _LOOKUP_SLOTS.acquire(timeout=left):
            raise TimeoutError(f"no time was left to look up {host[:80]!r}")
        with _IN_FLIGHT_LOCK:
            lookup = _IN_FLIGHT.get(key)
            started = lookup is None
            if started:
                lookup = _IN_FLIGHT[key] = _Lookup()
        if started:
            threading.Thread(target=_look_up, args=(key, lookup), name="deadline-lookup", daemon=True).start()
        else:
            _LOOKUP_SLOTS.release()  # another caller started it meanwhile
    assert lookup is not None
    if not lookup.done.wait(max(0.0, deadline - time.monotonic())):
        raise TimeoutError(f"looking up {host[:80]!r} did not finish by the deadline")
    failed = lookup.failed
    if isinstance(failed, OSError):
        raise type(failed)(*failed.args)  # each caller its own exception: a shared one collects tracebacks
    if failed is not None:
        raise failed
    return lookup.found


def _look_up(key: tuple[str, int], lookup: _Lookup) -> None:
    try:
        lookup.found = socket.getaddrinfo(key[0], key[1], type=socket.SOCK_STREAM)
    except BaseException as exc:  # handed to the callers still waiting
        lookup.failed = exc
    finally:
        with _IN_FLIGHT_LOCK:
            if _IN_FLIGHT.get(key) is lookup:
                del _IN_FLIGHT[key]
        _LOOKUP_SLOTS.release()
        lookup.done.set()


def open_connection(host: str, port: int, deadline: float) -> DeadlineSocket:
    """A TCP connection to ``host:port`` whose lookup, connect and every later read and write end by ``deadline``.

    The addresses are tried in the resolver's order, all within the one deadline.
    """
    error: OSError | None = None
    for family, kind, proto, _, address in resolve(host, port, deadline):
        sock = DeadlineSocket(family, kind, proto)
        try:
            sock.set_deadline(deadline)
            sock.connect(address)
        except OSError as exc:
            sock.close()
            error = exc
            if isinstance(exc, TimeoutError):
                break  # the deadline is spent: no time for the next address
            continue
        return sock
    raise error or OSError(f"{host[:80]!r} has no address")


def tls_for_deadlines(context: ssl.SSLContext) -> ssl.SSLContext:
    """``context``, its sockets made :class:`DeadlineSSLSocket`: what :func:`connect` and the API client wrap with."""
    context.sslsocket_class = DeadlineSSLSocket
    return context


def connect(
    host: str, port: int, deadline: float, *, context: ssl.SSLContext | None = None, server_name: str | None = None
) -> socket.socket:
    """A connection to ``host:port`` whose lookup, connect and every read and write end by ``deadline``.

    With ``context`` (whose ``sslsocket_class`` must be :class:`DeadlineSSLSocket`:
    :func:`tls_for_deadlines`), the TLS handshake runs under the same deadline,
    against ``server_name`` (default ``host``). A socket that fails half-way is
    closed, never leaked.
    """
    if context is not None and context.sslsocket_class is not DeadlineSSLSocket:
        raise TypeError("the TLS context must wrap DeadlineSSLSocket")
    raw = open_connection(host, port, deadline)
    if context is None:
        return raw
    try:
        tls = context.wrap_socket(raw, server_hostname=server_name or host, do_handshake_on_connect=False)
    except BaseException:
        raw.close()
        raise
    try:
        tls.set_deadline(deadline)  # type: ignore[attr-defined]
        tls.do_handshake()
    except BaseException:
        tls.close()
        raise
    return tls
