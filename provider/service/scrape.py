"""The metrics port: ``GET /metrics`` over plain HTTP, without credentials, for Prometheus.

The API port's ``/metrics`` needs a caller's credentials (``METRICS_CALLERS``),
which a cluster's Prometheus does not have when the API port asks for
Gatekeeper's client certificate. Gatekeeper and ratify serve their metrics on a
port of their own (8888); so does this service (``MANIFEST_PROVIDER_METRICS_PORT``,
``--metrics-port``; 0 or ``--no-metrics-port`` turns it off). The
NetworkPolicy (``manifests/base/networkpolicy.yaml``) decides who may reach it:
the counts it shows are no secret, but nothing else is served there.

What it serves, and nothing more:

* ``GET /metrics`` (any query string) -- 200, the text exposition of every
  worker's values (:func:`provider.service.metrics.exposition`);
* any other path -- 404; any other method -- 501 (:mod:`http.server`'s answer);
  one request per connection (HTTP/1.0).

It runs in the gunicorn master: the master handles no requests, so a scrape
never waits for a busy worker, and a worker never spends a thread on it. One
thread accepts; each connection gets a thread of its own, at most
:data:`MAX_CONNECTIONS` at once (past that a connection is closed at once), so
idle or trickling clients cannot queue a scrape behind them. Every exchange --
request head and answer -- must end within :data:`EXCHANGE_SECONDS`
(:class:`~provider.deadlines.DeadlineSocket`). The threads write nothing to the
log and take no lock a worker uses: gunicorn forks workers from the master while
it runs, and a lock held at a fork stays held in the child.
"""

from __future__ import annotations

import http.server
import socket
import threading
import time
import urllib.parse
from typing import Any

from ..deadlines import DeadlineSocket
from . import metrics
from .ports import listen

__all__ = ["EXCHANGE_SECONDS", "MAX_CONNECTIONS", "PATH", "MetricsServer", "listen"]

#: The path Prometheus scrapes by default.
PATH = "/metrics"
#: Seconds one connection may take, from accept to the last byte of the answer.
EXCHANGE_SECONDS = 5.0
#: Connections served at once; Prometheus keeps one scrape per target in flight.
MAX_CONNECTIONS = 8


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "manifest-provider"
    sys_version = ""
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        if urllib.parse.urlsplit(self.path).path != PATH:
            self._answer(404, b"not found\n", "text/plain; charset=utf-8")
            return
        # No flush: the master counts nothing itself, and its tally's lock is the workers' too.
        body, content_type = metrics.exposition(flush=False)
        self._answer(200, body, content_type)

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Nothing: the master's thread never writes to the log (see the module docstring)."""


class MetricsServer(http.server.ThreadingHTTPServer):
    """:class:`_Handler` on a bound, listening socket: a thread per connection, :data:`MAX_CONNECTIONS` at most."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, listener: socket.socket) -> None:
        super().__init__(listener.getsockname()[:2], _Handler, bind_and_activate=False)
        self.socket.close()
        self.socket = listener
        self._thread: threading.Thread | None = None
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # full: this one is closed, the ones in flight go on
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def get_request(self) -> tuple[socket.socket, Any]:
        client, address = self.socket.accept()
        guarded = DeadlineSocket.adopt(client)
        guarded.set_deadline(time.monotonic() + EXCHANGE_SECONDS)
        return guarded, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone, a deadline passed, a broken head: drop the connection, say nothing."""

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, name="metrics-port", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join(timeout=5)
        self.server_close()
