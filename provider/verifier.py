"""``verify`` and ``decide``: the one decision every entry point shares.

:func:`decide` answers an admission review (scope, profiles, then
verification); :func:`verify` proves one object is what its signers signed,
returning the facts or raising a :class:`~provider.errors.VerificationFailure`
whose ``reason`` says what is wrong. Both are pure functions of their inputs
(plus the optional dry-run client): no HTTP, no Flask, no argparse here.

The steps of :func:`verify`, numbered as in ``docs/architecture.md``:

1. read the envelope from the object's annotations (message, signature sets);
2. check every trusted key / signer against every signature set over the
   payload bytes, and apply keyOperation / threshold;
3. find the one document in the payload with this object's group, kind, name
   (and namespace, when the signed document has one) -- never by value;
4. compare it with the object, leaf by leaf, outside the ignored fields;
5. if they differ and the policy enables dry-run, ask the cluster what it makes
   of the signed document and compare that with the object, by value.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache, partial
from typing import Any, Protocol

from .compare import DiffItem, diff
from .envelope import Envelope, read_envelope
from .errors import (
    ContentMismatch,
    MalformedMessage,
    NoMatchingManifest,
    RequestError,
    SignatureInvalid,
    ThresholdNotMet,
    VerificationFailure,
)
from .keys import PublicKey
from .limits import DEFAULT_LIMITS, Limits
from .patterns import ObjectIdentity, split_api_version
from .policy import Policy, SignerSpec
from .result import Result, Signer
from .review import Review

log = logging.getLogger(__name__)


class DryRunner(Protocol):
    """Creates a manifest with ``dryRun=All`` and returns what the API server made of it.

    The deadline is the runner's to keep, and step 5 relies on it: it uses
    whatever :meth:`dry_run` returns. So a runner returns only an answer that
    was complete within its deadline -- every exchange with the API server
    (discovery, the create, a retry), connection and whole body included -- and
    raises :class:`~provider.errors.TransientError` ``dry-run-failed`` for an
    answer that was not, never returning it; and it returns or raises within
    its deadline plus a bounded margin, so the caller's thread is free by then
    (:class:`provider.kube.KubeDryRunner`: ``Limits.dry_run_timeout`` plus
    ``DEADLINE_MARGIN_SECONDS``).
    """

    def dry_run(self, manifest: dict[str, Any], namespace: str | None) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Outcome:
    """What checking one trusted key or signer against the signature sets found.

    ``signer`` is the first signer that satisfied the anchor; ``others`` the further
    ones, when the caller asked for every one (a threshold counts distinct signers).
    """

    verified: bool
    signer: Signer | None = None
    reason: str = "signature-invalid"
    detail: str = ""
    others: tuple[Signer, ...] = ()

    @property
    def candidates(self) -> tuple[Signer, ...]:
        return (self.signer, *self.others) if self.signer is not None else ()


@dataclass(frozen=True)
class Verification:
    """The facts a successful :func:`verify` proves."""

    signers: tuple[Signer, ...]
    document: dict[str, Any]
    payload_format: str
    used_cluster: bool = False


# --- step 2: keys and signers -----------------------------------------------------


def _check_key(key: PublicKey, envelope: Envelope) -> Outcome:
    data = envelope.payload.data
    for sig_set in envelope.sets:
        if key.verifies(sig_set.signature, data):
            return Outcome(True, key.fingerprint)
    return Outcome(False, None, "signature-invalid", f"key {key.label()} verifies none of them")


def _check_signer(spec: SignerSpec, envelope: Envelope, policy: Policy, now: datetime | None, limits: Limits, *, every: bool) -> Outcome:
    from .keyless import check_signer  # sigstore and certificate machinery: loaded only when used

    return check_signer(spec, envelope, policy.trusted_root, now=now, limits=limits, every=every)


def _signer_id(signer: Signer) -> Any:
    return signer if isinstance(signer, str) else (signer.get("subject"), signer.get("issuer"))


class _DistinctSigners:
    """A maximum matching of anchors to distinct signers, grown one anchor at a time.

    Each satisfied anchor lists every signer that satisfies it; the largest set of
    (anchor, signer) pairs using no anchor and no signer twice is how many
    *different* signers stand behind the object. Adding an anchor grows that
    maximum by one exactly when an augmenting path starts from it (Kuhn's
    algorithm), so checking can stop as soon as the count reaches the threshold,
    whatever order the signature sets come in.
    """

    def __init__(self) -> None:
        self._candidates: list[tuple[Signer, ...]] = []
        self._owner: dict[Any, int] = {}  # signer id -> the anchor it is matched to
        self._chosen: dict[int, Signer] = {}  # anchor -> its signer

    def add(self, candidates: tuple[Signer, ...]) -> None:
        self._candidates.append(candidates)
        self._augment(len(self._candidates) - 1, set())

    def _augment(self, anchor: int, seen: set[Any]) -> bool:
        for signer in self._candidates[anchor]:
            ident = _signer_id(signer)
            if ident in seen:
                continue
            seen.add(ident)
            if ident not in self._owner or self._augment(self._owner[ident], seen):
                self._owner[ident] = anchor
                self._chosen[anchor] = signer
                return True
        return False

    def __len__(self) -> int:
        return len(self._chosen)

    @property
    def signers(self) -> tuple[Signer, ...]:
        """The matched signers, in the order of the anchors they stand for."""
        return tuple(self._chosen[anchor] for anchor in sorted(self._chosen))


def _first_signers(outcomes: list[tuple[str, Outcome]]) -> tuple[Signer, ...]:
    """Each verified anchor's first signer, once each, in policy order."""
    signers: list[Signer] = []
    for _, outcome in outcomes:
        if outcome.verified and outcome.signer is not None and outcome.signer not in signers:
            signers.append(outcome.signer)
    return tuple(signers)


def _check_anchors(envelope: Envelope, policy: Policy, now: datetime | None, limits: Limits) -> tuple[Signer, ...]:
    """The keys/signers that verify, in policy order, stopping once the requirement is met.

    Keys are tried before keyless signers (a key costs one signature check, a
    signer a certificate chain and a transparency-log entry). A verdict's
    ``signers`` therefore lists who verified *until the policy was satisfied*,
    not necessarily every listed key that signed.

    ``MustAll`` needs every listed key and signer entry to verify. ``AtLeastOne``
    and ``threshold`` count *distinct signers* (:class:`_DistinctSigners`): two
    overlapping signer entries (``subjectRegExp: .*@corp`` and ``subject:
    jane@corp``) count once when only jane signed -- one person never meets a
    threshold of two -- and twice when bob signed too, in either order.
    """
    must_all = policy.key_operation == "MustAll" and policy.threshold is None
    required = policy.required_count
    every = not must_all and required > 1  # distinctness matters: an entry lists every signer it accepts
    checks: list[tuple[str, Callable[[], Outcome]]] = [(key.label(), partial(_check_key, key, envelope)) for key in policy.keys]
    checks += [(spec.describe(), partial(_check_signer, spec, envelope, policy, now, limits, every=every)) for spec in policy.signers]
    outcomes: list[tuple[str, Outcome]] = []
    distinct = _DistinctSigners()
    satisfied = 0
    met = False
    for label, run in checks:
        outcome = run()
        outcomes.append((label, outcome))
        if outcome.verified and outcome.signer is not None:
            satisfied += 1
            distinct.add(outcome.candidates)
            met = (satisfied if must_all else len(distinct)) >= required
            if met:
                break
    verified = _first_signers(outcomes) if must_all else distinct.signers
    if met:
        return verified
    failed = [(label, o) for label, o in outcomes if not o.verified]
    sets = len(envelope.sets)
    count = f"{sets} signature{'s' if sets != 1 else ''}"
    unread = ""
    if envelope.unread:
        unread = f"; {', '.join(envelope.unread)} not read: signature numbering stops at the first gap"
    details = "; ".join(o.detail for _, o in failed[:3] if o.detail)
    if not verified:
        reasons = {o.reason for _, o in failed}
        reason = reasons.pop() if len(reasons) == 1 else "signature-invalid"
        raise SignatureInvalid(
            f"no trusted key or signer verifies the object's {count} ({details}){unread}", reason=reason
        )
    if must_all:
        shortfall = f"{satisfied} of the {required} keys and signers required by MustAll verified"
    else:
        shortfall = f"{len(verified)} distinct signer{'s' if len(verified) != 1 else ''} verified, {policy.requirement()} requires {required}"
    missing = ", ".join(label for label, _ in failed[:5]) or "(entries satisfied by the same signer)"
    raise ThresholdNotMet(
        f"{shortfall} for the object's {count}; not verified: {missing}{unread}",
        signers=verified,
    )


# --- step 3: the signed document for this object ----------------------------------


def find_document(documents: list[dict[str, Any]], obj: dict[str, Any], namespace: str | None) -> dict[str, Any]:
    """The document signed *for this object*: same group, kind and name (and namespace if it has one)."""
    ident = ObjectIdentity.of(obj, namespace)
    raw_meta = obj.get("metadata")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    name_field = "name" if meta.get("name") else "generateName"
    candidates = []
    same_kind = []
    for doc in documents:
        doc_meta = doc.get("metadata")
        doc_meta = doc_meta if isinstance(doc_meta, dict) else {}
        if split_api_version(doc.get("apiVersion"))[0] != ident.group or doc.get("kind") != ident.kind:
            continue
        same_kind.append(doc)
        if not meta.get(name_field) or doc_meta.get(name_field) != meta.get(name_field):
            continue
        doc_ns = doc_meta.get("namespace")
        if doc_ns and doc_ns != ident.namespace:
            continue
        candidates.append(doc)
    if len(candidates) == 1:
        return candidates[0]
    if len(candidates) > 1:
        raise MalformedMessage(f"the message holds {len(candidates)} documents for {ident.describe()}; it is ambiguous")
    if same_kind:
        signed = ", ".join(ObjectIdentity.of(d).describe() for d in same_kind[:3])
        more = f" and {len(same_kind) - 3} more" if len(same_kind) > 3 else ""
        raise NoMatchingManifest(
            f"the message signs {signed}{more}, not {ident.describe()}; a signature for one object never verifies another"
        )
    kinds = sorted({f"{d.get('kind')}" for d in documents})[:5]
    raise NoMatchingManifest(
        f"the message holds no {ident.kind or 'object'} (it signs {', '.join(map(str, kinds)) or 'nothing'}); "
        f"it was not signed for {ident.describe()}"
    )


# --- step 4: comparison -----------------------------------------------------------


@lru_cache(maxsize=64)
def _envelope_annotation(domain: str) -> Callable[[str], Any]:
    return re.compile(re.escape(domain) + r"/(?:message|(?:signature|certificate|bundle)(?:_\d+)?)\Z").match


def without_envelope(obj: dict[str, Any], domain: str) -> dict[str, Any]:
    """A shallow copy without what never belongs to the signed content.

    The signature annotations cannot be part of what they sign, and
    ``metadata.namespace`` was already checked as part of the identity.
    """
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return obj
    meta = dict(meta)
    meta.pop("namespace", None)
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        is_envelope = _envelope_annotation(domain)
        meta["annotations"] = {k: v for k, v in annotations.items() if not is_envelope(k)}
    return {**obj, "metadata": meta}


def _quote(value: Any, limits: Limits) -> str:
    text = f"'{value}'" if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limits.max_quoted_value else text[: limits.max_quoted_value - 1] + "…"


def describe_diff(items: list[DiffItem], limits: Limits = DEFAULT_LIMITS) -> str:
    first = items[0]
    if first.before is None:
        text = f"{first.key} was added: admitted {_quote(first.after, limits)}, not in the signed manifest"
    elif first.after is None:
        text = f"{first.key} was removed: signed {_quote(first.before, limits)}, absent from the admitted object"
    else:
        text = f"{first.key} differs: signed {_quote(first.before, limits)}, admitted {_quote(first.after, limits)}"
    if len(items) > 1:
        keys = ", ".join(item.key for item in items[1:4])
        more = f" and {len(items) - 4} more" if len(items) > 4 else ""
        text += f"; {len(items) - 1} more difference{'s' if len(items) > 2 else ''}: {keys}{more}"
    return text


def verify(
    obj: Any,
    policy: Policy,
    *,
    namespace: str | None = None,
    dry_runner: DryRunner | None = None,
    now: datetime | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> Verification:
    """Prove ``obj`` is what the policy's keys/signers signed, or raise why not."""
    if not isinstance(obj, dict):
        raise RequestError(f"the object to verify is a {type(obj).__name__}, not a Kubernetes object")
    meta = obj.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise MalformedMessage("metadata is not a mapping")
    meta = meta or {}
    # 1. the envelope
    envelope = read_envelope(meta.get("annotations"), policy.annotation_domain, limits)
    # 2. keys and signers over the payload bytes
    signers = _check_anchors(envelope, policy, now, limits)
    # 3. the document signed for this object
    try:
        document = find_document(envelope.payload.documents(limits), obj, namespace)
    except VerificationFailure as failure:
        failure.signers = signers
        raise
    # 4. compare outside the ignored fields
    ident = ObjectIdentity.of(obj, namespace)
    if policy.unsafe_unanchored_ignore_fields and policy.ignore_fields:
        log.warning("unsafeUnanchoredIgnoreFields is on for %s: ignore patterns match anywhere in a path", ident.describe())
    ignore = policy.ignore_set_for(ident)
    domain = policy.annotation_domain
    items = diff(without_envelope(document, domain), without_envelope(obj, domain), ignore)
    if not items:
        return Verification(signers, document, envelope.payload.format)
    # 5. dry-run: what does the cluster make of the signed document?
    hint, used_cluster = "", False
    if policy.dry_run.enabled:
        if dry_runner is not None:
            from .dryrun import compare_with_dry_run

            try:
                items = compare_with_dry_run(document, obj, namespace, policy, ignore, dry_runner)
            except VerificationFailure as failure:  # the API server rejected the signed manifest
                failure.signers, failure.used_cluster = signers, True
                raise
            if not items:
                return Verification(signers, document, envelope.payload.format, used_cluster=True)
            # The "before" values are now the dry-run's, not the bare manifest's.
            hint, used_cluster = " (compared with the API server's dry-run of the signed manifest)", True
        else:
            hint = " (dry-run is enabled in the policy, but no cluster was available to run it)"
    raise ContentMismatch(describe_diff(items, limits) + hint, diff=tuple(items), signers=signers, used_cluster=used_cluster)


# --- decide -----------------------------------------------------------------------


def decide(
    review: Review,
    policy: Policy,
    *,
    dry_runner: DryRunner | None = None,
    now: datetime | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> Result:
    """The verdict for one admission review.

    Order: our own dry-run requests; operations without a new object (DELETE,
    CONNECT: matched by the object they act on, then allowed); scope
    (``inScopeObjects``, the common profile's out-of-scope kinds); ``skipObjects``;
    ``skipUsers`` (common profile first, then the policy's; not for audit
    reviews); then :func:`verify`. Raises only :class:`RequestError` (the
    review is unusable) and :class:`~provider.errors.TransientError` (the
    cluster could not be asked).
    """
    if review.dry_run:
        return Result.allow("dry-run-request", "dry-run requests change nothing and are allowed (this also lets the verifier's own dry-runs through)")
    # A DELETE (or CONNECT) carries no new object: scope and profiles are read
    # from the object it acts on (admission's oldObject), so the traffic table
    # can tell a controller's deletes from a person's.
    no_new_object = review.operation in ("DELETE", "CONNECT")
    obj = review.old_object if no_new_object else review.object
    if no_new_object and not isinstance(obj, dict):
        return Result.allow("out-of-scope", f"{review.operation} requests carry no new object to verify", "policy")
    if not isinstance(obj, dict):
        raise RequestError("the review has no object to verify")
    ident = ObjectIdentity.of(obj, review.namespace)
    what = ident.describe()
    if policy.in_scope_objects and not any(ref.matches(ident) for ref in policy.in_scope_objects):
        return Result.allow("out-of-scope", f"{what} is not in the policy's inScopeObjects", "policy")
    for profile in policy.profiles:
        if any(ref.matches(ident) for ref in profile.out_of_scope):
            return Result.allow("out-of-scope", f"{ident.kind} objects are out of scope (built-in profile '{profile.name}')", "common")
    if any(ref.matches(ident) for ref in policy.skip_objects):
        return Result.allow("skipped-object", f"{what} matches the policy's skipObjects", "policy")
    if not review.is_audit and review.username is not None:
        user, groups = review.username, review.groups
        for profile in policy.profiles:
            for rule in profile.skip_users:
                if rule.matches(user, groups, ident):
                    return Result.allow("skipped-user", f"{user} may change {what} unsigned: {rule.describe()} (built-in profile '{profile.name}')", "common")
        for rule in policy.skip_users:
            if rule.matches(user, groups, ident):
                return Result.allow("skipped-user", f"{user} may change {what} unsigned: {rule.describe()}", "policy")
    if no_new_object:
        return Result.allow("unverifiable-operation", f"{review.operation} of {what} by {review.username or 'an unnamed user'}: there is no new object and so no signature to check; allowed unverified, no profile covers it")
    try:
        facts = verify(obj, policy, namespace=review.namespace, dry_runner=dry_runner, now=now, limits=limits)
    except VerificationFailure as failure:
        items = tuple(failure.diff)
        return Result(
            allowed=False,
            verified=False,
            reason=failure.reason,
            message=f"{what}: {failure.message}",
            signers=tuple(failure.signers),
            diff=items[: limits.max_diff_items],
            diff_count=len(items),
            used_cluster=failure.used_cluster,
        )
    signed_by = ", ".join(s if isinstance(s, str) else s.get("subject", "?") for s in facts.signers[:3])
    how = " after a server-side dry-run" if facts.used_cluster else ""
    return Result(
        allowed=True,
        verified=True,
        reason="verified",
        message=f"{what} matches its signed manifest{how} (signed by {signed_by})",
        signers=facts.signers,
        used_cluster=facts.used_cluster,
    )
