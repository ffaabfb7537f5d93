"""What verification reads outside the object: its signatures, wherever the policy keeps them, and keys kept in Secrets.

Step 1 of :mod:`provider.verifier.verification` (:func:`find_envelope`): the
object's own annotations, a signature ConfigMap or an OCI resource bundle; and
step 2's keys kept in Secrets (:func:`secret_keys`), read as they are now. Every
read ends by its own timeout and by the request's deadline; one that cannot be
made denies, never cached (``used_cluster``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..errors import (
    PolicyError,
    TransientError,
    Unsigned,
    VerificationFailure,
)
from ..keys.pem import PublicKey
from ..keys.refs import SecretKeyRef, load_secret_key
from ..policy.schema import Policy
from ..signatures.envelope import DEFAULT_DOMAIN, Envelope, message_key, read_envelope
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
from .context import Context

if TYPE_CHECKING:  # an OpenPGP key in a Secret loads the OpenPGP code where it is read
    from ..keys.openpgp import OpenPGPKey

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


def find_envelope(annotations: Any, policy: Policy, ctx: Context, own_namespaces: tuple[str, ...]) -> Envelope:
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
        return _configmap_envelope(policy.signature_resource_ref, policy, ctx, own_namespaces)
    bundle_key = f"{domain}/{BUNDLE_REF_NAME}"
    named = isinstance(annotations, dict) and bundle_key in annotations
    if named and policy.resource_bundle is not None:
        return _bundle_envelope(annotations[bundle_key], policy.resource_bundle, domain, ctx)
    if (
        isinstance(annotations, dict)
        and domain == DEFAULT_DOMAIN
        and message_key(domain) not in annotations
        and f"{INTEGRITY_SHIELD_DOMAIN}/signature" in annotations
    ):
        domain = INTEGRITY_SHIELD_DOMAIN
    try:
        return read_envelope(annotations, domain, ctx.limits)
    except Unsigned as unsigned:
        if named:
            raise Unsigned(
                f"{unsigned.message}; it names a resource bundle ({bundle_key}), but the policy does not enable "
                "resourceBundleRef"
            ) from None
        raise


def _configmap_envelope(ref: ConfigMapRef, policy: Policy, ctx: Context, own_namespaces: tuple[str, ...]) -> Envelope:
    """The signatures in the policy's ``signatureResourceRef``, once its namespace is allowed."""
    _check_configmap_namespace(ref, policy, own_namespaces)
    configmaps = (ctx.sources or Sources()).configmaps
    if configmaps is None:
        raise _unavailable(
            f"the policy keeps signatures in {ref}, but no cluster is configured to read it",
            "signature-configmap-unavailable",
        )
    try:
        data = configmaps.read_data(ref.namespace, ref.name, _until(ctx.limits.dry_run_timeout, ctx.deadline))
    except TransientError as exc:
        raise _unavailable(f"the signature ConfigMap {ref} could not be read: {exc.message}",
                           "signature-configmap-unavailable") from exc  # fmt: skip
    if data is None:
        raise no_signature_configmap(ref)
    return configmap_envelope(data, ref, policy.annotation_domain, ctx.limits)


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


def _bundle_envelope(text: Any, options: BundleOptions, domain: str, ctx: Context) -> Envelope:
    sources, limits = ctx.sources or Sources(), ctx.limits

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
    until = _until(min(options.timeout, limits.bundle_timeout), ctx.deadline)
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


def secret_keys(policy: Policy, ctx: Context) -> dict[SecretKeyRef, PublicKey | OpenPGPKey]:
    """The key each of the policy's Secret-held keys holds now (step 2's keys; :mod:`provider.keys.refs`).

    Every reference is read before any is checked, and one that cannot be used denies, whatever the
    other keys would say: a policy whose key cannot be read is broken or the cluster is down, and
    neither is a reason to decide on what is left of it. Unusable (missing, forbidden, not one key):
    :class:`~provider.errors.PolicyError` naming the reference; the cluster could not be asked:
    ``key-secret-unavailable``, never cached.
    """
    sources, limits = ctx.sources or Sources(), ctx.limits
    found: dict[SecretKeyRef, PublicKey | OpenPGPKey] = {}
    for ref in policy.secret_keys:
        if sources.keys is None:
            raise _unavailable(
                f"the policy names the key Secret {ref}, but no cluster is configured to read it",
                "key-secret-unavailable",
            )
        try:
            text = sources.keys.read_key(ref.namespace, ref.name, ref.key, _until(limits.dry_run_timeout, ctx.deadline))
        except TransientError as exc:
            raise _unavailable(f"the key Secret {ref} could not be read: {exc.message}",
                               "key-secret-unavailable") from exc  # fmt: skip
        found[ref] = load_secret_key(ref, text, limits.max_keys)
    return found
