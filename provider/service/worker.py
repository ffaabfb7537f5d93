"""gunicorn's gthread worker, with no thread spent on a connection until its request head is complete.

The cause of the stall this fixes (gunicorn 23-27, ``gunicorn/workers/gthread.py``):
gthread hands every accepted connection to a pool thread, which waits up to
5 s for a first byte, then performs the TLS handshake and reads the request
head with blocking calls and no timeout. Anyone who completes a handshake and
then sends nothing -- no client certificate needed -- holds that thread for as
long as the connection stays open; ``workers x threads`` such connections
(16 with the shipped 2 x 8) stop every authenticated request, and with
``failurePolicy: Fail`` every write in the cluster.

:class:`GuardedThreadWorker` keeps gunicorn's event loop, thread pool,
keep-alive and shutdown, and changes where a connection waits:

1. **Until its head is complete, a connection lives in the event loop.** The
   accept callback wraps the socket for TLS without a handshake; the loop then
   drives the handshake and reads the request head without blocking
   (:meth:`GuardedThreadWorker._advance`). A pool thread is given the
   connection only with the whole head in hand, handed to gunicorn's parser, so
   idle, slow or half-open connections cost a file descriptor, never a thread.
2. **A deadline for the head, handshake included**: ``head_timeout`` seconds
   from the accept (or from the first byte of a kept-alive connection's next
   request); past it the connection is closed. A head larger than
   :data:`MAX_HEAD_BYTES` is answered 431 and closed, and so is one that
   gunicorn's parser refuses by its own limits (:func:`too_large`).
3. **Deadlines for the rest of the exchange**: the request body must arrive
   within ``body_timeout`` seconds of the head (the service's request
   deadline: past it the answer is a deadline error anyway) and the answer
   must be written within :data:`WRITE_SECONDS`, through
   :class:`~provider.deadlines.DeadlineSSLSocket`; a trickling client is cut
   off, never waited for.
4. **Room for callers who proved who they are**: when the worker holds
   ``worker_connections`` connections, the oldest one that has no verified
   client certificate and is not being served is closed to make room (the
   event loop would otherwise stop accepting, and Gatekeeper's next
   connection would wait in the kernel's backlog).
5. **Refused callers are not kept**: an answer the app marks with
   :data:`provider.service.body.CLOSE_CONNECTION` (401/403/503, an unreadable body)
   closes the connection.
6. **Closing never blocks the loop or a thread.** gunicorn closes "gracefully"
   (half-close, then read until the peer closes, up to 2 s) in the event loop
   itself, so a client that never closes its side stalls every connection of
   the worker for 2 s at a time. Here the half-closed socket waits in the loop
   like any other (:data:`LINGER_SECONDS`, :data:`LINGER_BYTES`), so the
   answer is not lost to a reset and nobody waits for the stranger.

7. **Housekeeping once a second, not once a loop.** gthread's loop turns once per
   batch of events -- several times per request under load -- and each turn
   touched the heartbeat file, asked for the parent's pid and (through the TLS
   context hook) stat'ed the three certificate files: about ten system calls per
   request for facts that change on the scale of seconds. Here the heartbeat,
   the parent check, the idle look at the certificate files and the flush of
   the metrics tally (:data:`provider.service.metrics.TALLY`) run at most every
   :data:`HOUSEKEEPING_SECONDS`. A new connection still looks at the files
   itself, so it is served the current certificate; deadlines of waiting and
   closing connections are still checked every turn.

Each closed-before-a-request connection is counted in
``manifest_provider_connections_closed_total{reason}``; refused handshakes are
logged at WARNING, repeated ones rate-limited by the log filter.
HTTP/2 is never negotiated (the TLS context offers no ALPN). The class extends
gthread's internals (``TConn``, ``enqueue_req``, ``keepalived_conns``,
``_keepalive_after``, the parser's ``take_buffered``), so setup.cfg pins gunicorn's
major version; ``tests/unit/service/test_serve.py`` checks they are there.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import selectors
import socket
import ssl
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from gunicorn import http, util
from gunicorn import sock as gunicorn_sock
from gunicorn.workers.gthread import TConn, ThreadWorker

from ..deadlines import DeadlineSocket, DeadlineSSLSocket

log = logging.getLogger("provider.serve")

#: Largest request head read before handing over (gunicorn's own limits are
#: 4094 bytes for the request line and 100 fields of 8190: far above any engine's
#: request; Gatekeeper's and Kyverno's heads are a few hundred bytes).
MAX_HEAD_BYTES = 64 * 1024
#: Seconds an answer may take to be written (a client that does not read it is cut off).
WRITE_SECONDS = 10.0
#: Bytes read from a socket at a time while waiting for a head.
READ_SIZE = 16 * 1024
#: After the answer, how long and how much a closing connection's unread input is
#: drained so the kernel does not reset it under the answer (gunicorn's
#: ``close_graceful`` uses the same 2 s and 64 KiB).
LINGER_SECONDS = 2.0
LINGER_BYTES = 64 * 1024
#: Seconds between two rounds of housekeeping (heartbeat, parent check, certificate files,
#: metrics flush). gunicorn replaces a worker silent for its ``timeout`` (30 s): far above.
HOUSEKEEPING_SECONDS = 1.0
#: Phases of a connection the event loop holds.
HANDSHAKE, HEAD, CLOSING = "handshake", "head", "closing"


def too_large(cfg: Any) -> bytes:
    """What a head that is too large gets (RFC 6585 section 5), before the connection closes.

    The same answer whichever limit trips: ours (:data:`MAX_HEAD_BYTES`, checked in the event
    loop) or one of gunicorn's, which its parser applies to a head under ours -- a request line
    over ``limit_request_line`` (gunicorn answers 414 with an HTML page of its own), more than
    ``limit_request_fields`` header fields or one over ``limit_request_field_size`` (431, its
    own page again). The message states all four, so a caller learns what to shorten.
    """
    text = (
        f"request head is too large: at most {MAX_HEAD_BYTES} bytes, a request line of at most "
        f"{cfg.limit_request_line} bytes, and at most {cfg.limit_request_fields} header fields of at most "
        f"{cfg.limit_request_field_size} bytes each"
    ).encode()
    return (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Type: text/plain\r\n"
        + f"Content-Length: {len(text)}\r\n\r\n".encode()
        + text
    )


class GuardedConn(TConn):  # type: ignore[misc]
    """A gthread connection, plus what the event loop needs while it waits for a head."""

    def __init__(self, cfg: Any, sock: socket.socket, client: Any, server: Any) -> None:
        super().__init__(cfg, sock, client, server)
        self.phase = HANDSHAKE
        self.head = bytearray()
        self.deadline = 0.0
        #: The TLS layer verified a client certificate (``CERT_OPTIONAL`` lets
        #: connections without one through): such a connection is never evicted.
        self.verified = False
        self.events = 0  # selector events registered for it (0: none)
        self.drained = 0  # bytes discarded while closing


def _head_complete(head: bytearray) -> bool:
    return head.find(b"\r\n\r\n") >= 0


class GuardedThreadWorker(ThreadWorker):  # type: ignore[misc]
    """The gthread worker with the changes described in the module docstring."""

    #: Set by :func:`worker_class` from the service's configuration.
    head_timeout = 5.0
    body_timeout = 2.5

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waiting: dict[GuardedConn, None] = {}  # handshake/head phase, oldest first
        self.closing: dict[GuardedConn, None] = {}  # half-closed after their answer
        self._closed: Callable[[str], None] = lambda _reason: None
        self._flush: Callable[[], None] = lambda: None
        self._housekept = -HOUSEKEEPING_SECONDS  # monotonic time of the last housekeeping
        self._notified = -HOUSEKEEPING_SECONDS
        self._parent_checked = -HOUSEKEEPING_SECONDS
        self._parent_alive = True

    # --- start-up -----------------------------------------------------------------

    def init_process(self) -> None:
        from . import metrics  # after the launcher set PROMETHEUS_MULTIPROC_DIR

        self._closed = lambda reason: metrics.CONNECTIONS_CLOSED.labels(reason).inc()
        self._flush = metrics.TALLY.flush
        super().init_process()

    def run(self) -> None:
        try:
            super().run()
        finally:
            self._flush()  # a stopping worker's last counts reach the metrics files

    # --- housekeeping, at most once a second ------------------------------------------

    def notify(self) -> None:
        """gunicorn's heartbeat (a ``utime`` of the worker's file), at most every :data:`HOUSEKEEPING_SECONDS`."""
        now = time.monotonic()
        if now - self._notified >= HOUSEKEEPING_SECONDS:
            self._notified = now
            super().notify()

    def is_parent_alive(self) -> bool:
        now = time.monotonic()
        if now - self._parent_checked >= HOUSEKEEPING_SECONDS:
            self._parent_checked = now
            self._parent_alive = bool(super().is_parent_alive())
        return self._parent_alive

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if now - self._housekept < HOUSEKEEPING_SECONDS:
            return
        self._housekept = now
        if self.cfg.is_ssl:
            # Idle or not, look at the certificate files: a worker that got no connection during a
            # rotation still follows it, so a later unusable write leaves every worker on the last
            # good files, not some on older ones.
            gunicorn_sock.ssl_context(self.cfg)
        self._flush()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        from .body import CLOSE_CONNECTION

        app: Callable[..., Iterable[bytes]] = getattr(self, "wsgi")  # noqa: B009 - set by gunicorn, untyped

        def guarded(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            result = app(environ, start_response)
            # The answer is ready: writing it gets its own budget.
            sock = environ.get("gunicorn.socket")
            if isinstance(sock, (DeadlineSSLSocket, DeadlineSocket)):
                sock.set_deadline(time.monotonic() + WRITE_SECONDS)
            if environ.get(CLOSE_CONNECTION):
                response = getattr(start_response, "__self__", None)
                if response is not None and hasattr(response, "force_close"):
                    response.force_close()
            return result

        self.wsgi = guarded

    # --- the event loop: accept, handshake, head ------------------------------------

    def accept(self, listener: socket.socket) -> None:
        try:
            client, address = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        client.setblocking(False)
        if self.cfg.is_ssl:
            # Each new connection gets the certificate files as they are now (three stat calls:
            # small beside a handshake), so a rotation is served from the next connection on.
            context = gunicorn_sock.ssl_context(self.cfg)
            wrapped: socket.socket = context.wrap_socket(
                client,
                server_side=True,
                do_handshake_on_connect=False,
                suppress_ragged_eofs=self.cfg.suppress_ragged_eofs,
            )
        else:
            wrapped = DeadlineSocket.adopt(client)
            wrapped.setblocking(False)
        conn = GuardedConn(self.cfg, wrapped, address, listener.getsockname())
        conn.phase = HANDSHAKE if self.cfg.is_ssl else HEAD
        conn.deadline = time.monotonic() + self.head_timeout
        self.waiting[conn] = None
        if self.nr_conns >= self.worker_connections:
            self._evict_one()
        if conn in self.waiting:  # not the one evicted
            self._advance(conn)

    def _watch(self, conn: GuardedConn, events: int) -> None:
        if conn.events == events:
            return
        if conn.events:
            self.poller.modify(conn.sock, events, partial(self._ready, conn))
        else:
            self.poller.register(conn.sock, events, partial(self._ready, conn))
        conn.events = events

    def _unwatch(self, conn: GuardedConn) -> None:
        if conn.events:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self.poller.unregister(conn.sock)
            conn.events = 0

    def _ready(self, conn: GuardedConn, _fileobj: Any) -> None:
        if conn.phase == CLOSING:
            self._drain(conn)
        else:
            self._advance(conn)

    def _drop(self, conn: GuardedConn, reason: str | None) -> None:
        """Close a connection the event loop holds (``reason``: counted as closed before a request)."""
        self._unwatch(conn)
        self.waiting.pop(conn, None)
        self.closing.pop(conn, None)
        self.nr_conns -= 1
        util.close(conn.sock)
        if reason is not None:
            self._closed(reason)

    def _advance(self, conn: GuardedConn) -> None:
        """Drive the handshake and the head read as far as the socket allows, without blocking."""
        try:
            if conn.phase == HANDSHAKE:
                conn.sock.do_handshake()
                conn.phase = HEAD
                # The DER, not the decoded dict: a certificate is there only if the TLS layer verified it.
                conn.verified = conn.sock.getpeercert(binary_form=True) is not None
            while not _head_complete(conn.head):
                data = conn.sock.recv(READ_SIZE)
                if not data:
                    self._drop(conn, None)  # the client went away
                    return
                conn.head += data
                if not conn.head.strip(b"\r\n"):
                    conn.head.clear()  # empty lines before a request line are ignored (RFC 9112 section 2.2)
                elif len(conn.head) > MAX_HEAD_BYTES:
                    self._refuse_head(conn)
                    return
        except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
            self._watch(conn, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._watch(conn, selectors.EVENT_WRITE)
            return
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionResetError, BrokenPipeError):
            self._drop(conn, None)  # the peer left (a TCP health check, a scanner): nothing to report
            return
        except (ssl.SSLError, OSError) as exc:
            if conn.phase == HANDSHAKE:
                # No detail from the exception: it can quote what the peer sent.
                log.warning("TLS handshake refused", extra={"reason": "handshake-failed", "error": type(exc).__name__,
                                                            "detail": getattr(exc, "reason", None) or ""})  # fmt: skip
                self._drop(conn, "handshake-failed")
            else:
                self._drop(conn, None)
            return
        self._dispatch(conn)

    def _refuse_head(self, conn: GuardedConn) -> None:
        with contextlib.suppress(OSError):
            conn.sock.send(too_large(self.cfg))
        self._drop(conn, "head-too-large")

    def _dispatch(self, conn: GuardedConn) -> None:
        """The head is complete: hand the connection to a pool thread, with the head already read."""
        self._unwatch(conn)
        self.waiting.pop(conn, None)
        if conn.parser is None:
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.initialized = True
        conn.parser.unreader.unread(bytes(conn.head))
        conn.head.clear()
        self.enqueue_req(conn)

    def _evict_one(self) -> None:
        """Make room: a connection already answered and closing, else the oldest stranger's that is not being served."""
        for conn in self.closing:
            self._drop(conn, None)
            return
        for conn in self.waiting:
            if not conn.verified:
                self._drop(conn, "evicted")
                return
        for conn in self.keepalived_conns:
            if not conn.verified:
                self.keepalived_conns.remove(conn)
                self._drop_kept(conn)
                self._closed("evicted")
                return

    def _drop_kept(self, conn: GuardedConn) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(conn.sock)
        self.nr_conns -= 1
        conn.close()

    def murder_pending(self) -> None:
        super().murder_pending()
        self._housekeeping()
        now = time.monotonic()
        for conn in [c for c in self.waiting if c.deadline <= now]:
            self._drop(conn, "head-timeout")
        for conn in [c for c in self.closing if c.deadline <= now]:
            self._drop(conn, None)

    # --- closing after an answer --------------------------------------------------

    def _linger(self, conn: GuardedConn) -> None:
        """Half-close after the answer and drain what the client still sends, in the loop."""
        sock = conn.sock
        try:
            if hasattr(sock, "set_deadline"):
                sock.set_deadline(None)
            sock.setblocking(False)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            self.nr_conns -= 1
            util.close(sock)
            return
        conn.phase = CLOSING
        conn.deadline = time.monotonic() + LINGER_SECONDS
        self.closing[conn] = None
        self._drain(conn)

    def _drain(self, conn: GuardedConn) -> None:
        try:
            while conn.drained < LINGER_BYTES:
                data = conn.sock.recv(READ_SIZE)
                if not data:
                    break
                conn.drained += len(data)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
            self._watch(conn, selectors.EVENT_READ)
            return
        except OSError:
            pass
        self._drop(conn, None)

    # --- kept-alive connections ---------------------------------------------------

    def on_client_socket_readable(self, conn: GuardedConn, client: Any) -> None:
        """A kept-alive connection's next request begins: back to the head phase, not to a thread."""
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        conn.events = 0
        conn.phase = HEAD
        conn.deadline = time.monotonic() + self.head_timeout
        self.waiting[conn] = None
        self._advance(conn)

    def finish_request(self, conn: GuardedConn, fs: Any) -> None:
        try:
            keep = fs.result() if not fs.cancelled() else False
        except Exception:  # a failed handler closes its connection
            keep = False
        if not keep:
            self._linger(conn)
            return
        if not self.alive:  # a stopping worker: gunicorn keeps the connection briefly, then closes it
            super().finish_request(conn, fs)
            return
        if hasattr(conn.sock, "set_deadline"):
            conn.sock.set_deadline(None)
        conn.sock.setblocking(False)
        pipelined = conn.parser.unreader.take_buffered()
        if pipelined:
            # The client sent its next request already: read the rest of its head in the loop.
            conn.head += pipelined
            conn.phase = HEAD
            conn.deadline = time.monotonic() + self.head_timeout
            self.waiting[conn] = None
            self._advance(conn)
            return
        conn.set_timeout()
        self.keepalived_conns.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_client_socket_readable, conn))

    # --- a pool thread: one request whose head is in hand --------------------------

    def handle(self, conn: GuardedConn) -> bool:
        request = None
        sock = conn.sock
        try:
            sock.setblocking(True)
            if hasattr(sock, "set_deadline"):
                sock.set_deadline(time.monotonic() + self.body_timeout)
            request = next(conn.parser)
            if not request:
                return False
            return bool(self._keepalive_after(conn, self.handle_request(request, conn)))
        except (http.errors.NoMoreData, StopIteration, TimeoutError):
            pass  # the client went away, the parser stopped, or a deadline passed: close
        except (http.errors.LimitRequestLine, http.errors.LimitRequestHeaders):
            # gunicorn's own head limits tripped before ours could: our answer, not its HTML page.
            with contextlib.suppress(OSError):
                sock.sendall(too_large(self.cfg))
            self._closed("head-too-large")
        except ssl.SSLError as exc:
            if exc.args[0] != ssl.SSL_ERROR_EOF:
                self.handle_error(request, sock, conn.client, exc)
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                self.log.exception("Socket error processing request.")
        except Exception as exc:  # gunicorn answers parse errors with 400 and logs the rest
            self.handle_error(request, sock, conn.client, exc)
        return False


def worker_class(head_timeout: float, body_timeout: float) -> type[GuardedThreadWorker]:
    """The worker class with the service's deadlines (gunicorn accepts a class for ``worker_class``)."""
    return type("ProviderWorker", (GuardedThreadWorker,), {"head_timeout": head_timeout, "body_timeout": body_timeout})
