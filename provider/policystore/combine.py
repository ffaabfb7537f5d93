"""How the policies the service holds decide one admission request: :func:`admit`.

The rules (``docs/policy.md``, "Cluster and tenant policies"):

1. Until every source has been read once the request is denied, with why
   (:meth:`provider.policystore.store.PolicyStore.problem`); so is every request
   while the policy files cannot be read.
2. A write of a policy object itself (``ClusterManifestPolicy``,
   ``ManifestPolicy``) must hold a policy that compiles under the operator's
   bounds, and a namespace may hold at most
   :data:`~provider.policystore.store.MAX_NAMESPACE_POLICIES`: otherwise it is
   denied (``policy-invalid``), so a tenant learns at once, and nobody can make
   the service hold what it would then have to refuse everything for.
3. The policies that apply: **every** ``ClusterManifestPolicy`` whose match
   holds, and every ``ManifestPolicy`` of the object's own namespace whose match
   holds (never for a cluster-scoped object). A policy that cannot be read
   applies to everything it could (fail closed).
4. None applies: **allowed**, reason ``out-of-scope`` ("no
   ClusterManifestPolicy or ManifestPolicy matches ..."), and counted.
5. Each policy that applies is judged **on its own**, by the one decision every
   face uses (``evaluate``: :func:`provider.verifier.decide` through the
   service's check context): its keys, its exemptions, its ignored fields. A
   policy that did not compile is a ``policy-invalid`` verdict.
6. The request is **denied** when any ``Enforce`` policy denies it: the first
   such verdict, cluster policies first, each group by name, is the answer; the
   others become warnings. ``Audit`` policies never deny: what they would deny
   becomes a warning.

Because each policy is judged on its own and every Enforce verdict must allow,
nothing a tenant writes can loosen a cluster policy: a ``ManifestPolicy``'s
``skipUsers``, ``skipObjects``, ``ignoreFields``, profiles, ``dryRun`` or key
operation change its own verdict only, and its verdict can only add a denial.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..bounds import Bounds
from ..errors import DataError, PolicyError, RequestError, TransientError
from ..objects import ObjectIdentity
from ..result import Result
from ..review import Review
from ..verifier import identity_of
from .objects import API_GROUP, CLUSTER_KIND, NAMESPACED_KIND, PLURALS, Compile, HeldPolicy, read_policy_object
from .store import MAX_NAMESPACE_POLICIES, PolicySet

#: Judges one held policy: the one decision, through the caller's context. Raises
#: :class:`~provider.errors.DataError` or :class:`~provider.errors.TransientError` as decide() does.
Evaluate = Callable[[HeldPolicy, Review], Result]
#: A namespace's labels, or None when they are not known.
Labels = Callable[[str], Mapping[str, str] | None]

#: The API server drops a warning holding a control character and cuts each to 256 characters once
#: a response's warnings pass 4096 (k8s.io/apimachinery ``pkg/util/net/http.go`` ``NewWarningHeader``;
#: k8s.io/apiserver ``pkg/endpoints/filters/warning.go``): at most 16 warnings of at most 256.
MAX_WARNING_CHARS = 256
MAX_WARNINGS = 16


@dataclass(frozen=True)
class PolicyVerdict:
    """One held policy's verdict on the request."""

    policy: HeldPolicy
    result: Result


@dataclass(frozen=True)
class Admission:
    """The answer to one admission request."""

    allowed: bool
    #: The verdict that decided: the first Enforce denial, else the best allowing verdict (a verification
    #: first); for a request only Audit policies matched, their first failure when one failed.
    result: Result
    #: The policy whose verdict :attr:`result` is (None: no policy decided -- none matched, or the
    #: request could not be decided at all).
    decided_by: HeldPolicy | None = None
    verdicts: tuple[PolicyVerdict, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def matched(self) -> bool:
        return bool(self.verdicts)


def _denied(reason: str, message: str) -> Admission:
    return Admission(False, Result.deny(reason, message))  # type: ignore[arg-type]


def warning_text(text: str) -> str:
    """``text`` as the API server passes a warning on: no control characters, at most 256 characters."""
    clean = "".join(" " if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch for ch in text)
    return clean if len(clean) <= MAX_WARNING_CHARS else clean[: MAX_WARNING_CHARS - 1] + "…"


def _target(review: Review) -> dict[str, Any] | None:
    for candidate in (review.object, review.old_object):
        if isinstance(candidate, dict):
            return candidate
    return None


def _namespace_of(review: Review, obj: dict[str, Any], ident: ObjectIdentity) -> str:
    """The namespace the object lives in ("" for a cluster-scoped one, a Namespace included).

    The API server sets ``metadata.namespace`` of a namespaced object to the
    request's before validating admission, and clears it on a cluster-scoped
    one; a Namespace's own requests carry its name as the request's namespace
    (k8s.io/apiserver ``pkg/endpoints/request/requestinfo.go``), which is not
    "in" it.
    """
    meta = obj.get("metadata")
    own = meta.get("namespace") if isinstance(meta, dict) else None
    if isinstance(own, str) and own:
        if review.namespace and review.namespace != own:
            raise RequestError(f"the request is for namespace {review.namespace!r} but the object says {own[:63]!r}")
        return own
    if ident.group == "" and ident.kind == "Namespace":
        return ""
    return review.namespace or ""


def check_policy_object(review: Review, policies: PolicySet, compile: Compile, bounds: Bounds) -> Admission | None:
    """Rule 2: the denial of a policy object that would not compile, or one too many; None to go on."""
    resource = review.resource
    if resource is None or resource.group != API_GROUP or resource.resource not in PLURALS or review.sub_resource:
        return None
    if review.operation not in ("CREATE", "UPDATE") or not isinstance(review.object, dict):
        return None
    try:
        held = read_policy_object(review.object, compile, bounds)
    except PolicyError as exc:
        return _denied("policy-invalid", exc.message)
    if not held.ready:
        return _denied("policy-invalid", f"{held.ref}: {held.error}")
    if held.kind == NAMESPACED_KIND:
        others = [h for h in policies.in_namespace(held.namespace) if h.name != held.name]
        if len(others) >= MAX_NAMESPACE_POLICIES:
            return _denied(
                "policy-invalid",
                f"{held.ref}: namespace {held.namespace} holds {len(others)} {NAMESPACED_KIND}s already; at most "
                f"{MAX_NAMESPACE_POLICIES} are allowed (combine their keys into fewer policies)",
            )
    return None


def _applies(  # noqa: PLR0917 - the request, as read once by admit()
    held: HeldPolicy, review: Review, obj: dict[str, Any], ident: ObjectIdentity, namespace: str, labels: Labels
) -> bool | None:
    """Whether ``held`` applies (rule 3); None when that hangs on a namespace's labels not known yet."""
    if held.namespace and (not namespace or held.namespace != namespace):
        return False
    match = held.match
    if match is None:
        return True  # its match could not be read: it applies to whatever it could (fail closed)
    if not match.matches_kind(ident):
        return False
    if not match.matches_objects((review.object, review.old_object)):
        return False
    return match.matches_namespace(namespace, ident, obj, labels)


def _judge(held: HeldPolicy, review: Review, evaluate: Evaluate) -> Result:
    """Rule 5; raises :class:`RequestError` only (the review itself is unusable, whatever the policy).

    A policy the cluster could not be asked for (a dry-run that failed) is that policy's
    denial with the reason (``dry-run-failed``, ``transient-error``): an Enforce policy's
    then denies the request, naming the policy; an Audit policy's is a warning.
    """
    if not held.ready:
        return Result.deny("policy-invalid", f"{held.ref} cannot be used: {held.error}")
    try:
        return evaluate(held, review)
    except RequestError:
        raise
    except (DataError, TransientError) as exc:
        return Result.from_error(exc)


def _finding(verdict: PolicyVerdict) -> str:
    held, result = verdict.policy, verdict.result
    return warning_text(f"{held.ref} ({held.action}): {result.reason}: {result.message}")


def _best_allow(verdicts: list[PolicyVerdict]) -> PolicyVerdict:
    return next((v for v in verdicts if v.result.verified), verdicts[0])


def admit(
    review: Review,
    policies: PolicySet,
    *,
    evaluate: Evaluate,
    labels: Labels,
    problem: tuple[str, str] | None = None,
) -> Admission:
    """The answer to ``review`` under ``policies`` (the rules in the module docstring).

    ``problem`` is (reason, message) when the service cannot decide now (rule 1).
    Raises :class:`~provider.errors.RequestError` when the review is unusable: the
    whole request's answer.
    """
    if problem is not None:
        return _denied(*problem)
    obj = _target(review)
    if obj is None:
        return Admission(
            True,
            Result.allow(
                "unverifiable-operation", f"{review.operation or 'the request'} carries no object: nothing to match"
            ),
        )
    ident, _ = identity_of(review, obj)
    namespace = _namespace_of(review, obj, ident)
    tenants = policies.in_namespace(namespace)
    if len(tenants) > MAX_NAMESPACE_POLICIES:
        return _denied(
            "policy-invalid",
            f"namespace {namespace} holds {len(tenants)} {NAMESPACED_KIND}s; at most {MAX_NAMESPACE_POLICIES} are "
            "judged, so none is until some are removed",
        )
    applying: list[HeldPolicy] = []
    for held in (*policies.cluster, *tenants):
        applies = _applies(held, review, obj, ident, namespace, labels)
        if applies is None:
            return _denied(
                "transient-error",
                f"{held.ref} selects namespaces by label, and the labels of namespace {namespace} are not known yet; "
                "ask again",
            )
        if applies:
            applying.append(held)
    what = ident.describe()
    if not applying:
        return Admission(True, Result.allow("out-of-scope", f"no {CLUSTER_KIND} or {NAMESPACED_KIND} matches {what}"))
    verdicts = [PolicyVerdict(held, _judge(held, review, evaluate)) for held in applying]
    enforced = [v for v in verdicts if v.policy.action == "Enforce"]
    denials = [v for v in enforced if not v.result.allowed]
    audit_failures = [v for v in verdicts if v.policy.action == "Audit" and not v.result.allowed]
    if denials:
        decided, allowed = denials[0], False
    elif enforced:
        decided, allowed = _best_allow(enforced), True
    elif audit_failures:
        decided, allowed = audit_failures[0], True
    else:
        decided, allowed = _best_allow(verdicts), True
    # Every finding the answer does not carry as its status: the other denials, and what Audit policies would deny.
    noted = [v for v in (*denials, *audit_failures) if v is not decided or allowed]
    warnings = [_finding(v) for v in noted]
    if len(warnings) > MAX_WARNINGS:
        warnings = [*warnings[: MAX_WARNINGS - 1], f"and {len(warnings) - MAX_WARNINGS + 1} more policies' findings"]
    return Admission(allowed, decided.result, decided.policy, tuple(verdicts), tuple(warnings))
