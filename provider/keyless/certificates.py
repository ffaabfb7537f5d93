"""Signing certificates: reading them, chaining them to a trusted CA, and the identity they carry.

Contract: every check raises a :class:`~provider.errors.VerificationFailure`
whose ``reason`` says what failed -- ``certificate-untrusted`` (unreadable, no
path to a trusted CA, not a code-signing certificate),
``certificate-expired-at-signing`` (not valid at the signing time) -- or
returns the facts it established.

Path validation is cryptography's RFC 5280 / CA-Browser-Forum verifier
(``cryptography.x509.verification``), the one sigstore-python uses, with one
relaxation copied from sigstore-python's policy: the Extended Key Usage is not
required to be TLS client authentication (Fulcio issues code-signing
certificates); instead :func:`require_code_signing` demands the code-signing
EKU on the leaf, as Fulcio and cosign do.

Identities (``docs/keyless.md``):

* the *subject* is any Subject Alternative Name of type email (RFC 822), URI,
  or sigstore's username ``otherName`` (OID 1.3.6.1.4.1.57264.1.7);
* the *issuer* is the OIDC issuer Fulcio recorded: extension
  1.3.6.1.4.1.57264.1.8 (a DER UTF8String) or its deprecated predecessor
  .1.1 (raw bytes); certificates with neither (2021-era Fulcio, enterprise
  CAs) have as issuer the issuing CA's distinguished name in RFC 4514 form.
  If both extensions are present they must agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, ObjectIdentifier

from ..errors import VerificationFailure
from ..limits import DEFAULT_LIMITS, Limits
from .identity import Identity, IdentityMismatch

if TYPE_CHECKING:
    from cryptography.x509.verification import Store

#: Fulcio certificate extensions (sigstore/fulcio docs/oid-info.md).
OID_ISSUER_V1 = ObjectIdentifier("1.3.6.1.4.1.57264.1.1")  # raw UTF-8 bytes, deprecated
OID_ISSUER_V2 = ObjectIdentifier("1.3.6.1.4.1.57264.1.8")  # DER UTF8String
OID_USERNAME = ObjectIdentifier("1.3.6.1.4.1.57264.1.7")  # otherName SAN, DER UTF8String

_UTF8STRING = 0x0C
_PEM_BEGIN = b"-----BEGIN CERTIFICATE-----"


class CertificateUntrusted(VerificationFailure):
    reason = "certificate-untrusted"


class CertificateExpired(VerificationFailure):
    reason = "certificate-expired-at-signing"


def read_certificates(
    pem: bytes, limits: Limits = DEFAULT_LIMITS
) -> tuple[x509.Certificate, tuple[x509.Certificate, ...]]:
    """The leaf (first PEM block) and the certificates the signer sent after it.

    Those are read, within the limits, so that a malformed annotation is refused
    and a denial can say they were not used; they are never path material
    (:func:`chains_to` takes intermediates from trust material only).
    """
    count = pem.count(_PEM_BEGIN)
    if count == 0:
        raise CertificateUntrusted("the certificate annotation holds no PEM certificate")
    if count > limits.max_chain_certificates:
        raise CertificateUntrusted(
            f"the certificate annotation holds {count} certificates; at most {limits.max_chain_certificates} are read"
        )
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise CertificateUntrusted(
            f"the certificate annotation is not a valid PEM certificate ({str(exc)[:80]})"
        ) from exc
    return certs[0], tuple(certs[1:])


@lru_cache(maxsize=1)
def _extension_policies() -> tuple[Any, Any]:
    from cryptography.x509.verification import Criticality, ExtensionPolicy

    # As sigstore-python: keep every CA/B-Forum default except the EKU check,
    # which would demand clientAuth; code signing is checked by require_code_signing.
    ca = ExtensionPolicy.webpki_defaults_ca().may_be_present(x509.ExtendedKeyUsage, Criticality.NON_CRITICAL, None)
    ee = ExtensionPolicy.webpki_defaults_ee().may_be_present(x509.ExtendedKeyUsage, Criticality.NON_CRITICAL, None)
    return ca, ee


def chains_to(
    leaf: x509.Certificate,
    intermediates: Sequence[x509.Certificate],
    store: Store,
    when: datetime,
    limits: Limits = DEFAULT_LIMITS,
) -> bool:
    """True when a valid path leads from ``leaf`` to an anchor in ``store``, every certificate valid at ``when``.

    ``intermediates`` must be trust material (a TrustedRoot authority's chain, a
    signer's ``roots``): a path through certificates the signer sent would let
    the signer choose who vouches for it.
    """
    from cryptography.x509.verification import PolicyBuilder, VerificationError

    ca_policy, ee_policy = _extension_policies()
    verifier = (
        PolicyBuilder()
        .store(store)
        .time(when)
        .max_chain_depth(limits.max_chain_certificates)
        .extension_policies(ca_policy=ca_policy, ee_policy=ee_policy)
        .build_client_verifier()
    )
    try:
        verifier.verify(leaf, list(intermediates))
    except (VerificationError, x509.UnsupportedGeneralNameType, ValueError):
        return False
    return True


def require_code_signing(leaf: x509.Certificate) -> None:
    try:
        usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        raise CertificateUntrusted(
            "the certificate has no extended key usage; a signing certificate must allow code signing"
        ) from None
    if ExtendedKeyUsageOID.CODE_SIGNING not in usages:
        raise CertificateUntrusted("the certificate is not a code-signing certificate (extended key usage)")


def valid_at(leaf: x509.Certificate, when: datetime) -> bool:
    return leaf.not_valid_before_utc <= when <= leaf.not_valid_after_utc


def validity(leaf: x509.Certificate) -> str:
    return f"{leaf.not_valid_before_utc.isoformat()} .. {leaf.not_valid_after_utc.isoformat()}"


def clamp_to_validity(leaf: x509.Certificate, when: datetime) -> datetime:
    """``when``, or the nearest instant inside the leaf's validity (to ask "is it trusted at all?")."""
    return min(max(when, leaf.not_valid_before_utc), leaf.not_valid_after_utc)


def same_certificate(a: x509.Certificate, b: x509.Certificate) -> bool:
    return a.public_bytes(serialization.Encoding.DER) == b.public_bytes(serialization.Encoding.DER)


# --- identity ---------------------------------------------------------------------


def _der_utf8(data: bytes) -> str | None:
    """The text of one DER UTF8String, or None when ``data`` is anything else."""
    if len(data) < 2 or data[0] != _UTF8STRING:
        return None
    length, offset = data[1], 2
    if length & 0x80:  # long form: the next (length & 0x7f) bytes hold the length
        width = length & 0x7F
        if width == 0 or width > 4 or len(data) < 2 + width:
            return None
        length, offset = int.from_bytes(data[2 : 2 + width], "big"), 2 + width
    if len(data) != offset + length:
        return None
    try:
        return data[offset:].decode("utf-8")
    except UnicodeDecodeError:
        return None


def _extension_bytes(leaf: x509.Certificate, oid: ObjectIdentifier) -> bytes | None:
    try:
        value = leaf.extensions.get_extension_for_oid(oid).value
    except x509.ExtensionNotFound:
        return None
    return value.value if isinstance(value, x509.UnrecognizedExtension) else None


def oidc_issuer(leaf: x509.Certificate) -> str | None:
    """The OIDC issuer Fulcio recorded, if any; inconsistent or unreadable values are refused."""
    v2_raw = _extension_bytes(leaf, OID_ISSUER_V2)
    v1_raw = _extension_bytes(leaf, OID_ISSUER_V1)
    v2 = _der_utf8(v2_raw) if v2_raw is not None else None
    if v2_raw is not None and v2 is None:
        raise IdentityMismatch("the certificate's OIDC issuer extension (1.3.6.1.4.1.57264.1.8) is not a UTF8String")
    v1 = None
    if v1_raw is not None:
        try:
            v1 = v1_raw.decode("utf-8")
        except UnicodeDecodeError:
            raise IdentityMismatch(
                "the certificate's OIDC issuer extension (1.3.6.1.4.1.57264.1.1) is not UTF-8"
            ) from None
    if v1 is not None and v2 is not None and v1 != v2:
        raise IdentityMismatch(f"the certificate names two different OIDC issuers ({v2[:80]!r} and {v1[:80]!r})")
    return v2 if v2 is not None else v1


def identity_of(leaf: x509.Certificate) -> Identity:
    try:
        names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        names = x509.SubjectAlternativeName([])
    subjects: list[str] = list(names.get_values_for_type(x509.RFC822Name))
    subjects += names.get_values_for_type(x509.UniformResourceIdentifier)
    for other in names.get_values_for_type(x509.OtherName):
        if other.type_id == OID_USERNAME and (text := _der_utf8(other.value)) is not None:
            subjects.append(text)
    issuer = oidc_issuer(leaf)
    return Identity(tuple(subjects), issuer if issuer is not None else leaf.issuer.rfc4514_string())
