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

Used by the server's worker (:mod:`provider.service.worker`: request bodies and
responses), and through :func:`connect` by the TokenReview client
(:mod:`provider.kube.tokenreview`) and the registry client (:mod:`provider.oci.registry`).
"""

from __future__ import annotations

import socket
import ssl
import time
from typing import Any


class _Deadline:
    """The mixin: ``deadline`` and the arming of every blocking call."""

    deadline: float | None = None

    def set_deadline(self, deadline: float | None) -> None:
        """Every later read or write must end by ``deadline`` (``None``: no deadline)."""
        self.deadline = deadline

    def _arm(self) -> None:
        if self.deadline is None:
            return
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the exchange's deadline passed")
        socket.socket.settimeout(self, left)  # type: ignore[arg-type]


class DeadlineSocket(_Deadline, socket.socket):
    """A TCP socket with a deadline for the whole exchange."""

    @classmethod
    def adopt(cls, sock: socket.socket) -> DeadlineSocket:
        """This class around ``sock``'s file descriptor (``sock`` is detached)."""
        adopted = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        return adopted

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        self._arm()
        return super().recv(bufsize, flags)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self._arm()
        return super().recv_into(buffer, nbytes, flags)

    def send(self, data: Any, flags: int = 0) -> int:
        self._arm()
        return super().send(data, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        # For a plain socket, the timeout bounds sendall as a whole (Python >= 3.5).
        self._arm()
        super().sendall(data, flags)


class DeadlineSSLSocket(_Deadline, ssl.SSLSocket):
    """An :class:`ssl.SSLSocket` with a deadline for the whole exchange (``SSLContext.sslsocket_class``)."""

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        self._arm()
        return super().recv(buflen, flags)

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        self._arm()
        return super().recv_into(buffer, nbytes, flags)

    def send(self, data: Any, flags: int = 0) -> int:
        self._arm()
        return super().send(data, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        # SSLSocket.sendall loops over send(), which arms itself each time.
        super().sendall(data, flags)

    def do_handshake(self, block: bool = False) -> None:
        self._arm()
        super().do_handshake(block)


def connect(
    host: str, port: int, deadline: float, *, context: ssl.SSLContext | None = None, server_name: str | None = None
) -> socket.socket:
    """A connection to ``host:port`` whose every read and write ends by ``deadline``.

    With ``context`` (whose ``sslsocket_class`` must be :class:`DeadlineSSLSocket`),
    the TLS handshake runs under the same deadline, against ``server_name`` (default
    ``host``). A socket that fails half-way is closed, never leaked.
    """
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("no time left to connect")
    raw = DeadlineSocket.adopt(socket.create_connection((host, port), timeout=left))
    raw.set_deadline(deadline)
    if context is None:
        return raw
    if context.sslsocket_class is not DeadlineSSLSocket:
        raw.close()
        raise TypeError("the TLS context must wrap DeadlineSSLSocket")
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
