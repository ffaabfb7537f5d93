"""Admission traffic in the paper's six classes: replay an audit log through :func:`decide`.

Reference: ``docs/classify.md``. :class:`Classifier` turns each audit event into
the review admission would have sent (:mod:`provider.audit.events`), asks
:func:`~provider.verifier.decide` -- the one decision every entry point shares
-- and files the verdict under :attr:`~provider.result.Result.traffic_class`:

1. ``out-of-scope``       kinds that are never configuration (Event, Lease), inScopeObjects
2. ``common-profile``     the built-in common profile let it through (the cluster's own components)
3. ``app-profile``        the policy's own skipUsers / skipObjects let it through
4. ``valid-signature``    verified
5. ``invalid-signature``  signed, but the signature or the content is wrong (denied)
6. ``unprocessed``        in scope, unsigned, matched by no profile (denied; a DELETE: allowed unverified)

:class:`Summary` aggregates a stream of verdicts in memory that does not grow
with the log's length: class counts; an optional breakdown by namespace, user
or kind (at most ``max_groups`` rows each, the rest under ``(other)``); the
heaviest unprocessed (user, kind, namespace) triples, kept with the
Space-Saving algorithm (Metwally, Agrawal, El Abbadi, ICDT 2005: with ``m``
counters every triple seen more than N/m times is kept, each count
overestimated by at most N/m, and exact while there are at most ``m``
distinct triples); and what each service account wrote, from which
:func:`suggestions` proposes skipUsers entries. Nothing here holds an event
after it was counted.
"""

from __future__ import annotations

import heapq
import re
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypedDict, TypeVar

from ..compare.dryrun import DryRunner
from ..errors import RequestError, TransientError
from ..limits import DEFAULT_LIMITS, Limits
from ..objects import DNS_LABEL, DNS_SUBDOMAIN
from ..policy.schema import Policy
from ..result import TRAFFIC_CLASSES, Result, TrafficClass
from ..verifier import decide
from .events import REPEATED_STAGES, AuditEvent, Evidence, KindIndex, Malformed, to_review

Dimension = Literal["namespace", "user", "kind"]
DIMENSIONS: tuple[Dimension, ...] = ("namespace", "user", "kind")

#: Why an event is not in the table: a read (no admission request), a request
#: without a resource (``/healthz``), a stage that repeats a logged request, a
#: verb admission never sees, or a write whose body the audit level did not
#: record and whose verdict depends on it (level Metadata).
SkipReason = Literal["read", "non-resource", "repeated-stage", "other-verb", "no-body"]

#: The row that collects groups beyond ``max_groups``.
OTHER = "(other)"


@dataclass(frozen=True)
class Classified:
    """One write request, classified."""

    event: AuditEvent
    kind: str  # of the admitted object; the resource name when no kind is known
    traffic_class: TrafficClass
    result: Result
    evidence: Evidence

    def to_dict(self) -> dict[str, Any]:
        """The ``--events`` line."""
        e = self.event
        return {
            "auditID": e.audit_id,
            "user": e.username,
            "verb": e.verb,
            "resource": e.resource_path,
            "namespace": e.namespace,
            "name": e.name,
            "class": self.traffic_class,
            "reason": self.result.reason,
        }


@dataclass(frozen=True)
class Skipped:
    event: AuditEvent
    why: SkipReason


class Classifier:
    """Replays audit events through :func:`decide` with one policy."""

    def __init__(self, policy: Policy, *, dry_runner: DryRunner | None = None, limits: Limits = DEFAULT_LIMITS) -> None:
        self.policy = policy
        self.dry_runner = dry_runner
        self.limits = limits
        self.kinds = KindIndex()

    def classify(self, event: AuditEvent) -> Classified | Skipped:
        if event.stage in REPEATED_STAGES:
            return Skipped(event, "repeated-stage")
        if not event.resource:
            return Skipped(event, "non-resource")
        self.kinds.learn(event)
        built = to_review(event, self.kinds, domain=self.policy.annotation_domain, limits=self.limits)
        if built is None:
            return Skipped(event, "read" if event.verb in ("get", "list", "watch") else "other-verb")
        review, evidence = built
        try:
            result = decide(review, self.policy, dry_runner=self.dry_runner, now=event.received, limits=self.limits)
        except (
            RequestError,
            TransientError,
        ) as exc:  # admission denies an unusable request, and a failing webhook (fail closed)
            result = Result.from_error(exc)
        traffic_class = result.traffic_class
        if (
            evidence == "identity"
            and review.operation in ("CREATE", "UPDATE")
            and traffic_class in ("valid-signature", "invalid-signature", "unprocessed")
        ):
            return Skipped(event, "no-body")  # the verdict rests on a body the log does not hold
        target = review.object if review.object is not None else review.old_object
        kind = target.get("kind") if isinstance(target, dict) else None
        return Classified(
            event, kind if isinstance(kind, str) and kind else event.resource, traffic_class, result, evidence
        )

    def classify_all(self, items: Iterable[AuditEvent | Malformed]) -> Iterable[Classified | Skipped | Malformed]:
        for item in items:
            yield item if isinstance(item, Malformed) else self.classify(item)


# --- bounded aggregation ----------------------------------------------------------

K = TypeVar("K", bound=Hashable)


class TopCounter(Generic[K]):
    """Space-Saving: the heaviest keys of a stream with at most ``capacity`` counters."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.counts: dict[K, int] = {}
        self.errors: dict[K, int] = {}
        self.evictions = 0
        self._heap: list[tuple[int, K]] = []  # (count, key), with stale entries skipped lazily

    def add(self, key: K) -> None:
        count = self.counts.get(key)
        if count is not None:
            self.counts[key] = count + 1
        elif len(self.counts) < self.capacity:
            self.counts[key], self.errors[key] = 1, 0
        else:  # replace the smallest counter; the newcomer inherits its count as error bound
            while True:
                least, victim = heapq.heappop(self._heap)
                if self.counts.get(victim) == least:
                    break
            del self.counts[victim], self.errors[victim]
            self.counts[key], self.errors[key] = least + 1, least
            self.evictions += 1
        heapq.heappush(self._heap, (self.counts[key], key))
        if len(self._heap) > 2 * self.capacity + 64:
            self._heap = [(c, k) for k, c in self.counts.items()]
            heapq.heapify(self._heap)

    @property
    def exact(self) -> bool:
        return self.evictions == 0

    def most_common(self, n: int) -> list[tuple[K, int, int]]:
        """Up to ``n`` (key, count, maximum overestimate), heaviest first; ties in key order."""
        ranked = sorted(self.counts.items(), key=lambda kc: (-kc[1], kc[0]))
        return [(k, c, self.errors[k]) for k, c in ranked[:n]]


def _empty_classes() -> dict[str, int]:
    return dict.fromkeys(TRAFFIC_CLASSES, 0)


class GroupCounts:
    """Six-class counts per group (namespace, user or kind), at most ``max_groups`` rows plus ``(other)``."""

    def __init__(self, max_groups: int) -> None:
        self.max_groups = max_groups
        self.rows: dict[str, dict[str, int]] = {}
        self.overflowed = 0  # distinct groups folded into (other), counted while they arrive

    def add(self, key: str, traffic_class: str) -> None:
        row = self.rows.get(key)
        if row is None:
            if len(self.rows) >= self.max_groups:
                if key != OTHER:
                    self.overflowed += 1
                key = OTHER
                row = self.rows.get(OTHER)
            if row is None:
                row = self.rows[key] = _empty_classes()
        row[traffic_class] += 1

    def to_dict(self) -> dict[str, dict[str, Any]]:
        ordered = sorted(self.rows.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
        return {key: {"total": sum(row.values()), "classes": dict(row)} for key, row in ordered}


class TopEntry(TypedDict):
    user: str
    kind: str
    namespace: str
    count: int


class Report(TypedDict):
    """``classify -o json``."""

    total: int
    classes: dict[str, int]
    by: dict[str, dict[str, dict[str, Any]]]
    topUnprocessed: list[TopEntry]


@dataclass(slots=True)
class AccountActivity:
    """What one service account wrote (for ``--suggest``); bounded by ``max_kinds``."""

    namespace: str
    requests: int = 0
    invalid: int = 0  # class 5 ...
    unprocessed: int = 0  # ... and 6: what enforcement would stop
    kinds: set[tuple[str, str]] = field(default_factory=set)  # (API group, kind) of those
    operations: set[str] = field(default_factory=set)  # and their operations
    too_many_kinds: bool = False
    outside: int = 0  # requests on objects outside its own namespace (or cluster-scoped)
    outside_example: str = ""


SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


class Summary:
    """Everything ``classify`` prints, aggregated in bounded memory."""

    def __init__(
        self,
        by: Sequence[Dimension] = (),
        *,
        top: int = 10,
        top_capacity: int = 10_000,
        max_groups: int = 10_000,
        max_accounts: int = 10_000,
        max_kinds: int = 32,
        examples: int = 5,
    ) -> None:
        self.classes = _empty_classes()
        self.groups = {dim: GroupCounts(max_groups) for dim in dict.fromkeys(by)}
        self.top = top
        self.unprocessed: TopCounter[tuple[str, str, str]] = TopCounter(top_capacity)
        self.skipped: Counter[str] = Counter()
        self.malformed = 0
        self.malformed_examples: list[Malformed] = []
        self.examples = examples
        self.accounts: dict[str, AccountActivity] = {}
        self.max_accounts = max_accounts
        self.max_kinds = max_kinds
        self.accounts_untracked = 0

    @property
    def total(self) -> int:
        return sum(self.classes.values())

    def add(self, item: Classified | Skipped | Malformed) -> None:
        if isinstance(item, Malformed):
            self.malformed += 1
            if len(self.malformed_examples) < self.examples:
                self.malformed_examples.append(item)
        elif isinstance(item, Skipped):
            self.skipped[item.why] += 1
        else:
            self._count(item)

    def _count(self, verdict: Classified) -> None:
        e, cls = verdict.event, verdict.traffic_class
        self.classes[cls] += 1
        keys = {"namespace": e.namespace, "user": e.username, "kind": verdict.kind}
        for dim, groups in self.groups.items():
            groups.add(keys[dim], cls)
        if cls == "unprocessed":
            self.unprocessed.add((e.username, verdict.kind, e.namespace))
        if e.username.startswith(SERVICE_ACCOUNT_PREFIX):
            self._account(verdict)

    def _account(self, verdict: Classified) -> None:
        e = verdict.event
        account = self.accounts.get(e.username)
        if account is None:
            if len(self.accounts) >= self.max_accounts:
                self.accounts_untracked += 1
                return
            namespace = e.username[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")[0]
            account = self.accounts[e.username] = AccountActivity(namespace)
        account.requests += 1
        if e.namespace != account.namespace:
            account.outside += 1
            if not account.outside_example:
                where = f"namespace {e.namespace}" if e.namespace else "cluster-scoped"
                account.outside_example = f"{verdict.kind} {e.name or '(collection)'} ({where})"
        if verdict.traffic_class in ("invalid-signature", "unprocessed"):
            if verdict.traffic_class == "unprocessed":
                account.unprocessed += 1
            else:
                account.invalid += 1
            kind = (e.group, verdict.kind)
            if kind not in account.kinds:
                if len(account.kinds) < self.max_kinds:
                    account.kinds.add(kind)
                else:
                    account.too_many_kinds = True
            if e.operation is not None:
                account.operations.add(e.operation)

    def top_unprocessed(self) -> list[TopEntry]:
        return [
            {"user": user, "kind": kind, "namespace": namespace, "count": count}
            for (user, kind, namespace), count, _ in self.unprocessed.most_common(self.top)
        ]

    def to_dict(self) -> Report:
        return {
            "total": self.total,
            "classes": dict(self.classes),
            "by": {dim: groups.to_dict() for dim, groups in self.groups.items()},
            "topUnprocessed": self.top_unprocessed(),
        }

    @property
    def needs_attention(self) -> bool:
        """Would switching enforcement on deny something, or leave something unprotected?"""
        return self.classes["invalid-signature"] + self.classes["unprocessed"] > 0


# --- suggestions (the paper, section 4.2) ------------------------------------------

_KIND = re.compile(r"[A-Za-z][A-Za-z0-9]{0,62}\Z")


@dataclass(frozen=True)
class Suggestion:
    """A proposed skipUsers entry, or (``entry`` None) why an account got none."""

    username: str
    note: str
    entry: dict[str, Any] | None = None


def suggestions(summary: Summary) -> list[Suggestion]:
    """skipUsers entries for service accounts that only ever touch their own namespace's objects.

    An application's own service accounts (an operator, a controller it
    installs) acting on the application's objects in its namespace are the
    cluster working as intended, not a threat (the paper, section 4.2). Only
    accounts with requests enforcement would stop (classes 5 and 6) are
    considered; each entry names the account, the operations it performed, its
    namespace and the API groups and kinds it wrote there -- nothing wider.
    Names that are not valid Kubernetes names
    (a pattern character such as ``*`` or ``,`` would widen the entry) are
    never proposed.
    """
    found: list[Suggestion] = []
    for username in sorted(summary.accounts):
        account = summary.accounts[username]
        if not account.invalid + account.unprocessed:
            continue
        counts = ", ".join(
            f"{n} {cls}"
            for cls, n in (("invalid-signature", account.invalid), ("unprocessed", account.unprocessed))
            if n
        )
        namespace, _, name = username[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")
        if not (DNS_LABEL.match(namespace) and DNS_SUBDOMAIN.match(name)):
            found.append(Suggestion(username, "not a valid service account name; not proposed"))
        elif account.outside:
            found.append(
                Suggestion(
                    username,
                    f"{account.outside} of its {account.requests} requests reach outside namespace {namespace} (e.g. "
                    f"{account.outside_example}); review by hand",
                )
            )
        elif account.too_many_kinds or not all(
            _KIND.match(k) and (not g or DNS_SUBDOMAIN.match(g)) for g, k in account.kinds
        ):
            found.append(
                Suggestion(
                    username,
                    f"writes more than {summary.max_kinds} kinds or kinds without a known name; review by hand",
                )
            )
        else:
            by_group: dict[str, list[str]] = {}
            for group, kind in sorted(account.kinds):
                by_group.setdefault(group, []).append(kind)
            entry = {
                "description": f"{username} manages its own namespace's objects ({counts} of {account.requests} "
                "requests in the audit log); proposed by classify --suggest",
                "users": [username],
                "operations": sorted(account.operations),
                "objects": [
                    {"namespace": namespace, "group": group or "-", "kind": ",".join(kinds)}
                    for group, kinds in by_group.items()
                ],
            }
            found.append(
                Suggestion(username, f"{account.requests} requests, all in namespace {namespace}; {counts}", entry)
            )
    return found


def _comment(text: str) -> str:
    return "# " + "".join(ch if ch.isprintable() else "?" for ch in text)


def suggestion_yaml(summary: Summary, source: str) -> str:
    """The proposals as a policy fragment for a person to review (never applied by this package)."""
    import yaml

    from ..parsing import KubectlSafeDumper

    found = suggestions(summary)
    lines = [
        _comment(f"skipUsers proposed by `manifest-provider classify --suggest` from {source}."),
        "# Review each entry before copying it into the policy: it lets that service",
        "# account write the listed kinds in its own namespace without a signature.",
    ]
    entries = [s.entry for s in found if s.entry is not None]
    if not entries:
        lines.append("# No service account qualifies.")
    # Quoted wherever kubectl (and this package's policy reader) would read a plain string as another type.
    text = yaml.dump(
        {"skipUsers": entries}, Dumper=KubectlSafeDumper, sort_keys=False, default_flow_style=False, width=200
    )
    lines.append(text.rstrip())
    skipped = [s for s in found if s.entry is None]
    if skipped:
        lines.append("# Not proposed:")
        lines.extend(_comment(f"  {s.username}: {s.note}") for s in skipped)
    if summary.accounts_untracked:
        lines.append(
            _comment(
                f"  {summary.accounts_untracked} requests by further service accounts were not tracked (more than "
                f"{summary.max_accounts} accounts)."
            )
        )
    return "\n".join(lines) + "\n"
