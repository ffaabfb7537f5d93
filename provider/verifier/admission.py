"""``decide``: the verdict for one admission review, in named steps.

The order, each step a function below: our own dry-run requests; the object and
its identity; scope (``inScopeObjects``, the built-in profiles' out-of-scope
kinds) and ``skipObjects``; exemptions (``skipUsers``); operations without a new
object and subresources without a signature; the control plane's own objects;
then :func:`provider.verifier.verification.verify`, its failures turned into a
denial -- or, for a difference an exempt controller may make, a tolerated one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ..compare.controlplane import Deviation, Written, describe, deviations
from ..compare.diff import redact
from ..compare.dryrun import DryRunner
from ..errors import (
    ContentMismatch,
    RequestError,
    Unsigned,
    VerificationFailure,
)
from ..limits import Limits
from ..objects import ObjectIdentity
from ..policy.schema import PROFILES, Policy, UserRule, load_profile
from ..resources import BUILTIN_KINDS
from ..result import Result, reason_of
from ..review import Review
from ..signatures.sources import Sources
from .context import Context
from .verification import DeletionFinalizersAdded, bounded, value_at, verify_bounded


def _controller_changes(
    review: Review, obj: dict[str, Any], policy: Policy, ident: ObjectIdentity, mismatch: ContentMismatch
) -> str | None:
    """A description of the differences, when each lies in a field an exemption lets a trusted controller change.

    Such a difference on a live object is a controller's work -- the autoscaler's
    ``spec.replicas``, the garbage collector's owner references -- admitted
    through its exemption, not a change to the signed content. It is tolerated
    (and named) only where nobody in the request can have made it: in an audit
    review (no operation, no user: the object as it is stored), and in an UPDATE
    that leaves the field exactly as ``oldObject`` had it. Never on CREATE, and
    never from what a client chooses (a ``managedFields`` manager name).
    None when any difference falls outside, or the request itself changed one.
    """
    items = mismatch.diff
    if not items:
        return None
    if review.is_audit:
        if not review.live:
            return None  # a file, not the stored object: nothing but its author changed it
        old = None
    elif review.operation == "UPDATE" and isinstance(review.old_object, dict):
        old = review.old_object
    else:
        return None
    lenders = policy.controller_fields_for(ident)
    named: dict[str, list[str]] = {}
    for item in items:
        lender = next((rule for fields, rule in lenders if fields.ignores(item.path)), None)
        if lender is None:
            return None
        if old is not None and value_at(obj, item.path) != value_at(old, item.path):
            return None  # this request changed it: only the controller itself may
        named.setdefault(lender.describe(), []).append(item.key)
    parts = [f"{', '.join(keys[:3])}{' and more' if len(keys) > 3 else ''} ({who})" for who, keys in named.items()]
    return "; ".join(parts) + ", which an exempt controller may change"


@dataclass(frozen=True)
class _Owned:
    """A stored object the control plane owns by name and kind, and where it is not as its writer writes it."""

    written: Written
    profile: str
    deviations: tuple[Deviation, ...]


def _control_plane_object(
    review: Review, obj: dict[str, Any], policy: Policy, ident: ObjectIdentity, limits: Limits
) -> _Owned | None:
    """For a review without a request, the control-plane object ``obj`` is (``compare/controlplane.py``), if any.

    Only where nobody asks (an audit review of a stored object: Gatekeeper's
    audit, a background scan, ``verify-resource``, the observer): at admission
    the common profile's ``skipUsers`` let the writer through by identity, and
    anyone else's write of the same object is verified. A file given to the CLI
    is not the stored object either.
    """
    if not (review.is_audit and review.live):
        return None
    found = policy.control_plane_object(ident)
    if found is None:
        return None
    written, profile = found
    found_deviations = deviations(written, obj, limits)
    items = redact([d.item for d in found_deviations], policy.sensitive_for(ident))
    return _Owned(
        written, profile, tuple(replace(d, item=item) for d, item in zip(found_deviations, items, strict=True))
    )


def _profile_hint(review: Review, policy: Policy, ident: ObjectIdentity) -> str:
    """For a stored object that a built-in profile the policy does not enable takes for the control plane's: which.

    The opt-in ``openshift`` profile's ``openshift-service-ca.crt`` is in every
    namespace of an OpenShift cluster: its audit would list it as ``unsigned``
    everywhere, and the fix is the profile, not a signature.
    """
    if not (review.is_audit and review.live):
        return ""
    for name in PROFILES:
        if name in policy.defaults:
            continue
        written = next((w for w in load_profile(name).control_plane_objects if w.owns(ident)), None)
        if written is not None:
            return (
                f"; {written.writer} writes this object into every namespace: on a cluster that runs it, enable the "
                f"built-in profile '{name}' (policy defaults)"
            )
    return ""


def _changed_control_plane_object(what: str, owned: _Owned, limits: Limits) -> Result:
    """An unsigned control-plane object that is not as its writer writes it: listed, naming each field."""
    items = tuple(d.item for d in owned.deviations)
    return Result.deny(
        "control-plane-object-changed",
        # The difference first: Gatekeeper keeps 256 bytes of a violation's message in the constraint's status
        # (open-policy-agent/gatekeeper pkg/audit/manager.go, msgSize).
        f"{what} is not as the control plane writes it: {describe(list(owned.deviations), limits)}; "
        f"{owned.written.writer} writes it into every namespace, unsigned. If the change is meant, sign the "
        "object; if not, the API server's audit log says who made it, and deleted, the object is written anew",
        diff=items[: limits.max_diff_items],
        diff_count=len(items),
    )


def _denied(what: str, failure: VerificationFailure, limits: Limits, hint: str = "") -> Result:
    items = tuple(failure.diff)
    return Result.deny(
        reason_of(failure),
        f"{what}: {failure.message}{hint}",
        signers=tuple(failure.signers),
        diff=items[: limits.max_diff_items],
        diff_count=len(items),
        used_cluster=failure.used_cluster,
    )


#: Subresource objects that are not the parent's kind and carry no signature:
#: (group, kind) -> what a request through them does (``docs/policy.md``, "Subresources").
#: ``Scale`` and ``Binding`` change the parent's content (``spec.replicas``,
#: ``spec.nodeName``) without a signature; ``Eviction`` deletes the Pod and
#: ``TokenRequest`` mints a token: neither brings new content, like a DELETE.
FOREIGN_SUBRESOURCE_OBJECTS = {
    ("autoscaling", "Scale"): "change",
    ("", "Binding"): "change",
    ("policy", "Eviction"): "no-content",
    ("authentication.k8s.io", "TokenRequest"): "no-content",
}


def identity_of(review: Review, obj: dict[str, Any]) -> tuple[ObjectIdentity, str | None]:
    """What scope, skip and exemption rules match, and whether the object is a foreign subresource object.

    For a request on a subresource whose object is the parent's own kind
    (``status``, ``ephemeralcontainers``, ``resize``, ``finalize``) that is the
    object, marked with the subresource. For one whose object is of another
    kind (``scale``: a ``Scale``) it is the parent -- group and kind from the
    request's ``resource``, the kind unknown for a custom resource -- so that a
    rule written for ``Deployment`` covers ``kubectl scale deployment`` too.
    """
    ident = ObjectIdentity.of(obj, review.namespace)
    sub = review.sub_resource or ""
    foreign = FOREIGN_SUBRESOURCE_OBJECTS.get((ident.group, ident.kind))
    if foreign is None:
        return (replace(ident, subresource=sub) if sub else ident), None
    parent = review.resource
    group, version = (parent.group, parent.version) if parent is not None else ("", "")
    kind = BUILTIN_KINDS.get((group, parent.resource), "") if parent is not None else ""
    name = review.name or ident.name
    parent_ident = ObjectIdentity(
        group,
        version,
        kind,
        name,
        review.namespace or ident.namespace,
        subresource=sub or ident.kind.lower(),
        kind_known=bool(kind),
    )
    return parent_ident, foreign


def find_exemption(review: Review, policy: Policy, ident: ObjectIdentity) -> tuple[UserRule, str | None] | None:
    """The first exemption covering the request: built-in profiles first, then the policy's ``skipUsers``."""
    if review.is_audit or review.username is None:
        return None
    for profile in policy.profiles:
        for rule in profile.skip_users:
            if rule.matches(review, ident):
                return rule, profile.name
    for rule in policy.skip_users:
        if rule.matches(review, ident):
            return rule, None
    return None


def decide(
    review: Review,
    policy: Policy,
    context: Context | None = None,
    *,
    dry_runner: DryRunner | None = None,
    now: datetime | None = None,
    limits: Limits | None = None,
    sources: Sources | None = None,
    deadline: float | None = None,
) -> Result:
    """The verdict for one admission review.

    Order: our own dry-run requests; scope (``inScopeObjects``, the built-in
    profiles' out-of-scope kinds); ``skipObjects``; exemptions (``skipUsers``:
    built-in profiles first, then the policy's; not for audit reviews);
    operations without a new object (DELETE, CONNECT, an eviction: allowed,
    nothing to verify); changes through a subresource whose object carries no
    signature (``scale``, ``binding``: denied); in a review without a request,
    an object a profile lists as the control plane's that holds exactly what its
    writer writes (``control-plane-object``, :mod:`provider.compare.controlplane`); then
    :func:`verify` -- where such an object is unsigned and not as written,
    ``control-plane-object-changed`` naming the differences. Raises only
    :class:`RequestError` (the review is unusable),
    :class:`~provider.errors.PolicyError` (the policy names what its bounds do not
    allow: a signature ConfigMap in another namespace) and
    :class:`~provider.errors.TransientError` (the cluster could not be asked).
    ``deadline`` (a :func:`time.monotonic` instant) ends every fetch at the latest.
    ``context`` carries the dry-run client, the clock, the limits, the sources and
    the deadline in one (:class:`~provider.verifier.context.Context`; the service's
    check context is one); the keyword arguments of the same names still work,
    instead of it.
    """
    ctx = Context.of(context, dry_runner=dry_runner, now=now, limits=limits, sources=sources, deadline=deadline)
    if review.dry_run:
        return Result.allow(
            "dry-run-request",
            "dry-run requests change nothing and are allowed (this also lets the verifier's own dry-runs through)",
        )
    obj = _object_under_review(review, ctx.limits)
    if obj is None:
        return Result.allow(
            "unverifiable-operation",
            f"{review.operation} requests carry no new object to verify; allowed unverified",
            "policy",
        )
    case = _Case(review, policy, obj, *identity_of(review, obj))
    for step in _BEFORE_VERIFYING:
        verdict = step(case)
        if verdict is not None:
            return verdict
    return _verified(case, ctx)


@dataclass(frozen=True)
class _Case:
    """One review under one policy, as :func:`decide`'s steps read it."""

    review: Review
    policy: Policy
    #: The object the request acts on: the new one, or for a DELETE or CONNECT the old one.
    obj: dict[str, Any]
    #: What scope, skip and exemption rules match (:func:`identity_of`).
    ident: ObjectIdentity
    #: What a request through a subresource whose object is of another kind does (``change``, ``no-content``).
    foreign: str | None

    @property
    def what(self) -> str:
        return self.ident.describe()

    @property
    def no_new_object(self) -> bool:
        return _acts_on_old_object(self.review)


def _acts_on_old_object(review: Review) -> bool:
    # A DELETE (or CONNECT) carries no new object: scope and profiles are read
    # from the object it acts on (admission's oldObject), so the traffic table
    # can tell a controller's deletes from a person's.
    return review.operation in ("DELETE", "CONNECT")


def _object_under_review(review: Review, limits: Limits) -> dict[str, Any] | None:
    """The object the request acts on, bounded (with the old object); ``None`` for a DELETE or CONNECT without one."""
    no_new_object = _acts_on_old_object(review)
    obj = review.old_object if no_new_object else review.object
    if no_new_object and not isinstance(obj, dict):
        return None
    if not isinstance(obj, dict):
        raise RequestError("the review has no object to verify")
    bounded(obj, "the object", limits)
    if isinstance(review.old_object, dict) and review.old_object is not obj:
        bounded(review.old_object, "the old object", limits)
    return obj


def _out_of_scope(case: _Case) -> Result | None:
    """Allowed when the policy's ``inScopeObjects`` leave the object out, or a built-in profile's out-of-scope kinds."""
    policy = case.policy
    if policy.in_scope_objects and not any(
        ref.matches(case.ident, unknown_kind_matches=True) for ref in policy.in_scope_objects
    ):
        return Result.allow("out-of-scope", f"{case.what} is not in the policy's inScopeObjects", "policy")
    own = ObjectIdentity.of(case.obj, case.review.namespace)  # read from the object itself (a TokenRequest)
    for profile in policy.profiles:
        if any(ref.matches(own) for ref in profile.out_of_scope):
            return Result.allow(
                "out-of-scope", f"{own.kind} objects are out of scope (built-in profile '{profile.name}')", "common"
            )
    return None


def _skipped_object(case: _Case) -> Result | None:
    if any(ref.matches(case.ident) for ref in case.policy.skip_objects):
        return Result.allow("skipped-object", f"{case.what} matches the policy's skipObjects", "policy")
    return None


def _exempted(case: _Case) -> Result | None:
    """Allowed unsigned when an exemption (``skipUsers``) covers the requester (:func:`find_exemption`)."""
    review = case.review
    exemption = find_exemption(review, case.policy, case.ident)
    if exemption is None:
        return None
    rule, profile_name = exemption
    scope = f" ({', '.join(rule.fields)} only)" if rule.fields else ""
    source = f" (built-in profile '{profile_name}')" if profile_name else ""
    return Result.allow(
        "skipped-user",
        f"{review.username} may {(review.operation or 'change').lower()} {case.what} unsigned{scope}: "
        f"{rule.describe()}{source}",
        "common" if profile_name else "policy",
    )


def _without_signature(case: _Case) -> Result | None:
    """A request that brings no content (allowed) or changes content through an object without a signature (denied)."""
    review, what = case.review, case.what
    if case.no_new_object or case.foreign == "no-content":
        return Result.allow(
            "unverifiable-operation",
            f"{review.operation} of {what} by {review.username or 'an unnamed user'}: there is no new object and so no "
            "signature to check; allowed unverified, no profile covers it",
        )
    if case.foreign is not None:
        own_kind = ObjectIdentity.of(case.obj, review.namespace).kind
        sub = case.ident.subresource
        return Result.deny(
            "unverifiable-subresource",
            f"{review.operation or 'a change'} of {what} by {review.username or 'an unnamed user'}: a {own_kind} "
            "carries no signature, "
            f"so a change through the {sub} subresource cannot be verified; change the signed manifest instead, "
            f"or exempt the requester (skipUsers with objects[].subresource: {sub})",
        )
    return None


#: :func:`decide`'s steps before verification, in order: the first verdict ends the decision.
_BEFORE_VERIFYING: tuple[Callable[[_Case], Result | None], ...] = (
    _out_of_scope,
    _skipped_object,
    _exempted,
    _without_signature,
)


def _verified(case: _Case, ctx: Context) -> Result:
    """The verdict of :func:`verify`, for an object no earlier step decided (or the control plane's, as written)."""
    review, what = case.review, case.what
    owned = _control_plane_object(review, case.obj, case.policy, case.ident, ctx.limits)
    if owned is not None and not owned.deviations:
        return Result.allow(
            "control-plane-object",
            f"{what} is the control plane's: {owned.written.writer} writes it into every namespace, and it holds "
            f"exactly what that writes; nobody signs it, so it is allowed unverified (built-in profile "
            f"'{owned.profile}')",
            "common",
        )
    try:
        facts = verify_bounded(case.obj, case.policy, review.namespace, ctx, held=review.held)
    except VerificationFailure as failure:
        return _failed(case, failure, owned, ctx.limits)
    signed_by = ", ".join(s if isinstance(s, str) else s.get("subject", "?") for s in facts.signers[:3])
    how = " after a server-side dry-run" if facts.dry_run else ""
    return Result.proven(
        f"{what} matches its signed manifest{how} (signed by {signed_by})",
        facts.signers,
        used_cluster=facts.used_cluster,
    )


def _failed(case: _Case, failure: VerificationFailure, owned: _Owned | None, limits: Limits) -> Result:
    """A failed verification's verdict: a denial, unless the difference is an exempt controller's (tolerated)."""
    what = case.what
    if isinstance(failure, Unsigned):
        if owned is None:
            return _denied(what, failure, limits, _profile_hint(case.review, case.policy, case.ident))
        return _changed_control_plane_object(what, owned, limits)
    if not isinstance(failure, ContentMismatch) or isinstance(failure, DeletionFinalizersAdded):
        return _denied(what, failure, limits)
    tolerated = _controller_changes(case.review, case.obj, case.policy, case.ident, failure)
    if tolerated is None:
        return _denied(what, failure, limits)
    return Result.proven(
        f"{what} matches its signed manifest but for {tolerated}",
        tuple(failure.signers),
        used_cluster=failure.used_cluster,
    )
