"""Public keys, private keys and raw signatures.

A *key* is one PEM block: ``PUBLIC KEY`` (SubjectPublicKeyInfo), ``RSA PUBLIC
KEY`` (PKCS#1) or ``CERTIFICATE`` (its subject key is used; the certificate
itself is not validated -- that is what signer roots are for). A string with
several PEM blocks is several keys.

Supported algorithms. ``sign`` uses the first scheme of each row (sigstore's
default for the key type); verification also accepts the others, because
``kubectl sigstore sign`` signed differently as its cosign dependency changed:
cosign before v2.4 hashed with SHA-256 whatever the curve and signed Ed25519
keys with pure EdDSA; cosign v2.4 and later (k8s-manifest-sigstore since
2024-09) use the curve's own hash and Ed25519ph (RFC 8032 pre-hashed, SHA-512)::

    key           signature                 schemes (sign with the first)
    ECDSA P-256   ASN.1 DER (r, s)          SHA-256
    ECDSA P-384   ASN.1 DER (r, s)          SHA-384, SHA-256 (cosign < 2.4)
    ECDSA P-521   ASN.1 DER (r, s)          SHA-512, SHA-256 (cosign < 2.4)
    RSA >= 2048   PKCS#1 v1.5               SHA-256
    Ed25519       64 bytes                  pure EdDSA, Ed25519ph (cosign >= 2.4)

Every scheme is a standard signature over the same bytes with the same key;
accepting two per key lets a forger choose between two secure schemes, which
gains nothing without breaking one of them.

Every key, however it arrives (``PUBLIC KEY``, ``CERTIFICATE``, a keyless
leaf certificate, a transparency log's key, a signing key), passes the strength
rules of :mod:`provider.keys.rules` in :meth:`PublicKey.from_crypto`, and every
signature passes that module's well-formedness rules before a scheme is tried:
no small-order or non-canonical Ed25519 point, no ECDSA point off its curve, no
RSA key under 2048 bits or with an exponent FIPS 186-5 forbids; no Ed25519
signature with ``S >= L`` or a small-order ``R``, no ECDSA signature that is not
strict DER or has ``r``/``s`` outside ``[1, n)``.

Each key is identified by its fingerprint, ``sha256:<hex>`` of the DER
SubjectPublicKeyInfo (the key id sigstore computes), so the same key gives the
same fingerprint whether it arrives as a public key or inside a certificate.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

from ..errors import KeyLoadError
from ..limits import DEFAULT_LIMITS
from . import rules as key_rules

KeyType = Literal["ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "rsa", "ed25519"]

_PEM_BEGIN = re.compile(r"-----BEGIN ([A-Z0-9 ]{1,40})-----\r?\n")
#: base64 of "-----BEGIN": a PEM file that was base64-encoded once more (a Secret's data).
_WRAPPED_PEM = "LS0tLS1CRUdJT"
#: Key texts longer than this are loaded without the cache: a cached text stays in memory
#: as the cache's key, and a chain of a dozen certificates is well under 64 KiB.
_MAX_CACHED_CHARS = 64 * 1024

#: Curve -> key type and the hashes its signatures are checked with (signing uses the first).
_CURVES: dict[str, tuple[KeyType, tuple[hashes.HashAlgorithm, ...]]] = {
    "secp256r1": ("ecdsa-p256", (hashes.SHA256(),)),
    "secp384r1": ("ecdsa-p384", (hashes.SHA384(), hashes.SHA256())),
    "secp521r1": ("ecdsa-p521", (hashes.SHA512(), hashes.SHA256())),
}
PublicKeyTypes = ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey
PrivateKeyTypes = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey


def fingerprint_of(key: PublicKeyTypes) -> str:
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    # SHA-256 by cryptography, already loaded for the key, not hashlib: hashlib loads the interpreter's
    # own OpenSSL (_hashlib, ~2.5 ms of a command's start) for this one digest. The same bytes either way.
    digest = hashes.Hash(hashes.SHA256())
    digest.update(der)
    return "sha256:" + digest.finalize().hex()


Verify = Callable[[bytes, bytes], None]


def _ecdsa(key: ec.EllipticCurvePublicKey, digest: hashes.HashAlgorithm) -> Verify:
    algorithm = ec.ECDSA(digest)
    curve = key.curve.name

    def verify(sig: bytes, data: bytes) -> None:
        if not key_rules.ecdsa_signature_well_formed(curve, sig):
            raise InvalidSignature
        key.verify(sig, data, algorithm)

    return verify


def _ed25519_strict(verify_any: Verify) -> Verify:
    """``verify_any`` behind one set of signature rules for both Ed25519 backends (OpenSSL checks fewer)."""

    def verify(sig: bytes, data: bytes) -> None:
        if not key_rules.ed25519_signature_well_formed(sig):
            raise InvalidSignature
        verify_any(sig, data)

    return verify


def _ed25519ph(key: ed25519.Ed25519PublicKey) -> Verify:
    """Ed25519ph (RFC 8032 5.1, empty context), libsodium's through PyNaCl: ``cryptography`` has pure EdDSA only."""
    from nacl.bindings import (
        crypto_sign_ed25519ph_final_verify,
        crypto_sign_ed25519ph_state,
        crypto_sign_ed25519ph_update,
    )
    from nacl.exceptions import CryptoError

    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    def verify(sig: bytes, data: bytes) -> None:
        state = crypto_sign_ed25519ph_state()
        crypto_sign_ed25519ph_update(state, data)
        try:
            crypto_sign_ed25519ph_final_verify(state, sig, raw)
        except CryptoError:
            raise InvalidSignature from None

    return verify


def _describe(key: PublicKeyTypes) -> tuple[KeyType, tuple[Verify, ...]]:
    """A key's type and the ``verify(signature, data)`` of each scheme it accepts (each raises InvalidSignature)."""
    if isinstance(key, ec.EllipticCurvePublicKey):
        entry = _CURVES.get(key.curve.name)
        if entry is None:
            raise KeyLoadError(f"ECDSA curve {key.curve.name} is not supported; use P-256, P-384 or P-521")
        key_type, digests = entry
        point = key.public_numbers()
        key_rules.check_ec_point(key.curve.name, point.x, point.y)
        return key_type, tuple(_ecdsa(key, digest) for digest in digests)
    if isinstance(key, rsa.RSAPublicKey):
        numbers = key.public_numbers()
        key_rules.check_rsa_numbers(numbers.n, numbers.e)
        return "rsa", (lambda sig, data: key.verify(sig, data, padding.PKCS1v15(), hashes.SHA256()),)
    if isinstance(key, ed25519.Ed25519PublicKey):
        key_rules.check_ed25519_key(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))
        return "ed25519", (_ed25519_strict(key.verify), _ed25519_strict(_ed25519ph(key)))
    raise KeyLoadError(
        f"{type(key).__name__.removeprefix('_')} keys are not supported; "
        "use ECDSA (P-256/P-384/P-521), RSA (>= 2048 bits) or Ed25519"
    )


@dataclass(frozen=True)
class PublicKey:
    """One trusted public key."""

    key_type: KeyType
    fingerprint: str
    _schemes: tuple[Verify, ...] = field(repr=False, compare=False)
    _key: PublicKeyTypes = field(repr=False, compare=False)
    name: str | None = None

    @classmethod
    def from_crypto(cls, key: object, *, name: str | None = None) -> PublicKey:
        if not isinstance(key, (ec.EllipticCurvePublicKey, rsa.RSAPublicKey, ed25519.Ed25519PublicKey)):
            kind = type(key).__name__.removeprefix("_")
            raise KeyLoadError(
                f"{kind} keys are not supported; use ECDSA (P-256/P-384/P-521), RSA (>= 2048 bits) or Ed25519"
            )
        key_type, schemes = _describe(key)
        return cls(key_type, fingerprint_of(key), schemes, key, name)

    @property
    def crypto_key(self) -> PublicKeyTypes:
        return self._key

    def verifies(self, signature: bytes, data: bytes) -> bool:
        """True when ``signature`` is this key's signature over ``data`` in one of its schemes."""
        for verify in self._schemes:
            try:
                verify(signature, data)
            except (InvalidSignature, ValueError, UnsupportedAlgorithm):
                continue
            return True
        return False

    def label(self) -> str:
        short = self.fingerprint[:19]
        return f"{self.name} ({short}…)" if self.name else short + "…"


def _load_block(label: str, body: str, name: str | None) -> PublicKey:
    try:
        pem = f"-----BEGIN {label}-----\n{body}-----END {label}-----\n".encode()
        if label == "CERTIFICATE":
            from cryptography import x509  # here: a certificate is rare among keys, and x509 is slow to import

            key: object = x509.load_pem_x509_certificate(pem).public_key()
        elif label in ("PUBLIC KEY", "RSA PUBLIC KEY"):
            key = serialization.load_pem_public_key(pem)
        elif "PRIVATE KEY" in label:
            raise KeyLoadError(
                "a private key was given where a public key is expected; "
                "never put private keys in a policy (export the public half with `openssl pkey -pubout`)"
            )
        else:
            raise KeyLoadError(f"PEM block '{label}' is not a public key or certificate")
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        # ValueError covers UnicodeEncodeError: JSON can carry lone surrogates, UTF-8 cannot.
        raise KeyLoadError(f"PEM block '{label}' could not be read: {str(exc)[:120]}") from exc
    return PublicKey.from_crypto(key, name=name)


def _pem_blocks(text: str, max_blocks: int) -> list[tuple[str, str]]:
    """``(label, body)`` of every PEM block in ``text``, in linear time.

    A regular expression ``BEGIN (L) ... END \\1`` with a lazy body rescans the
    rest of the text from every BEGIN line it cannot close: quadratic, hours
    for a few megabytes of BEGIN lines. Here each BEGIN line costs one search
    for its END line, a label found unclosed once is never searched again, and
    more BEGIN lines than ``max_blocks`` are refused before any key is parsed.
    """
    blocks: list[tuple[str, str]] = []
    unclosed: set[str] = set()
    begins = 0
    position = 0
    while (begin := _PEM_BEGIN.search(text, position)) is not None:
        begins += 1
        if begins > max_blocks:
            raise KeyLoadError(
                f"the key text holds more than {max_blocks} PEM blocks; at most {max_blocks} keys are allowed"
            )
        label, position = begin.group(1), begin.end()
        if label in unclosed:
            continue
        end_line = f"-----END {label}-----"
        end = text.find(end_line, position)
        if end < 0:
            unclosed.add(label)
            continue
        blocks.append((label, text[position:end]))
        position = end + len(end_line)
    return blocks


def _load_public_keys(pem_text: str, name: str | None, max_blocks: int) -> tuple[PublicKey, ...]:
    blocks = _pem_blocks(pem_text.replace("\r\n", "\n"), max_blocks)
    if not blocks:
        if not pem_text.strip():
            raise KeyLoadError("the key is empty")
        hint = " (it looks base64-wrapped; decode it first)" if _WRAPPED_PEM in pem_text else ""
        raise KeyLoadError(f"no PEM block found in key{hint}")
    return tuple(_load_block(label, body, name) for label, body in blocks)


_load_cached = lru_cache(maxsize=512)(_load_public_keys)


def load_public_keys(
    pem_text: str, name: str | None = None, max_blocks: int = DEFAULT_LIMITS.max_keys
) -> tuple[PublicKey, ...]:
    """Every key in ``pem_text`` (one or more PEM blocks, at most ``max_blocks``), in order.

    Cached: policies arrive with every admission request and carry the same keys.
    """
    if not isinstance(pem_text, str):
        raise KeyLoadError("a key must be a PEM string")
    if len(pem_text) > _MAX_CACHED_CHARS:
        return _load_public_keys(pem_text, name, max_blocks)
    return _load_cached(pem_text, name, max_blocks)


# --- private keys: signing and generation -----------------------------------------


def load_private_key(pem: bytes, password: bytes | None) -> PrivateKeyTypes:
    """A signing key: PKCS #8 PEM (encrypted or not), ``EC``/``RSA PRIVATE KEY``, or a cosign key file."""
    from . import cosign as cosign_keys

    try:
        if cosign_keys.is_cosign_key(pem):
            key = serialization.load_der_private_key(cosign_keys.decrypt(pem, password), password=None)
        else:
            key = serialization.load_pem_private_key(pem, password=password)
    except TypeError as exc:
        raise KeyLoadError(
            "the private key is encrypted; set MANIFEST_PROVIDER_PASSWORD"
            if password is None
            else f"the private key could not be read: {exc}"
        ) from exc
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise KeyLoadError(
            f"the private key could not be read (expected PKCS#8 PEM, or a wrong password): {str(exc)[:120]}"
        ) from exc
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey, ed25519.Ed25519PrivateKey)):
        raise KeyLoadError(f"{type(key).__name__.removeprefix('_')} private keys are not supported")
    _describe(key.public_key())  # the same type/strength rules as for verification
    return key


def sign_bytes(key: PrivateKeyTypes, data: bytes) -> bytes:
    """A raw signature over ``data`` in the format :meth:`PublicKey.verifies` expects."""
    if isinstance(key, ec.EllipticCurvePrivateKey):
        _, digests = _CURVES[key.curve.name]
        return key.sign(data, ec.ECDSA(digests[0]))
    if isinstance(key, rsa.RSAPrivateKey):
        return key.sign(data, padding.PKCS1v15(), hashes.SHA256())
    return key.sign(data)


_GENERATORS: dict[str, Callable[[], PrivateKeyTypes]] = {
    "ecdsa-p256": lambda: ec.generate_private_key(ec.SECP256R1()),
    "ecdsa-p384": lambda: ec.generate_private_key(ec.SECP384R1()),
    "ecdsa-p521": lambda: ec.generate_private_key(ec.SECP521R1()),
    "rsa": lambda: rsa.generate_private_key(public_exponent=65537, key_size=3072),
    "ed25519": ed25519.Ed25519PrivateKey.generate,
}
KEY_TYPES = tuple(_GENERATORS)


def generate_key(key_type: str) -> PrivateKeyTypes:
    try:
        generate = _GENERATORS[key_type]
    except KeyError:
        raise KeyLoadError(f"unknown key type {key_type!r}; choose one of {', '.join(KEY_TYPES)}") from None
    key = generate()
    _describe(key.public_key())  # the rules hold for what we make, not only for what we are given
    return key


def private_pem(key: PrivateKeyTypes, password: bytes | None, *, cosign: bool = False) -> bytes:
    """PKCS #8 PEM (encrypted when ``password`` is given), or with ``cosign`` cosign's encrypted key file."""
    if cosign:
        from .cosign import encrypt

        der = key.private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return encrypt(der, password)
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def public_pem(key: PrivateKeyTypes | PublicKeyTypes) -> bytes:
    public: PublicKeyTypes = (
        key.public_key()
        if isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey, ed25519.Ed25519PrivateKey))
        else key
    )
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
