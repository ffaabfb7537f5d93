"""``observe --watch``: verify each object as it changes, from a list and a watch per target.

One :class:`~provider.kube.watcher.KubeWatcher` per target and namespace runs
in a thread of its own; what it sees comes here through one bounded queue (a
watcher waits while the verifier is behind, so memory stays bounded) and the
main thread verifies it (:meth:`Observer.check <provider.audit.observer.Observer.check>`),
writes the report of a new verdict, and deletes the report of an object that
is gone (:meth:`Observer.forget <provider.audit.observer.Observer.forget>`):
one seen ``DELETED``, or missing from a list made again after a 410.

Every ``--interval`` seconds the policy is read again: a changed one (a
rotated key, an edited ConfigMap) makes every watcher list again, so every
object is verified under it. So does a policy that keeps signatures outside
the objects (a signature ConfigMap, resource bundles), every interval: those
change verdicts without any object changing, as for passes. The gauges (``objects``, ``failures``) are set
from the verdicts in hand then, and ``last_full_pass_timestamp_seconds`` moves
on while every watcher has listed and none is failing -- the alert on it
still fires when the observer stops seeing the cluster.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..audit.live import Checked, ObjectRef
from ..audit.observer import Observer, PassStats, Target
from ..audit.reports import Outcome, outcome
from ..errors import PolicyError, ProviderError

#: Items the watchers may have queued for the verifier (each a page of at most --chunk-size objects, or one).
QUEUE_ITEMS = 16

Log = Callable[..., None]


class Relay:
    """A :class:`~provider.kube.watcher.WatchHandler` that queues what its watcher saw for the main thread."""

    def __init__(self, stream: int, items: queue.Queue[tuple[str, int, Any]], stop: threading.Event) -> None:
        self.stream = stream
        self.items = items
        self.stop = stop

    def _put(self, kind: str, payload: Any) -> None:
        while not self.stop.is_set():
            try:
                self.items.put((kind, self.stream, payload), timeout=0.5)
                return
            except queue.Full:
                continue

    def page(self, objects: list[dict[str, Any]]) -> None:
        self._put("page", objects)

    def listed(self, present: set[tuple[str, str]]) -> None:
        self._put("listed", present)

    def changed(self, obj: dict[str, Any]) -> None:
        self._put("changed", obj)

    def deleted(self, obj: dict[str, Any]) -> None:
        self._put("deleted", obj)

    def note(self, event: str, **fields: Any) -> None:
        self._put("note", (event, fields))


@dataclass
class Stream:
    """One watcher and what is known of its objects: (namespace, name) -> (reference, outcome, reason)."""

    target: Target
    make: Callable[[Relay], Any]
    relay: Relay
    watcher: Any = None
    known: dict[tuple[str, str], tuple[ObjectRef, Outcome, str]] = field(default_factory=dict)
    listed: bool = False
    failing: str = ""
    thread: threading.Thread | None = None


def _key(ref: ObjectRef) -> tuple[str, str]:
    return (ref.namespace, ref.name)


class Follower:
    """The main thread's loop (module docstring)."""

    def __init__(self, observer: Observer, interval: float, log: Log) -> None:
        self.observer = observer
        self.interval = interval
        self.log = log
        self.stop = threading.Event()
        self.items: queue.Queue[tuple[str, int, Any]] = queue.Queue(maxsize=QUEUE_ITEMS)
        self.streams: list[Stream] = []

    def add(self, target: Target, make_watcher: Callable[[Relay], Any]) -> None:
        """Follow a target (in one namespace): ``make_watcher`` builds its watcher, or raises when the target
        cannot be resolved yet (it is tried again every interval)."""
        self.streams.append(Stream(target, make_watcher, Relay(len(self.streams), self.items, self.stop)))

    def _start(self, stream: Stream) -> None:
        try:
            stream.watcher = stream.make(stream.relay)
        except ProviderError as exc:
            stream.failing = exc.message
            self.log("target-error", target=stream.target.describe(), error=exc.message)
            return
        stream.thread = threading.Thread(target=stream.watcher.run, name="observe-watch", daemon=True)
        stream.thread.start()

    def run(self, stop: threading.Event) -> None:
        """Until ``stop`` is set: start the watchers, verify what they see, read the policy every interval."""
        while True:  # as passes do: a policy that cannot be read is said, and read again every interval
            try:
                self.observer.reload()
                break
            except PolicyError as exc:
                self.log("policy-invalid", message=exc.message)
                if stop.wait(self.interval):
                    return
        for stream in self.streams:
            self._start(stream)
        resync = time.monotonic() + self.interval
        try:
            while not stop.is_set():
                try:
                    item = self.items.get(timeout=max(0.0, min(1.0, resync - time.monotonic())))
                except queue.Empty:
                    item = None
                if item is not None:
                    self._handle(*item)
                if time.monotonic() >= resync:
                    resync = time.monotonic() + self.interval
                    self._resync()
        finally:
            self.stop.set()
            for stream in self.streams:
                if stream.watcher is not None:
                    stream.watcher.stop()
            for stream in self.streams:
                if stream.thread is not None:
                    stream.thread.join(timeout=10)

    # -- what the watchers saw --

    def _handle(self, kind: str, index: int, payload: Any) -> None:
        stream = self.streams[index]
        if kind == "note":
            event, fields = payload
            stream.failing = fields.get("error", "") if event == "watch-error" else ""
            self.log(event, **fields)
        elif kind == "page":
            self._check(stream, payload, quiet=True)
        elif kind == "changed":
            stream.failing = ""
            self._check(stream, [payload], quiet=False)
        elif kind == "deleted":
            stream.failing = ""
            ref = ObjectRef.of(payload)
            stream.known.pop(_key(ref), None)
            self.log("deleted", object=ref.describe(), resourceVersion=ref.resource_version,
                     report=self.observer.forget(ref))  # fmt: skip
        elif kind == "listed":
            stream.listed, stream.failing = True, ""
            gone = [entry for key, entry in stream.known.items() if key not in payload]
            for ref, _, _ in gone:
                del stream.known[_key(ref)]
                self.log("deleted", object=ref.describe(), report=self.observer.forget(ref), seen="list")
            self.log("listed", target=stream.watcher.describe(), objects=len(stream.known))

    def _check(self, stream: Stream, objects: list[dict[str, Any]], *, quiet: bool) -> None:
        try:
            stats = self.observer.check(objects)
        except PolicyError as exc:
            self.log("policy-invalid", message=exc.message)
            return
        for checked, report in stats.verdicts or []:
            self._remember(stream, checked)
            if not quiet:
                self.log("checked", object=checked.ref.describe(), resourceVersion=checked.ref.resource_version,
                         result=outcome(checked), reason=checked.result.reason, report=report)  # fmt: skip

    @staticmethod
    def _remember(stream: Stream, checked: Checked) -> None:
        stream.known[_key(checked.ref)] = (checked.ref, outcome(checked), checked.result.reason)

    # -- every interval --

    def _resync(self) -> None:
        try:
            changed = self.observer.reload()
        except (PolicyError, ProviderError) as exc:
            self.log("policy-invalid", message=exc.message)
            changed = False
        for stream in self.streams:
            if stream.watcher is None:
                self._start(stream)
            elif changed or self.observer.external_signatures:
                stream.watcher.relist()
        if changed:
            self.log("policy-changed", streams=len(self.streams))
        now = time.time()
        stats = PassStats(started=now, finished=now)
        for stream in self.streams:
            if not stream.listed or stream.failing:
                stats.failed_targets.append((stream.target, stream.failing or "not listed yet"))
            for _, result, reason in stream.known.values():
                stats.objects += 1
                stats.by_outcome[result] += 1
                stats.by_reason[reason] += 1
                if result in ("fail", "error"):
                    stats.failing_reasons[reason] += 1
        self.observer.metrics.pass_finished(stats)
        self.log("watching", objects=stats.objects, results=dict(stats.by_outcome), failing=dict(stats.failing_reasons),
                 failedTargets=[{"target": t.describe(), "error": why} for t, why in stats.failed_targets])  # fmt: skip
