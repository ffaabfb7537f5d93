"""Following what a cluster holds as it changes: list, then watch, the way client-go's reflector does.

One :class:`KubeWatcher` follows one resource in one namespace (or all) under
one label selector, and tells a :class:`WatchHandler` what it sees:

1. **List** the objects page by page (:meth:`KubeLister.pages <provider.kube.lister.KubeLister.pages>`),
   handing over each page, then the set of objects that exist -- whatever the
   handler knew that is not in it was deleted meanwhile. The list's
   ``resourceVersion`` (its last page's) is where the watch starts.
2. **Watch** from there: ``GET <collection>?watch=1&resourceVersion=RV&allowWatchBookmarks=true&timeoutSeconds=T``.
   The API server answers 200 and streams one JSON event per line on a
   chunked body (k8s.io/apiserver ``pkg/endpoints/handlers/watch.go``
   ``HandleHTTP``): ``ADDED`` and ``MODIFIED`` hand the object over,
   ``DELETED`` says it is gone, ``BOOKMARK`` only moves the resourceVersion on
   (the watch cache sends one every minute, ``defaultBookmarkFrequency`` in
   ``pkg/storage/cacher/cacher.go``, and one before the watch's deadline), so a
   watch that resumes after a quiet hour does not start from a version the
   server has forgotten.
3. The server ends the watch after ``timeoutSeconds`` (five to six minutes
   here, jittered so that many watchers do not return at once): watch again
   from the last resourceVersion seen, without listing.
4. **Resume** from the last resourceVersion after a dropped connection, or a
   stream silent for :attr:`KubeWatcher.idle_seconds` (two bookmark periods:
   taken for a dead connection).
5. **410**: a resourceVersion older than the server's window is refused with
   an ``ERROR`` event holding a 410 ``Expired`` Status on a 200 stream (the
   watch cache: "once we have passed authn/authz/admission, and successfully
   parsed a resource version, other errors must fail with a watch event of
   type ERROR"), or with an HTTP 410: list again (step 1), at once.
6. Any other failure (refused, 5xx, 403, an ``ERROR`` event of another code, a
   watch that ended within a second having sent nothing -- the reflector's
   "very short watch") waits a bounded, jittered backoff before the next try
   (:class:`Backoff`, the reflector's figures) and resumes where it was.

Every event is bounded like every answer from the cluster: a line longer than
:attr:`Limits.max_api_response_bytes <provider.limits.Limits.max_api_response_bytes>`
or deeper than its node limit fails the watch (and it is tried again after the
backoff), never grows memory.

Why not the ``kubernetes`` client's ``watch.Watch``: it drives the generated
per-kind API functions (or a dynamic client with its own discovery), where the
observer names any kind as kubectl does through the lister's one discovery
cache; it retries an expired watch once with the same resourceVersion instead
of listing again; and it reads lines without a bound. This uses the same client
-- credentials, connection pool, TLS -- through
:meth:`KubeClient.open_stream <provider.kube.client.KubeClient.open_stream>`.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import DataError, ProviderError, TransientError
from ..parsing import load_json
from .client import Resource
from .lister import PAGE_LIMITS, KubeLister, _list_failure, _message, _with_identity, collection_path

#: Seconds a watch asks the server to last, before jitter (client-go's reflector asks for 5 to 10 minutes).
WATCH_SECONDS = 300.0
#: Seconds without a byte after which a watch is taken for dead and resumed: two bookmark periods.
IDLE_SECONDS = 120.0
#: Seconds to connect to the API server for a watch.
CONNECT_SECONDS = 30.0
#: A watch shorter than this that sent nothing failed (client-go's reflector: "very short watch").
SHORT_WATCH_SECONDS = 1.0
#: Bytes read from the stream at once.
_READ_BYTES = 64 * 1024


class WatchHandler(Protocol):
    """What a :class:`KubeWatcher` tells: called from its thread, in the order things happened."""

    def page(self, objects: list[dict[str, Any]]) -> None:
        """A page of a list (the first, or one after a 410)."""

    def listed(self, present: set[tuple[str, str]]) -> None:
        """The list is complete: these (namespace, name) exist; any other one known was deleted."""

    def changed(self, obj: dict[str, Any]) -> None:
        """An object was created or changed (``ADDED``, ``MODIFIED``)."""

    def deleted(self, obj: dict[str, Any]) -> None:
        """An object was deleted (or left the label selector): its last state."""

    def note(self, event: str, **fields: Any) -> None:
        """Something an operator may want in the log: ``relist``, ``watch-error``, ``resumed``."""


@dataclass
class Backoff:
    """A bounded exponential backoff with jitter: client-go's reflector's figures.

    ``wait.NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0)`` in
    k8s.io/client-go ``tools/cache/reflector.go``: 0.8 s doubling up to 30 s,
    each wait stretched by up to 100 % at random (so at most 60 s), and back to
    0.8 s once two minutes passed without a failure.
    """

    initial: float = 0.8
    cap: float = 30.0
    reset_after: float = 120.0
    factor: float = 2.0
    jitter: float = 1.0
    rng: Callable[[], float] = random.random
    clock: Callable[[], float] = time.monotonic
    _attempt: int = field(default=0, init=False)
    _last: float | None = field(default=None, init=False)

    def delay(self) -> float:
        """The wait before the next attempt, after a failure now."""
        now = self.clock()
        if self._last is not None and now - self._last > self.reset_after:
            self._attempt = 0
        self._last = now
        base = min(self.cap, self.initial * self.factor**self._attempt)
        self._attempt += 1
        return base * (1 + self.jitter * self.rng())


class _Expired(Exception):
    """The server no longer has the resourceVersion asked for (410): list again."""


def _version(obj: Any, what: str) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    version = meta.get("resourceVersion") if isinstance(meta, dict) else None
    if not isinstance(version, str) or not version:
        raise TransientError(f"{what}: an event without metadata.resourceVersion")
    return version


class KubeWatcher:
    """Lists, then watches, one resource (module docstring); :meth:`run` until :meth:`stop`."""

    def __init__(
        self,
        lister: KubeLister,
        resource: Resource,
        namespace: str | None,
        selector: str | None,
        handler: WatchHandler,
        *,
        watch_seconds: float = WATCH_SECONDS,
        idle_seconds: float = IDLE_SECONDS,
        backoff: Backoff | None = None,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.lister = lister
        self.resource = resource
        self.namespace = namespace
        self.selector = selector
        self.handler = handler
        self.watch_seconds = watch_seconds
        self.idle_seconds = idle_seconds
        self.backoff = backoff or Backoff()
        self._rng = rng
        self._stopping = threading.Event()
        self._relisting = threading.Event()
        self._lock = threading.Lock()
        self._response: Any = None
        #: The resourceVersion the next watch starts from; None: list first.
        self.resource_version: str | None = None
        #: The last attempt failed: the next watch that starts says it resumed.
        self._failed = False

    @property
    def path(self) -> str:
        return collection_path(self.resource, self.namespace)

    def describe(self) -> str:
        where = f"namespace {self.namespace}" if self.namespace else "all namespaces"
        return f"{self.resource.describe()} in {where}{f' ({self.selector})' if self.selector else ''}"

    # -- the loop --

    def run(self) -> None:
        while not self._stopping.is_set():
            if self._relisting.is_set():
                self._relisting.clear()
                self.resource_version = None
            try:
                if self.resource_version is None:
                    self.resource_version = self._list()
                self._watch(self.resource_version)
            except _Expired as exc:
                self.handler.note("relist", target=self.describe(), why=str(exc)[:300])
                self.resource_version = None  # list again, at once: the reflector does not back off for it
            except (ProviderError, OSError) as exc:
                if self._stopping.is_set():
                    return
                if self._relisting.is_set():
                    continue  # cut on purpose: list again
                self._failed = True
                wait = self.backoff.delay()
                why = exc.message if isinstance(exc, ProviderError) else str(exc) or type(exc).__name__
                self.handler.note(
                    "watch-error", target=self.describe(), error=why[:400], retryIn=round(wait, 3),
                    resourceVersion=self.resource_version,
                )  # fmt: skip
                self._stopping.wait(wait)

    def stop(self) -> None:
        """Make :meth:`run` return: at once, even from a stream waiting for its next byte."""
        self._stopping.set()
        self._interrupt()

    def relist(self) -> None:
        """List everything again (the policy changed): the stream in progress is cut."""
        self._relisting.set()
        self._interrupt()

    def _interrupt(self) -> None:
        with self._lock:
            response = self._response
        if response is not None:
            sock = getattr(getattr(response, "connection", None), "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    # -- list --

    def _list(self) -> str:
        self._failed = False  # a list that completes says so itself (WatchHandler.listed)
        meta: dict[str, Any] = {}
        present: set[tuple[str, str]] = set()
        for page in self.lister.pages(self.resource, self.namespace, self.selector, list_meta=meta):
            for obj in page:
                item_meta = obj.get("metadata") or {}
                present.add((str(item_meta.get("namespace") or ""), str(item_meta.get("name") or "")))
            self.handler.page(page)
        self.handler.listed(present)
        version = meta.get("resourceVersion")
        if not isinstance(version, str) or not version:
            raise TransientError(f"the list of {self.resource.describe()} has no resourceVersion to watch from")
        return version

    # -- watch --

    def _watch(self, version: str) -> None:
        seconds = int(self.watch_seconds * (1 + self._rng() / 5))
        query = [
            ("watch", "1"),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(max(1, seconds))),
        ]
        if self.selector:
            query.append(("labelSelector", self.selector))
        what = f"watch GET {self.path}"
        runner = self.lister.runner
        response = runner.open_stream(
            self.path, query=query, connect_timeout=self.lister.timeout, read_timeout=self.idle_seconds, what=what
        )
        with self._lock:
            self._response = response
        started, events = time.monotonic(), 0
        try:
            if response.status == 410:
                raise _Expired(_message(self._body(response)))
            if response.status != 200:
                raise _list_failure(response.status, self._body(response), what, runner.source)
            if self._failed:
                self._failed = False
                self.handler.note("resumed", target=self.describe(), resourceVersion=version)
            for event in self._events(response, what):
                events += 1
                self._handle(event, what)
        finally:
            with self._lock:
                self._response = None
            response.close()
            response.release_conn()
        interrupted = self._stopping.is_set() or self._relisting.is_set()
        if events == 0 and time.monotonic() - started < SHORT_WATCH_SECONDS and not interrupted:
            raise TransientError(f"{what} ended within {SHORT_WATCH_SECONDS:g} s having sent nothing")

    def _body(self, response: Any) -> Any:
        """A refused watch's answer (a Status), bounded."""
        data = response.read(PAGE_LIMITS.max_api_response_bytes + 1)[: PAGE_LIMITS.max_api_response_bytes]
        try:
            return load_json(data, limits=PAGE_LIMITS, what="a refused watch's answer")
        except DataError:
            return data.decode("utf-8", "replace")

    def _events(self, response: Any, what: str) -> Any:
        """Each event of the stream, parsed, until the server ends it; bounded per line."""
        import urllib3

        limit = self.lister.limits.max_api_response_bytes
        buffer = bytearray()
        while not self._stopping.is_set() and not self._relisting.is_set():
            try:
                chunk = response.read1(_READ_BYTES)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                if self._stopping.is_set() or self._relisting.is_set():
                    return
                if isinstance(exc, (urllib3.exceptions.ReadTimeoutError, TimeoutError)):
                    raise TransientError(f"{what} was silent for {self.idle_seconds:g} s; resuming") from exc
                raise TransientError(f"{what} was cut: {str(exc)[:300]}") from exc
            if not chunk:
                return  # the server ended the watch (its timeoutSeconds)
            buffer += chunk
            while True:
                end = buffer.find(b"\n")
                if end < 0:
                    break
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                if line.strip():
                    try:
                        yield load_json(line, limits=self.lister.limits, what=f"an event of {what}")
                    except DataError as exc:
                        raise TransientError(exc.message) from exc
            if len(buffer) > limit:
                raise TransientError(f"{what}: an event longer than {limit} bytes")

    def _handle(self, event: Any, what: str) -> None:
        kind = event.get("type") if isinstance(event, dict) else None
        obj = event.get("object") if isinstance(event, dict) else None
        if kind == "ERROR":
            code = obj.get("code") if isinstance(obj, dict) else None
            if code == 410:
                raise _Expired(_message(obj))
            raise TransientError(f"{what}: the server ended the watch with an error ({code}): {_message(obj)}")
        if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK") or not isinstance(obj, dict):
            raise TransientError(f"{what}: an event of type {str(kind)[:40]!r}, not one a watch sends")
        version = _version(obj, what)
        if kind == "DELETED":
            self.handler.deleted(_with_identity(obj, self.resource, what))
        elif kind != "BOOKMARK":
            self.handler.changed(_with_identity(obj, self.resource, what))
        self.resource_version = version
