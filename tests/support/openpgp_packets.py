"""OpenPGP packets built byte by byte (RFC 9580), for what no honest tool writes.

``gpg`` makes every honest key and signature the tests use (``tests/support/openpgp.py``);
this module builds the ones an attacker would: a certificate whose Ed25519 key is the
identity point, a signature packet followed by other packets inside one armor. Formats:

* packet framing: RFC 9580 section 4.2 (OpenPGP-format headers, one-, two- and
  five-octet lengths);
* v4 public keys: section 5.5.2 (version, creation time, algorithm, key material);
  EdDSALegacy (22, section 5.5.5.5: the curve OID, then the MPI of ``0x40 || A``),
  ECDSA (19, section 5.5.5.4), RSA (1, section 5.5.5.1); fingerprint section 5.5.4.2;
* v4 signatures: section 5.2.3 (hashed and unhashed subpackets, the hash's left 16
  bits, the algorithm's MPIs; EdDSALegacy ``R`` and ``S`` as MPIs of their octet
  strings), what is hashed: section 5.2.4;
* armor: section 6.2, CRC-24 section 6.1.1.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, padding, rsa, utils

ED25519_OID = bytes.fromhex("2b06010401da470f01")  # 1.3.6.1.4.1.11591.15.1
IDENTITY = (1).to_bytes(32, "little")  # the Ed25519 identity point (x = 0, y = 1)
SIG_BINARY, SIG_POSITIVE, SIG_SUBKEY_BINDING, SIG_PRIMARY_BINDING = 0x00, 0x13, 0x18, 0x19
TAG_SIGNATURE, TAG_PUBLIC_KEY, TAG_MARKER, TAG_LITERAL, TAG_USER_ID, TAG_PUBLIC_SUBKEY = 2, 6, 10, 11, 13, 14
SHA256 = 8


def packet(tag: int, body: bytes) -> bytes:
    """An OpenPGP-format packet (RFC 9580 section 4.2.1)."""
    n = len(body)
    if n < 192:
        length = bytes([n])
    elif n < 8384:
        length = bytes([((n - 192) >> 8) + 192, (n - 192) & 0xFF])
    else:
        length = b"\xff" + struct.pack(">I", n)
    return bytes([0xC0 | tag]) + length + body


def mpi(value: bytes | int) -> bytes:
    number = value if isinstance(value, int) else int.from_bytes(value, "big")
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return struct.pack(">H", number.bit_length()) + raw


def subpacket(kind: int, data: bytes) -> bytes:
    return bytes([len(data) + 1, kind]) + data


@dataclass(frozen=True)
class Key:
    """A v4 public key packet body and how it signs (``sign(digest) -> MPIs``)."""

    body: bytes
    sign: Callable[[bytes], bytes]

    @property
    def fingerprint(self) -> bytes:
        return hashlib.sha1(
            b"\x99" + struct.pack(">H", len(self.body)) + self.body
        ).digest()  # the v4 fingerprint is SHA-1 (RFC 9580 5.5.4.2)

    @property
    def algorithm(self) -> int:
        return self.body[5]


def ed25519_key(point: bytes, sign: Callable[[bytes], bytes], created: int = 1_700_000_000) -> Key:
    body = b"\x04" + struct.pack(">I", created) + bytes([22, len(ED25519_OID)]) + ED25519_OID + mpi(b"\x40" + point)
    return Key(body, sign)


def forged_identity_key() -> Key:
    """The identity point as a key, and its "signature" R = identity, S = 0, valid for any digest."""
    return ed25519_key(IDENTITY, lambda _digest: mpi(IDENTITY) + mpi(0))


def honest_ed25519_key() -> tuple[Key, ed25519.Ed25519PrivateKey]:
    private = ed25519.Ed25519PrivateKey.generate()
    point = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    def sign(digest: bytes) -> bytes:
        native = private.sign(digest)
        # R and S as MPIs of their octet strings (read big-endian, as GnuPG and Sequoia write them).
        return mpi(native[:32]) + mpi(native[32:])

    return ed25519_key(point, sign), private


def rsa_key(private: rsa.RSAPrivateKey, created: int = 1_700_000_000) -> Key:
    """An RSA (algorithm 1) key signing PKCS #1 v1.5 over SHA-256, as section 5.2.3.1 says."""
    numbers = private.public_key().public_numbers()
    body = b"\x04" + struct.pack(">I", created) + bytes([1]) + mpi(numbers.n) + mpi(numbers.e)

    def sign(digest: bytes) -> bytes:
        return mpi(private.sign(digest, padding.PKCS1v15(), utils.Prehashed(hashes.SHA256())))

    return Key(body, sign)


def _key_hash_prefix(key: Key) -> bytes:
    return b"\x99" + struct.pack(">H", len(key.body)) + key.body


def signature(
    signer: Key,
    sig_type: int,
    hashed_data: bytes,
    *,
    flags: int | None = None,
    created: int = 1_700_000_100,
    unhashed: bytes | None = None,
    wrong_prefix: bool = False,
    embedded: bytes = b"",
) -> bytes:
    """A v4 signature packet by ``signer`` over ``hashed_data`` (what section 5.2.4 hashes before the trailer)."""
    hashed = subpacket(2, struct.pack(">I", created)) + subpacket(33, b"\x04" + signer.fingerprint)
    if flags is not None:
        hashed += subpacket(27, bytes([flags]))
    if embedded:
        hashed += _long_subpacket(32, embedded)
    head = bytes([4, sig_type, signer.algorithm, SHA256]) + struct.pack(">H", len(hashed)) + hashed
    digest = hashlib.sha256(hashed_data + head + b"\x04\xff" + struct.pack(">I", len(head))).digest()
    if unhashed is None:
        unhashed = subpacket(16, signer.fingerprint[-8:])
    prefix = bytes([digest[0] ^ 0xFF, digest[1]]) if wrong_prefix else digest[:2]
    body = head + struct.pack(">H", len(unhashed)) + unhashed + prefix + signer.sign(digest)
    return packet(TAG_SIGNATURE, body)


def _long_subpacket(kind: int, data: bytes) -> bytes:
    """A subpacket of any length (section 5.2.3.7: one-, two- or five-octet lengths)."""
    n = len(data) + 1
    if n < 192:
        return bytes([n, kind]) + data
    if n < 16320:
        return bytes([((n - 192) >> 8) + 192, (n - 192) & 0xFF, kind]) + data
    return b"\xff" + struct.pack(">I", n) + bytes([kind]) + data


def body_of(signature_packet: bytes) -> bytes:
    """The body of a packet :func:`packet` wrote."""
    length = signature_packet[1]
    return signature_packet[2:] if length < 192 else signature_packet[3:] if length < 224 else signature_packet[6:]


def certificate(primary: Key, user_id: str = "mallory <mallory@example.com>", subkey: Key | None = None) -> bytes:
    """A transferable public key: the primary key, a user ID with its self-signature, optionally a signing
    subkey bound by the primary, with the subkey's own back-signature embedded (section 5.2.3.34)."""
    uid = user_id.encode()
    out = packet(TAG_PUBLIC_KEY, primary.body) + packet(TAG_USER_ID, uid)
    hashed = _key_hash_prefix(primary) + b"\xb4" + struct.pack(">I", len(uid)) + uid
    out += signature(primary, SIG_POSITIVE, hashed, flags=0x03 if subkey is None else 0x01)
    if subkey is not None:
        out += packet(TAG_PUBLIC_SUBKEY, subkey.body)
        bound = _key_hash_prefix(primary) + _key_hash_prefix(subkey)
        back = body_of(signature(subkey, SIG_PRIMARY_BINDING, bound))
        out += signature(primary, SIG_SUBKEY_BINDING, bound, flags=0x02, embedded=back)
    return out


def detached(signer: Key, data: bytes, **options: object) -> bytes:
    """A binary-document signature packet over ``data``."""
    return signature(signer, SIG_BINARY, data, **options)  # type: ignore[arg-type]


def crc24(data: bytes) -> int:
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def armor(kind: str, data: bytes, *, headers: str = "", checksum: bool = True) -> bytes:
    """ASCII armor (RFC 9580 section 6.2) around ``data``."""
    text = base64.b64encode(data).decode()
    lines = [text[i : i + 64] for i in range(0, len(text), 64)]
    out = f"-----BEGIN PGP {kind}-----\n{headers}\n" + "\n".join(lines) + "\n"
    if checksum:
        out += "=" + base64.b64encode(crc24(data).to_bytes(3, "big")).decode() + "\n"
    return (out + f"-----END PGP {kind}-----\n").encode()


def dearmor(text: bytes) -> bytes:
    """The data of one armored block as gpg writes it (no headers, a checksum line), for tests to take apart."""
    lines = text.strip().split(b"\n")
    return base64.b64decode(b"".join(line for line in lines[2:-1] if not line.startswith(b"=")))


def only_packet_body(data: bytes) -> bytes:
    """The body of the single packet in ``data`` (either header format, as gpg and this module write them)."""
    first = data[0]
    if first & 0x40:
        length = data[1]
        start = 2 if length < 192 else 3 if length < 224 else 6
    else:
        start = 1 + (1, 2, 4)[first & 0x03]
    return data[start:]
