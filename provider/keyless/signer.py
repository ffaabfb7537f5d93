"""Keyless (Fulcio + Rekor) and certificate signers, verified offline.

Contract: :func:`check_signer` returns an :class:`~provider.keys.signers.Outcome`
for one ``signers`` entry against the object's signature sets -- verified, with
a :class:`~provider.verifier.Match` per signing key whose verdict name is
``{"subject": ..., "issuer": ..., "key": "sha256:..."}``, when at least one set
carries a certificate that passes every check, otherwise the most specific failure
(``tlog-entry-invalid``, ``certificate-untrusted``,
``certificate-expired-at-signing``, ``signature-invalid``,
``identity-mismatch``, in the order the checks run, the furthest one reached
wins). A trusted root that cannot be used raises
:class:`~provider.errors.PolicyError`: that is the policy's fault, not the
object's. No network access, ever: everything needed is in the trusted root.

Keyless signer (no ``roots``), per signature set with a certificate
(steps numbered as in ``docs/keyless.md``):

1. the bundle's SET verifies with the Rekor key chosen by its ``logID``,
2. the logged hashedrekord/rekord entry names sha256(P), this signature and
   this certificate (:mod:`provider.keyless.rekor`);
3. the certificate chains to a Fulcio CA of the trusted root whose validity
   window contains ``integratedTime``, through that CA's own chain in the
   trusted root -- certificates sent after the leaf in the annotation are never
   path material, so a retired CA's intermediate cannot be brought back under a
   root it shares with a current one -- and is a code-signing certificate;
4. the certificate was valid at ``integratedTime`` (Fulcio certificates live
   ten minutes; the log's timestamp proves when the signature existed);
5. the signature over P verifies with the certificate's key;
6. a SAN identity matches ``subject``/``subjectRegExp`` and the issuer matches
   ``issuer``/``issuerRegExp`` (regular expressions must match the whole value).

Certificate signer (``roots`` given): the certificate chains *now* through the
certificates of ``roots`` only -- those no other listed certificate issued are
the anchors, the others the intermediates a path may pass (as a TrustedRoot's
``certChain``); intermediates sent in the annotation are not used, so trusting
a root never trusts every CA it ever certified. No transparency log is
consulted, so there is no signing time -- the certificate must be valid at
verification time -- and steps 5 and 6 apply unchanged.

Every certificate that passes steps 1-5 (or the certificate signer's checks)
is reported as a :class:`~provider.keys.signers.Binding` of its key to its SAN
values, whether or not it matches the entry: the verifier counts keys bound to
one subject as one signer.

Steps 1-5 do not depend on the signer entry or the clock, so their outcome for
a keyless set is cached (keyed by the SHA-256 of root, payload, signature,
certificate and bundle): several signer entries, or the same object reviewed
again, cost one hash.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..cache import LRUCache, digest
from ..errors import KeyLoadError, VerificationFailure
from ..keys.pem import PublicKey
from ..keys.signers import Binding, Match, Outcome
from ..limits import DEFAULT_LIMITS, Limits
from .certificates import (
    CertificateExpired,
    CertificateUntrusted,
    chains_to,
    clamp_to_validity,
    identity_of,
    read_certificates,
    require_code_signing,
    valid_at,
    validity,
)
from .identity import Identity, SignerSpec, match_identity
from .rekor import TlogEntryInvalid, check_bundle
from .trust import SignerRoots, TrustRoot, load_signer_roots, load_trusted_root

if TYPE_CHECKING:
    from ..signatures.envelope import Envelope, SignatureSet

#: Failure reasons in the order the checks run: the furthest one reached is reported.
_PROGRESS = (
    "tlog-entry-invalid",
    "certificate-untrusted",
    "certificate-expired-at-signing",
    "signature-invalid",
    "identity-mismatch",
)
_CACHE_SIZE = 1024


@dataclass(frozen=True)
class Certified:
    """What steps 1-5 prove about one signature set: who the certificate names, with which key, and when it signed."""

    identity: Identity
    key: str  # fingerprint of the certificate's public key, the key that made the signature
    signed_at: datetime | None  # None for certificate signers: no transparency log


@dataclass(frozen=True)
class _Failed:
    reason: str
    message: str


#: Steps 1-5 per signature set, keyed by the digest of root, payload, signature, certificate and bundle.
_cache: LRUCache[Certified | _Failed] = LRUCache(_CACHE_SIZE)


def _signature_verifies(leaf: Any, signature: bytes, payload: bytes) -> PublicKey:
    try:
        key = PublicKey.from_crypto(leaf.public_key())
    except KeyLoadError as exc:  # a key type or size no signature may use
        raise CertificateUntrusted(f"the certificate's key cannot be used: {exc.message}") from exc
    if not key.verifies(signature, payload):
        raise VerificationFailure(
            "the signature over the message does not verify with the certificate's key", reason="signature-invalid"
        )
    return key


def certify_keyless(
    sig_set: SignatureSet, payload: bytes, root: TrustRoot, limits: Limits = DEFAULT_LIMITS
) -> Certified:
    """Steps 1-5 for a Fulcio certificate and its Rekor bundle (see the module docstring)."""
    if sig_set.certificate is None:
        raise CertificateUntrusted("the signature carries no certificate")
    leaf, extra = read_certificates(sig_set.certificate, limits)  # extra: read (bounded), never trusted
    if sig_set.bundle is None:
        raise TlogEntryInvalid(
            "the signature has a certificate but no Rekor bundle; keyless signatures must be logged "
            "(use a signer with `roots` for certificates without a transparency log)"
        )
    # 1-2. the log vouches for this payload, signature and certificate at integratedTime
    entry = check_bundle(sig_set.bundle, root, payload, sig_set.signature, leaf, limits=limits)
    signed_at = entry.integrated_time
    # 3. a Fulcio CA valid at signing time issued it, through that CA's own chain.
    # The path is built from the trusted root alone, authority by authority, as
    # sigstore-go does (pkg/root/certificate_authority.go: one pool of the CA's
    # root and intermediates, the CA's validity period at the observer time).
    # sigstore-python also never uses a bundle's chain (sigstore/verify/verifier.py,
    # Verifier._verify_chain_at_time: a store of every Fulcio certificate, the leaf
    # alone), but it pools all CAs, expired ones included (sigstore/_internal/trust.py,
    # TrustedRoot.get_fulcio_certs), so a retired CA's window is not applied there.
    # The path is checked at an instant inside the leaf's own validity so that a
    # genuine certificate used after it expired is reported as such (step 4).
    authorities = root.authorities_at(signed_at)
    if not authorities:
        raise CertificateUntrusted(f"no certificate authority of the trusted root was valid at {signed_at.isoformat()}")
    path_time = clamp_to_validity(leaf, signed_at)
    if not any(chains_to(leaf, ca.intermediates, ca.store, path_time, limits) for ca in authorities):
        names = ", ".join(ca.label for ca in authorities[:3])
        ignored = f"; the {len(extra)} certificate(s) sent after it are never used" if extra else ""
        raise CertificateUntrusted(
            f"the certificate (issuer {leaf.issuer.rfc4514_string()[:80]}) does not chain to a certificate authority "
            f"of the trusted root valid at {signed_at.isoformat()} ({names}){ignored}"
        )
    require_code_signing(leaf)
    # 4. valid when logged
    if not valid_at(leaf, signed_at):
        raise CertificateExpired(
            f"the certificate ({validity(leaf)}) was not valid when the signature was logged ({signed_at.isoformat()})"
        )
    # 5. the signature itself
    key = _signature_verifies(leaf, sig_set.signature, payload)
    return Certified(identity_of(leaf), key.fingerprint, signed_at)


def certify_with_roots(
    sig_set: SignatureSet, payload: bytes, roots: SignerRoots, now: datetime, limits: Limits = DEFAULT_LIMITS
) -> Certified:
    """Steps 3-5 for a certificate signer: chain through the given roots only, valid now, signature good."""
    if sig_set.certificate is None:
        raise CertificateUntrusted("the signature carries no certificate")
    leaf, extra = read_certificates(sig_set.certificate, limits)  # extra: read (bounded), never trusted
    if not chains_to(leaf, roots.intermediates, roots.store, clamp_to_validity(leaf, now), limits):
        hint = (
            f"; the {len(extra)} certificate(s) sent after it are not used: list the issuing CA in the signer's roots"
            if extra
            else ""
        )
        raise CertificateUntrusted(
            f"the certificate (issuer {leaf.issuer.rfc4514_string()[:80]}) does not chain to the signer's roots{hint}"
        )
    require_code_signing(leaf)
    if not valid_at(leaf, now):
        # Without a transparency log nothing proves when the signature was made.
        raise CertificateUntrusted(
            f"the certificate ({validity(leaf)}) is not valid now; without a transparency log it must be"
        )
    key = _signature_verifies(leaf, sig_set.signature, payload)
    return Certified(identity_of(leaf), key.fingerprint, None)


def _certify_cached(sig_set: SignatureSet, payload: bytes, root: TrustRoot, limits: Limits) -> Certified:
    key = digest("keyless", root.digest, payload, sig_set.signature, sig_set.certificate or b"", sig_set.bundle or b"")
    known = _cache.get(key)
    if known is None:
        try:
            known = certify_keyless(sig_set, payload, root, limits)
        except VerificationFailure as failure:
            known = _Failed(failure.reason, failure.message)
        _cache.put(key, known)
    if isinstance(known, _Failed):
        raise VerificationFailure(known.message, reason=known.reason)
    return known


def clear_cache() -> None:
    """Forget cached set outcomes (benchmarks measure the uncached cost)."""
    _cache.clear()


def check_signer(
    spec: SignerSpec,
    envelope: Envelope,
    root: TrustRoot | None,
    *,
    now: datetime | None = None,
    limits: Limits = DEFAULT_LIMITS,
    every: bool = False,
) -> Outcome:
    """Check one ``signers`` entry against every signature set (see the module docstring).

    The first set that satisfies the entry answers; with ``every``, each further
    signing key that satisfies it is listed too, and every certificate that
    passed the trust checks is reported as a binding -- for a threshold or
    MustAll, which count distinct signers.
    """

    label = f"signer {spec.describe()}"
    certified_sets = [s for s in envelope.sets if s.certificate is not None]
    if not certified_sets:
        return Outcome(False, (), "signature-invalid", f"{label}: no signature carries a certificate")
    moment = now or datetime.now(UTC)
    moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    # Trust material comes compiled with the policy (Policy.from_dict); a spec built by
    # hand gets it loaded here. Keyless entries need the TrustedRoot, certificate signers their roots.
    anchors = (spec.anchors or load_signer_roots(spec.roots, limits)) if spec.roots is not None else None
    if anchors is None and root is None:
        root = load_trusted_root(None, limits=limits)
    worst: tuple[int, SignatureSet, VerificationFailure] | None = None
    found: dict[str, Match] = {}  # signing key -> the first match with it
    bindings: dict[Binding, None] = {}  # ordered and once each
    for sig_set in certified_sets:
        try:
            if anchors is None:
                assert root is not None
                facts = _certify_cached(sig_set, envelope.signed_bytes(sig_set), root, limits)
            else:
                facts = certify_with_roots(sig_set, envelope.signed_bytes(sig_set), anchors, moment, limits)
            bindings[Binding(facts.key, frozenset(facts.identity.subjects))] = None
            named = match_identity(spec, facts.identity)
        except VerificationFailure as failure:
            rank = _PROGRESS.index(failure.reason) if failure.reason in _PROGRESS else 0
            if worst is None or rank > worst[0]:
                worst = (rank, sig_set, failure)
            continue
        match = Match(facts.key, {**named, "key": facts.key})
        if not every:
            return Outcome(True, (match,), bindings=tuple(bindings))
        found.setdefault(facts.key, match)
    if found:
        return Outcome(True, tuple(found.values()), bindings=tuple(bindings))
    if worst is None:  # pragma: no cover - every set either verified or failed
        return Outcome(False, (), "signature-invalid", f"{label}: no signature verified", bindings=tuple(bindings))
    _, worst_set, worst_failure = worst
    return Outcome(
        False, (), worst_failure.reason, f"{label}: {worst_set.name}: {worst_failure.message}", bindings=tuple(bindings)
    )
