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
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any

from ..compare.allocations import deletion_finalizers_added, with_server_choices
from ..compare.controlplane import Deviation, Written, describe, deviations
from ..compare.diff import DiffItem, diff, redact
from ..compare.dryrun import DryRunner, compare_with_dry_run
from ..compare.kindschema import object_shape
from ..compare.stamps import take_stamps
from ..errors import (
    ContentMismatch,
    MalformedMessage,
    NoMatchingManifest,
    PolicyError,
    RequestError,
    SignatureInvalid,
    ThresholdNotMet,
    TransientError,
    Unsigned,
    VerificationFailure,
)
from ..keyless.identity import SignerSpec
from ..keys.openpgp import OpenPGPKey
from ..keys.pem import PublicKey
from ..keys.refs import SecretKeyRef, load_secret_key
from ..keys.signers import DistinctSigners, Match, Outcome, Signers
from ..limits import DEFAULT_LIMITS, Limits
from ..objects import ObjectIdentity, split_api_version
from ..parsing import check_shape
from ..policy.attestors import SEARCH_BUDGET, BudgetExceeded, Leaf, solve
from ..policy.schema import PROFILES, Policy, UserRule, load_profile
from ..resources import BUILTIN_KINDS
from ..result import Result, Signer, reason_of
from ..review import Held, Review
from ..signatures.envelope import DEFAULT_DOMAIN, Envelope, message_key, read_envelope, without_envelope
from ..signatures.sources import (
    BUNDLE_REF_NAME,
    BundleOptions,
    ConfigMapRef,
    Reference,
    Sources,
    bundle_envelope,
    configmap_envelope,
    no_signature_configmap,
)

log = logging.getLogger(__name__)


class DeletionFinalizersAdded(ContentMismatch):
    """The garbage collector's finalizers on an object that is not being deleted (``deletion_finalizers_added``).

    Never tolerated as an exempt controller's change (``_controller_changes``): the
    garbage collector's exemption lends ``metadata.finalizers`` because it *removes*
    these two, and only a DELETE adds them -- so on a live object, or in an UPDATE
    that keeps what ``oldObject`` had, one is still a bypass of admission, not the
    collector's work. A client cannot fake the deletion that would excuse one: the
    API server clears a client's ``deletionTimestamp`` on create and refuses to set
    one by update (kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/registry/rest/create.go,
    BeforeCreate; staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go,
    ValidateObjectMetaAccessorUpdate).
    """


@dataclass(frozen=True)
class Verification:
    """The facts a successful :func:`verify` proves."""

    signers: tuple[Signer, ...]
    document: dict[str, Any]
    payload_format: str
    used_cluster: bool = False
    #: A dry-run made the difference (the verdict's message says so).
    dry_run: bool = False


# --- step 1: where the signatures are -----------------------------------------------


#: Integrity Shield's annotation domain (``IBM/integrity-shield`` ``shield/pkg/shield/request_handler.go``
#: ``AnnotationKeyDomain``): an object carrying ``integrityshield.io/signature`` is read under it.
INTEGRITY_SHIELD_DOMAIN = "integrityshield.io"


def _unavailable(message: str, reason: str) -> VerificationFailure:
    # Not the object's fault and not deterministic: denied, and never cached (used_cluster).
    return VerificationFailure(message, reason=reason, used_cluster=True)


def _until(seconds: float, deadline: float | None) -> float:
    """A fetch's own deadline: ``seconds`` from now, and never past the request's ``deadline``."""
    own = time.monotonic() + seconds
    return own if deadline is None else min(own, deadline)


def _envelope(  # noqa: PLR0917 - step 1's inputs
    annotations: Any,
    policy: Policy,
    sources: Sources,
    limits: Limits,
    own_namespaces: tuple[str, ...],
    deadline: float | None,
) -> Envelope:
    """The signatures for this object (steps 1 of ``docs/architecture.md``), wherever the policy keeps them.

    * ``signatureResourceRef``: the named ConfigMap, for every object (upstream's ``-s k8s://...``), if the
      operator lets policies read that namespace (:func:`_check_configmap_namespace`);
    * ``resourceBundleRef`` enabled and the object names a bundle: the bundle, if its reference is
      allow-listed (upstream, too, prefers the bundle when an object names one);
    * otherwise the object's own annotations -- under the policy's domain, or, when the policy
      keeps the default and the object carries Integrity Shield's ``integrityshield.io/signature``
      and no message under the default, under ``integrityshield.io``.

    Every fetch ends by its own timeout and by the request's ``deadline``, whichever comes first.
    """
    domain = policy.annotation_domain
    if policy.signature_resource_ref is not None:
        ref = policy.signature_resource_ref
        _check_configmap_namespace(ref, policy, own_namespaces)
        if sources.configmaps is None:
            raise _unavailable(
                f"the policy keeps signatures in {ref}, but no cluster is configured to read it",
                "signature-configmap-unavailable",
            )
        try:
            data = sources.configmaps.read_data(ref.namespace, ref.name, _until(limits.dry_run_timeout, deadline))
        except TransientError as exc:
            raise _unavailable(f"the signature ConfigMap {ref} could not be read: {exc.message}",
                               "signature-configmap-unavailable") from exc  # fmt: skip
        if data is None:
            raise no_signature_configmap(ref)
        return configmap_envelope(data, ref, domain, limits)
    bundle_key = f"{domain}/{BUNDLE_REF_NAME}"
    named = isinstance(annotations, dict) and bundle_key in annotations
    if named and policy.resource_bundle is not None:
        return _bundle_envelope(annotations[bundle_key], policy.resource_bundle, domain, sources, limits, deadline)
    if (
        isinstance(annotations, dict)
        and domain == DEFAULT_DOMAIN
        and message_key(domain) not in annotations
        and f"{INTEGRITY_SHIELD_DOMAIN}/signature" in annotations
    ):
        domain = INTEGRITY_SHIELD_DOMAIN
    try:
        return read_envelope(annotations, domain, limits)
    except Unsigned as unsigned:
        if named:
            raise Unsigned(
                f"{unsigned.message}; it names a resource bundle ({bundle_key}), but the policy does not enable "
                "resourceBundleRef"
            ) from None
        raise


def _check_configmap_namespace(ref: ConfigMapRef, policy: Policy, own_namespaces: tuple[str, ...]) -> None:
    """Refuse a signature ConfigMap in a namespace the operator does not let policies read (before any read).

    A namespaced policy's author can name any namespace; reading another tenant's ConfigMap would hand
    back what that tenant signed (document names in a message, values in a diff) and, through the
    answer, whether it exists. The message depends only on the policy and the object, never on the
    cluster.
    """
    if policy.bounds.allows_signature_namespace(ref.namespace, own_namespaces):
        return
    readable = (
        "the admitted object's own namespace and the namespaces the operator lists"
        if policy.bounds.own_namespace_signatures
        else "only the namespaces the operator lists"
    )
    raise PolicyError(
        f"signatureResourceRef: policies may not read signature ConfigMaps in namespace {ref.namespace!r} ({ref}); "
        f"they may read {readable} (MANIFEST_PROVIDER_SIGNATURE_NAMESPACES)"
    )


def _check_dry_run_namespace(policy: Policy, own_namespaces: tuple[str, ...]) -> None:
    """Refuse a ``dryRun.namespace`` the operator does not let policies send dry-runs to (before any is sent).

    A dry-run creates the signed document there, through that namespace's admission webhooks, and the
    verdict shows what the API server made of it: another tenant's defaults and mutations.
    """
    target = policy.dry_run.namespace
    if not target or policy.bounds.allows_dry_run_namespace(target, own_namespaces):
        return
    raise PolicyError(
        f"dryRun.namespace: policies may not send dry-runs to namespace {target[:63]!r}; they may use the "
        "admitted object's own namespace and the namespaces the operator lists (MANIFEST_PROVIDER_DRY_RUN_NAMESPACES)"
    )


def _bundle_envelope(  # noqa: PLR0917 - step 1's inputs
    text: Any, options: BundleOptions, domain: str, sources: Sources, limits: Limits, deadline: float | None
) -> Envelope:
    reference = Reference.parse(text)
    if not options.allows(reference):
        raise VerificationFailure(
            f"the resource bundle {reference} is not under the policy's resourceBundleRef.repositories "
            f"({', '.join(options.repositories[:3])}); the object chooses its own reference, so only listed "
            "repositories are read",
            reason="bundle-not-allowed",
        )
    if sources.bundles is None:
        raise _unavailable(
            f"the object is signed in the resource bundle {reference}, but no registry client is configured",
            "bundle-unavailable",
        )
    until = _until(min(options.timeout, limits.bundle_timeout), deadline)
    fetched = sources.bundles.fetch(reference, until, limits, _pull_secrets(options, sources, until))
    return bundle_envelope(fetched, domain, limits)


def _pull_secrets(options: BundleOptions, sources: Sources, deadline: float) -> tuple[str, ...]:
    """The Docker configs the policy's pull Secrets hold now (read as keys kept in Secrets are, and as bounded)."""
    texts = []
    for ref in options.pull_secrets:
        where = f"the pull Secret k8s://{ref.namespace}/{ref.name}"
        if sources.keys is None:
            raise _unavailable(f"the policy names {where}, but no cluster is configured to read it",
                               "bundle-unavailable")  # fmt: skip
        try:
            texts.append(sources.keys.read_key(ref.namespace, ref.name, ref.key, deadline))
        except TransientError as exc:
            raise _unavailable(f"{where} could not be read: {exc.message}", "bundle-unavailable") from exc
    return tuple(texts)


# --- step 2: keys and signers -----------------------------------------------------


def _check_key(key: PublicKey, envelope: Envelope) -> Outcome:
    for sig_set in envelope.sets:
        if key.verifies(sig_set.signature, envelope.signed_bytes(sig_set)):
            return Outcome(True, (Match(key.fingerprint, key.fingerprint),))
    return Outcome(False, (), "signature-invalid", f"key {key.label()} verifies none of them")


def _check_openpgp(key: OpenPGPKey, envelope: Envelope, now: datetime | None) -> Outcome:
    """An OpenPGP certificate against every set: the first that verifies, else the most telling refusal."""
    refusal = None
    for sig_set in envelope.sets:
        check = key.check(sig_set.signature, envelope.signed_bytes(sig_set), now)
        if check.verified:
            return Outcome(True, (Match(key.signer, key.signer),))
        if refusal is None or (refusal.reason == "signature-invalid" and check.reason != "signature-invalid"):
            refusal = check
    assert refusal is not None  # an envelope has at least one set
    return Outcome(False, (), refusal.reason, refusal.detail)


def _check_signer(
    spec: SignerSpec, envelope: Envelope, policy: Policy, now: datetime | None, limits: Limits, *, every: bool
) -> Outcome:
    from ..keyless.signer import check_signer  # sigstore and certificate machinery: loaded only when used

    return check_signer(spec, envelope, policy.trusted_root, now=now, limits=limits, every=every)


def _secret_keys(
    policy: Policy, sources: Sources, limits: Limits, deadline: float | None
) -> dict[SecretKeyRef, PublicKey | OpenPGPKey]:
    """The key each of the policy's Secret-held keys holds now (step 2's keys; :mod:`provider.keys.refs`).

    Every reference is read before any is checked, and one that cannot be used denies, whatever the
    other keys would say: a policy whose key cannot be read is broken or the cluster is down, and
    neither is a reason to decide on what is left of it. Unusable (missing, forbidden, not one key):
    :class:`~provider.errors.PolicyError` naming the reference; the cluster could not be asked:
    ``key-secret-unavailable``, never cached.
    """
    found: dict[SecretKeyRef, PublicKey | OpenPGPKey] = {}
    for ref in policy.secret_keys:
        if sources.keys is None:
            raise _unavailable(
                f"the policy names the key Secret {ref}, but no cluster is configured to read it",
                "key-secret-unavailable",
            )
        try:
            text = sources.keys.read_key(ref.namespace, ref.name, ref.key, _until(limits.dry_run_timeout, deadline))
        except TransientError as exc:
            raise _unavailable(f"the key Secret {ref} could not be read: {exc.message}",
                               "key-secret-unavailable") from exc  # fmt: skip
        found[ref] = load_secret_key(ref, text, limits.max_keys)
    return found


def _leaf_check(
    leaf: Leaf,
    envelope: Envelope,
    policy: Policy,
    now: datetime | None,
    limits: Limits,
    *,
    every: bool,
    in_secrets: dict[SecretKeyRef, PublicKey | OpenPGPKey] | None = None,
) -> tuple[str, Callable[[], Outcome]]:
    """A leaf's label and its check: keys cost one signature check each, OpenPGP one Sequoia verify, signers more.

    A key kept in a Secret is checked as the key ``in_secrets`` says it holds now.
    """
    if isinstance(leaf, SecretKeyRef):
        key = (in_secrets or {})[leaf]
        label, check = _leaf_check(key, envelope, policy, now, limits, every=every)
        return f"{leaf} ({label})", check
    if isinstance(leaf, PublicKey):
        return leaf.label(), partial(_check_key, leaf, envelope)
    if isinstance(leaf, OpenPGPKey):
        return leaf.label(), partial(_check_openpgp, leaf, envelope, now)
    return leaf.describe(), partial(_check_signer, leaf, envelope, policy, now, limits, every=every)


def _check_anchors(
    envelope: Envelope,
    policy: Policy,
    now: datetime | None,
    limits: Limits,
    in_secrets: dict[SecretKeyRef, PublicKey | OpenPGPKey] | None = None,
) -> tuple[Signer, ...]:
    """The signers that satisfy the policy's keys and signer entries, or raise why they do not.

    A *signer* is who signed, not an entry's name for them (:class:`~provider.keys.signers.Signers`):
    the signing key, joined with every key a trusted certificate binds to the
    same subject; an OpenPGP certificate is one signer whichever subkey signed.
    An entry matches signers; the requirement counts distinct signers matched
    by distinct entries (:class:`~provider.keys.signers.DistinctSigners`):

    * ``AtLeastOne`` (and ``threshold: 1``): one satisfied entry; checking stops
      at the first (keys are tried before signer entries: a key costs one
      signature check, a signer a certificate chain and a log entry).
    * ``threshold: N``: N entries, each matched to a different signer.
    * ``MustAll``: every entry, each matched to a different signer. Two entries
      one signer satisfies are not both met: a policy that lists key A and
      identity B under MustAll asks for two approvals, and one key certified
      as B is one approval. (In the lenient reading an entry that overlaps
      another would add nothing, silently: the author who listed two entries to
      get two approvals would get one.)
    * ``attestors``: every set, each by its count of entries, signers distinct
      across the whole tree (:func:`_check_attestors`).

    Counting (N > 1, MustAll, attestors) checks every entry against every
    signature set before deciding: a set checked later can show that two keys
    counted apart are one signer, so stopping early would depend on order.
    """
    if policy.attestors:
        return _check_attestors(envelope, policy, now, limits, in_secrets)
    required = policy.required_count  # MustAll: every anchor
    counting = required > 1
    checks = [
        _leaf_check(leaf, envelope, policy, now, limits, every=counting, in_secrets=in_secrets)
        for leaf in policy.anchors
    ]
    outcomes: list[tuple[str, Outcome]] = []
    for label, run in checks:
        outcome = run()
        outcomes.append((label, outcome))
        if outcome.verified and not counting:
            return (outcome.matches[0].signer,)
    satisfied = [outcome for _, outcome in outcomes if outcome.verified and outcome.matches]
    signers = Signers(binding for _, outcome in outcomes for binding in outcome.bindings)
    distinct = DistinctSigners(signers.of)
    for outcome in satisfied:
        distinct.add(outcome.matches)
    verified = distinct.signers
    if counting and len(distinct) >= required:
        return verified
    failed = [(label, o) for label, o in outcomes if not o.verified]
    count, unread = _counted(envelope)
    details = "; ".join(o.detail for _, o in failed[:3] if o.detail)
    if not verified:
        reasons = {o.reason for _, o in failed}
        reason = reasons.pop() if len(reasons) == 1 else "signature-invalid"
        raise SignatureInvalid(
            f"no trusted key or signer verifies the object's {count} ({details}){unread}", reason=reason
        )
    found = f"{len(verified)} distinct signer{'s' if len(verified) != 1 else ''}"
    if policy.threshold is None:  # MustAll
        shortfall = f"{len(satisfied)} of the {required} keys and signers required by MustAll verified, by {found}"
    else:
        shortfall = f"{found} verified, {policy.requirement()} requires {required}"
    missing = ", ".join(label for label, _ in failed[:5]) or "(entries satisfied by the same signer)"
    raise ThresholdNotMet(
        f"{shortfall} for the object's {count}; not verified: {missing}{unread}",
        signers=verified,
    )


def _counted(envelope: Envelope) -> tuple[str, str]:
    sets = len(envelope.sets)
    unread = ""
    if envelope.unread:
        unread = f"; {', '.join(envelope.unread)} not read: signature numbering stops at the first gap"
    return f"{sets} signature{'s' if sets != 1 else ''}", unread


def _check_attestors(
    envelope: Envelope,
    policy: Policy,
    now: datetime | None,
    limits: Limits,
    in_secrets: dict[SecretKeyRef, PublicKey | OpenPGPKey] | None = None,
) -> tuple[Signer, ...]:
    """Every attestor set satisfied by its count of entries, with signers distinct across the tree.

    Every leaf is checked (with every signer each accepts); :func:`provider.policy.attestors.solve`
    then looks for an assignment of distinct signers. A denial names each set
    that fails on its own, or -- when each passes alone -- says the sets are
    met only by the same signers.
    """
    leaves = list(policy.anchors)
    outcomes: dict[int, tuple[str, Outcome]] = {}
    for leaf in leaves:
        if id(leaf) not in outcomes:
            label, run = _leaf_check(leaf, envelope, policy, now, limits, every=True, in_secrets=in_secrets)
            outcomes[id(leaf)] = (label, run())
    signers = Signers(binding for _, outcome in outcomes.values() for binding in outcome.bindings)
    by_class: dict[Hashable, Signer] = {}

    def candidates(leaf: Leaf) -> list[Hashable]:
        _, outcome = outcomes[id(leaf)]
        found: list[Hashable] = []
        for match in outcome.matches if outcome.verified else ():
            cls = signers.of(match)
            by_class.setdefault(cls, match.signer)
            found.append(cls)
        return found

    count, unread = _counted(envelope)
    try:
        assignment = solve(policy.attestors, candidates)
    except BudgetExceeded:
        raise ThresholdNotMet(
            f"the attestor sets are too large to decide within {SEARCH_BUDGET} steps for the object's {count}; "
            "split them or lower their counts"
        ) from None
    if assignment is not None:
        chosen = dict.fromkeys(assignment[id(leaf)] for leaf in leaves if id(leaf) in assignment)
        return tuple(by_class[cls] for cls in chosen)
    failing = []
    for attestor_set in policy.attestors:
        try:
            alone = solve((attestor_set,), candidates)
        except BudgetExceeded:
            alone = None
        if alone is None:
            unmet = [outcomes[id(leaf)] for leaf in attestor_set.leaves() if not outcomes[id(leaf)][1].verified]
            detail = "; ".join(o.detail for _, o in unmet[:2] if o.detail)
            failing.append(
                f"set {attestor_set.describe()} needs {attestor_set.count} of its {len(attestor_set.entries)} "
                f"entries by distinct signers; not verified: {', '.join(label for label, _ in unmet[:4]) or '-'}"
                + (f" ({detail})" if detail else "")
            )
    any_verified = any(o.verified for _, o in outcomes.values())
    if failing:
        message = "; ".join(failing) + f", for the object's {count}{unread}"
    else:
        message = (
            f"each attestor set is met on its own, but not by distinct signers together (one signer cannot stand "
            f"for two sets), for the object's {count}{unread}"
        )
    if not any_verified:
        reasons = {o.reason for _, o in outcomes.values()}
        raise SignatureInvalid(message, reason=reasons.pop() if len(reasons) == 1 else "signature-invalid")
    raise ThresholdNotMet(message)


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
            f"the message signs {signed}{more}, not {ident.describe()}; a signature for one object never verifies "
            "another"
        )
    kinds = sorted({f"{d.get('kind')}" for d in documents})[:5]
    raise NoMatchingManifest(
        f"the message holds no {ident.kind or 'object'} (it signs {', '.join(map(str, kinds)) or 'nothing'}); "
        f"it was not signed for {ident.describe()}"
    )


# --- step 4: comparison -----------------------------------------------------------


def _quote(value: Any, limits: Limits) -> str:
    text = f"'{value}'" if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limits.max_quoted_value else text[: limits.max_quoted_value - 1] + "…"


def describe_diff(items: list[DiffItem], limits: Limits = DEFAULT_LIMITS, held: Held = "admitted") -> str:
    """The first difference in a sentence, and how many more.

    ``held`` names the object compared with the signed manifest: ``admitted``
    for a request's, ``stored`` for one as the cluster stores it (Gatekeeper's
    audit, a background scan, ``verify-resource``, the observer), where nothing
    is being admitted.
    """
    first = items[0]
    if first.redacted:
        change = "was added" if first.before is None else "was removed" if first.after is None else "differs"
        text = f"{first.key} {change} (a sensitive value: neither value is shown)"
    elif first.before is None:
        text = f"{first.key} was added: {held} {_quote(first.after, limits)}, not in the signed manifest"
    elif first.after is None:
        text = f"{first.key} was removed: signed {_quote(first.before, limits)}, absent from the {held} object"
    else:
        text = f"{first.key} differs: signed {_quote(first.before, limits)}, {held} {_quote(first.after, limits)}"
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
    sources: Sources | None = None,
    deadline: float | None = None,
    held: Held = "admitted",
) -> Verification:
    """Prove ``obj`` is what the policy's keys/signers signed, or raise why not.

    ``sources`` fetches signatures kept outside the object (an OCI resource
    bundle, a signature ConfigMap); without them a policy that needs one denies.
    A verdict read from a signature ConfigMap used the cluster (``used_cluster``,
    never cached): the ConfigMap can change -- a signature withdrawn, one
    added -- while the object and the policy stay the same; so does one that
    used a key kept in a Secret (the key rotates). ``deadline`` (a
    :func:`time.monotonic` instant, the request's) ends every fetch at the
    latest. A signature ConfigMap in a namespace the policy's bounds do not
    allow is a :class:`~provider.errors.PolicyError`, raised before it is read.
    ``held`` is the word a difference's message uses for ``obj``
    (:func:`describe_diff`).
    """
    if isinstance(obj, dict):  # not a mapping: _verify says so
        _bounded(obj, "the object to verify", limits)
    return _verify_bounded(obj, policy, namespace, dry_runner, now, limits, sources, deadline, held=held)


def _verify_bounded(  # noqa: PLR0917 - verify()'s arguments, passed on
    obj: Any,
    policy: Policy,
    namespace: str | None,
    dry_runner: DryRunner | None,
    now: datetime | None,
    limits: Limits,
    sources: Sources | None,
    deadline: float | None = None,
    *,
    held: Held,
) -> Verification:
    """:func:`verify` for an object already bounded (:func:`decide` checks it once, before anything else)."""
    if policy.signature_resource_ref is None and not policy.secret_keys:
        return _verify(obj, policy, namespace, dry_runner, now, limits, sources, deadline, held=held)
    try:
        facts = _verify(obj, policy, namespace, dry_runner, now, limits, sources, deadline, held=held)
    except VerificationFailure as failure:
        failure.used_cluster = True
        raise
    return replace(facts, used_cluster=True)


def _verify(  # noqa: PLR0917 - verify()'s arguments, passed on
    obj: Any,
    policy: Policy,
    namespace: str | None,
    dry_runner: DryRunner | None,
    now: datetime | None,
    limits: Limits,
    sources: Sources | None,
    deadline: float | None,
    *,
    held: Held,
) -> Verification:
    if not isinstance(obj, dict):
        raise RequestError(f"the object to verify is a {type(obj).__name__}, not a Kubernetes object")
    meta = obj.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise MalformedMessage("metadata is not a mapping")
    meta = meta or {}
    # 1. the envelope: on the object, in a signature ConfigMap, or in an OCI resource bundle
    own_namespaces = tuple(ns for ns in (namespace, meta.get("namespace")) if isinstance(ns, str) and ns)
    envelope = _envelope(meta.get("annotations"), policy, sources or Sources(), limits, own_namespaces, deadline)
    # 2. keys and signers over the payload bytes (keys kept in Secrets as they are now)
    in_secrets = _secret_keys(policy, sources or Sources(), limits, deadline) if policy.secret_keys else None
    signers = _check_anchors(envelope, policy, now, limits, in_secrets)
    # 3. the document signed for this object
    try:
        document = find_document(envelope.payload.documents(limits), obj, namespace)
    except VerificationFailure as failure:
        failure.signers = signers
        raise
    # 4. compare outside the ignored fields
    ident = ObjectIdentity.of(obj, namespace)
    if policy.unsafe_unanchored_ignore_fields and policy.ignore_fields:
        log.warning(
            "unsafeUnanchoredIgnoreFields is on for %s: ignore patterns match anywhere in a path", ident.describe()
        )
    added = deletion_finalizers_added(document, obj)
    if added:  # no ignore pattern, no dry-run and no exemption explains them (provider.compare.allocations)
        path = ("metadata", "finalizers")
        items = [DiffItem(path, _value_at(document, path), _value_at(obj, path))]
        raise DeletionFinalizersAdded(
            describe_diff(items, limits, held) + f"; {', '.join(map(str, added))}: the garbage collector's finalizers, "
            "set only by a DELETE",
            diff=tuple(items),
            signers=signers,
        )
    ignore = policy.ignore_set_for(ident)
    shape = object_shape(document)  # the signer chose the kind and version, not the requester
    reference = with_server_choices(document, obj)  # a Service's allocated address, where the signer left it open
    # What Argo CD, Flux or Helm stamped on it, where the signer left it open and the value is the tool's.
    admitted, refused = take_stamps(obj, document, policy.tool_metadata, ident)
    items = diff(
        without_envelope(reference, envelope.annotations),
        without_envelope(admitted, envelope.annotations),
        ignore,
        shape,
    )
    if not items:
        return Verification(signers, document, envelope.payload.format)
    # 5. dry-run: what does the cluster make of the signed document?
    hint, used_cluster = "", False
    if policy.dry_run.enabled and dry_runner is None:
        # The policy relies on the cluster to explain the differences; without one the
        # verdict is "could not check", not "tampered" -- decided here, once, for every
        # entry point (the CLI, classify, both routes).
        items = redact(items, policy.sensitive_for(ident))
        raise VerificationFailure(
            f"the policy enables dry-run, but no cluster is configured to run it, so these differences could not be "
            f"checked against what the API server makes of the signed manifest: {describe_diff(items, limits, held)}",
            reason="dry-run-failed",
            diff=tuple(items),
            signers=signers,
        )
    if policy.dry_run.enabled and dry_runner is not None:
        _check_dry_run_namespace(policy, own_namespaces)
        try:
            items = compare_with_dry_run(
                document, admitted, namespace, policy.dry_run.namespace, ignore, dry_runner, envelope.annotations
            )
        except VerificationFailure as failure:  # the API server rejected the signed manifest
            failure.signers, failure.used_cluster = signers, True
            raise
        if not items:
            return Verification(signers, document, envelope.payload.format, used_cluster=True, dry_run=True)
        # The "before" values are now the dry-run's, not the bare manifest's.
        hint, used_cluster = " (compared with the API server's dry-run of the signed manifest)", True
    items = redact(items, policy.sensitive_for(ident))
    hint += "".join(f"; {why}" for why in refused)
    raise ContentMismatch(
        describe_diff(items, limits, held) + hint, diff=tuple(items), signers=signers, used_cluster=used_cluster
    )


# --- decide -----------------------------------------------------------------------


def _bounded(value: Any, what: str, limits: Limits) -> None:
    """Depth, size and finite numbers, as the service's body parser checks them, for objects a caller built.

    The comparison recurses once per level: without this a library caller's 5 000-deep object raised
    RecursionError out of :func:`decide`, which promises only RequestError and TransientError.
    """
    check_shape(value, limits=limits, error=RequestError, what=what)


def _value_at(obj: Any, path: tuple[str | int, ...]) -> Any:
    for step in path:
        if isinstance(obj, dict) and isinstance(step, str):
            obj = obj.get(step)
        elif isinstance(obj, list) and isinstance(step, int) and step < len(obj):
            obj = obj[step]
        else:
            return None
    return obj


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
        if old is not None and _value_at(obj, item.path) != _value_at(old, item.path):
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
    _bounded(obj, "the object", limits)
    if isinstance(review.old_object, dict) and review.old_object is not obj:
        _bounded(review.old_object, "the old object", limits)
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
        facts = _verify_bounded(
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
