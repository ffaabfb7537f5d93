"""Attack classes on OpenPGP: **a weak key arrives through OpenPGP**, and **unsigned bytes ride inside the armor**.

Weak keys: an Ed25519 certificate whose key is the identity point (self-signature R = identity,
S = 0) is a valid certificate to Sequoia, and every "signature" R = identity, S = 0 by it
verifies any payload -- no private key anywhere. The key rules every PEM, cosign and
certificate key passes (``provider/keys/rules.py``) now judge every key of every OpenPGP
certificate, primary or subkey, in ``keys``, ``openpgpKeyring`` and ``attestors`` alike.

Unsigned bytes: Sequoia reads the first signature packet of an armor and ignores what follows
it, does not compare the hash's left 16 bits, and takes any unhashed subpacket: each was a
place to carry bytes nobody signed in an annotation the comparison masks. An annotation now
holds exactly one signature packet and nothing else.

Honest keys and signatures come from the real ``gpg``; the hostile ones are built packet by
packet (``tests/support/openpgp_packets.py``).
"""

from __future__ import annotations

import base64
import gzip
import struct
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from provider.errors import PolicyError
from provider.policy.schema import Policy
from provider.result import Result
from provider.review import Review
from provider.signatures.signing import dump_yaml
from provider.verifier import decide
from tests.support import openpgp_packets as pgp
from tests.support.manifests import configmap
from tests.support.openpgp import Gpg

PAYLOAD = dump_yaml([configmap("app", mode="attacker-chosen")]).encode()


def annotated(signature: bytes, payload: bytes = PAYLOAD) -> dict[str, Any]:
    obj = configmap("app", mode="attacker-chosen")
    obj["metadata"]["annotations"] = {
        "cosign.sigstore.dev/message": base64.b64encode(gzip.compress(payload, mtime=0)).decode(),
        "cosign.sigstore.dev/signature": base64.b64encode(signature).decode(),
    }
    return obj


def verdict(obj: dict[str, Any], policy: dict[str, Any]) -> Result:
    return decide(Review.for_object(obj), Policy.from_dict(policy))


# --- a weak key arrives through OpenPGP -------------------------------------------------------


def _identity_primary() -> tuple[bytes, pgp.Key]:
    key = pgp.forged_identity_key()
    return pgp.certificate(key), key


def _identity_subkey() -> tuple[bytes, pgp.Key]:
    honest, _ = pgp.honest_ed25519_key()
    weak = pgp.forged_identity_key()
    return pgp.certificate(honest, "alice <alice@example.com>", subkey=weak), weak


def _rsa_exponent_3() -> tuple[bytes, pgp.Key]:
    key = pgp.rsa_key(rsa.generate_private_key(public_exponent=3, key_size=2048))
    return pgp.certificate(key), key


def _rsa_1024() -> tuple[bytes, pgp.Key]:
    key = pgp.rsa_key(rsa.generate_private_key(public_exponent=65537, key_size=1024))
    return pgp.certificate(key), key


WEAK: dict[str, tuple[Callable[[], tuple[bytes, pgp.Key]], str]] = {
    "ed25519-identity-primary": (_identity_primary, "small-order point"),
    "ed25519-identity-signing-subkey": (_identity_subkey, "small-order point"),
    "rsa-exponent-3": (_rsa_exponent_3, "public exponent 3"),
    "rsa-1024": (_rsa_1024, "1024 bits is too weak"),
}


def _as_keys(cert: bytes) -> dict[str, Any]:
    return {"keys": [pgp.armor("PUBLIC KEY BLOCK", cert).decode()]}


def _as_keyring(cert: bytes) -> dict[str, Any]:
    ring = base64.b64encode(cert).decode()
    return {"attestors": [{"entries": [{"keys": {"openpgpKeyring": ring}}]}]}


def _as_attestor_key(cert: bytes) -> dict[str, Any]:
    armored = pgp.armor("PUBLIC KEY BLOCK", cert).decode()
    return {"attestors": [{"count": 1, "entries": [{"attestor": {"entries": [{"keys": {"publicKeys": armored}}]}}]}]}


def _in_a_keyring_beside_an_honest_one(cert: bytes) -> dict[str, Any]:
    honest, _ = pgp.honest_ed25519_key()
    ring = base64.b64encode(pgp.certificate(honest, "bob <bob@example.com>") + cert).decode()
    return {"attestors": [{"count": 1, "entries": [{"keys": {"openpgpKeyring": ring}}]}]}


WAYS: dict[str, Callable[[bytes], dict[str, Any]]] = {
    "keys": _as_keys,
    "openpgp-keyring": _as_keyring,
    "nested-attestor": _as_attestor_key,
    "keyring-beside-an-honest-certificate": _in_a_keyring_beside_an_honest_one,
}


@pytest.mark.parametrize("way", list(WAYS), ids=list(WAYS))
@pytest.mark.parametrize("weak", list(WEAK), ids=list(WEAK))
def test_a_weak_openpgp_key_is_refused_however_it_arrives(weak: str, way: str) -> None:
    build, rule = WEAK[weak]
    cert, _ = build()
    with pytest.raises(PolicyError, match=rule):
        Policy.from_dict(WAYS[way](cert))


def test_the_identity_key_forges_a_signature_that_sequoia_accepts() -> None:
    """What the key rule stops: with the identity certificate trusted, a signature made without any private
    key verified an attacker's ConfigMap. The policy carrying it is now invalid, so nothing verifies."""
    import pysequoia

    cert, key = _identity_primary()
    forged = pgp.armor("SIGNATURE", pgp.detached(key, PAYLOAD))
    found = pysequoia.verify(bytes=PAYLOAD, store=lambda _ids: [pysequoia.Cert.from_bytes(cert)],
                             signature=pysequoia.Sig.from_bytes(forged))  # fmt: skip
    assert found.valid_sigs  # Sequoia alone accepts the forgery
    with pytest.raises(PolicyError, match="small-order point"):
        verdict(annotated(forged), _as_keys(cert))


# --- unsigned bytes ride inside the armored signature ----------------------------------------------


@pytest.fixture(scope="module")
def gpg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gpg]:
    home = Gpg(tmp_path_factory.mktemp("gnupg"))
    yield home
    home.close()


@pytest.fixture(scope="module")
def alice(gpg: Gpg) -> str:
    return gpg.generate("alice@example.com")


@pytest.fixture(scope="module")
def outsider(gpg: Gpg) -> str:
    return gpg.generate("outsider@example.com")


def _rebuilt(packet: bytes, *, unhashed_extra: bytes = b"", prefix_flip: bool = False, pad_mpi: bool = False) -> bytes:
    """gpg's v4 signature packet with its unhashed area, hash prefix or first MPI changed (re-framed)."""
    body = pgp.only_packet_body(packet)
    hashed_len = struct.unpack(">H", body[4:6])[0]
    at = 6 + hashed_len
    unhashed_len = struct.unpack(">H", body[at : at + 2])[0]
    unhashed = body[at + 2 : at + 2 + unhashed_len] + unhashed_extra
    rest = body[at + 2 + unhashed_len :]
    left16, values = rest[:2], rest[2:]
    if prefix_flip:
        left16 = bytes([left16[0] ^ 0xFF, left16[1]])
    if pad_mpi:  # zero octets in front, counted in the bit count -- never the 32-octet native width
        bits = struct.unpack(">H", values[:2])[0]
        pad = 2 if bits + 8 == 256 else 1
        values = struct.pack(">H", bits + 8 * pad) + b"\x00" * pad + values[2:]
    return pgp.packet(pgp.TAG_SIGNATURE, body[:at] + struct.pack(">H", len(unhashed)) + unhashed + left16 + values)


def _wrong_checksum(raw: bytes) -> bytes:
    armored = pgp.armor("SIGNATURE", raw)
    right = b"=" + base64.b64encode(pgp.crc24(raw).to_bytes(3, "big"))
    wrong = b"=" + base64.b64encode((pgp.crc24(raw) ^ 1).to_bytes(3, "big"))
    return armored.replace(right, wrong)


def _variants(signature: bytes, outsider_signature: bytes) -> dict[str, bytes]:
    """The honest armored signature, and each way of carrying something unsigned in it."""
    raw = pgp.dearmor(signature)
    other = pgp.dearmor(outsider_signature)
    notation = pgp.subpacket(20, b"\x80\x00\x00\x00" + struct.pack(">HH", 4, 8) + b"smug" + b"gled-in!")
    literal = pgp.packet(pgp.TAG_LITERAL, b"b\x04name\x00\x00\x00\x00any text at all")
    marker = pgp.packet(pgp.TAG_MARKER, b"PGP")
    return {
        "outsider-signature-after-it": pgp.armor("SIGNATURE", raw + other),
        "outsider-signature-before-it": pgp.armor("SIGNATURE", other + raw),
        "literal-data-packet": pgp.armor("SIGNATURE", raw + literal),
        "marker-packet-after": pgp.armor("SIGNATURE", raw + marker),
        "marker-packet-before": pgp.armor("SIGNATURE", marker + raw),
        "nul-bytes": pgp.armor("SIGNATURE", raw + b"\x00" * 16),
        "the-same-signature-twice": pgp.armor("SIGNATURE", raw + raw),
        "armor-comment-header": pgp.armor("SIGNATURE", raw, headers="Comment: anything at all\n"),
        "wrong-armor-checksum": _wrong_checksum(raw),
        "unhashed-notation": pgp.armor("SIGNATURE", _rebuilt(raw, unhashed_extra=notation)),
        "unhashed-issuer-of-another-key": pgp.armor(
            "SIGNATURE", _rebuilt(raw, unhashed_extra=pgp.subpacket(33, b"\x04" + bytes(20)))
        ),
        "flipped-hash-prefix": pgp.armor("SIGNATURE", _rebuilt(raw, prefix_flip=True)),
        "padded-mpi": pgp.armor("SIGNATURE", _rebuilt(raw, pad_mpi=True)),
    }


ONE_PACKET = ("malformed-message", "exactly one signature packet")
#: Each variant and the (reason, words of the message) it is denied with.
VARIANTS: dict[str, tuple[str, str]] = {
    "outsider-signature-after-it": ONE_PACKET,
    "outsider-signature-before-it": ONE_PACKET,
    "literal-data-packet": ONE_PACKET,
    "marker-packet-after": ONE_PACKET,
    "marker-packet-before": ONE_PACKET,
    "nul-bytes": ("malformed-message", "not the start of an OpenPGP packet"),
    "the-same-signature-twice": ONE_PACKET,
    "armor-comment-header": ("malformed-message", "header lines"),
    "wrong-armor-checksum": ("malformed-message", "checksum does not match"),
    "unhashed-notation": ("malformed-message", "unhashed area holds subpacket type 20"),
    "unhashed-issuer-of-another-key": ("malformed-message", "names another issuer"),
    "flipped-hash-prefix": ("signature-invalid", "hash prefix"),
    "padded-mpi": ("malformed-message", "MPI whose bit count"),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_only_the_one_signature_packet_rides_in_the_annotation(
    gpg: Gpg, alice: str, outsider: str, variant: str
) -> None:
    policy = {"keys": [gpg.export(alice).decode()]}
    honest = gpg.sign(alice, PAYLOAD)
    assert verdict(annotated(honest), policy).allowed  # gpg's own signature verifies
    changed = _variants(honest, gpg.sign(outsider, PAYLOAD))[variant]
    assert changed != honest
    result = verdict(annotated(changed), policy)
    reason, words = VARIANTS[variant]
    assert (result.allowed, result.reason) == (False, reason), f"{variant}: {result.message}"
    assert words in result.message, result.message


def test_line_ends_and_wrapping_as_honest_tools_write_them_still_verify(gpg: Gpg, alice: str) -> None:
    """CRLF line ends and a final newline are how some tools pass the armor on; they carry no packet."""
    policy = {"keys": [gpg.export(alice).decode()]}
    honest = gpg.sign(alice, PAYLOAD)
    raw = pgp.dearmor(honest)
    for text in (honest.replace(b"\n", b"\r\n"), honest + b"\n", pgp.armor("SIGNATURE", raw, checksum=False)):
        assert verdict(annotated(text), policy).allowed
    # and a forged packet built here verifies only when it is well formed: the builder is honest
    key, _ = pgp.honest_ed25519_key()
    built = {"keys": [pgp.armor("PUBLIC KEY BLOCK", pgp.certificate(key, "carol <carol@example.com>")).decode()]}
    assert verdict(annotated(pgp.armor("SIGNATURE", pgp.detached(key, PAYLOAD))), built).allowed
    assert not verdict(annotated(pgp.armor("SIGNATURE", pgp.detached(key, PAYLOAD, wrong_prefix=True))), built).allowed


@pytest.mark.parametrize("profile", ["RFC9580", "RFC4880"], ids=["sequoia-v6", "sequoia-v4"])
def test_sequoias_own_signatures_of_either_version_verify(profile: str) -> None:
    """The strict reading knows both packet versions Sequoia writes (v6 keys and signatures carry a salt)."""
    import warnings

    import pysequoia

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        tsk = pysequoia.Tsk.generate("dora <dora@example.com>", profile=getattr(pysequoia.Profile, profile))
        signature = pysequoia.sign(tsk.signer(), PAYLOAD, mode=pysequoia.SignatureMode.DETACHED)
    policy = {"keys": [str(tsk.extract_certificate())]}
    result = verdict(annotated(signature), policy)
    assert result.allowed, result.message
    raw = pgp.dearmor(signature)
    assert not verdict(annotated(pgp.armor("SIGNATURE", raw + b"\x00")), policy).allowed
