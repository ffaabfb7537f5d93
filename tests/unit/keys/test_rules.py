"""No key without strength: every weak or malformed key is refused, every malformed signature fails.

Attack classes, each with its own section:

* the forgery of issue 12: the Ed25519 identity point as a key, and R = identity, S = 0
  as its "signature", which verifies every payload under OpenSSL's cofactorless check;
* small-order and non-canonical Ed25519 keys (the 8 torsion points in every encoding);
* malformed Ed25519 signatures (S >= L, small-order or non-canonical R), on both the
  pure path (OpenSSL) and the Ed25519ph path (libsodium);
* ECDSA keys off their curve, unreduced, or at infinity; ECDSA signatures that are
  BER rather than DER or carry r, s outside [1, n);
* RSA keys under 2048 bits, with an even modulus, or an exponent FIPS 186-5 forbids;
* the same rules for keys inside CERTIFICATE blocks, certificate signers and keyless leaves,
  and for signing keys.

Published vectors come from Project Wycheproof (tests/assets/wycheproof/README.md says
which); the rest are built here from the standards' own constants.
"""

from __future__ import annotations

import base64
import copy
import datetime
import hashlib
import json
from pathlib import Path
from typing import Any, cast

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID
from nacl.bindings import crypto_core_ed25519_add, crypto_core_ed25519_is_valid_point

from provider import Policy, Review, decide
from provider.errors import KeyLoadError, PolicyError
from provider.keys.pem import (
    PublicKey,
    generate_key,
    load_private_key,
    load_public_keys,
    private_pem,
    public_pem,
    sign_bytes,
)
from provider.keys.rules import (
    CURVES,
    ED25519_L,
    ED25519_P,
    SMALL_ORDER_Y,
    _decode,
    _is_identity,
    _small_order,
    _times,
    ecdsa_signature_well_formed,
    ed25519_signature_well_formed,
)
from tests.support.cosign import ed25519ph_sign
from tests.support.keyless import World, issue_leaf, make_ca, pem
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign

WYCHEPROOF = Path(__file__).resolve().parents[2] / "assets" / "wycheproof"
D = "cosign.sigstore.dev"
#: The DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410 section 4): the 32 key bytes follow.
ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")
IDENTITY = (1).to_bytes(32, "little")
#: R = identity, S = 0: a "signature" that needs no private key.
FORGED = IDENTITY + bytes(32)


def spki_pem(der: bytes) -> str:
    body = base64.encodebytes(der).decode()
    return f"-----BEGIN PUBLIC KEY-----\n{body}-----END PUBLIC KEY-----\n"


def ed25519_pem(raw: bytes) -> str:
    return spki_pem(ED25519_SPKI_PREFIX + raw)


def refused(text: str, fragment: str) -> KeyLoadError:
    with pytest.raises(KeyLoadError, match=fragment) as info:
        load_public_keys(text)
    assert info.value.reason == "policy-invalid"
    return info.value


def certificate_for(public: Any) -> str:
    """A certificate whose subject key is ``public``, signed by an honest CA key."""
    ca = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "signer")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(public)
        .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .sign(ca, hashes.SHA256())
    )  # fmt: skip
    return cert.public_bytes(serialization.Encoding.PEM).decode()


# --- the forgery of the issue: identity key, R = identity, S = 0 ------------------------------


def test_identity_key_is_refused_at_policy_load() -> None:
    refused(ed25519_pem(IDENTITY), "small-order point")
    with pytest.raises(PolicyError) as info:
        Policy.from_dict({"keys": [ed25519_pem(IDENTITY)]})
    assert info.value.reason == "policy-invalid"
    assert "small-order" in info.value.message


def test_identity_key_in_a_certificate_block_is_refused() -> None:
    identity = ed25519.Ed25519PublicKey.from_public_bytes(IDENTITY)
    refused(certificate_for(identity), "small-order point")


def test_forged_signature_never_verifies_on_either_ed25519_path() -> None:
    """Whatever the key, R = identity with S = 0 is refused before OpenSSL or libsodium is asked."""
    assert not ed25519_signature_well_formed(FORGED)
    (honest,) = load_public_keys(public_key_pem(make_key("ed25519")))
    for payload in (b"", b"anything", b"kind: ClusterRoleBinding\n"):
        assert not honest.verifies(FORGED, payload)


def identity_r_signature(key: ed25519.Ed25519PrivateKey, data: bytes) -> bytes:
    """What only the key holder can make: R = identity and S = H(R || A || M) * a mod L (RFC 8032 5.1.6 with r = 0)."""
    seed = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    scalar = int.from_bytes(hashlib.sha512(seed).digest()[:32], "little") & ((1 << 254) - 8) | (1 << 254)
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    challenge = int.from_bytes(hashlib.sha512(IDENTITY + public + data).digest(), "little") % ED25519_L
    return IDENTITY + (challenge * scalar % ED25519_L).to_bytes(32, "little")


def test_identity_r_is_refused_on_the_pure_path_as_libsodium_refuses_it() -> None:
    """A small-order R verifies under OpenSSL's cofactorless check when the key holder makes it, and never under
    libsodium's: the verdict must not depend on the path, so both refuse it."""
    key = ed25519.Ed25519PrivateKey.generate()
    signature = identity_r_signature(key, b"m")
    key.public_key().verify(signature, b"m")  # the backend alone accepts it (cryptography 50 / OpenSSL 4.0)
    (public,) = load_public_keys(public_pem(key).decode())
    assert not public.verifies(signature, b"m")


def test_forged_signature_on_a_signed_object_is_signature_invalid() -> None:
    key = make_key("ed25519")
    (obj,) = sign(configmap(), key)
    obj["metadata"]["annotations"][f"{D}/signature"] = base64.b64encode(FORGED).decode()
    result = decide(Review.for_object(obj), Policy.from_dict({"keys": [public_key_pem(key)]}))
    assert (result.allowed, result.reason) == (False, "signature-invalid")


class _KeylessForger:
    """What a forger holds: a public key that is the identity point, and the signature any payload gets."""

    def public_key(self) -> ed25519.Ed25519PublicKey:
        return ed25519.Ed25519PublicKey.from_public_bytes(IDENTITY)

    def sign(self, data: bytes) -> bytes:
        return FORGED


def test_identity_key_in_a_certificate_signer_leaf_is_untrusted() -> None:
    """A CA that certifies the identity point (by mistake or on purpose) does not make it a signer."""
    root = make_ca("corp-root")
    issuing = make_ca("corp-issuing", root, path_length=0)
    forger = cast(Any, _KeylessForger())
    now = datetime.datetime.now(datetime.UTC)
    _, leaf = issue_leaf(issuing, key=forger, issuer=None, email="build@corp.example",
                         not_before=now - datetime.timedelta(days=1), lifetime=datetime.timedelta(days=30))  # fmt: skip
    obj = World().sign(configmap(), key=forger, cert=leaf, chain=(issuing.cert,), bundle=False)
    # ``roots`` is the whole path: the root and the issuing CA (docs/keyless.md).
    roots = (pem(root.cert) + pem(issuing.cert)).decode()
    policy = Policy.from_dict({"signers": [{"subject": "build@corp.example", "roots": roots}]})
    result = decide(Review.for_object(obj), policy)
    assert (result.allowed, result.reason) == (False, "certificate-untrusted"), result.message
    assert "small-order" in result.message


# --- Ed25519 keys: the 8 small-order points, every encoding, and non-canonical encodings ----------

#: The y coordinates of the order-8 points (libsodium src/libsodium/crypto_core/ed25519/ref10/ed25519_ref10.c,
#: ge25519_has_small_order's blocklist, written out here rather than imported from the code under test); the
#: other torsion points have y = 1 (order 1), p - 1 (order 2) and 0 (order 4). Each y != +-1 names two points,
#: told apart by the sign bit of x.
ORDER_8_Y = 2707385501144840649318225287225658788936804267575313519463743609750303402022
TORSION_Y = {
    "identity": 1,
    "order-2": ED25519_P - 1,
    "order-4": 0,
    "order-8a": ORDER_8_Y,
    "order-8b": ED25519_P - ORDER_8_Y,
}


def encode(y: int, x_sign: int) -> bytes:
    return (y | x_sign << 255).to_bytes(32, "little")


TORSION_CANONICAL = [
    (f"{name}-x{sign}", encode(y, sign))
    for name, y in TORSION_Y.items()
    for sign in (0, 1)
    if y not in (1, ED25519_P - 1) or sign == 0  # x = 0 for y = +-1: only the clear sign bit is canonical
]
TORSION_NON_CANONICAL = [
    ("identity-negative-zero", encode(1, 1)),
    ("order-2-negative-zero", encode(ED25519_P - 1, 1)),
    ("identity-as-p+1", encode(ED25519_P + 1, 0)),
    ("identity-as-p+1-negative-zero", encode(ED25519_P + 1, 1)),
    ("order-4-as-p", encode(ED25519_P, 0)),
    ("order-4-as-p-x1", encode(ED25519_P, 1)),
]


def test_the_torsion_table_has_all_eight_points() -> None:
    assert len({raw for _, raw in TORSION_CANONICAL}) == 8
    assert set(TORSION_Y.values()) == SMALL_ORDER_Y  # the signature rule's table is the same one


@pytest.mark.parametrize("raw", [r for _, r in TORSION_CANONICAL], ids=[n for n, _ in TORSION_CANONICAL])
def test_small_order_points_are_small_order_by_arithmetic(raw: bytes) -> None:
    """[8]T is the identity for each of them: the table is the torsion subgroup, not a list of guesses."""
    point = _decode(raw)
    assert _is_identity(_times(8, point))
    assert _small_order(point)


def test_an_honest_key_is_of_prime_order_by_arithmetic() -> None:
    raw = serialization.load_pem_public_key(public_pem(make_key("ed25519"))).public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    point = _decode(raw)
    assert not _small_order(point) and _is_identity(_times(ED25519_L, point))


@pytest.mark.parametrize("raw", [r for _, r in TORSION_CANONICAL], ids=[n for n, _ in TORSION_CANONICAL])
def test_small_order_ed25519_key_is_refused(raw: bytes) -> None:
    assert not crypto_core_ed25519_is_valid_point(raw)  # libsodium agrees the point is unusable
    refused(ed25519_pem(raw), "small-order point")


@pytest.mark.parametrize("raw", [r for _, r in TORSION_NON_CANONICAL], ids=[n for n, _ in TORSION_NON_CANONICAL])
def test_non_canonical_encoding_of_a_small_order_point_is_refused(raw: bytes) -> None:
    assert not crypto_core_ed25519_is_valid_point(raw)
    error = refused(ed25519_pem(raw), "not canonical")
    assert "small order" in error.message


#: The curve constant d = -121665/121666 (RFC 8032 section 5.1).
ED25519_D = -121665 * pow(121666, -1, ED25519_P) % ED25519_P


def on_curve(y: int) -> bool:
    """Some x has x^2 = (y^2 - 1) / (d y^2 + 1): Euler's criterion for that quotient."""
    quotient = (y * y - 1) * pow(ED25519_D * y * y + 1, -1, ED25519_P) % ED25519_P
    return pow(quotient, (ED25519_P - 1) // 2, ED25519_P) in (0, 1)


def test_non_canonical_encoding_of_an_ordinary_point_is_refused() -> None:
    """y in [p, 2^255) names the point y - p: a second encoding of a point with y < 19."""
    ys = [y for y in range(2, 19) if on_curve(y)]
    assert ys
    for y in ys:
        refused(ed25519_pem(encode(y + ED25519_P, 0)), "not canonical")


def test_ed25519_key_off_the_curve_is_refused() -> None:
    y = next(y for y in range(2, 1000) if not on_curve(y))
    assert not crypto_core_ed25519_is_valid_point(encode(y, 0))
    refused(ed25519_pem(encode(y, 0)), "not a point on the curve")


def test_ed25519_key_with_a_small_order_component_is_refused() -> None:
    """A + T (T of order 8) has order 8L: no seed makes it, and cofactored and cofactorless checks disagree on it."""
    honest = public_pem(make_key("ed25519"))
    raw = serialization.load_pem_public_key(honest).public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    mixed = crypto_core_ed25519_add(raw, encode(ORDER_8_Y, 0))
    assert not crypto_core_ed25519_is_valid_point(mixed)
    refused(ed25519_pem(mixed), "small-order component")


# --- Ed25519 signatures: Wycheproof, and the Ed25519ph path -------------------------------------


def wycheproof(name: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``(id, group, test)`` for every test of a committed Wycheproof excerpt."""
    data = json.loads((WYCHEPROOF / name).read_text())
    cases = [
        (f"tc{t['tcId']}-{'-'.join(t['flags']) or 'plain'}-{t['result']}", g, t)
        for g in data["testGroups"]
        for t in g["tests"]
    ]
    assert cases, name
    return cases


ED25519_VECTORS = wycheproof("ed25519.json")


@pytest.mark.parametrize(("group", "test"), [c[1:] for c in ED25519_VECTORS], ids=[c[0] for c in ED25519_VECTORS])
def test_wycheproof_ed25519(group: dict[str, Any], test: dict[str, Any]) -> None:
    (key,) = load_public_keys(spki_pem(bytes.fromhex(group["publicKeyDer"])))
    assert key.verifies(bytes.fromhex(test["sig"]), bytes.fromhex(test["msg"])) is (test["result"] == "valid")


def test_wycheproof_ed25519_excerpt_covers_every_attack_flag() -> None:
    flags = {f for _, _, t in ED25519_VECTORS for f in t["flags"]}
    assert {
        "InvalidSignature",
        "InvalidEncoding",
        "SignatureMalleability",
        "TruncatedSignature",
        "SignatureWithGarbage",
    } <= flags


def _plus_l(signature: bytes) -> bytes:
    return signature[:32] + (int.from_bytes(signature[32:], "little") + ED25519_L).to_bytes(32, "little")


def _r_non_canonical(signature: bytes) -> bytes:
    """R replaced by the second encoding (y + p) of an ordinary point: only points with y < 19 have one."""
    y = next(y for y in range(2, 19) if on_curve(y))
    return encode(y + ED25519_P, 0) + signature[32:]


MALFORMED_ED25519 = [
    ("s-plus-l", _plus_l),
    ("r-identity-s-zero", lambda s: FORGED),
    ("r-order-8", lambda s: encode(ORDER_8_Y, 0) + s[32:]),
    ("r-non-canonical", _r_non_canonical),
    ("r-off-the-curve", lambda s: encode(next(y for y in range(2, 1000) if not on_curve(y)), 0) + s[32:]),
    ("truncated", lambda s: s[:63]),
    ("trailing-byte", lambda s: s + b"\0"),
]


@pytest.mark.parametrize("scheme", ["pure", "ed25519ph"])
@pytest.mark.parametrize("malform", [m for _, m in MALFORMED_ED25519], ids=[n for n, _ in MALFORMED_ED25519])
def test_malformed_ed25519_signature_fails_on_both_paths(scheme: str, malform: Any) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    (public,) = load_public_keys(public_pem(key).decode())
    good = key.sign(b"m") if scheme == "pure" else ed25519ph_sign(key, b"m")
    assert public.verifies(good, b"m")
    assert not public.verifies(malform(good), b"m")


def test_s_just_under_l_is_well_formed_and_l_is_not() -> None:
    base_point = bytes.fromhex("5866666666666666666666666666666666666666666666666666666666666666")  # B, RFC 8032 5.1
    assert ed25519_signature_well_formed(base_point + (ED25519_L - 1).to_bytes(32, "little"))
    assert not ed25519_signature_well_formed(base_point + ED25519_L.to_bytes(32, "little"))


# --- ECDSA: keys on their curve, signatures in DER with r, s in [1, n) ------------------------


def test_curve_orders_match_the_backend() -> None:
    """n of each curve as the backend knows it: n - 1 is a private scalar, n is not."""
    backend_curves = {"secp256r1": ec.SECP256R1(), "secp384r1": ec.SECP384R1(), "secp521r1": ec.SECP521R1()}
    assert set(backend_curves) == set(CURVES)
    for name, curve in CURVES.items():
        ec_curve = backend_curves[name]
        ec.derive_private_key(curve.n - 1, ec_curve)
        with pytest.raises(ValueError):
            ec.derive_private_key(curve.n, ec_curve)


def _uncompressed(curve: ec.EllipticCurve, x: int, y: int) -> bytes:
    size = (curve.key_size + 7) // 8
    return b"\x04" + x.to_bytes(size, "big") + y.to_bytes(size, "big")


def _spki(curve: ec.EllipticCurve, point: bytes) -> bytes:
    """An EC SubjectPublicKeyInfo with ``point`` as given: the prefix of an honest one, the point swapped in."""
    honest = ec.generate_private_key(curve).public_key()
    der = honest.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    good = honest.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    assert der.endswith(good) and len(point) == len(good)
    return der[: -len(good)] + point


@pytest.mark.parametrize("curve", [ec.SECP256R1(), ec.SECP384R1(), ec.SECP521R1()], ids=lambda c: c.name)
def test_ecdsa_key_off_its_curve_is_refused(curve: ec.EllipticCurve) -> None:
    numbers = ec.generate_private_key(curve).public_key().public_numbers()
    off = _uncompressed(curve, numbers.x, numbers.y ^ 1)  # y flipped in its last bit: not on the curve
    refused(spki_pem(_spki(curve, off)), "could not be read")


def test_ecdsa_point_at_infinity_is_refused() -> None:
    honest = ec.generate_private_key(ec.SECP256R1()).public_key()
    der = honest.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    # SEQUENCE { AlgorithmIdentifier, BIT STRING { 00 } }: the SEC 1 encoding of infinity is one 0 octet.
    algorithm = der[2:23]
    refused(spki_pem(bytes([0x30, len(algorithm) + 4]) + algorithm + b"\x03\x02\x00\x00"), "could not be read")


def test_ecdsa_unreduced_coordinate_is_refused() -> None:
    """x + p names the same point as x; a P-256 point with small x lets x + p fit in 32 bytes."""
    curve = CURVES["secp256r1"]
    for x in range(1, 10_000):
        rhs = (x**3 - 3 * x + curve.b) % curve.p
        y = pow(rhs, (curve.p + 1) // 4, curve.p)  # p = 3 mod 4: this is the square root when one exists
        if y * y % curve.p == rhs and x + curve.p < 2**256:
            break
    else:  # pragma: no cover
        pytest.fail("no small x on P-256")
    ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()  # the reduced point is a real key
    refused(spki_pem(_spki(ec.SECP256R1(), _uncompressed(ec.SECP256R1(), x + curve.p, y))), "could not be read")


def test_explicit_point_rule_refuses_what_the_backend_cannot_even_load() -> None:
    """The rule itself, for the day a backend stops checking: off-curve and unreduced points."""
    from provider.keys.rules import check_ec_point

    numbers = ec.generate_private_key(ec.SECP384R1()).public_key().public_numbers()
    check_ec_point("secp384r1", numbers.x, numbers.y)
    with pytest.raises(KeyLoadError, match="not a point on the curve"):
        check_ec_point("secp384r1", numbers.x, numbers.y ^ 1)
    with pytest.raises(KeyLoadError, match="outside the field"):
        check_ec_point("secp384r1", numbers.x + CURVES["secp384r1"].p, numbers.y)
    with pytest.raises(KeyLoadError, match="outside the field"):
        check_ec_point("secp384r1", numbers.x, -numbers.y)


ECDSA_VECTORS = wycheproof("ecdsa_secp256r1_sha256.json")


@pytest.mark.parametrize(("group", "test"), [c[1:] for c in ECDSA_VECTORS], ids=[c[0] for c in ECDSA_VECTORS])
def test_wycheproof_ecdsa_p256(group: dict[str, Any], test: dict[str, Any]) -> None:
    (key,) = load_public_keys(spki_pem(bytes.fromhex(group["publicKeyDer"])))
    sig, msg = bytes.fromhex(test["sig"]), bytes.fromhex(test["msg"])
    valid = test["result"] == "valid"
    assert key.verifies(sig, msg) is valid
    # The rule alone, whatever OpenSSL does, refuses every invalid vector of the excerpt but one:
    # r = s = n - 1 (tc204) is strict DER and in range, and wrong only for the arithmetic.
    assert ecdsa_signature_well_formed("secp256r1", sig) is (valid or test["tcId"] == 204)


def test_high_s_is_accepted_as_go_and_openssl_sign_it() -> None:
    """ECDSA has no low-s rule: (r, n - s) is a valid signature, and cosign's signer emits either."""
    key = ec.generate_private_key(ec.SECP256R1())
    (public,) = load_public_keys(public_pem(key).decode())
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

    r, s = decode_dss_signature(sign_bytes(key, b"m"))
    assert public.verifies(encode_dss_signature(r, CURVES["secp256r1"].n - s), b"m")


# --- RSA: size, modulus, exponent -------------------------------------------------------------

RSA_2048 = rsa.generate_private_key(public_exponent=65537, key_size=2048)
RSA_N = RSA_2048.public_key().public_numbers().n


def _pkcs1_pem(n: int, e: int) -> str:
    """An ``RSA PUBLIC KEY`` block for any (n, e), built by hand so no library check stands in the way."""

    def integer(value: int) -> bytes:
        body = value.to_bytes(value.bit_length() // 8 + 1, "big")
        return b"\x02" + _length(len(body)) + body

    body = integer(n) + integer(e)
    der = b"\x30" + _length(len(body)) + body
    return f"-----BEGIN RSA PUBLIC KEY-----\n{base64.encodebytes(der).decode()}-----END RSA PUBLIC KEY-----\n"


def _length(size: int) -> bytes:
    if size < 0x80:
        return bytes([size])
    octets = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(octets)]) + octets


BAD_RSA = [
    # Newer cryptography refuses e < 3 while loading; 45.x (setup.cfg's floor) loads it and our own check refuses it.
    ("e-1", RSA_N, 1, "could not be read|public exponent 1;"),
    ("e-3", RSA_N, 3, "public exponent 3;"),
    ("e-17", RSA_N, 17, "public exponent 17;"),
    ("e-2^16-minus-1", RSA_N, 2**16 - 1, "public exponent 65535;"),
    ("e-even", RSA_N, 65538, "could not be read|must be odd"),
    ("e-2^256-plus-1", RSA_N, 2**256 + 1, "a 257-bit number"),
    ("even-modulus", RSA_N + 1, 65537, "even modulus"),
    (
        "1024-bits",
        rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key().public_numbers().n,
        65537,
        "too weak",
    ),
]


@pytest.mark.parametrize(("n", "e", "fragment"), [b[1:] for b in BAD_RSA], ids=[b[0] for b in BAD_RSA])
def test_weak_rsa_key_is_refused(n: int, e: int, fragment: str) -> None:
    refused(_pkcs1_pem(n, e), fragment)


def test_weak_rsa_key_in_a_certificate_is_refused() -> None:
    refused(certificate_for(rsa.RSAPublicNumbers(3, RSA_N).public_key()), "public exponent 3;")


def test_weak_rsa_signing_key_is_refused() -> None:
    small_e = rsa.generate_private_key(public_exponent=3, key_size=2048)
    with pytest.raises(KeyLoadError, match="public exponent 3;"):
        load_private_key(private_pem(small_e, None), None)


RSA_VECTORS = wycheproof("rsa_signature_2048_sha256.json")


@pytest.mark.parametrize(("group", "test"), [c[1:] for c in RSA_VECTORS], ids=[c[0] for c in RSA_VECTORS])
def test_wycheproof_rsa_2048_pkcs1_sha256(group: dict[str, Any], test: dict[str, Any]) -> None:
    """ "acceptable" (a DigestInfo without its NULL) is refused: Go's crypto/rsa, cosign's verifier, refuses it too."""
    (key,) = load_public_keys(spki_pem(bytes.fromhex(group["publicKeyDer"])))
    assert key.verifies(bytes.fromhex(test["sig"]), bytes.fromhex(test["msg"])) is (test["result"] == "valid")


# --- no regression: honest keys of every kind still load, sign and verify ----------------------

HONEST = [
    ("ecdsa-p256", lambda: ec.generate_private_key(ec.SECP256R1())),
    ("ecdsa-p384", lambda: ec.generate_private_key(ec.SECP384R1())),
    ("ecdsa-p521", lambda: ec.generate_private_key(ec.SECP521R1())),
    ("rsa-2048", lambda: RSA_2048),
    ("rsa-3072", lambda: make_key("rsa")),
    ("ed25519", ed25519.Ed25519PrivateKey.generate),
]


@pytest.mark.parametrize("make", [h[1] for h in HONEST], ids=[h[0] for h in HONEST])
def test_honest_keys_load_and_verify_through_policy_and_decide(make: Any) -> None:
    key = make()
    text = public_pem(key).decode()
    (public,) = load_public_keys(text)
    assert isinstance(public, PublicKey) and public.verifies(sign_bytes(key, b"payload"), b"payload")
    (from_cert,) = load_public_keys(certificate_for(key.public_key()))
    assert from_cert.fingerprint == public.fingerprint
    assert load_private_key(private_pem(key, None), None).public_key() == key.public_key()
    (obj,) = sign(configmap(), key)
    policy = Policy.from_dict({"keys": [text]})
    result = decide(Review.for_object(obj), policy)
    assert (result.allowed, result.verified, result.reason) == (True, True, "verified"), result.message
    tampered = copy.deepcopy(obj)
    tampered["data"] = {"key": "other"}
    assert decide(Review.for_object(tampered), policy).reason == "content-mismatch"


@pytest.mark.parametrize("key_type", ["ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "rsa", "ed25519"])
def test_generated_keys_pass_the_same_rules(key_type: str) -> None:
    key = generate_key(key_type)
    assert load_public_keys(public_pem(key).decode())[0].key_type == key_type
