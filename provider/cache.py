"""A small, thread-safe, bounded LRU cache with an optional time-to-live.

The service keeps three of them per worker process, and no other state:
verdicts (keyed by the hash of the key Gatekeeper sent, so Gatekeeper audit's
repeated keys cost a hash and a lookup), compiled policies (keyed by the hash
of their canonical JSON) and accepted bearer tokens (keyed by the token's hash;
the token itself is never stored).

Keys are SHA-256 digests (:func:`digest`), never the caller's data: memory per
entry is bounded by the value, and a key cannot be recovered from a dump.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


def digest(*parts: str | bytes) -> bytes:
    """SHA-256 over length-prefixed parts, so ``("ab", "c")`` and ``("a", "bc")`` differ."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass") if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.digest()


class LRUCache(Generic[V]):
    """At most ``max_entries`` values, least recently used evicted first, each kept at most ``ttl`` seconds.

    ``max_entries=0`` keeps nothing (every lookup misses). ``ttl=None`` keeps
    entries until they are evicted; :meth:`put` may give an entry a shorter
    life of its own (a token that expires sooner).
    """

    def __init__(self, max_entries: int, ttl: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 0:
            raise ValueError("max_entries must be 0 or more")
        self.max_entries = max_entries
        self.ttl = ttl
        self._clock = clock
        self._entries: OrderedDict[bytes, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: bytes) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            expires, value = entry
            if expires <= self._clock():
                del self._entries[key]
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: bytes, value: V, ttl: float | None = None) -> None:
        if self.max_entries == 0:
            return
        lives = [t for t in (self.ttl, ttl) if t is not None]
        expires = self._clock() + min(lives) if lives else float("inf")
        with self._lock:
            self._entries[key] = (expires, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
