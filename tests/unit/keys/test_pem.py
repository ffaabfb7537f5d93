"""Keys: every supported type signs and verifies; unusable keys give a clear error."""

from __future__ import annotations

import base64
import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.x509.oid import NameOID

from provider.errors import KeyLoadError, PolicyError
from provider.keys.pem import (
    KEY_TYPES,
    generate_key,
    load_private_key,
    load_public_keys,
    private_pem,
    public_pem,
    sign_bytes,
)
from tests.support.cosign import ed25519ph_sign
from tests.support.data import UPSTREAM


def pem_of(
    public_key: object, fmt: serialization.PublicFormat = serialization.PublicFormat.SubjectPublicKeyInfo
) -> str:
    return public_key.public_bytes(serialization.Encoding.PEM, fmt).decode()  # type: ignore[attr-defined]


def self_signed(key: ec.EllipticCurvePrivateKey) -> str:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "signer")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_every_key_type_signs_and_verifies(key_type: str) -> None:
    key = generate_key(key_type)
    (public,) = load_public_keys(public_pem(key).decode())
    assert public.key_type == key_type
    signature = sign_bytes(key, b"payload")
    assert public.verifies(signature, b"payload")
    assert not public.verifies(signature, b"payload!")
    assert not public.verifies(signature[:-1] + bytes([signature[-1] ^ 1]), b"payload")
    assert not public.verifies(b"", b"payload")
    assert not public.verifies(b"\x00" * 3000, b"payload")


def test_fingerprint_is_sha256_of_spki_and_same_for_certificate() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    (from_key,) = load_public_keys(pem_of(key.public_key()))
    (from_cert,) = load_public_keys(self_signed(key))
    assert from_key.fingerprint == from_cert.fingerprint
    assert from_key.fingerprint.startswith("sha256:") and len(from_key.fingerprint) == 7 + 64


def test_several_pem_blocks_are_several_keys_and_names_carry() -> None:
    a, b = ec.generate_private_key(ec.SECP256R1()), generate_key("ed25519")
    keys = load_public_keys(pem_of(a.public_key()) + "\n# comment\n" + public_pem(b).decode(), "team-a")
    assert [k.key_type for k in keys] == ["ecdsa-p256", "ed25519"]
    assert all(k.name == "team-a" and k.label().startswith("team-a (sha256:") for k in keys)


def test_pkcs1_rsa_public_key_and_crlf() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    text = pem_of(key.public_key(), serialization.PublicFormat.PKCS1).replace("\n", "\r\n")
    assert load_public_keys(text)[0].key_type == "rsa"


def test_upstream_cosign_keys_load() -> None:
    paths = sorted((UPSTREAM / "keys").glob("*.pem"))
    assert len(paths) >= 2, paths  # the interop data's two cosign keys
    for path in paths:
        assert load_public_keys(path.read_text())[0].key_type == "ecdsa-p256"


CURVE_HASHES = [
    # (curve, what sign uses, what verification also accepts, what it refuses)
    (ec.SECP256R1(), hashes.SHA256(), [], [hashes.SHA384(), hashes.SHA512(), hashes.SHA1()]),
    (ec.SECP384R1(), hashes.SHA384(), [hashes.SHA256()], [hashes.SHA512(), hashes.SHA1(), hashes.SHA224()]),
    (ec.SECP521R1(), hashes.SHA512(), [hashes.SHA256()], [hashes.SHA384(), hashes.SHA1()]),
]


@pytest.mark.parametrize(("curve", "own", "legacy", "refused"), CURVE_HASHES, ids=[c[0].name for c in CURVE_HASHES])
def test_each_curve_signs_with_its_own_hash_and_accepts_old_cosign_sha256(
    curve: ec.EllipticCurve,
    own: hashes.HashAlgorithm,
    legacy: list[hashes.HashAlgorithm],
    refused: list[hashes.HashAlgorithm],
) -> None:
    """cosign < 2.4 hashed with SHA-256 whatever the curve; later releases use the curve's own hash."""
    key = ec.generate_private_key(curve)
    (public,) = load_public_keys(pem_of(key.public_key()))
    ours = sign_bytes(key, b"m")
    key.public_key().verify(ours, b"m", ec.ECDSA(own))  # sign uses the curve's own hash
    for digest in [own, *legacy]:
        assert public.verifies(key.sign(b"m", ec.ECDSA(digest)), b"m"), digest.name
        assert not public.verifies(key.sign(b"m", ec.ECDSA(digest)), b"n"), digest.name
    for digest in refused:
        assert not public.verifies(key.sign(b"m", ec.ECDSA(digest)), b"m"), digest.name


def test_ed25519_accepts_pure_and_prehashed_signatures_and_signs_pure() -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    (public,) = load_public_keys(pem_of(key.public_key()))
    key.public_key().verify(sign_bytes(key, b"m"), b"m")  # sign writes pure EdDSA
    prehashed = ed25519ph_sign(key, b"m")
    assert prehashed != key.sign(b"m")
    assert public.verifies(key.sign(b"m"), b"m") and public.verifies(prehashed, b"m")
    assert not public.verifies(prehashed, b"n")
    assert not public.verifies(prehashed[:-1] + bytes([prehashed[-1] ^ 1]), b"m")
    assert not public.verifies(ed25519ph_sign(ed25519.Ed25519PrivateKey.generate(), b"m"), b"m")
    assert not public.verifies(prehashed + b"\0", b"m") and not public.verifies(prehashed[:63], b"m")


BAD_KEYS = [
    (
        "weak-rsa-1024",
        lambda: pem_of(rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()),
        "too weak",
    ),
    (
        "secp256k1",
        lambda: pem_of(ec.generate_private_key(ec.SECP256K1()).public_key()),
        "curve secp256k1 is not supported",
    ),
    ("dsa", lambda: pem_of(dsa.generate_private_key(2048).public_key()), "not supported"),
    ("ed448", lambda: pem_of(ed448.Ed448PrivateKey.generate().public_key()), "not supported"),
    ("private-key", lambda: private_pem(generate_key("ecdsa-p256"), None).decode(), "private key was given"),
    ("garbage-body", lambda: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "could not be read"),
    ("no-pem", lambda: "hello", "no PEM block"),
    ("base64-wrapped", lambda: base64.b64encode(b"-----BEGIN PUBLIC KEY-----").decode(), "base64-wrapped"),
    ("unknown-label", lambda: "-----BEGIN FOO-----\nAAAA\n-----END FOO-----\n", "not a public key"),
    ("mismatched-end", lambda: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END CERTIFICATE-----\n", "no PEM block"),
]


@pytest.mark.parametrize(("name", "make", "fragment"), BAD_KEYS, ids=[b[0] for b in BAD_KEYS])
def test_unusable_keys_give_a_clear_error(name: str, make: object, fragment: str) -> None:
    with pytest.raises(KeyLoadError, match=fragment) as info:
        load_public_keys(make())  # type: ignore[operator]
    assert isinstance(info.value, PolicyError)
    assert info.value.reason == "policy-invalid"


def test_private_key_password_handling() -> None:
    key = generate_key("ecdsa-p256")
    encrypted = private_pem(key, b"s3cret")
    with pytest.raises(KeyLoadError, match="MANIFEST_PROVIDER_PASSWORD"):
        load_private_key(encrypted, None)
    with pytest.raises(KeyLoadError, match="wrong password"):
        load_private_key(encrypted, b"nope")
    assert isinstance(load_private_key(encrypted, b"s3cret"), ec.EllipticCurvePrivateKey)


def test_weak_private_keys_are_refused_for_signing() -> None:
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    pem = weak.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(KeyLoadError, match="too weak"):
        load_private_key(pem, None)


def test_unknown_key_type_for_generation() -> None:
    with pytest.raises(KeyLoadError, match="unknown key type"):
        generate_key("dsa")
