"""OpenPGP public keys and detached signatures, checked with Sequoia-PGP (``pysequoia``).

What ``kubectl sigstore`` reads (``sigstore/k8s-manifest-sigstore``
``pkg/util/sigtypes/pgp/pgp.go``) and Integrity Shield writes
(``scripts/gpg-annotation-sign.sh``: ``gpg --detach-sign --armor``):

* a *key* is an OpenPGP certificate (a transferable public key: primary key,
  user IDs, subkeys and their binding signatures), ASCII-armored
  (``-----BEGIN PGP PUBLIC KEY BLOCK-----``) or binary; a keyring is several.
  Upstream tells a PGP key from a cosign key by the key itself
  (``pkg/util/sigtypes/sigtypes.go``), and so do we: every key is tried on
  every signature set, and a PGP key only ever accepts a PGP signature;
* a *signature* annotation is base64 of an ASCII-armored detached signature
  (``-----BEGIN PGP SIGNATURE-----``) over the payload ``P`` -- the same bytes
  a cosign signature covers (``docs/format.md``, "OpenPGP signatures").

**Every key of a certificate passes the rules every key passes.** When an
:class:`OpenPGPKey` is made, the material of its primary key and of each
subkey is read (:func:`provider.keys.openpgp_packets.public_key_of`) and handed to
:meth:`provider.keys.pem.PublicKey.from_crypto`, the one door every PEM, cosign,
certificate and keyless key goes through, so :mod:`provider.keys.rules` judges
it: an Ed25519 key that is the identity point -- whose self-signature and
"signatures" R = identity, S = 0 Sequoia accepts for any data -- is
``policy-invalid``, whether it arrives in ``keys``, in an ``openpgpKeyring``
or as a subkey. Keys that only encrypt (ECDH, X25519, ElGamal) never verify a
signature and are not judged; DSA, Ed448 and curves other than P-256, P-384,
P-521 and Ed25519 are refused, as they are in PEM.

A signature counts only when all of these hold (each refusal has its reason):

1. the annotation is one armored block holding exactly one signature packet
   and nothing else (:func:`provider.keys.openpgp_packets.read_armored_signature`:
   no second packet, no trailing bytes, no armor headers, no unhashed
   subpackets but the issuer's, a matching hash prefix and checksum), over a
   *binary* document (type 0x00), and it passes the signature rules of
   :mod:`provider.keys.rules` for its key.
   A text-mode signature (0x01) signs the text with its line endings
   normalised, so CRLF and LF payloads would verify alike: refused;
2. Sequoia's standard policy accepts it with one of the policy's certificates:
   the signing key (primary or subkey) was alive, not revoked and
   signing-capable when the signature was made, and the algorithms are not
   broken (no SHA-1, no MD5);
3. the certificate and the signing key are alive and unrevoked *now* (the
   verifier's clock): a key that expired or was revoked since signing signs
   nothing more for us. Upstream's check stops at 2.

The signer is the certificate, named ``openpgp:<PRIMARY FINGERPRINT>``: one
person's certificate is one signer whichever of its subkeys signed.

No ``gpg`` process is started: Sequoia is a library (Rust, via PyO3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..errors import KeyLoadError
from .openpgp_packets import (
    PacketError,
    SignatureFacts,
    digest_prefix_matches,
    public_key_of,
    read_armored_signature,
    signature_well_formed,
)
from .pem import PublicKey

if TYPE_CHECKING:
    import pysequoia

_BEGIN_KEY = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
_END_KEY = "-----END PGP PUBLIC KEY BLOCK-----"
_ARMORED_SECRET = "-----BEGIN PGP PRIVATE KEY BLOCK-----"  # noqa: S105 - an armor line, not a password
SIGNATURE_ARMOR = b"-----BEGIN PGP SIGNATURE-----"
#: How a verdict names an OpenPGP signer.
SIGNER_PREFIX = "openpgp:"
#: A key text longer than this is refused before parsing: a keyring of a few dozen RSA-4096 certificates
#: with their user IDs and binding signatures is well under it.
MAX_KEYRING_BYTES = 1024 * 1024


def has_armored_keys(text: str) -> bool:
    return _BEGIN_KEY in text or _ARMORED_SECRET in text


def split_armored(text: str) -> tuple[list[str], str]:
    """The armored OpenPGP key blocks of ``text`` (RFC 9580 section 6.2), and what is left of it (PEM blocks, say).

    Linear: each BEGIN line costs one search for its END line, and a block without one ends the reading.
    """
    if _ARMORED_SECRET in text:
        raise KeyLoadError(
            "an OpenPGP private key was given where a public key is expected; never put private keys in a policy "
            "(export the public half with `gpg --armor --export`)"
        )
    blocks: list[str] = []
    rest: list[str] = []
    position = 0
    while (begin := text.find(_BEGIN_KEY, position)) >= 0:
        end = text.find(_END_KEY, begin)
        if end < 0:
            raise KeyLoadError("an OpenPGP public key block has no END line")
        rest.append(text[position:begin])
        blocks.append(text[begin : end + len(_END_KEY)] + "\n")
        position = end + len(_END_KEY)
    rest.append(text[position:])
    return blocks, "".join(rest)


@dataclass(frozen=True)
class Check:
    """What checking one signature with one certificate found."""

    verified: bool
    reason: str = "signature-invalid"
    detail: str = ""


def _utc(moment: datetime | None) -> datetime:
    if moment is None:
        return datetime.now(UTC)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass(frozen=True)
class _KeyFacts:
    """One key of a certificate as its self-signatures describe it (latest binding, any revocation)."""

    fingerprint: str
    key_id: str
    created: datetime | None
    expires: datetime | None
    revoked: bool
    can_sign: bool
    #: The key, through the rules every key passes; None for a key that only encrypts.
    key: PublicKey | None


def _checked_key(body: bytes, fingerprint: str) -> PublicKey | None:
    """A key packet's material through :meth:`PublicKey.from_crypto` (and so :mod:`provider.keys.rules`)."""
    try:
        crypto = public_key_of(body)
        return None if crypto is None else PublicKey.from_crypto(crypto)
    except KeyLoadError as exc:
        raise KeyLoadError(f"OpenPGP key {fingerprint[-16:].upper()}: {exc.message}") from None


def _key_facts(cert: pysequoia.Cert) -> list[_KeyFacts]:
    """The primary key and each subkey, read from the certificate's packets.

    Only for reasons and the "alive now" check (step 3): Sequoia decides
    whether a signature is valid. A revocation packet counts whatever it
    says about itself -- in a certificate the policy author supplied, a
    doubt about revocation resolves towards "revoked".
    """
    from pysequoia.packet import PacketPile, SignatureType, Tag

    facts: list[_KeyFacts] = []
    current: dict[str, Any] | None = None

    def close() -> None:
        if current is None:
            return
        binding = current["binding"]
        period = binding.key_validity_period if binding is not None else None
        created = current["created"]
        expires = created + period if (period is not None and created is not None) else None
        flags = binding.key_flags if binding is not None else None
        facts.append(
            _KeyFacts(
                current["fingerprint"],
                current["key_id"],
                created,
                expires,
                current["revoked"],
                bool(flags is not None and flags.signing),
                _checked_key(current["body"], current["fingerprint"]),
            )
        )

    for packet in PacketPile.from_bytes(bytes(cert)):
        tag = packet.tag
        if tag in (Tag.PublicKey, Tag.PublicSubkey):
            close()
            current = {
                "fingerprint": str(packet.fingerprint),
                "key_id": str(packet.key_id),
                "body": bytes(packet.body),
                "created": packet.key_created,
                "binding": None,
                "revoked": False,
                "primary": tag == Tag.PublicKey,
            }
        elif tag == Tag.Signature and current is not None:
            kind = packet.signature_type
            if kind in (SignatureType.KeyRevocation, SignatureType.SubkeyRevocation):
                current["revoked"] = True
            elif kind in (
                SignatureType.SubkeyBinding,
                SignatureType.DirectKey,
                SignatureType.PositiveCertification,
                SignatureType.GenericCertification,
                SignatureType.CasualCertification,
                SignatureType.PersonaCertification,
            ):
                if packet.issuer_fingerprint not in (None, facts[0].fingerprint if facts else current["fingerprint"]):
                    continue  # a third party's certification says nothing about the key's own use
                created = packet.signature_created
                binding = current["binding"]
                if binding is None or (created is not None and created >= (binding.signature_created or created)):
                    current["binding"] = packet
    close()
    return facts


@dataclass(frozen=True)
class OpenPGPKey:
    """One trusted OpenPGP certificate; making one checks every key in it (see the module)."""

    fingerprint: str  # the primary key's, upper-case hex
    user_ids: tuple[str, ...]
    _cert: Any = field(repr=False, compare=False)
    name: str | None = None
    _facts: tuple[_KeyFacts, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Here, not in a loader: however a certificate arrives, none is usable unchecked.
        object.__setattr__(self, "_facts", tuple(_key_facts(self._cert)))

    @property
    def signer(self) -> str:
        return SIGNER_PREFIX + self.fingerprint

    def certificate_bytes(self) -> bytes:
        """The certificate as binary OpenPGP packets (a keyring of one)."""
        return bytes(self._cert)

    def label(self) -> str:
        short = f"openpgp:{self.fingerprint[-16:]}"
        who = self.name or (self.user_ids[0] if self.user_ids else "")
        return f"{who} ({short})" if who else short

    def check(self, signature: bytes, data: bytes, now: datetime | None = None) -> Check:
        """Whether ``signature`` (armored, detached) is this certificate's over ``data``, alive now (see the module)."""
        import pysequoia
        from pysequoia.packet import SignatureType

        if not signature.startswith(SIGNATURE_ARMOR):
            return Check(False, detail=f"{self.label()}: not an armored OpenPGP signature")
        try:
            # Sequoia reads the first signature and ignores what follows it, in the armor or after it:
            # bytes nobody checks would ride along in an annotation the comparison masks.
            binary, packet = read_armored_signature(signature)
        except PacketError as exc:
            return Check(False, "malformed-message", f"{self.label()}: {exc}")
        try:
            sig = pysequoia.Sig.from_bytes(binary)
        except (RuntimeError, ValueError) as exc:
            return Check(False, "malformed-message", f"{self.label()}: the OpenPGP signature does not parse "
                         f"({str(exc).splitlines()[0][:80]})")  # fmt: skip
        if sig.signature_type != SignatureType.Binary:
            return Check(False, detail=f"{self.label()}: a {sig.signature_type} signature, not a binary-document one "
                         "(text-mode signatures normalise line endings and are refused)")  # fmt: skip
        issuer = (sig.issuer_fingerprint or "").lower()
        key_id = (sig.issuer_key_id or "").lower()
        facts = self._facts
        signing = next((f for f in facts if f.fingerprint == issuer or (not issuer and f.key_id == key_id)), None)
        if signing is None:
            return Check(False, detail=f"{self.label()}: signed by another key ({issuer or key_id or 'unnamed'})")
        unsound = self._unsound(packet, signing, data)
        if unsound is not None:
            return Check(False, unsound[0], f"{self.label()}: {unsound[1]}")
        cert = self._cert
        try:
            result = pysequoia.verify(bytes=data, store=lambda _ids: [cert], signature=sig)
            valid = bool(result.valid_sigs)
        except RuntimeError:
            valid = False
        moment = _utc(now)
        primary = facts[0]
        if not valid:
            return self._why_not(signing, primary, sig.created)
        # 3. alive and unrevoked now
        for key, what in ((primary, "certificate"), (signing, "signing key")):
            if key.revoked or (key is primary and cert.is_revoked):
                return Check(False, "openpgp-key-revoked", f"{self.label()}: the {what} {key.fingerprint[-16:]} is "
                             "revoked")  # fmt: skip
            expires = cert.expiration if key is primary else key.expires
            if expires is not None and expires <= moment:
                return Check(False, "openpgp-key-expired", f"{self.label()}: the {what} {key.fingerprint[-16:]} "
                             f"expired at {expires.isoformat()}")  # fmt: skip
        return Check(True)

    @staticmethod
    def _unsound(packet: SignatureFacts, signing: _KeyFacts, data: bytes) -> tuple[str, str] | None:
        """``(reason, detail)`` when the signature packet is not what its key's honest holder made."""
        for kind, value in packet.unhashed:
            named = value.hex() if kind == 16 else value[1:].hex()
            wanted = signing.key_id if kind == 16 else signing.fingerprint
            if named != wanted.lower():
                return "malformed-message", "the signature's unhashed area names another issuer than its signing key"
        if not digest_prefix_matches(packet, data):
            return (
                "signature-invalid",
                "the signature's hash prefix is not that of the signed data, or its hash algorithm is not accepted",
            )
        if signing.key is None or not signature_well_formed(packet, signing.key.crypto_key):
            return "signature-invalid", "the signature's values break the signature rules for its key"
        return None

    def _why_not(self, signing: _KeyFacts, primary: _KeyFacts, created: datetime | None) -> Check:
        """The most specific reason Sequoia refused a signature by one of this certificate's keys."""
        label = self.label()
        if primary.revoked or self._cert.is_revoked or signing.revoked:
            what = "certificate" if (primary.revoked or self._cert.is_revoked) else "signing key"
            return Check(False, "openpgp-key-revoked", f"{label}: the {what} is revoked")
        if not signing.can_sign:
            return Check(False, "openpgp-key-not-for-signing", f"{label}: the key {signing.fingerprint[-16:]} is not "
                         "flagged for signing")  # fmt: skip
        at = created or datetime.now(UTC)
        for key, expires in ((primary, self._cert.expiration), (signing, signing.expires)):
            if expires is not None and expires <= at:
                return Check(False, "openpgp-key-expired", f"{label}: the key {key.fingerprint[-16:]} had expired "
                             f"({expires.isoformat()}) when the signature was made")  # fmt: skip
        return Check(False, detail=f"{label}: the OpenPGP signature does not verify")


def load_openpgp_keys(data: bytes, name: str | None = None, max_keys: int = 64) -> tuple[OpenPGPKey, ...]:
    """Every certificate in ``data`` (one armored block, or a binary keyring), in order."""
    import pysequoia

    if len(data) > MAX_KEYRING_BYTES:
        raise KeyLoadError(f"the OpenPGP keyring is larger than {MAX_KEYRING_BYTES} bytes")
    from pysequoia.packet import PacketPile, Tag

    try:
        secret = any(packet.tag in (Tag.SecretKey, Tag.SecretSubkey) for packet in PacketPile.from_bytes(data))
        certs = pysequoia.Cert.split_bytes(data)
    except (RuntimeError, ValueError) as exc:
        raise KeyLoadError(f"the OpenPGP key does not parse ({str(exc).splitlines()[0][:120]})") from exc
    if secret:
        raise KeyLoadError("an OpenPGP private key was given where a public key is expected; export the public half")
    if not certs:
        raise KeyLoadError("the OpenPGP key block holds no certificate")
    if len(certs) > max_keys:
        raise KeyLoadError(f"the OpenPGP keyring holds {len(certs)} certificates; at most {max_keys} keys are allowed")
    keys = []
    for cert in certs:
        fingerprint = cert.fingerprint.upper()
        _key_facts(cert)  # the key rules first: a weak key is named as such, not as Sequoia words it
        try:
            user_ids = tuple(str(u) for u in cert.user_ids)
        except RuntimeError as exc:  # Sequoia's policy refuses the certificate's own binding signatures
            raise KeyLoadError(f"OpenPGP certificate {fingerprint[-16:]} is not usable: "
                               f"{str(exc).splitlines()[0][:120]}") from None  # fmt: skip
        keys.append(OpenPGPKey(fingerprint, user_ids, cert, name))
    return tuple(keys)


def load_trusted_keys(text: str, name: str | None, max_keys: int) -> tuple[Any, ...]:
    """Every key in a policy's key text: PEM blocks (:func:`provider.keys.pem.load_public_keys`) and armored OpenPGP
    certificates (:func:`load_openpgp_keys`), PEM first, each in the order written."""
    from .pem import load_public_keys

    if not isinstance(text, str):
        raise KeyLoadError("a key must be a PEM or armored OpenPGP string")
    if not has_armored_keys(text):
        return load_public_keys(text, name, max_keys)
    blocks, rest = split_armored(text)
    found: list[Any] = []
    if "-----BEGIN" in rest:
        found.extend(load_public_keys(rest, name, max_keys))
    for block in blocks:
        found.extend(load_openpgp_keys(block.encode(), name, max_keys))
        if len(found) > max_keys:
            raise KeyLoadError(f"the key text holds more than {max_keys} keys")
    return tuple(found)
