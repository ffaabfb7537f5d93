"""``verify``: proves one object is what its signers signed.

:func:`verify` returns the facts (:class:`Verification`) or raises a
:class:`~provider.errors.VerificationFailure` whose ``reason`` says what is
wrong. It is a pure function of its inputs (plus the optional dry-run client and
signature sources): no HTTP, no Flask, no argparse here. :func:`decide`
(:mod:`provider.verifier.admission`) calls it for every admission review.

The steps of :func:`verify`, numbered as in ``docs/architecture.md``:

1. read the envelope from the object's annotations (message, signature sets),
   or wherever the policy keeps it (:mod:`provider.verifier.fetching`);
2. check every trusted key / signer against every signature set over the
   payload bytes, and apply keyOperation / threshold (:mod:`provider.verifier.anchors`);
3. find the one document in the payload with this object's group, kind, name
   (and namespace, when the signed document has one) -- never by value;
4. compare it with the object, leaf by leaf, outside the ignored fields;
5. if they differ and the policy enables dry-run, ask the cluster what it makes
   of the signed document and compare that with the object, by value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ..compare.allocations import deletion_finalizers_added, with_server_choices
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
    VerificationFailure,
)
from ..limits import DEFAULT_LIMITS, Limits
from ..objects import ObjectIdentity, split_api_version
from ..parsing import check_shape
from ..policy.schema import Policy
from ..result import Signer
from ..review import Held
from ..signatures.envelope import Envelope, without_envelope
from ..signatures.sources import Sources
from .anchors import check_anchors
from .context import Context
from .fetching import find_envelope, secret_keys


def _warn(message: str, *args: object) -> None:
    """A warning on the ``provider.verifier`` logger. :mod:`logging` (with ``traceback``, ``string`` and
    ``threading``: ~3 ms of a command's start) is loaded for it when a warning is due, never by a
    command-line ``verify`` that has none to give."""
    import logging

    logging.getLogger("provider.verifier").warning(message, *args)


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
    context: Context | None = None,
    *,
    namespace: str | None = None,
    dry_runner: DryRunner | None = None,
    now: datetime | None = None,
    limits: Limits | None = None,
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
    (:func:`describe_diff`). ``context`` carries the dry-run client, the clock,
    the limits, the sources and the deadline in one
    (:class:`~provider.verifier.context.Context`); the keyword arguments of the
    same names still work, instead of it.
    """
    ctx = Context.of(context, dry_runner=dry_runner, now=now, limits=limits, sources=sources, deadline=deadline)
    if isinstance(obj, dict):  # not a mapping: _verify says so
        bounded(obj, "the object to verify", ctx.limits)
    return verify_bounded(obj, policy, namespace, ctx, held=held)


def verify_bounded(obj: Any, policy: Policy, namespace: str | None, ctx: Context, *, held: Held) -> Verification:
    """:func:`verify` for an object already bounded (:func:`decide` checks it once, before anything else)."""
    if policy.signature_resource_ref is None and not policy.secret_keys:
        return _verify(obj, policy, namespace, ctx, held=held)
    try:
        facts = _verify(obj, policy, namespace, ctx, held=held)
    except VerificationFailure as failure:
        failure.used_cluster = True
        raise
    return replace(facts, used_cluster=True)


@dataclass(frozen=True)
class _Signed:
    """What steps 1-3 proved: the signatures, who made them, and the document they sign for the object."""

    envelope: Envelope
    signers: tuple[Signer, ...]
    document: dict[str, Any]
    #: The namespaces that are the object's own (the request's and its metadata's), for the bounds.
    own_namespaces: tuple[str, ...]


def _verify(obj: Any, policy: Policy, namespace: str | None, ctx: Context, *, held: Held) -> Verification:
    """Steps 1-3 (who signed what for this object), then the comparison (:func:`_compare`)."""
    limits = ctx.limits
    if not isinstance(obj, dict):
        raise RequestError(f"the object to verify is a {type(obj).__name__}, not a Kubernetes object")
    meta = obj.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise MalformedMessage("metadata is not a mapping")
    meta = meta or {}
    # 1. the envelope: on the object, in a signature ConfigMap, or in an OCI resource bundle
    own_namespaces = tuple(ns for ns in (namespace, meta.get("namespace")) if isinstance(ns, str) and ns)
    envelope = find_envelope(meta.get("annotations"), policy, ctx, own_namespaces)
    # 2. keys and signers over the payload bytes (keys kept in Secrets as they are now)
    in_secrets = secret_keys(policy, ctx) if policy.secret_keys else None
    signers = check_anchors(envelope, policy, ctx.now, limits, in_secrets)
    # 3. the document signed for this object
    try:
        document = find_document(envelope.payload.documents(limits), obj, namespace)
    except VerificationFailure as failure:
        failure.signers = signers
        raise
    return _compare(obj, policy, namespace, _Signed(envelope, signers, document, own_namespaces), ctx, held=held)


def _compare(
    obj: dict[str, Any], policy: Policy, namespace: str | None, signed: _Signed, ctx: Context, *, held: Held
) -> Verification:
    """Steps 4 and 5: the object against the signed document, and if they differ, against the cluster's dry-run."""
    limits, dry_runner = ctx.limits, ctx.dry_runner
    envelope, signers, document = signed.envelope, signed.signers, signed.document
    # 4. compare outside the ignored fields
    ident = ObjectIdentity.of(obj, namespace)
    if policy.unsafe_unanchored_ignore_fields and policy.ignore_fields:
        _warn("unsafeUnanchoredIgnoreFields is on for %s: ignore patterns match anywhere in a path", ident.describe())
    added = deletion_finalizers_added(document, obj)
    if added:  # no ignore pattern, no dry-run and no exemption explains them (provider.compare.allocations)
        path = ("metadata", "finalizers")
        items = [DiffItem(path, value_at(document, path), value_at(obj, path))]
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
        _check_dry_run_namespace(policy, signed.own_namespaces)
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


def bounded(value: Any, what: str, limits: Limits) -> None:
    """Depth, size and finite numbers, as the service's body parser checks them, for objects a caller built.

    The comparison recurses once per level: without this a library caller's 5 000-deep object raised
    RecursionError out of :func:`decide`, which promises only RequestError and TransientError.
    """
    check_shape(value, limits=limits, error=RequestError, what=what)


def value_at(obj: Any, path: tuple[str | int, ...]) -> Any:
    for step in path:
        if isinstance(obj, dict) and isinstance(step, str):
            obj = obj.get(step)
        elif isinstance(obj, list) and isinstance(step, int) and step < len(obj):
            obj = obj[step]
        else:
            return None
    return obj
