"""OpenPGP's wire format, read strictly: ASCII armor, packet framing, public-key material, signature fields.

RFC 9580 throughout (section numbers below). Sequoia decides whether a
signature is valid; this module decides what may be *handed* to it and reads
what it does not expose:

* :func:`read_armored_signature` -- a signature annotation is exactly one
  armored block holding exactly one signature packet and nothing else. Sequoia
  reads the first signature and ignores what follows it in the armor (another
  signature, a literal-data or marker packet, NUL bytes), does not compare the
  hash's left 16 bits, and an unhashed subpacket area carries whatever its
  writer likes: all of that rides, unsigned, in an annotation the comparison
  masks. Refused here: armor header lines (``Comment:``), a CRC-24 that does
  not match, base64 that does not re-encode to itself, a second packet, any
  byte after the packet, unhashed subpackets other than the issuer's key ID and
  fingerprint, MPIs with leading zeros, and (:func:`digest_prefix_matches`)
  a wrong hash prefix.
* :func:`public_key_of` -- the key material of a public-key or subkey packet
  as a ``cryptography`` key, so that OpenPGP keys go through the same strength
  rules as every other key (:mod:`provider.keys.rules`, via
  :meth:`provider.keys.pem.PublicKey.from_crypto`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from ..errors import KeyLoadError
from . import rules as key_rules

# --- algorithms (RFC 9580 section 9.1) ----------------------------------------------------

RSA, RSA_ENCRYPT, RSA_SIGN, ELGAMAL, DSA, ECDH, ECDSA, EDDSA_LEGACY = 1, 2, 3, 16, 17, 18, 19, 22
X25519, X448, ED25519, ED448 = 25, 26, 27, 28
#: Algorithms that only encrypt: a key of one never verifies a signature, so no signature rule applies.
ENCRYPTION_ONLY = frozenset({RSA_ENCRYPT, ELGAMAL, ECDH, X25519, X448})

#: Curve OIDs (section 9.2), as written after their length octet.
_OID_CURVES: dict[bytes, ec.EllipticCurve] = {
    bytes.fromhex("2a8648ce3d030107"): ec.SECP256R1(),
    bytes.fromhex("2b81040022"): ec.SECP384R1(),
    bytes.fromhex("2b81040023"): ec.SECP521R1(),
}
_OID_ED25519_LEGACY = bytes.fromhex("2b06010401da470f01")

#: Hash algorithms (section 9.5) a signature may name, and how to compute them. MD5, SHA-1 and
#: RIPEMD-160 are absent: Sequoia's standard policy refuses them for signatures, and so do we.
_HASHES: dict[int, Callable[[], hashlib._Hash]] = {
    8: hashlib.sha256,
    9: hashlib.sha384,
    10: hashlib.sha512,
    11: hashlib.sha224,
    12: hashlib.sha3_256,
    14: hashlib.sha3_512,
}

SIGNATURE_TAG = 2
#: Subpackets an unhashed area may hold (section 5.2.3.7): the issuer's key ID (16) and fingerprint (33),
#: which only say which key to try -- and must then name the key that verified.
UNHASHED_ALLOWED = frozenset({16, 33})


class PacketError(ValueError):
    """The bytes are not what an honest OpenPGP tool writes; the message says what is wrong."""


# --- armor (section 6.2) ---------------------------------------------------------------------

_BEGIN_SIGNATURE = b"-----BEGIN PGP SIGNATURE-----"
_END_SIGNATURE = b"-----END PGP SIGNATURE-----"
#: Section 6.2: "the Radix-64 encoded data... with lines no longer than 76 characters".
_MAX_LINE = 76


def crc24(data: bytes) -> int:
    """The armor checksum (section 6.1.1)."""
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def dearmor_signature(text: bytes) -> bytes:
    """The binary of one armored signature block, which must be all of ``text`` but line ends after it.

    Lines end with LF or CRLF. No armor headers; base64 lines of at most 76
    characters, all but the last of one length, that re-encode to themselves;
    an optional ``=`` checksum line that must match.
    """
    lines = text.rstrip(b"\r\n").split(b"\n")
    lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    if len(lines) < 4 or lines[0] != _BEGIN_SIGNATURE or lines[-1] != _END_SIGNATURE:
        raise PacketError("not one armored OpenPGP signature block (BEGIN line, blank line, data, END line)")
    if lines[1] != b"":
        raise PacketError("the armor carries header lines (such as Comment:); they are unsigned text")
    body = lines[2:-1]
    checksum = None
    if body and body[-1].startswith(b"="):
        checksum = body.pop()
    if not body:
        raise PacketError("the armored signature holds no data")
    width = len(body[0])
    if any(len(line) != width for line in body[:-1]) or not 0 < len(body[-1]) <= width or width > _MAX_LINE:
        raise PacketError("the armored signature's base64 lines are not evenly wrapped")
    joined = b"".join(body)
    try:
        data = base64.b64decode(joined, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PacketError(f"the armored signature is not base64 ({exc})") from exc
    if base64.b64encode(data) != joined:
        raise PacketError("the armored signature's base64 is not in its one canonical form")
    if checksum is not None:
        try:
            given = base64.b64decode(checksum[1:], validate=True)
        except (binascii.Error, ValueError):
            given = b""
        if len(given) != 3 or base64.b64encode(given) != checksum[1:] or int.from_bytes(given, "big") != crc24(data):
            raise PacketError("the armor checksum does not match the data")
    return data


# --- packets (section 4.2) ---------------------------------------------------------------------


@dataclass(frozen=True)
class Packet:
    tag: int
    body: bytes


def read_packets(data: bytes) -> list[Packet]:
    """Every packet of ``data``, which they must fill exactly. Partial and indeterminate lengths are refused:
    section 4.2.1.4 allows partial lengths only for data packets, and a signature or key is none."""
    packets: list[Packet] = []
    position = 0
    while position < len(data):
        first = data[position]
        if not first & 0x80:
            raise PacketError(f"byte {position} is not the start of an OpenPGP packet")
        if first & 0x40:  # OpenPGP format (section 4.2.1)
            tag = first & 0x3F
            if position + 1 >= len(data):
                raise PacketError("a packet header is cut short")
            octet = data[position + 1]
            if octet < 192:
                length, header = octet, 2
            elif octet < 224:
                if position + 2 >= len(data):
                    raise PacketError("a packet header is cut short")
                length, header = ((octet - 192) << 8) + data[position + 2] + 192, 3
            elif octet == 255:
                if position + 6 > len(data):
                    raise PacketError("a packet header is cut short")
                (length,) = struct.unpack(">I", data[position + 2 : position + 6])
                header = 6
            else:
                raise PacketError("a packet with a partial body length (only data packets may have one)")
        else:  # legacy format (section 4.2.2)
            tag, kind = (first >> 2) & 0x0F, first & 0x03
            if kind == 3:
                raise PacketError("a packet of indeterminate length")
            size = (1, 2, 4)[kind]
            if position + 1 + size > len(data):
                raise PacketError("a packet header is cut short")
            length = int.from_bytes(data[position + 1 : position + 1 + size], "big")
            header = 1 + size
        start = position + header
        if start + length > len(data):
            raise PacketError("a packet is longer than the data holding it")
        packets.append(Packet(tag, data[start : start + length]))
        position = start + length
    return packets


class _Reader:
    """A cursor over one packet body; every read is bounds-checked."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.position, self.what = data, 0, what

    def take(self, count: int) -> bytes:
        if count < 0 or self.position + count > len(self.data):
            raise PacketError(f"the {self.what} is cut short")
        chunk = self.data[self.position : self.position + count]
        self.position += count
        return chunk

    def octet(self) -> int:
        return self.take(1)[0]

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def mpi(self, native_octets: int = 0) -> int:
        """A multiprecision integer (section 3.2) in its one minimal form: no leading zero bits.

        ``native_octets``: the value is a fixed-width octet string (EdDSALegacy's R and S, 32
        octets), which some writers keep at its full width; that one padded form is accepted too.
        """
        bits = self.number(2)
        value = int.from_bytes(self.take((bits + 7) // 8), "big")
        if value.bit_length() != bits and not (native_octets and bits == 8 * native_octets):
            raise PacketError(f"the {self.what} holds an MPI whose bit count is not its value's (padded)")
        return value

    def rest(self) -> bytes:
        return self.take(len(self.data) - self.position)

    def done(self) -> None:
        if self.position != len(self.data):
            raise PacketError(f"the {self.what} has {len(self.data) - self.position} bytes after its last field")


# --- public keys (section 5.5.2) ------------------------------------------------------------


def public_key_of(body: bytes) -> ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey | None:
    """The key of a public-key or public-subkey packet body, for the strength rules; None for a key that
    only encrypts. :class:`KeyLoadError` for one we do not accept (DSA, Ed448, other curves, unknown)."""
    try:
        reader = _Reader(body, "public key packet")
        version = reader.octet()
        if version not in (4, 6):
            raise PacketError(f"a version {version} key (only 4 and 6 are read)")
        reader.take(4)  # creation time
        algorithm = reader.octet()
        if version == 6:
            reader = _Reader(reader.take(reader.number(4)), "public key material")
        return _key_material(algorithm, reader)
    except PacketError as exc:
        raise KeyLoadError(f"an OpenPGP key packet does not parse: {exc}") from None


def _key_material(
    algorithm: int, reader: _Reader
) -> ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey | None:
    if algorithm in ENCRYPTION_ONLY:
        return None
    if algorithm in (RSA, RSA_SIGN):
        n, e = reader.mpi(), reader.mpi()
        key_rules.check_rsa_numbers(n, e)
        try:
            return rsa.RSAPublicNumbers(e, n).public_key()
        except ValueError as exc:
            raise KeyLoadError(f"OpenPGP RSA key could not be read: {exc}") from None
    if algorithm == ECDSA:
        oid = reader.take(reader.octet())
        curve = _OID_CURVES.get(oid)
        if curve is None:
            raise KeyLoadError(f"OpenPGP ECDSA curve {oid.hex()} is not supported; use P-256, P-384 or P-521")
        point = reader.mpi()
        encoded = point.to_bytes((point.bit_length() + 7) // 8, "big")
        try:
            return ec.EllipticCurvePublicKey.from_encoded_point(curve, encoded)
        except ValueError as exc:
            raise KeyLoadError(f"OpenPGP ECDSA {curve.name} public key is not a point on the curve ({exc})") from None
    if algorithm == EDDSA_LEGACY:
        oid = reader.take(reader.octet())
        if oid != _OID_ED25519_LEGACY:
            raise KeyLoadError(f"OpenPGP EdDSA curve {oid.hex()} is not supported; use Ed25519")
        value = reader.mpi()
        if value.bit_length() > 33 * 8:
            raise KeyLoadError("OpenPGP Ed25519 key is longer than 0x40 and 32 octets (section 5.5.5.5)")
        native = value.to_bytes(33, "big")
        if native[0] != 0x40:
            raise KeyLoadError("OpenPGP Ed25519 key is not in the native 0x40-prefixed form (section 5.5.5.5)")
        return ed25519.Ed25519PublicKey.from_public_bytes(native[1:])
    if algorithm == ED25519:
        return ed25519.Ed25519PublicKey.from_public_bytes(reader.take(32))
    names = {DSA: "DSA", ED448: "Ed448"}
    name = names.get(algorithm, f"algorithm {algorithm}")
    raise KeyLoadError(f"OpenPGP {name} keys are not supported; use Ed25519, ECDSA (P-256/P-384/P-521) or RSA")


# --- signatures (section 5.2.3) --------------------------------------------------------------


@dataclass(frozen=True)
class SignatureFacts:
    """What a signature packet says, read field by field."""

    version: int
    signature_type: int
    algorithm: int
    hash_algorithm: int
    #: The bytes the signature hashes after the data: the hashed part of the packet (section 5.2.4).
    hashed_part: bytes
    #: ``(type, data)`` of each unhashed subpacket.
    unhashed: tuple[tuple[int, bytes], ...]
    left16: bytes
    salt: bytes
    #: The algorithm's values: the MPIs (RSA: one, ECDSA and EdDSALegacy: two) or Ed25519's 64 octets.
    values: tuple[int, ...]
    native: bytes


def _subpackets(area: bytes) -> list[tuple[int, bytes]]:
    """``(type, data)`` of each subpacket of an area (section 5.2.3.7), which they must fill exactly."""
    reader = _Reader(area, "subpacket area")
    found = []
    while reader.position < len(area):
        first = reader.octet()
        if first < 192:
            length = first
        elif first < 255:
            length = ((first - 192) << 8) + reader.octet() + 192
        else:
            length = reader.number(4)
        if length == 0:
            raise PacketError("a subpacket without its type octet")
        content = reader.take(length)
        found.append((content[0] & 0x7F, content[1:]))
    return found


def read_signature(body: bytes) -> SignatureFacts:
    """A v4 or v6 signature packet body (section 5.2.3), every byte accounted for."""
    reader = _Reader(body, "signature packet")
    version = reader.octet()
    if version not in (4, 6):
        raise PacketError(f"a version {version} signature (only 4 and 6 are read)")
    signature_type, algorithm, hash_algorithm = reader.octet(), reader.octet(), reader.octet()
    size = 2 if version == 4 else 4
    hashed_area = reader.take(reader.number(size))
    _subpackets(hashed_area)  # well-formed, even though signed
    hashed_part = body[: reader.position]
    unhashed = tuple(_subpackets(reader.take(reader.number(size))))
    left16 = reader.take(2)
    salt = reader.take(reader.octet()) if version == 6 else b""
    values: tuple[int, ...] = ()
    native = b""
    if algorithm in (RSA, RSA_SIGN):
        values = (reader.mpi(),)
    elif algorithm == ECDSA:
        values = (reader.mpi(), reader.mpi())
    elif algorithm == EDDSA_LEGACY:
        values = (reader.mpi(native_octets=32), reader.mpi(native_octets=32))
    elif algorithm == ED25519:
        native = reader.take(64)
    else:
        raise PacketError(f"a signature by public-key algorithm {algorithm}, which is not accepted")
    reader.done()
    return SignatureFacts(
        version, signature_type, algorithm, hash_algorithm, hashed_part, unhashed, left16, salt, values, native
    )


def read_armored_signature(text: bytes) -> tuple[bytes, SignatureFacts]:
    """The one signature packet (header and body, as Sequoia should read it) of an armored annotation, and
    its fields; :class:`PacketError` unless the armor holds exactly that packet and nothing else."""
    data = dearmor_signature(text)
    packets = read_packets(data)
    if len(packets) != 1 or packets[0].tag != SIGNATURE_TAG:
        tags = ", ".join(str(p.tag) for p in packets) or "none"
        raise PacketError(f"the armor must hold exactly one signature packet; it holds packets with tags {tags}")
    facts = read_signature(packets[0].body)
    for kind, _ in facts.unhashed:
        if kind not in UNHASHED_ALLOWED:
            raise PacketError(f"the signature's unhashed area holds subpacket type {kind}, which nobody signed")
    if len([k for k, _ in facts.unhashed if k == 16]) > 1 or len([k for k, _ in facts.unhashed if k == 33]) > 1:
        raise PacketError("the signature's unhashed area names its issuer twice")
    return data, facts


def digest_prefix_matches(facts: SignatureFacts, data: bytes) -> bool:
    """Whether the hash's left 16 bits are those of the hash over ``data`` (section 5.2.4); Sequoia does not check."""
    make = _HASHES.get(facts.hash_algorithm)
    if make is None:
        return False
    digest = make()
    digest.update(facts.salt)
    digest.update(data)
    digest.update(facts.hashed_part)
    digest.update(bytes([facts.version, 0xFF]) + struct.pack(">I", len(facts.hashed_part)))
    return digest.digest()[:2] == facts.left16


def signature_well_formed(facts: SignatureFacts, key: object) -> bool:
    """The signature rules of :mod:`provider.keys.rules` on an OpenPGP signature by ``key`` (a ``cryptography`` key)."""
    if isinstance(key, ed25519.Ed25519PublicKey):
        if facts.algorithm == ED25519:
            return key_rules.ed25519_signature_well_formed(facts.native)
        if facts.algorithm != EDDSA_LEGACY or any(v.bit_length() > 256 for v in facts.values):
            return False
        r, s = facts.values
        return key_rules.ed25519_signature_well_formed(r.to_bytes(32, "big") + s.to_bytes(32, "big"))
    if isinstance(key, ec.EllipticCurvePublicKey):
        if facts.algorithm != ECDSA:
            return False
        n = key_rules.CURVES[key.curve.name].n
        return all(1 <= v < n for v in facts.values)
    return isinstance(key, rsa.RSAPublicKey) and facts.algorithm in (RSA, RSA_SIGN)
