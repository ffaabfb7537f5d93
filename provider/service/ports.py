"""Listening sockets, bound by the launcher before gunicorn starts, so a port that is taken is one line and exit 2.

gunicorn binds its addresses itself and, when one is taken, retries five
times a second apart, logs ``Can't connect to ...`` and exits 1 -- after the
server has printed that it is starting, and with the exit code of a failure
rather than of a configuration error (docs/cli.md: 2). The launcher therefore
binds the API port and the metrics port itself, reports a taken port as a
:class:`~provider.errors.ConfigError`, and hands the API's socket to gunicorn
as ``fd://N`` (which gunicorn adopts as systemd's sockets), so nothing can
take the port in between.
"""

from __future__ import annotations

import contextlib
import os
import socket

#: Connections the kernel queues for the API port before a worker accepts them (gunicorn's ``backlog`` default).
API_BACKLOG = 2048
#: The metrics port's queue: Prometheus keeps one scrape per target in flight.
METRICS_BACKLOG = 16


def listen(bind: str, port: int, backlog: int = METRICS_BACKLOG) -> socket.socket:
    """A listening socket on ``bind`` (a host: IPv4, IPv6 or a name) and ``port``, or an inherited ``fd://N``.

    Raises :class:`OSError` when the address cannot be bound (the port is taken, the host is not this
    machine's, the name does not resolve).
    """
    if bind.startswith("fd://"):
        listener = socket.socket(fileno=int(bind[len("fd://") :]))
        listener.setblocking(True)
        return listener
    host = bind.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As gunicorn binds: a port in TIME_WAIT from the last run is free, one that listens is not.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(backlog)
    except OSError:
        with contextlib.suppress(OSError):
            listener.close()
        raise
    return listener


def host_of(bind: str) -> str:
    """The host an API bind listens on: itself, an inherited socket's address, or 127.0.0.1 beside a unix socket."""
    if bind.startswith("unix:"):
        return "127.0.0.1"
    if bind.startswith("fd://"):
        with socket.socket(fileno=os.dup(int(bind[len("fd://") :]))) as sock:
            name = sock.getsockname()
        return str(name[0]) if isinstance(name, tuple) else "127.0.0.1"
    return bind.strip("[]")


def why(exc: OSError) -> str:
    """``Address already in use``, not ``[Errno 98] Address already in use``."""
    return exc.strerror or str(exc)
