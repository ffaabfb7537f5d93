"""The observer: the check of ``verify-resource``, repeated, with each object's PolicyReport kept current.

One :meth:`Observer.run_pass` reads every object of every :class:`Target`
(a resource, namespaces, a label selector) from an :class:`ObjectSource`,
verifies the ones it has not seen in this state, and hands the reports of new
verdicts to a :class:`ReportSink`. ``manifest-provider observe``
(``provider/cli/observe.py``) runs passes on a schedule; the cluster side --
listing, writing PolicyReports -- lives in :mod:`provider.kube`, behind the two
ports, so this loop is testable without a cluster and the library never
imports the kubernetes client.

**When an object is verified again.** A verdict is a function of the object,
the policy and the trust material in it, and -- with dry-run -- the cluster.
The :class:`VerdictCache` keys verdicts by the object's ``uid`` and
``resourceVersion`` (the API server changes the latter on every write, status
included) and the digest of the policy (:func:`~provider.audit.live.policy_digest`:
keys, signers, trusted roots, every setting). The policy is read anew before
each pass (:class:`Observer` takes a loader), so a rotated key or a changed
ConfigMap re-verifies everything on the next pass. A failure to decide (the
cluster could not be asked) is never cached. Nor is anything under a policy
that keeps signatures outside the object (``signatureResourceRef``,
``resourceBundleRef``): a re-signed ConfigMap or a moved tag changes the
verdict while the object's ``resourceVersion`` stays, so every pass verifies
every object again (the report is still rewritten only when it changed). The cache is a bounded LRU: an
evicted verdict costs one verification, never a wrong answer.

A report is written only for a new verdict, and the sink skips it when the
report in the cluster already says the same (timestamps aside): a pass over
an unchanged cluster reads, and writes nothing.

**Following changes as they happen** (``observe --watch``): instead of
passes, the caller hands over what a watch saw (:mod:`provider.kube.watcher`):
:meth:`Observer.check` verifies objects now -- a page of a list, one object that
changed -- through the same cache and sink, and :meth:`Observer.forget` deletes
the report of an object that is gone (the garbage collector would too, through
the report's ``ownerReferences``, but only after its own delay, and not for an
object that merely left the label selector). :meth:`Observer.reload` reads the
policy again and says whether it changed, in which case the caller lists
everything again.

Metrics go to an :class:`ObserverMetrics` (no-op by default; the CLI's
exports them to Prometheus).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ..cache import LRUCache, digest
from ..errors import PolicyError, ProviderError
from ..readers import read_optional_str
from .live import Checked, LiveChecker, ObjectRef
from .reports import Outcome, outcome, report_for, report_stub

#: Verdicts the cache holds by default: one per object observed, for clusters
#: of up to this many objects in scope (a few hundred bytes each).
DEFAULT_CACHE_ENTRIES = 100_000

WriteOutcome = Literal["created", "updated", "unchanged"]


@dataclass(frozen=True)
class Target:
    """What to observe: a resource as kubectl names it, in some namespaces (none: all), matching a label selector."""

    resource: str
    namespaces: tuple[str, ...] = ()
    selector: str | None = None

    def describe(self) -> str:
        where = ", ".join(self.namespaces) if self.namespaces else "all namespaces"
        return f"{self.resource} in {where}{f' ({self.selector})' if self.selector else ''}"


def read_targets(data: Any, where: str = "the observer configuration") -> tuple[Target, ...]:
    """``{targets: [{resource, namespaces?, selector?}, ...]}`` as targets; :class:`PolicyError` when unusable."""
    if not isinstance(data, dict) or not isinstance(data.get("targets"), list) or not data["targets"]:
        raise PolicyError(f"{where}: expected a mapping with a non-empty list 'targets'")
    unknown = set(data) - {"targets"}
    if unknown:
        raise PolicyError(f"{where}: unknown field(s) {sorted(unknown)}")
    targets = []
    for index, entry in enumerate(data["targets"]):
        at = f"{where}: targets[{index}]"
        if not isinstance(entry, dict):
            raise PolicyError(f"{at}: expected a mapping")
        extra = set(entry) - {"resource", "namespaces", "selector"}
        if extra:
            raise PolicyError(f"{at}: unknown field(s) {sorted(extra)}")
        resource = read_optional_str(entry, "resource", at, PolicyError)
        if not resource:
            raise PolicyError(f"{at}: 'resource' (a kind, plural, short name or kind.group) is required")
        namespaces = entry.get("namespaces") or []
        if not isinstance(namespaces, list) or not all(isinstance(n, str) and n for n in namespaces):
            raise PolicyError(f"{at}: 'namespaces' must be a list of names (leave it out for all namespaces)")
        selector = read_optional_str(entry, "selector", at, PolicyError)
        targets.append(Target(resource, tuple(namespaces), selector or None))
    return tuple(targets)


class ObjectSource(Protocol):
    """Where live objects come from (:class:`provider.kube.lister.KubeLister` behind it)."""

    def objects(self, target: Target) -> Iterator[dict[str, Any]]:
        """Every object of ``target``; a :class:`~provider.errors.ProviderError` when they cannot be read."""
        ...


class ReportSink(Protocol):
    """Where reports go (:class:`provider.kube.writer.KubeWriter` behind it)."""

    def write(self, report: dict[str, Any]) -> WriteOutcome: ...

    def delete(self, obj: dict[str, Any]) -> Literal["deleted", "absent"]: ...


class ObserverMetrics(Protocol):
    def checked(self, checked: Checked, *, cached: bool) -> None: ...

    def report_written(self, result: WriteOutcome | Literal["failed", "deleted", "absent"]) -> None: ...

    def target_failed(self, target: Target, reason: str) -> None: ...

    def pass_finished(self, stats: PassStats) -> None: ...


class NoMetrics:
    def checked(self, checked: Checked, *, cached: bool) -> None:
        pass

    def report_written(self, result: WriteOutcome | Literal["failed", "deleted", "absent"]) -> None:
        pass

    def target_failed(self, target: Target, reason: str) -> None:
        pass

    def pass_finished(self, stats: PassStats) -> None:
        pass


@dataclass
class PassStats:
    """What one pass found: every object in scope counted once, by outcome and by reason."""

    started: float
    finished: float = 0.0
    objects: int = 0
    verified_now: int = 0  # cache misses: verifications this pass made
    cache_hits: int = 0
    by_outcome: Counter[Outcome] = field(default_factory=Counter)
    by_reason: Counter[str] = field(default_factory=Counter)
    #: Reasons of the objects that failed (fail or error): what an alert wants.
    failing_reasons: Counter[str] = field(default_factory=Counter)
    reports: Counter[str] = field(default_factory=Counter)
    #: Targets that could not be read, with why: the pass is then not complete.
    failed_targets: list[tuple[Target, str]] = field(default_factory=list)
    #: Each verdict and what became of its report ("cached": not written again), when asked for
    #: (:meth:`Observer.check`: the watch logs each one).
    verdicts: list[tuple[Checked, str]] | None = None

    @property
    def complete(self) -> bool:
        return not self.failed_targets


class VerdictCache:
    """Verdicts by (uid, resourceVersion, policy digest), bounded (module docstring)."""

    def __init__(self, max_entries: int = DEFAULT_CACHE_ENTRIES) -> None:
        self._cache: LRUCache[Checked] = LRUCache(max_entries)

    @staticmethod
    def key(ref: ObjectRef, policy: str) -> bytes | None:
        if not ref.uid or not ref.resource_version:
            return None  # not a stored object's identity: nothing says it is unchanged
        return digest(ref.uid, ref.resource_version, policy)

    def get(self, ref: ObjectRef, policy: str) -> Checked | None:
        key = self.key(ref, policy)
        return None if key is None else self._cache.get(key)

    def put(self, checked: Checked, policy: str) -> None:
        key = self.key(checked.ref, policy)
        if key is not None and not checked.error:
            self._cache.put(key, checked)

    def __len__(self) -> int:
        return len(self._cache)


class Observer:
    """Runs passes (module docstring); ``make_checker`` builds a checker for a policy, ``load_policy`` reads it."""

    def __init__(
        self,
        targets: tuple[Target, ...],
        source: ObjectSource,
        *,
        load_policy: Callable[[], dict[str, Any]],
        make_checker: Callable[[dict[str, Any]], LiveChecker],
        sink: ReportSink | None = None,
        cache: VerdictCache | None = None,
        metrics: ObserverMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.targets = targets
        self.source = source
        self.sink = sink
        self.cache = cache if cache is not None else VerdictCache()  # an empty cache is falsy
        self.metrics = metrics or NoMetrics()
        self._load_policy = load_policy
        self._make_checker = make_checker
        self._checker: LiveChecker | None = None
        self._clock = clock

    def _checker_for(self, policy_data: dict[str, Any]) -> LiveChecker:
        checker = self._checker
        if checker is None or checker.policy_data != policy_data:
            if checker is not None:
                checker.close()
            checker = self._checker = self._make_checker(policy_data)
        return checker

    def run_pass(self) -> PassStats:
        """One pass over every target. A policy that cannot be read fails the pass (:class:`PolicyError`)."""
        stats = PassStats(started=self._clock())
        checker = self._checker_for(self._load_policy())
        for target in self.targets:
            try:
                self._observe(target, checker, stats)
            except ProviderError as exc:
                # One target that cannot be read (RBAC, a kind not served) leaves the others observed.
                stats.failed_targets.append((target, exc.message))
                self.metrics.target_failed(target, exc.reason)
        stats.finished = self._clock()
        self.metrics.pass_finished(stats)
        return stats

    def _observe(self, target: Target, checker: LiveChecker, stats: PassStats) -> None:
        self._verify(self.source.objects(target), checker, stats)

    def _verify(self, objects: Iterable[dict[str, Any]], checker: LiveChecker, stats: PassStats) -> None:
        policy = checker.digest
        cacheable = not checker.external_signatures  # module docstring: what resourceVersion does not track

        def misses() -> Iterator[dict[str, Any]]:
            for obj in objects:
                cached = self.cache.get(ObjectRef.of(obj), policy) if cacheable else None
                if cached is None:
                    yield obj
                else:
                    self._record(cached, stats, cached_verdict=True)

        for checked in checker.check_all(misses()):
            if self._record(checked, stats, cached_verdict=False) and cacheable:
                self.cache.put(checked, policy)

    def _record(self, checked: Checked, stats: PassStats, *, cached_verdict: bool) -> bool:
        """Count a verdict and write the report of a new one; False when that write failed."""
        written = self._write(checked, stats, cached_verdict=cached_verdict)
        if stats.verdicts is not None:
            stats.verdicts.append((checked, written))
        return written != "failed"

    def _write(self, checked: Checked, stats: PassStats, *, cached_verdict: bool) -> str:
        stats.objects += 1
        if cached_verdict:
            stats.cache_hits += 1
        else:
            stats.verified_now += 1
        result = outcome(checked)
        stats.by_outcome[result] += 1
        stats.by_reason[checked.result.reason] += 1
        if result in ("fail", "error"):
            stats.failing_reasons[checked.result.reason] += 1
        self.metrics.checked(checked, cached=cached_verdict)
        if cached_verdict:
            return "cached"  # an unchanged verdict's report was written when it was new
        if self.sink is None:
            return "none"
        try:
            written: WriteOutcome | Literal["failed"] = self.sink.write(report_for(checked, now=self._clock()))
        except ProviderError:
            written = "failed"  # not cached: the next pass verifies it and writes its report again
        stats.reports[written] += 1
        self.metrics.report_written(written)
        return written

    # -- following changes (module docstring) --

    def reload(self) -> bool:
        """Read the policy again; whether it (or the trust material in it) changed since the last read.

        A :class:`PolicyError` leaves the policy in use as it was.
        """
        before = self._checker.digest if self._checker is not None else None
        checker = self._checker_for(self._load_policy())
        return checker.digest != before

    @property
    def external_signatures(self) -> bool:
        """Whether the policy in use keeps signatures outside the objects (verdicts change without them)."""
        return self._checker is not None and self._checker.external_signatures

    def check(self, objects: Iterable[dict[str, Any]]) -> PassStats:
        """Verify ``objects`` now (what a watch saw) and write the reports of new verdicts."""
        stats = PassStats(started=self._clock(), verdicts=[])
        checker = self._checker if self._checker is not None else self._checker_for(self._load_policy())
        self._verify(objects, checker, stats)
        stats.finished = self._clock()
        return stats

    def forget(self, ref: ObjectRef) -> Literal["deleted", "absent", "failed", "none"]:
        """An object is gone (or out of scope): delete its report; "none" without a sink."""
        if self.sink is None:
            return "none"
        try:
            done: Literal["deleted", "absent", "failed"] = self.sink.delete(report_stub(ref))
        except ProviderError:
            done = "failed"
        self.metrics.report_written(done)
        return done

    def close(self) -> None:
        if self._checker is not None:
            self._checker.close()
            self._checker = None
