"""Verifying objects as the cluster stores them: one at a time, or many on a bounded pool of processes.

Every object read from a cluster is reviewed with ``live=True``
(:meth:`Review.for_object <provider.review.Review.for_object>`): it is the
stored object, so a difference that lies only in fields an exemption lets a
trusted controller change (``spec.replicas`` scaled by the autoscaler through
``scale``, owner references edited by the garbage collector) is tolerated and
named in the verdict's message, and any other difference is a failure
(``docs/policy.md``, "Changes by exempt controllers").

:func:`check` is the one decision: :func:`~provider.verifier.decide`, with a
failure to decide (the cluster could not be asked for a dry-run) kept apart
from a verdict about the object (:attr:`Checked.error`).

:class:`LiveChecker` checks a stream of objects in constant memory: with
``concurrency`` 1 in this process (sharing the caller's dry-run client and its
discovery cache); with more, on that many worker processes (verification is
CPU-bound and holds the GIL, so threads would not add a core), to which
objects go in batches, at most :attr:`LiveChecker.in_flight` batches at a
time. Verdicts come back in the order they finish. Each worker builds the
policy once and, when the policy dry-runs, its own dry-run client from a
factory the caller passes (this package never imports the kubernetes client);
likewise its :class:`~provider.signatures.sources.Sources` (a signature ConfigMap's
reader, a registry client) when the policy keeps signatures outside the
object (:attr:`LiveChecker.external_signatures`).
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from ..bounds import SERVICE, Bounds
from ..cache import digest
from ..compare.dryrun import DryRunner
from ..errors import DataError, TransientError
from ..policy.schema import Policy
from ..result import Result
from ..review import Review
from ..signatures.sources import Sources
from ..verifier import decide

#: Objects sent to a worker at once: large enough that pickling and the
#: round trip are a small part of a batch's cost, small enough to spread
#: a page over every worker.
BATCH_SIZE = 32


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class ObjectRef:
    """Which object a verdict is about, and which version of it (``resourceVersion``) was checked."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""

    @classmethod
    def of(cls, obj: Any) -> ObjectRef:
        if not isinstance(obj, dict):
            return cls("", "", "", "")
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        return cls(
            _text(obj.get("apiVersion")),
            _text(obj.get("kind")),
            _text(meta.get("namespace")),
            _text(meta.get("name")),
            _text(meta.get("uid")),
            _text(meta.get("resourceVersion")),
        )

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def describe(self) -> str:
        """``Deployment.apps shop/web``: kind, group and where."""
        kind = f"{self.kind}.{self.group}" if self.group else self.kind
        return f"{kind} {self.namespace + '/' if self.namespace else ''}{self.name}"

    def to_dict(self) -> dict[str, str]:
        out = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.uid:
            out["uid"] = self.uid
        if self.resource_version:
            out["resourceVersion"] = self.resource_version
        return out


@dataclass(frozen=True)
class Checked:
    """The verdict on one live object; ``error``: no verdict could be reached (its reason says why), retry later."""

    ref: ObjectRef
    result: Result
    error: bool = False


def check(
    obj: dict[str, Any], policy: Policy, dry_runner: DryRunner | None = None, sources: Sources | None = None
) -> Checked:
    """Verify one object as the cluster stores it (``live=True``)."""
    ref = ObjectRef.of(obj)
    try:
        review = Review.for_object(obj, live=True)
        return Checked(ref, decide(review, policy, dry_runner=dry_runner, sources=sources))
    except (DataError, TransientError) as exc:
        return Checked(ref, Result.from_error(exc), error=True)


def policy_digest(policy_data: dict[str, Any]) -> str:
    """A digest of a policy and the trust material in it (keys, signers, trusted roots): a change re-verifies."""
    canonical = json.dumps(policy_data, sort_keys=True, separators=(",", ":"), default=str)
    return digest("policy", canonical).hex()


# --- the pool -------------------------------------------------------------------------------------------

#: Builds the signature sources for a policy (a module-level function or partial: it is sent to the workers).
SourcesFactory = Callable[[Policy], Sources]

#: One worker process's policy, dry-run client and sources (set by :func:`_start_worker`, once per process).
_WORKER: dict[str, tuple[Policy, DryRunner | None, Sources | None]] = {}


def _start_worker(
    policy_data: dict[str, Any],
    runner_factory: Callable[[], DryRunner] | None,
    sources_factory: SourcesFactory | None,
    bounds: Bounds = SERVICE,
) -> None:
    policy = Policy.from_dict(policy_data, bounds=bounds)
    runner = runner_factory() if runner_factory is not None else None
    _WORKER["state"] = (policy, runner, sources_factory(policy) if sources_factory is not None else None)


def _ready() -> None:
    """Nothing: submitted once per worker to start it early."""


def _check_batch(batch: list[dict[str, Any]]) -> list[Checked]:
    policy, runner, sources = _WORKER["state"]
    return [check(obj, policy, runner, sources) for obj in batch]


class LiveChecker:
    """Checks a stream of objects against one policy (module docstring): a context manager, close to stop the pool."""

    def __init__(
        self,
        policy_data: dict[str, Any],
        *,
        concurrency: int = 1,
        dry_runner: DryRunner | None = None,
        runner_factory: Callable[[], DryRunner] | None = None,
        sources_factory: SourcesFactory | None = None,
        batch_size: int = BATCH_SIZE,
        bounds: Bounds = SERVICE,
    ) -> None:
        """``bounds``: what the policy may name (:mod:`provider.bounds`; the CLI's is ``LOCAL``)."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.policy_data = policy_data
        self.policy = Policy.from_dict(policy_data, bounds=bounds)  # an invalid policy fails here, before any read
        self.digest = policy_digest(policy_data)
        self.concurrency = concurrency
        self.dry_runner = dry_runner
        self.batch_size = batch_size
        #: Whether the policy reads signatures kept outside the object (a signature ConfigMap, resource
        #: bundles): then a verdict also depends on what those hold, which the object's resourceVersion
        #: does not track.
        self.external_signatures = (
            self.policy.signature_resource_ref is not None or self.policy.resource_bundle is not None
        )
        if not self.external_signatures:
            sources_factory = None  # nothing to read: no client is built
        self.sources = sources_factory(self.policy) if sources_factory is not None and concurrency == 1 else None
        #: Batches handed to the workers and not yet answered, at most.
        self.in_flight = 2 * concurrency
        self._pool: ProcessPoolExecutor | None = None
        if concurrency > 1:
            # spawn, not fork: the parent runs threads (the HTTP client's, a metrics server's),
            # and a forked child would inherit their locks in whatever state they were.
            self._pool = ProcessPoolExecutor(
                concurrency,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(
                    policy_data,
                    runner_factory if self.policy.dry_run.enabled else None,
                    sources_factory,
                    bounds,
                ),
            )
            # Start every worker now (a spawned worker starts on a submit that finds none idle),
            # so that they import while the caller still sets up; nothing waits for these.
            for _ in range(concurrency):
                self._pool.submit(_ready)

    def check_all(self, objects: Iterable[dict[str, Any]]) -> Iterator[Checked]:
        """A verdict for every object of ``objects``, holding at most ``in_flight`` batches besides the input's own."""
        if self._pool is None:
            for obj in objects:
                yield check(obj, self.policy, self.dry_runner, self.sources)
            return
        pending: set[Future[list[Checked]]] = set()
        batch: list[dict[str, Any]] = []
        for obj in objects:
            batch.append(obj)
            if len(batch) < self.batch_size:
                continue
            pending.add(self._pool.submit(_check_batch, batch))
            batch = []
            while len(pending) >= self.in_flight:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield from future.result()
        if batch:
            pending.add(self._pool.submit(_check_batch, batch))
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield from future.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> LiveChecker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
