"""The strength rules every key and signature passes, whatever the crypto backend would accept.

``cryptography`` (OpenSSL) and libsodium each check some of these and not others,
and which ones changes between releases. This module states the rules once, in
terms of the standards, so a key or a signature is judged the same way on every
path (public key, certificate, private key, keyless leaf; pure Ed25519 through
OpenSSL, Ed25519ph through libsodium). It never verifies a signature: it only
refuses what no honest signer produces, before the backend is asked.

Keys (a violation raises :class:`KeyLoadError`, ``policy-invalid``):

* **Ed25519**: the 32 bytes decode as RFC 8032 section 5.1.3 says (``y < p``;
  a square root exists; not ``x = 0`` with the sign bit set), and the point lies
  in the prime-order subgroup: not one of the 8 small-order points (the identity
  among them: a "key" that any forger can sign for, see below) and without a
  small-order component (``[L]A`` is the identity). Every key made from a seed
  (RFC 8032 section 5.1.5: ``A = [s]B``) passes.
* **ECDSA**: the point is an affine point of its curve (``0 <= x, y < p`` and
  ``y^2 = x^3 - 3x + b``), not the point at infinity. The curves have cofactor 1,
  so that is also the subgroup check (SEC 1 v2 section 3.2.2.1; NIST SP 800-56A r3
  section 5.6.2.3.3).
* **RSA**: at least 2048 bits (NIST SP 800-131A r2), an odd modulus, and an odd
  public exponent with ``2^16 < e < 2^256`` (FIPS 186-5 section A.1.1; NIST SP
  800-89 section 5.3.3). Tiny exponents are where Bleichenbacher's 2006 forgery of
  PKCS #1 v1.5 signatures (CVE-2006-4339) works against lenient parsers; no current
  tool generates them. And what OpenSSL verifies with: at most 16384 bits, and an
  exponent of at most 64 bits when the modulus is over 3072 bits. OpenSSL refuses
  every signature of any other key as if it were forged; refused here at load, a
  key it cannot use is named as such instead of every signature being called invalid.

Signatures (a violation means "does not verify"):

* **Ed25519** (pure and Ed25519ph): 64 bytes; ``S < L`` (RFC 8032 section 5.1.7
  step 1: "If ... S is out of range, the signature is invalid"); ``R`` is a
  canonical encoding (section 5.1.3) of a point that is not of small order. With the
  key rules above this closes the forgery "A = identity, R = identity, S = 0", which
  OpenSSL's cofactorless check accepts for every message.
* **ECDSA**: ASN.1 DER ``SEQUENCE { INTEGER r, INTEGER s }`` with nothing before or
  after and minimal integer encodings (cosign signs with Go's ``ecdsa.SignASN1``
  and verifies with ``ecdsa.VerifyASN1``, which reads exactly that: see
  sigstore/sigstore ``pkg/signature/ecdsa.go``), and ``1 <= r, s < n`` (FIPS 186-5
  section 6.4.2 step 1). High ``s`` is accepted: Go's and OpenSSL's signers emit
  either half, and ECDSA verification has no low-``s`` rule.

What the backends do on their own (cryptography 50 with OpenSSL 4.0, PyNaCl 1.6's
libsodium; tests/unit/keys/test_rules.py pins the cases): libsodium's verify
refuses ``S >= L``, a small-order or non-canonical ``A`` and a small-order ``R``
(``_crypto_sign_ed25519_verify_detached`` in ``crypto_sign/ed25519/ref10/open.c``);
OpenSSL refuses ``S >= L`` but loads any 32 bytes as an Ed25519 key and verifies the
identity forgery. OpenSSL refuses ECDSA points off the curve or at infinity, BER
signatures and ``r``, ``s`` outside ``[1, n)``, and RSA exponents below 3 or even;
it loads RSA keys with ``e = 3`` or an even modulus. The rules here hold either way.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from ..errors import KeyLoadError

# --- Ed25519 (RFC 8032 section 5.1) ----------------------------------------------------

#: The field prime p = 2^255 - 19 (RFC 8032 section 5.1).
ED25519_P = 2**255 - 19
#: The order L of the base point B (RFC 8032 section 5.1).
ED25519_L = 2**252 + 27742317777372353535851937790883648493
#: The curve constant d = -121665/121666 (RFC 8032 section 5.1).
_D = -121665 * pow(121666, -1, ED25519_P) % ED25519_P
#: A square root of -1 mod p, 2^((p-1)/4) (RFC 8032 section 5.1.3 step 3).
_SQRT_M1 = pow(2, (ED25519_P - 1) // 4, ED25519_P)
ED25519_BYTES = 32
ED25519_SIGNATURE_BYTES = 64

#: A point in extended homogeneous coordinates (X, Y, Z, T): x = X/Z, y = Y/Z, x*y = T/Z.
_Point = tuple[int, int, int, int]
_IDENTITY: _Point = (0, 1, 1, 0)


class _Undecodable(ValueError):
    """The 32 bytes are not the encoding of a curve point; the message says why."""


def _decode(encoded: bytes, *, strict: bool = True) -> _Point:
    """RFC 8032 section 5.1.3, step by step; ``strict=False`` reduces y >= p instead of refusing it.

    The lenient form exists only to say *which* point a non-canonical encoding
    names (an error message may add "of a small-order point"); nothing that
    decodes leniently is ever accepted.
    """
    number = int.from_bytes(encoded, "little")
    x_sign, y = number >> 255, number & ((1 << 255) - 1)
    # 1. y must be below p: y and y + p would both name the same point.
    if y >= ED25519_P:
        if strict:
            raise _Undecodable("is not canonical: its y coordinate is not reduced modulo p (y >= p)")
        y -= ED25519_P
    # 2. x^2 = (y^2 - 1) / (d y^2 + 1): the candidate root u v^3 (u v^7)^((p-5)/8).
    u = (y * y - 1) % ED25519_P
    v = (_D * y * y + 1) % ED25519_P
    x = u * pow(v, 3, ED25519_P) * pow(u * pow(v, 7, ED25519_P), (ED25519_P - 5) // 8, ED25519_P) % ED25519_P
    # 3. The candidate is a root of u/v, or of -u/v (then times sqrt(-1)), or there is none.
    if (v * x * x - u) % ED25519_P != 0:
        x = x * _SQRT_M1 % ED25519_P
        if (v * x * x - u) % ED25519_P != 0:
            raise _Undecodable("is not a point on the curve (x^2 has no square root)")
    # 4. x = 0 has one encoding: with the sign bit clear ("negative zero" names the same point).
    if x == 0 and x_sign == 1:
        if strict:
            raise _Undecodable("is not canonical: x = 0 with the sign bit set")
    elif x & 1 != x_sign:
        x = ED25519_P - x
    return (x, y, 1, x * y % ED25519_P)


def _add(p: _Point, q: _Point) -> _Point:
    """Point addition on -x^2 + y^2 = 1 + d x^2 y^2 (RFC 8032 section 5.1.4); complete, so it also doubles."""
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % ED25519_P
    b = (y1 + x1) * (y2 + x2) % ED25519_P
    c = 2 * _D * t1 * t2 % ED25519_P
    d = 2 * z1 * z2 % ED25519_P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % ED25519_P, g * h % ED25519_P, f * g % ED25519_P, e * h % ED25519_P)


def _times(scalar: int, point: _Point) -> _Point:
    """``[scalar] point`` by double-and-add (variable time: only public points are multiplied)."""
    result = _IDENTITY
    for bit in bin(scalar)[2:]:
        result = _add(result, result)
        if bit == "1":
            result = _add(result, point)
    return result


def _is_identity(point: _Point) -> bool:
    x, y, z, _ = point
    return x % ED25519_P == 0 and (y - z) % ED25519_P == 0


def _small_order(point: _Point) -> bool:
    """True for the 8 points whose order divides the cofactor 8 (the identity included)."""
    return _is_identity(_times(8, point))


#: The y coordinates of the 8 small-order points: the identity (y = 1), order 2 (y = -1), order 4 (y = 0)
#: and order 8 (y = +-ORDER_8_Y); each y != +-1 names two points, one per sign of x. The same table as
#: libsodium's ge25519_has_small_order (src/libsodium/crypto_core/ed25519/ref10/ed25519_ref10.c).
ORDER_8_Y = 2707385501144840649318225287225658788936804267575313519463743609750303402022
SMALL_ORDER_Y = frozenset({1, ED25519_P - 1, 0, ORDER_8_Y, ED25519_P - ORDER_8_Y})


def check_ed25519_key(raw: bytes) -> None:
    """Refuse an Ed25519 public key that is not a canonical point of the prime-order subgroup.

    libsodium's ``crypto_core_ed25519_is_valid_point`` decides (canonical, on the curve, not of
    small order, in the main subgroup: the rule above, in C, in microseconds); the arithmetic here
    runs only for a key it refuses, to say why.
    """
    from nacl.bindings import crypto_core_ed25519_is_valid_point

    if len(raw) != ED25519_BYTES:
        raise KeyLoadError(f"Ed25519 public key is {len(raw)} bytes, not {ED25519_BYTES}")
    if crypto_core_ed25519_is_valid_point(raw):
        return
    try:
        point = _decode(raw)
    except _Undecodable as exc:
        problem = str(exc)
        try:
            if _small_order(_decode(raw, strict=False)):
                problem += ", and the point it names is of small order"
        except _Undecodable:
            pass
        raise KeyLoadError(f"Ed25519 public key {problem} (RFC 8032 section 5.1.3)") from None
    if _small_order(point):
        raise KeyLoadError(
            "Ed25519 public key is a small-order point (order dividing 8, the identity among them): "
            "no private key belongs to it, and signatures for it can be forged without one"
        )
    if not _is_identity(_times(ED25519_L, point)):
        raise KeyLoadError(
            "Ed25519 public key has a small-order component (it is not in the prime-order subgroup); "
            "no key generated from a seed (RFC 8032 section 5.1.5) looks like this"
        )
    raise KeyLoadError("Ed25519 public key is not a valid curve point (libsodium refuses it)")  # pragma: no cover


def ed25519_signature_well_formed(signature: bytes) -> bool:
    """RFC 8032 section 5.1.7 step 1 done strictly: 64 bytes, S < L, R canonical and not of small order.

    R is judged by its y alone: y < p is the canonical range, and the small-order points are
    exactly those with a y in :data:`SMALL_ORDER_Y` (which also holds the two points with x = 0,
    the only ones with a "negative zero" encoding). An R that is no point at all needs no test:
    both backends compare R's bytes with the encoding of the point they compute.
    """
    if len(signature) != ED25519_SIGNATURE_BYTES:
        return False
    if int.from_bytes(signature[32:], "little") >= ED25519_L:
        return False
    y = int.from_bytes(signature[:32], "little") & ((1 << 255) - 1)
    return y < ED25519_P and y not in SMALL_ORDER_Y


# --- ECDSA over the NIST prime curves -------------------------------------------------


@dataclass(frozen=True)
class _Curve:
    """Short-Weierstrass y^2 = x^3 - 3x + b over GF(p), base point of prime order n, cofactor 1."""

    p: int
    b: int
    n: int


#: The parameters of NIST SP 800-186 section 3.2.1 (= SEC 2 v2 sections 2.4.2, 2.5.1, 2.6.1; checked against
#: ``openssl ecparam -param_enc explicit -text``), keyed by the names ``cryptography`` gives the curves.
CURVES: dict[str, _Curve] = {
    "secp256r1": _Curve(
        p=0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF,
        b=0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B,
        n=0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551,
    ),
    "secp384r1": _Curve(
        p=2**384 - 2**128 - 2**96 + 2**32 - 1,
        b=0xB3312FA7E23EE7E4988E056BE3F82D19181D9C6EFE8141120314088F5013875AC656398D8A2ED19D2A85C8EDD3EC2AEF,
        n=0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFC7634D81F4372DDF581A0DB248B0A77AECEC196ACCC52973,
    ),
    "secp521r1": _Curve(
        p=2**521 - 1,
        b=0x051953EB9618E1C9A1F929A21A0B68540EEA2DA725B99B315F3B8B489918EF109E156193951EC7E937B1652C0BD3BB1BF073573DF883D2C34F1EF451FD46B503F00,
        n=0x01FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFA51868783BF2F966B7FCC0148F709A5D03BB5C9B8899C47AEBB6FB71E91386409,
    ),
}


def check_ec_point(curve_name: str, x: int, y: int) -> None:
    """Refuse a point that is not an affine point of the named curve (SEC 1 v2 section 3.2.2.1)."""
    curve = CURVES[curve_name]
    if not (0 <= x < curve.p and 0 <= y < curve.p):
        raise KeyLoadError(f"ECDSA {curve_name} public key has a coordinate outside the field (not reduced modulo p)")
    if (y * y - (x * x * x - 3 * x + curve.b)) % curve.p != 0:
        raise KeyLoadError(f"ECDSA {curve_name} public key is not a point on the curve")


def ecdsa_signature_well_formed(curve_name: str, signature: bytes) -> bool:
    """Strict DER ``SEQUENCE { r, s }`` and ``1 <= r, s < n``."""
    try:
        # cryptography's parser is DER, not BER: one SEQUENCE, minimal lengths and integers, no
        # trailing bytes. A BER form (long-form length, padded integer) raises ValueError.
        r, s = decode_dss_signature(signature)
    except ValueError:
        return False
    n = CURVES[curve_name].n
    return 1 <= r < n and 1 <= s < n


# --- RSA -------------------------------------------------------------------------------

#: Smallest RSA modulus accepted (NIST SP 800-131A r2 section 3: 2048 bits since 2013).
MIN_RSA_BITS = 2048
#: Public exponent bounds, exclusive: FIPS 186-5 section A.1.1 (and NIST SP 800-89 section 5.3.3)
#: require an odd e with 2^16 < e < 2^256. 65537 = 2^16 + 1 is the smallest allowed, and what every
#: current tool (Go's crypto/rsa, OpenSSL, cosign) generates.
RSA_EXPONENT_ABOVE = 2**16
RSA_EXPONENT_BELOW = 2**256


#: OpenSSL's own limits on the keys it verifies with (include/openssl/rsa.h:
#: OPENSSL_RSA_MAX_MODULUS_BITS, OPENSSL_RSA_SMALL_MODULUS_BITS, OPENSSL_RSA_MAX_PUBEXP_BITS;
#: the same in OpenSSL 1.1 and 3.x, and in the OpenSSL 4.0 that ``cryptography`` 50 bundles).
#: crypto/rsa/rsa_ossl.c refuses a larger modulus (RSA_R_MODULUS_TOO_LARGE) and, for a modulus
#: over the "small" size, a larger exponent (RSA_R_BAD_E_VALUE) before it looks at the
#: signature; ``cryptography`` reports both as InvalidSignature. FIPS 186-5 allows exponents
#: up to 2^256, so the second is narrower than our own rule.
OPENSSL_MAX_RSA_BITS = 16384
OPENSSL_SMALL_RSA_BITS = 3072
OPENSSL_MAX_EXPONENT_BITS = 64


def check_rsa_numbers(n: int, e: int) -> None:
    """Refuse an RSA public key that is too short, has a modulus or exponent no valid key has,
    or that OpenSSL would not verify with."""
    bits = n.bit_length()
    if bits < MIN_RSA_BITS:
        raise KeyLoadError(f"RSA key of {bits} bits is too weak; at least {MIN_RSA_BITS} bits are required")
    if bits > OPENSSL_MAX_RSA_BITS:
        raise KeyLoadError(
            f"RSA key of {bits} bits is larger than OpenSSL verifies with (at most {OPENSSL_MAX_RSA_BITS} bits); "
            "every signature by it would be refused"
        )
    if n % 2 == 0:
        raise KeyLoadError("RSA key has an even modulus; a modulus is a product of two odd primes")
    if e % 2 == 0 or not RSA_EXPONENT_ABOVE < e < RSA_EXPONENT_BELOW:
        shown = str(e) if e.bit_length() <= 64 else f"a {e.bit_length()}-bit number"
        raise KeyLoadError(
            f"RSA key has public exponent {shown}; it must be odd, above 2^16 and below 2^256 "
            "(FIPS 186-5 section A.1.1; 65537 is the usual choice)"
        )
    if bits > OPENSSL_SMALL_RSA_BITS and e.bit_length() > OPENSSL_MAX_EXPONENT_BITS:
        raise KeyLoadError(
            f"RSA key of {bits} bits has a {e.bit_length()}-bit public exponent; OpenSSL verifies with keys over "
            f"{OPENSSL_SMALL_RSA_BITS} bits only when the exponent has at most {OPENSSL_MAX_EXPONENT_BITS} bits, so "
            "every signature by it would be refused (65537 is the usual choice)"
        )
