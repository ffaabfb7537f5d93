"""cosign's encrypted private keys, and signatures made by each cosign generation.

The key files here are sealed by the tests' own code (``tests/support/cosign.py``:
scrypt from hashlib, NaCl secretbox from PyNaCl, the JSON of go-securesystemslib's
``encrypted`` format), not by ``provider.keys.cosign``, so reader and writer are
checked against an independent implementation of the format.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from provider import Policy, Review, decide
from provider.errors import KeyLoadError
from provider.keys.cosign import PEM_LABELS, decrypt
from provider.keys.pem import KEY_TYPES, generate_key, load_private_key, private_pem, public_pem
from provider.signatures.signing import sign_documents
from tests.support.cosign import ed25519ph_sign, pkcs8_der, seal, unseal
from tests.support.manifests import configmap

D = "cosign.sigstore.dev"


@pytest.mark.parametrize("key_type", KEY_TYPES)
@pytest.mark.parametrize("label", PEM_LABELS)
def test_cosign_key_files_load_for_every_key_type_and_both_labels(key_type: str, label: str) -> None:
    key = generate_key(key_type)
    loaded = load_private_key(seal(pkcs8_der(key), b"pw", label=label), b"pw")
    assert public_pem(loaded) == public_pem(key)


def test_an_empty_password_is_a_password_like_cosign_treats_it() -> None:
    key = generate_key("ecdsa-p256")
    assert public_pem(load_private_key(seal(pkcs8_der(key), b""), None)) == public_pem(key)


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_keys_written_in_cosign_format_open_with_an_independent_reader(key_type: str) -> None:
    key = generate_key(key_type)
    for password in (b"s3cret", None):
        pem = private_pem(key, password, cosign=True)
        assert pkcs8_der(serialization.load_der_private_key(unseal(pem, password or b""), None)) == pkcs8_der(key)
        assert public_pem(load_private_key(pem, password)) == public_pem(key)


BROKEN: list[tuple[str, Any, str]] = [
    ("wrong-password", lambda der: seal(der, b"right"), "decryption failed; is the password right"),
    (
        "kdf-not-scrypt",
        lambda der: seal(der, b"pw", kdf={"name": "pbkdf2", "params": {}, "salt": ""}),
        "unsupported kdf 'pbkdf2'",
    ),
    ("cipher-not-secretbox", lambda der: seal(der, b"pw", cipher={"name": "aes-gcm", "nonce": ""}), "cipher 'aes-gcm'"),
    ("scrypt-n-huge", lambda der: seal(der, b"pw", n=2**30), "out of bounds"),
    ("scrypt-n-not-power-of-two", lambda der: seal(der, b"pw", n=1000), "out of bounds"),
    ("scrypt-r-huge", lambda der: seal(der, b"pw", n=2**16, r=1024), "out of bounds"),
    (
        "scrypt-n-a-string",
        lambda der: seal(der, b"pw", kdf={"name": "scrypt", "params": {"N": "32768", "r": 8, "p": 1}, "salt": ""}),
        "positive integers",
    ),
    (
        "salt-missing",
        lambda der: seal(der, b"pw", kdf={"name": "scrypt", "params": {"N": 2, "r": 1, "p": 1}}),
        "'kdf.salt' is missing",
    ),
    (
        "nonce-short",
        lambda der: seal(der, b"pw", cipher={"name": "nacl/secretbox", "nonce": "AAAA"}),
        "nonce is 3 bytes",
    ),
    ("ciphertext-not-base64", lambda der: seal(der, b"pw", ciphertext="%%%"), "'ciphertext' is not base64"),
    (
        "body-not-json",
        lambda der: (
            b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\naGVsbG8=\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n"
        ),
        "not JSON",
    ),
    (
        "body-json-100000-deep",  # past json's recursion limit: RecursionError is not a ValueError
        lambda der: (
            b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n"
            + base64.encodebytes(b"[" * 100_000 + b"]" * 100_000)
            + b"-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n"
        ),
        "not JSON",
    ),
    (
        "body-not-base64",
        lambda der: (
            b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n@@@@\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n"
        ),
        "not base64",
    ),
    ("no-end-line", lambda der: b"-----BEGIN ENCRYPTED COSIGN PRIVATE KEY-----\naGVsbG8=\n", "no END line"),
    ("plaintext-not-a-key", lambda der: seal(b"not DER", b"pw"), "could not be read"),
]


@pytest.mark.parametrize(("name", "make", "fragment"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_cosign_key_files_give_a_clear_error_quickly(name: str, make: Any, fragment: str) -> None:
    pem = make(pkcs8_der(generate_key("ecdsa-p256")))
    start = time.process_time()  # CPU time: the work, whatever else the machine runs
    with pytest.raises(KeyLoadError, match=fragment):
        load_private_key(pem, b"pw")
    assert time.process_time() - start < 5  # scrypt parameters past the bound are refused, not run


def test_a_missing_password_says_where_to_set_it() -> None:
    pem = seal(pkcs8_der(generate_key("ecdsa-p256")), b"right")
    with pytest.raises(KeyLoadError, match="set MANIFEST_PROVIDER_PASSWORD \\(or COSIGN_PASSWORD\\)"):
        decrypt(pem, None)


# --- signatures made by each cosign generation verify ------------------------------


def resigned(obj: dict[str, Any], signature: bytes) -> dict[str, Any]:
    """``obj`` with its signature replaced by ``signature`` over the same message."""
    obj["metadata"]["annotations"][f"{D}/signature"] = base64.b64encode(signature).decode()
    return obj


def payload_of(obj: dict[str, Any]) -> bytes:
    import gzip

    return gzip.decompress(base64.b64decode(obj["metadata"]["annotations"][f"{D}/message"]))


GENERATIONS = [
    # (key, how that cosign generation signs the payload)
    (
        "p384-sha256-cosign-before-2.4",
        lambda: ec.generate_private_key(ec.SECP384R1()),
        lambda k, p: k.sign(p, ec.ECDSA(hashes.SHA256())),
    ),
    (
        "p384-sha384-cosign-2.4",
        lambda: ec.generate_private_key(ec.SECP384R1()),
        lambda k, p: k.sign(p, ec.ECDSA(hashes.SHA384())),
    ),
    (
        "p521-sha256-cosign-before-2.4",
        lambda: ec.generate_private_key(ec.SECP521R1()),
        lambda k, p: k.sign(p, ec.ECDSA(hashes.SHA256())),
    ),
    (
        "p521-sha512-cosign-2.4",
        lambda: ec.generate_private_key(ec.SECP521R1()),
        lambda k, p: k.sign(p, ec.ECDSA(hashes.SHA512())),
    ),
    ("ed25519-pure-cosign-before-2.4", ed25519.Ed25519PrivateKey.generate, lambda k, p: k.sign(p)),
    ("ed25519ph-cosign-2.4", ed25519.Ed25519PrivateKey.generate, ed25519ph_sign),
]


@pytest.mark.parametrize(("name", "make", "sign_with"), GENERATIONS, ids=[g[0] for g in GENERATIONS])
def test_manifests_signed_by_each_cosign_generation_verify_and_tampering_is_caught(
    name: str, make: Any, sign_with: Any
) -> None:
    key = make()
    obj = sign_documents([configmap("cm", "ns", mode="production")], key)[0]
    obj = resigned(obj, sign_with(key, payload_of(obj)))
    policy = Policy.from_dict({"keys": [public_pem(key).decode()]})
    assert decide(Review.for_object(obj), policy).reason == "verified"
    obj["data"]["mode"] = "debug"
    assert decide(Review.for_object(obj), policy).reason == "content-mismatch"
    other = Policy.from_dict({"keys": [public_pem(make()).decode()]})
    assert (
        decide(Review.for_object(resigned(obj, sign_with(key, payload_of(obj)))), other).reason == "signature-invalid"
    )
