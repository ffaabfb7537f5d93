"""A name resolver that never answers in time: ``socket.getaddrinfo`` stuck on every host *name*.

A resolver that does not answer (a DNS server that drops the query, a hostile
zone delegated to one) makes ``getaddrinfo`` wait for the C library's own
timeout and retries -- seconds, out of any caller's reach. The stand-in waits
until the test releases it (or :data:`GIVE_UP_SECONDS`, so that a client that
waits for it fails its test instead of hanging it) and then fails as glibc does
(``EAI_AGAIN``). IP addresses (``AI_NUMERICHOST``) are answered at once by the
real function.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

#: How long the stand-in holds a lookup when nobody releases it: far past any deadline under test.
GIVE_UP_SECONDS = 20.0


class StuckResolver:
    """Install with ``monkeypatch.setattr(socket, "getaddrinfo", resolver)``; :meth:`release` at the end."""

    def __init__(self) -> None:
        self._real = socket.getaddrinfo
        self.asked: list[str] = []
        self._release = threading.Event()
        #: Set once a stuck lookup has returned (released, or given up).
        self.gave_up = threading.Event()

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        # getaddrinfo(host, port, family=0, type=0, proto=0, flags=0)
        options = dict(zip(("family", "type", "proto", "flags"), args, strict=False)) | kwargs
        flags = options.get("flags", 0)
        if flags & socket.AI_NUMERICHOST:
            return self._real(host, port, **options)
        try:
            return self._real(host, port, **(options | {"flags": flags | socket.AI_NUMERICHOST}))
        except socket.gaierror:
            pass  # a name: stuck
        self.asked.append(str(host))
        self._release.wait(GIVE_UP_SECONDS)
        self.gave_up.set()
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution (the stand-in resolver)")

    def release(self) -> None:
        """Let every stuck lookup fail now, and wait for them (no thread of the test outlives it)."""
        self._release.set()
        if self.asked:
            self.gave_up.wait(GIVE_UP_SECONDS)
