"""Which check answers a key, and how the keys of one request are answered together.

A *check* is a function ``(review, policy, context) -> Result``: the default,
``"manifest"``, compiles the policy (:meth:`Policy.from_dict`, cached in the
app's :class:`PolicyCache` by a hash of its canonical JSON) and calls
:func:`provider.verifier.decide`. Other checks register themselves in
:data:`CHECKS` under their own name; a key or body names its check in
``"check"`` (default ``"manifest"``), and an unknown name is a
:class:`~provider.errors.RequestError` for that key alone.

A check raises only :class:`~provider.errors.DataError` (this key is bad: a
per-key error, cacheable) or :class:`~provider.errors.TransientError` (ask
again later: a whole-request ``systemError``); every verdict, allow or deny, is
a :class:`~provider.result.Result`.

:class:`Dispatcher` answers the keys of one request: verdicts that did not use
the live cluster come from an LRU cache keyed by the hash of the key; the rest
are computed concurrently on a per-process thread pool -- or, for questions that
wait on nothing and whose cost the limits bound, in the calling thread
(:mod:`provider.service.inline`: the hand-off costs more than it buys); when the request's
deadline passes first, the request fails as a whole with
:class:`DeadlineExceeded` (work already started finishes in the background and
fills the cache, so Gatekeeper's retry is cheap).

A request's keys are handed to the pool as at most ``threads`` *drains*, each
taking the request's next unanswered key until none is left, rather than as one
task per key: the concurrency is the same (a slow dry-run does not hold up the
other keys), but a 50-key request costs four hand-offs between threads, not fifty.
A verdict is encoded to JSON once, when it is made (:attr:`Verdict.value`): a
cache hit or a repeated key in a request reuses the text.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from ..bounds import SERVICE, Bounds
from ..cache import LRUCache, digest
from ..errors import DataError, PolicyError, ProviderError, RequestError, TransientError
from ..kube.tokens import KubeTokenSource
from ..limits import DEFAULT_LIMITS, Limits
from ..neighbours.bootstrap import BootstrapToken, ClusterInfoPolicy, evaluate_cluster_info
from ..neighbours.csr import CsrPolicy, evaluate_csr
from ..policy.schema import Policy
from ..result import REASONS, Reason, Result
from ..review import Review
from ..verifier import Context, decide

log = logging.getLogger("provider.checks")

T = TypeVar("T")


class PolicyCache:
    """Compiled policies by the SHA-256 of their canonical JSON (LRU, bounded).

    One per :class:`~provider.service.state.Service` (sized by
    ``MANIFEST_PROVIDER_POLICY_CACHE_ENTRIES``), handed to the checks in their
    :class:`CheckContext`: two apps in one process share nothing.
    """

    def __init__(self, max_entries: int = 256) -> None:
        self._cache: LRUCache[Policy] = LRUCache(max_entries)

    def compile(
        self, raw: Any, limits: Limits = DEFAULT_LIMITS, bounds: Bounds = SERVICE, deadline: float | None = None
    ) -> Policy:
        """The compiled policy; ``bounds`` are the operator's, ``deadline`` ends reading a trust-root file."""
        try:
            key = self._key(raw, limits, bounds)
        except (TypeError, ValueError) as exc:
            raise PolicyError(f"policy: not JSON data ({str(exc)[:80]})") from exc
        policy = self._cache.get(key)
        if policy is None:
            policy = Policy.from_dict(raw, limits=limits, bounds=bounds, deadline=deadline)
            self._cache.put(key, policy)
        return policy

    def cached(self, raw: Any, limits: Limits = DEFAULT_LIMITS, bounds: Bounds = SERVICE) -> Policy | None:
        """The policy :meth:`compile` compiled before, or ``None``: never compiles (compiling may read a file)."""
        try:
            return self._cache.get(self._key(raw, limits, bounds))
        except (TypeError, ValueError):
            return None

    @staticmethod
    def _key(raw: Any, limits: Limits, bounds: Bounds) -> bytes:
        canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), allow_nan=False)
        # The default trust root is part of a compiled keyless policy: one refreshed in the background
        # (provider/service/trustroot.py) must reach policies compiled before it.
        from ..keyless.trust import current_default_digest

        return digest(canonical, str(limits.max_keys), repr(bounds), current_default_digest())


@dataclass(frozen=True)
class CheckContext(Context):
    """What a check may use besides the review and the policy.

    The verifier's :class:`~provider.verifier.context.Context` (dry-run client, clock,
    limits, signature sources, the request's deadline), which :func:`judge` hands to
    :func:`~provider.verifier.decide` as it is, and what only the service holds.
    """

    #: A Kubernetes client for checks that read cluster objects (``None``: no cluster configured).
    kube_client: Any = None
    #: What the operator lets a policy name (provider/bounds.py): the service's configuration.
    bounds: Bounds = SERVICE
    #: The app's compiled policies; a context made without one compiles into a cache of its own.
    policies: PolicyCache = field(default_factory=PolicyCache, compare=False, repr=False)


Check = Callable[[Review, Any, CheckContext], Result]

DEFAULT_CHECK = "manifest"


# --- the manifest check -----------------------------------------------------------


def check_manifest(review: Review, policy_raw: Any, ctx: CheckContext) -> Result:
    """The object matches what the policy's keys/signers signed (:func:`provider.verifier.decide`)."""
    policy = ctx.policies.compile(policy_raw, ctx.limits, ctx.bounds, ctx.deadline)
    return judge(review, policy, ctx)


def judge(review: Review, policy: Policy, ctx: CheckContext) -> Result:
    """:func:`provider.verifier.decide` with what the context holds: every route's one call of it.

    The manifest check calls it with the policy a request carries, the admission
    route (:mod:`provider.service.heldpolicies`) with each policy the service holds.
    """
    return decide(review, policy, ctx)


# --- the neighbouring checks (docs/neighbours.md) ----------------------------------


class _Unconfigured:
    """The token source when the service has no cluster client: a lookup cannot be answered."""

    description = "no cluster configured"

    def lookup(self, token_id: str) -> BootstrapToken | None:
        raise TransientError(
            f"cluster-info carries a signature by token {token_id}, but the provider has no Kubernetes client to read "
            "bootstrap token Secrets"
        )


def check_cluster_info(review: Review, policy: Any, ctx: CheckContext) -> Result:
    """``"cluster-info"``: the bootstrap-token signatures of ``kube-public/cluster-info`` (``neighbours.bootstrap``).

    Reads the policy strictly; tokens are the Secrets :class:`~provider.kube.tokens.KubeTokenSource`
    reads. A verdict that looked a token up used the cluster (never cached): a token expires or is deleted.
    """
    parsed = ClusterInfoPolicy.from_dict(policy, ctx.limits)
    if ctx.kube_client is None:
        return evaluate_cluster_info(review, parsed, _Unconfigured(), now=ctx.now, limits=ctx.limits)
    kube = KubeTokenSource(ctx.kube_client, limits=ctx.limits)
    result = evaluate_cluster_info(review, parsed, kube, now=ctx.now, limits=ctx.limits)
    return dataclasses.replace(result, used_cluster=True) if kube.lookups else result


def check_kubelet_serving_csr(review: Review, policy: Any, ctx: CheckContext) -> Result:
    """``"kubelet-serving-csr"``: kubelet-csr-approver's checks on a kubelet-serving CSR (``neighbours.csr``)."""
    return evaluate_csr(review, CsrPolicy.from_dict(policy), limits=ctx.limits)


#: Every check by name. Other modules add theirs here (``CHECKS["name"] = check``).
CHECKS: dict[str, Check] = {
    DEFAULT_CHECK: check_manifest,
    "cluster-info": check_cluster_info,
    "kubelet-serving-csr": check_kubelet_serving_csr,
}


#: What each check answers with (provider/result.py, ``Reason``), for the series every scrape
#: shows from the start (``decisions_total``; provider.service.metrics.initialise). A reason
#: missing here still counts; it appears at its first verdict.
CHECK_REASONS: dict[str, tuple[Reason, ...]] = {
    DEFAULT_CHECK: (
        "verified", "skipped-user", "skipped-object", "out-of-scope", "dry-run-request", "no-signatures",
        "unverifiable-operation", "control-plane-object", "unsigned", "no-matching-manifest", "signature-invalid",
        "key-threshold-not-met", "content-mismatch", "unverifiable-subresource", "control-plane-object-changed",
        "malformed-message", "certificate-untrusted",
        "tlog-entry-invalid", "certificate-expired-at-signing", "identity-mismatch",
    ),
    "cluster-info": (
        "verified", "out-of-scope", "skipped-user", "no-signatures", "unsigned", "cluster-info-invalid",
        "jws-malformed", "jws-header-invalid", "token-unknown", "token-expired", "token-not-for-signing",
        "ca-pin-mismatch",
    ),
    # The CSR rules' reasons are the ones named csr-* (provider/neighbours/csr.py).
    "kubelet-serving-csr": ("verified", "out-of-scope", *(cast(Reason, r) for r in REASONS if r.startswith("csr-"))),
}  # fmt: skip


def run_check(name: str, review: Review, policy_raw: Any, ctx: CheckContext) -> Result:
    check = CHECKS.get(name)
    if check is None:
        known = ", ".join(sorted(CHECKS))
        raise RequestError(f"unknown check {str(name)[:60]!r}; known checks: {known}")
    return check(review, policy_raw, ctx)


# --- answering the keys of one request --------------------------------------------


class DeadlineExceeded(TransientError):
    reason = "deadline-exceeded"


class InternalError(TransientError):
    """A check failed in a way nobody planned for; logged, answered without detail, never cached."""

    reason = "internal-error"


@dataclass(frozen=True)
class Question:
    """One thing to decide: which check, about which review, under which policy."""

    check: str
    review: Review
    policy: Any


@dataclass(frozen=True)
class Subject:
    """The object a verdict is about, for logs (kind, namespace, name; nothing else)."""

    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, review: Review) -> Subject:
        obj: dict[str, Any] = review.object if isinstance(review.object, dict) else {}
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = {}

        def text(value: Any) -> str:
            return value[:253] if isinstance(value, str) else ""

        return cls(
            text(obj.get("kind")),
            text(meta.get("namespace")) or text(review.namespace),
            text(meta.get("name")) or text(review.name),
        )


@dataclass(frozen=True)
class Verdict:
    check: str
    result: Result
    subject: Subject
    #: ``result.to_dict()`` as compact JSON: the ``value`` both wire formats answer with.
    value: str = field(compare=False, repr=False)

    @classmethod
    def of(cls, check: str, result: Result, review: Review) -> Verdict:
        return cls(check, result, Subject.of(review), json.dumps(result.to_dict(), separators=(",", ":")))


@dataclass(frozen=True)
class Job:
    """One key: its cache key (``None``: never cached) and how to read its :class:`Question`.

    ``read`` runs on the pool, so parsing counts against the deadline too; it
    raises :class:`~provider.errors.DataError` when the key is unusable.
    """

    cache_key: bytes | None
    read: Callable[[], Question]


@dataclass(frozen=True)
class Answer:
    verdict: Verdict | None
    error: DataError | None
    cached: bool = False
    seconds: float = 0.0
    #: For an error: the known check the key named (``""``: it named none, or the key was unreadable).
    check: str = ""


#: How the calling thread answers a question itself (a function of no arguments), or ``None``: hand it
#: to a verify thread. The service's is :func:`provider.service.inline.inline_answer`.
Inline = Callable[[Question, CheckContext], Callable[[], Result] | None]


@dataclass(frozen=True)
class _Batch:
    """The keys of one request being answered, shared by its drains."""

    jobs: Sequence[Job]
    #: Indices of ``jobs`` with one cache key each (the first is computed); drains take them in turn.
    work: Iterator[list[int]]
    #: Filled in by the drains, one per job.
    answers: list[Answer | None]
    deadline: float
    #: Set when the request has failed or passed its deadline: no drain starts another job.
    stop: threading.Event


class Dispatcher:
    """Answers jobs from the cache or on a bounded thread pool, under a deadline."""

    def __init__(
        self, cache: LRUCache[Verdict], threads: int, inline: Inline | None = None, inline_share: float = 0.5
    ) -> None:
        self.cache = cache
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        #: Which questions the calling thread answers itself (``None``: every one goes to the pool).
        self._inline = inline
        #: The share of a request's time left at its start during which the calling thread takes on more.
        self._inline_share = inline_share

    def _executor(self) -> ThreadPoolExecutor:
        # Created on first use, after gunicorn has forked the worker: threads do not survive fork.
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix="verify")
            return self._pool

    def shutdown(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None

    def _answer(self, job: Job, ctx: CheckContext) -> Answer:
        start = time.perf_counter()
        check = ""
        try:
            question = job.read()
            check = question.check if question.check in CHECKS else ""  # a label: never the key's own text
            result = run_check(question.check, question.review, question.policy, ctx)
        except DataError as exc:
            return Answer(None, exc, seconds=time.perf_counter() - start, check=check)
        return self._verdict(job, question, result, start)

    def _verdict(self, job: Job, question: Question, result: Result, start: float) -> Answer:
        verdict = Verdict.of(question.check, result, question.review)
        if job.cache_key is not None and not result.used_cluster:
            self.cache.put(job.cache_key, verdict)
        return Answer(verdict, None, seconds=time.perf_counter() - start)

    def _drain(self, batch: _Batch, ctx: CheckContext) -> None:
        """Answer the request's next unanswered job until none is left, the request failed or its deadline passed.

        Several drains share ``batch.work`` (a list iterator: taking the next item
        is atomic); a job already started always finishes and fills the cache.
        """
        for indices in batch.work:
            if batch.stop.is_set() or time.monotonic() >= batch.deadline:
                return
            answer = self._answer(batch.jobs[indices[0]], ctx)
            for index in indices:
                batch.answers[index] = answer

    def call(self, work: Callable[[CheckContext], T], ctx: CheckContext, deadline: float) -> T:
        """``work(ctx)`` on the pool under the request's deadline, as :meth:`run` answers one key.

        For a route whose request is one decision that is not a check of a key (the
        admission route: every policy the service holds). ``work`` raises
        :class:`~provider.errors.ProviderError` as a check does; anything else is an
        :class:`InternalError`. Past ``deadline``, :class:`DeadlineExceeded` (the work
        finishes in the background).
        """
        if ctx.deadline is None or ctx.deadline > deadline:
            ctx = dataclasses.replace(ctx, deadline=deadline)
        future = self._executor().submit(work, ctx)
        done, _ = wait([future], timeout=max(0.0, deadline - time.monotonic()))
        if not done:
            future.cancel()
            raise DeadlineExceeded("deadline passed before the request was decided; ask again")
        error = future.exception()
        if error is None:
            return future.result()
        if isinstance(error, ProviderError):
            raise error
        log.error("a decision failed unexpectedly", exc_info=error)
        raise InternalError("internal error while deciding; see the service's log") from error

    def run(self, jobs: Sequence[Job], ctx: CheckContext, deadline: float) -> list[Answer]:
        """One answer per job, in order; raises :class:`~provider.errors.TransientError` for the whole request.

        ``deadline`` is a :func:`time.monotonic` instant. Jobs with the same
        cache key are computed once. With an ``inline`` decider, the calling thread
        answers the questions it accepts itself (:meth:`_here`), the rest go to the pool.
        """
        if ctx.deadline is None or ctx.deadline > deadline:
            ctx = dataclasses.replace(ctx, deadline=deadline)  # every read and fetch of the checks ends by it
        answers: list[Answer | None] = [None] * len(jobs)
        groups: dict[bytes | int, list[int]] = {}
        for index, job in enumerate(jobs):
            if job.cache_key is not None:
                hit = self.cache.get(job.cache_key)
                if hit is not None:
                    answers[index] = Answer(hit, None, cached=True)
                    continue
            groups.setdefault(job.cache_key if job.cache_key is not None else index, []).append(index)
        if not groups:
            return cast(list[Answer], answers)
        # The drains' stop flag, made with the first hand-off: a request answered in this thread needs none.
        stops: list[threading.Event] = []
        futures: list[Future[None]] = []

        def hand_off(work: list[list[int]], jobs: Sequence[Job]) -> None:
            if not stops:
                stops.append(threading.Event())
            batch = _Batch(jobs, iter(work), answers, deadline, stops[0])
            executor = self._executor()
            futures.extend(executor.submit(self._drain, batch, ctx) for _ in range(min(self._threads, len(work))))

        def stop(pending: Iterable[Future[None]]) -> None:
            for flag in stops:
                flag.set()
            for future in pending:
                future.cancel()

        late = False
        if self._inline is None:
            hand_off(list(groups.values()), jobs)
        else:
            try:
                late = self._here(jobs, list(groups.values()), answers, ctx, deadline, hand_off)
            except Exception as failure:
                stop(futures)
                if isinstance(failure, TransientError):
                    raise
                log.error("a check failed unexpectedly", exc_info=failure)
                raise InternalError("internal error while verifying; see the service's log") from failure
        done: set[Future[None]] = set()
        not_done: set[Future[None]] = set()
        if futures:
            done, not_done = wait(futures, timeout=max(0.0, deadline - time.monotonic()), return_when=FIRST_EXCEPTION)
        for future in done:
            error = future.exception()
            if error is not None:
                stop(not_done)
                if isinstance(error, TransientError):
                    raise error
                log.error("a check failed unexpectedly", exc_info=error)
                raise InternalError("internal error while verifying; see the service's log") from error
        finished = sum(a is not None for a in answers)
        if late or not_done or finished < len(jobs):  # a drain that saw the deadline first stops early, done or not
            stop(not_done)
            raise DeadlineExceeded(
                f"deadline passed: {finished} of {len(jobs)} keys answered in time; the rest are still being "
                "verified, ask again"
            )
        return cast(list[Answer], answers)

    def _here(  # noqa: PLR0917 - run()'s state
        self,
        jobs: Sequence[Job],
        work: list[list[int]],
        answers: list[Answer | None],
        ctx: CheckContext,
        deadline: float,
        hand_off: Callable[[list[list[int]], Sequence[Job]], None],
    ) -> bool:
        """Answer in this thread, in order, the questions the ``inline`` decider accepts; hand the rest to the pool.

        Each key is read, asked about and answered before the next is read, so a
        request's parsed objects do not pile up (holding fifty at once made the
        collector run five times as often). At the first question the decider
        turns down -- it may wait on the network, or its cost is not bounded --
        that key and every one after it go to the pool at once, as before. So do
        the keys left when the first ``inline_share`` of the time the request had
        left has passed: this thread starts no verification after that, and the one
        it is in is bounded by the decider (:mod:`provider.service.inline`).
        True when the last answer made here came after ``deadline``: the request has
        failed it, as it has when a drain finishes late (the verdict is cached all the same).
        """
        assert self._inline is not None
        now = time.monotonic()
        until = now + max(0.0, deadline - now) * self._inline_share
        for position, indices in enumerate(work):
            if time.monotonic() >= until:
                hand_off(work[position:], jobs)
                return False
            job = jobs[indices[0]]
            start = time.perf_counter()
            try:
                question = job.read()
            except DataError as exc:
                _fill(answers, indices, Answer(None, exc, seconds=time.perf_counter() - start))
                continue
            how = self._inline(question, ctx)
            if how is None:  # handed off with its question: not read again
                read = list(jobs)
                read[indices[0]] = Job(job.cache_key, functools.partial(_given, question))
                hand_off(work[position:], read)
                return False
            try:
                answer = self._verdict(job, question, how(), start)
            except DataError as exc:
                answer = Answer(None, exc, seconds=time.perf_counter() - start, check=question.check)
            _fill(answers, indices, answer)
        return time.monotonic() > deadline


def _given(question: Question) -> Question:
    return question


def _fill(answers: list[Answer | None], indices: list[int], answer: Answer) -> None:
    for index in indices:
        answers[index] = answer
