"""``decide``: the verdict for one admission review, in named steps.

The order, each step a function below: our own dry-run requests; the object and
its identity; scope (``inScopeObjects``, the built-in profiles' out-of-scope
kinds) and ``skipObjects``; exemptions (``skipUsers``); operations without a new
object and subresources without a signature; the control plane's own objects;
then :func:`provider.verifier.verification.verify`, its failures turned into a
denial -- or, for a difference an exempt controller may make, a tolerated one.
"""

from __future__ import annotations

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
from ..limits import DEFAULT_LIMITS, Limits
from ..objects import ObjectIdentity
from ..policy.schema import PROFILES, Policy, UserRule, load_profile
from ..resources import BUILTIN_KINDS
from ..result import Result, reason_of
from ..review import Review
from ..signatures.sources import Sources
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
    *,
    dry_runner: DryRunner | None = None,
    now: datetime | None = None,
    limits: Limits = DEFAULT_LIMITS,
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
    """
    if review.dry_run:
        return Result.allow(
            "dry-run-request",
            "dry-run requests change nothing and are allowed (this also lets the verifier's own dry-runs through)",
        )
    # A DELETE (or CONNECT) carries no new object: scope and profiles are read
    # from the object it acts on (admission's oldObject), so the traffic table
    # can tell a controller's deletes from a person's.
    no_new_object = review.operation in ("DELETE", "CONNECT")
    obj = review.old_object if no_new_object else review.object
    if no_new_object and not isinstance(obj, dict):
        return Result.allow(
            "unverifiable-operation",
            f"{review.operation} requests carry no new object to verify; allowed unverified",
            "policy",
        )
    if not isinstance(obj, dict):
        raise RequestError("the review has no object to verify")
    bounded(obj, "the object", limits)
    if isinstance(review.old_object, dict) and review.old_object is not obj:
        bounded(review.old_object, "the old object", limits)
    ident, foreign = identity_of(review, obj)
    what = ident.describe()
    if policy.in_scope_objects and not any(
        ref.matches(ident, unknown_kind_matches=True) for ref in policy.in_scope_objects
    ):
        return Result.allow("out-of-scope", f"{what} is not in the policy's inScopeObjects", "policy")
    own = ObjectIdentity.of(
        obj, review.namespace
    )  # out-of-scope kinds are read from the object itself (a TokenRequest)
    for profile in policy.profiles:
        if any(ref.matches(own) for ref in profile.out_of_scope):
            return Result.allow(
                "out-of-scope", f"{own.kind} objects are out of scope (built-in profile '{profile.name}')", "common"
            )
    if any(ref.matches(ident) for ref in policy.skip_objects):
        return Result.allow("skipped-object", f"{what} matches the policy's skipObjects", "policy")
    exemption = find_exemption(review, policy, ident)
    if exemption is not None:
        rule, profile_name = exemption
        scope = f" ({', '.join(rule.fields)} only)" if rule.fields else ""
        source = f" (built-in profile '{profile_name}')" if profile_name else ""
        return Result.allow(
            "skipped-user",
            f"{review.username} may {(review.operation or 'change').lower()} {what} unsigned{scope}: "
            f"{rule.describe()}{source}",
            "common" if profile_name else "policy",
        )
    if no_new_object or foreign == "no-content":
        return Result.allow(
            "unverifiable-operation",
            f"{review.operation} of {what} by {review.username or 'an unnamed user'}: there is no new object and so no "
            "signature to check; allowed unverified, no profile covers it",
        )
    if foreign is not None:
        return Result.deny(
            "unverifiable-subresource",
            f"{review.operation or 'a change'} of {what} by {review.username or 'an unnamed user'}: a {own.kind} "
            "carries no signature, "
            f"so a change through the {ident.subresource} subresource cannot be verified; change the signed manifest "
            "instead, "
            f"or exempt the requester (skipUsers with objects[].subresource: {ident.subresource})",
        )
    owned = _control_plane_object(review, obj, policy, ident, limits)
    if owned is not None and not owned.deviations:
        return Result.allow(
            "control-plane-object",
            f"{what} is the control plane's: {owned.written.writer} writes it into every namespace, and it holds "
            f"exactly what that writes; nobody signs it, so it is allowed unverified (built-in profile "
            f"'{owned.profile}')",
            "common",
        )
    try:
        facts = verify_bounded(
            obj, policy, review.namespace, dry_runner, now, limits, sources, deadline, held=review.held
        )
    except Unsigned as unsigned:
        if owned is None:
            return _denied(what, unsigned, limits, _profile_hint(review, policy, ident))
        return _changed_control_plane_object(what, owned, limits)
    except ContentMismatch as mismatch:
        tolerated = (
            None
            if isinstance(mismatch, DeletionFinalizersAdded)
            else _controller_changes(review, obj, policy, ident, mismatch)
        )
        if tolerated is None:
            return _denied(what, mismatch, limits)
        return Result.proven(
            f"{what} matches its signed manifest but for {tolerated}",
            tuple(mismatch.signers),
            used_cluster=mismatch.used_cluster,
        )
    except VerificationFailure as failure:
        return _denied(what, failure, limits)
    signed_by = ", ".join(s if isinstance(s, str) else s.get("subject", "?") for s in facts.signers[:3])
    how = " after a server-side dry-run" if facts.dry_run else ""
    return Result.proven(
        f"{what} matches its signed manifest{how} (signed by {signed_by})",
        facts.signers,
        used_cluster=facts.used_cluster,
    )
