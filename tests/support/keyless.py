"""A small sigstore world for tests: a Fulcio-like CA, a Rekor-like log key, generated in milliseconds.

Nothing here is trusted by anything but the tests that build it. A
:class:`World` holds

* a root CA and an intermediate (``fulcio``), both ECDSA P-256, shaped like
  Fulcio's (basicConstraints, keyUsage, subject/authority key identifiers);
* a log key (``rekor``) whose SHA-256 SPKI digest is its ``logID``;
* :meth:`World.trusted_root`, the sigstore TrustedRoot JSON naming both.

:meth:`World.sign` signs a manifest the way ``kubectl sigstore sign`` does
without ``--key``: a short-lived certificate for an identity, a signature
over the payload P, and a cosign RekorBundle whose SET the log key signs.
Every knob an attack needs is a keyword argument (another CA, another time,
another hash in the logged entry, a SET over different bytes, ...).
"""

from __future__ import annotations

import base64
import copy
import gzip
import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

from provider.keys.pem import sign_bytes
from provider.signatures.envelope import decode_message, set_key
from provider.signatures.signing import sign_documents

D = "cosign.sigstore.dev"
OID_ISSUER_V1 = ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
OID_ISSUER_V2 = ObjectIdentifier("1.3.6.1.4.1.57264.1.8")
OID_USERNAME = ObjectIdentifier("1.3.6.1.4.1.57264.1.7")
GOOGLE = "https://accounts.google.com"
GITHUB = "https://github.com/login/oauth"
#: The instant every world "logs" its entries at, unless told otherwise.
SIGNED_AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def der_utf8(text: str) -> bytes:
    data = text.encode()
    if len(data) < 0x80:
        return bytes([0x0C, len(data)]) + data
    width = (len(data).bit_length() + 7) // 8
    return bytes([0x0C, 0x80 | width]) + len(data).to_bytes(width, "big") + data


def _name(cn: str, org: str = "test.example") -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org), x509.NameAttribute(NameOID.COMMON_NAME, cn)])


@dataclass
class CA:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


def make_ca(
    cn: str,
    issuer: CA | None = None,
    *,
    not_before: datetime = datetime(2020, 1, 1, tzinfo=UTC),
    not_after: datetime = datetime(2040, 1, 1, tzinfo=UTC),
    path_length: int | None = None,
) -> CA:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = _name(cn)
    signer_key = issuer.key if issuer else key
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.cert.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer_key.public_key()), critical=False)
    )
    return CA(key, builder.sign(signer_key, hashes.SHA256()))


def issue_leaf(
    ca: CA,
    *,
    email: str | None = "jane@example.com",
    also: tuple[str, ...] = (),
    uri: str | None = None,
    username: str | None = None,
    issuer: str | None = GOOGLE,
    issuer_v1: str | None = None,
    not_before: datetime = SIGNED_AT - timedelta(minutes=1),
    lifetime: timedelta = timedelta(minutes=10),
    code_signing: bool = True,
    key: ec.EllipticCurvePrivateKey | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A Fulcio-shaped signing certificate: empty subject, critical SAN, code-signing EKU, issuer extension.

    ``also`` adds more email SANs (Fulcio issues one; an enterprise CA issues what it issues).
    """
    key = key or ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    if email:
        names.append(x509.RFC822Name(email))
    names += [x509.RFC822Name(more) for more in also]
    if uri:
        names.append(x509.UniformResourceIdentifier(uri))
    if username:
        names.append(x509.OtherName(OID_USERNAME, der_utf8(username)))
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_before + lifetime)
        .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    if code_signing:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
    if issuer is not None:
        builder = builder.add_extension(x509.UnrecognizedExtension(OID_ISSUER_V2, der_utf8(issuer)), critical=False)
    if issuer_v1 is not None:
        builder = builder.add_extension(x509.UnrecognizedExtension(OID_ISSUER_V1, issuer_v1.encode()), critical=False)
    return key, builder.sign(ca.key, hashes.SHA256())


def pem(*certs: x509.Certificate) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def spki(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


@dataclass
class World:
    root: CA = field(default_factory=lambda: make_ca("test-fulcio-root"))
    rekor: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    intermediate: CA = field(init=False)

    def __post_init__(self) -> None:
        self.intermediate = make_ca("test-fulcio-intermediate", self.root, path_length=0)

    @property
    def log_id(self) -> str:
        return hashlib.sha256(spki(self.rekor.public_key())).hexdigest()

    def trusted_root(
        self,
        *,
        ca_valid_for: dict[str, str] | None = None,
        log_valid_for: dict[str, str] | None = None,
        root_first: bool = False,
    ) -> dict[str, Any]:
        chain = [self.intermediate.cert, self.root.cert]
        if root_first:
            chain.reverse()
        return {
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [
                {
                    "baseUrl": "https://rekor.test.example",
                    "hashAlgorithm": "SHA2_256",
                    "publicKey": {
                        "rawBytes": _b64(spki(self.rekor.public_key())),
                        "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                        "validFor": log_valid_for or {"start": "2020-01-01T00:00:00Z"},
                    },
                    "logId": {"keyId": _b64(bytes.fromhex(self.log_id))},
                }
            ],
            "certificateAuthorities": [
                {
                    "subject": {"organization": "test.example", "commonName": "test-fulcio"},
                    "uri": "https://fulcio.test.example",
                    "certChain": {
                        "certificates": [{"rawBytes": _b64(c.public_bytes(serialization.Encoding.DER))} for c in chain]
                    },
                    "validFor": ca_valid_for or {"start": "2020-01-01T00:00:00Z"},
                }
            ],
            "ctlogs": [],
        }

    def leaf(self, **kwargs: Any) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        return issue_leaf(self.intermediate, **kwargs)

    def forged_leaf(self, **kwargs: Any) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        """What anyone can make without the CA's key: a certificate naming the victim, signed by
        its own key, that claims this world's intermediate as its issuer."""
        key = ec.generate_private_key(ec.SECP256R1())
        return issue_leaf(CA(key, self.intermediate.cert), key=key, **kwargs)

    def bundle(
        self,
        payload: bytes,
        signature: bytes,
        cert: x509.Certificate,
        *,
        integrated_time: datetime = SIGNED_AT,
        kind: str = "hashedrekord",
        logged_hash: str | None = None,
        logged_signature: bytes | None = None,
        logged_cert: x509.Certificate | None = None,
        log_key: ec.EllipticCurvePrivateKey | None = None,
        log_id: str | None = None,
        set_over: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
        entry: Any = None,
    ) -> bytes:
        """A cosign RekorBundle for (payload, signature, cert), its SET signed by the log key.

        ``entry`` replaces the logged entry (JSON value, or raw bytes) while the SET stays valid.
        """
        spec: dict[str, Any] = {
            "data": {"hash": {"algorithm": "sha256", "value": logged_hash or hashlib.sha256(payload).hexdigest()}},
            "signature": {
                "content": _b64(logged_signature if logged_signature is not None else signature),
                "publicKey": {"content": _b64(pem(logged_cert or cert))},
            },
        }
        if kind == "rekord":
            spec["signature"]["format"] = "x509"
        if entry is None:
            entry = {"apiVersion": "0.0.1", "kind": kind, "spec": spec}
        body = _b64(entry if isinstance(entry, bytes) else json.dumps(entry, separators=(",", ":")).encode())
        fields = {
            "body": body,
            "integratedTime": int(integrated_time.timestamp()),
            "logID": log_id or self.log_id,
            "logIndex": 4242,
        }
        signed = {**fields, **(set_over or {})}
        canonical = json.dumps(signed, sort_keys=True, separators=(",", ":")).encode()
        set_signature = sign_bytes(log_key or self.rekor, canonical)
        return json.dumps({"SignedEntryTimestamp": _b64(set_signature), "Payload": fields, **(extra or {})}).encode()

    def sign(
        self,
        obj: dict[str, Any],
        *,
        key: ec.EllipticCurvePrivateKey | None = None,
        cert: x509.Certificate | None = None,
        chain: tuple[x509.Certificate, ...] = (),
        bundle: bytes | bool | None = True,
        index: int = 0,
        **bundle_options: Any,
    ) -> dict[str, Any]:
        """``obj`` signed keylessly (or, with ``index`` > 0, with one more keyless signature set).

        ``bundle=True`` makes an honest bundle (tuned by ``bundle_options``), ``False``
        leaves it out, bytes are used as given.
        """
        if key is None or cert is None:
            key, cert = self.leaf()
        if index == 0:
            (signed,) = sign_documents([copy.deepcopy(obj)], key)
        else:
            signed = copy.deepcopy(obj)
        annotations = signed["metadata"]["annotations"]
        payload = decode_message(annotations[f"{D}/message"]).data
        signature = sign_bytes(key, payload)
        annotations[set_key(D, "signature", index)] = _b64(signature)
        annotations[set_key(D, "certificate", index)] = _b64(gzip.compress(pem(cert, *chain), mtime=0))
        if bundle is True:
            bundle = self.bundle(payload, signature, cert, **bundle_options)
        if isinstance(bundle, bytes):
            annotations[set_key(D, "bundle", index)] = _b64(gzip.compress(bundle, mtime=0))
        return signed
