"""A certificate authority whose key the test keeps, and the certificates it issues for the real server.

The dev PKI (:func:`provider.service.devcerts.make_dev_pki`) throws its CA key
away; the TLS and caller tests need to issue more certificates from the CA the
server trusts: other names, other usages, expired ones.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from provider.service.devcerts import DevPki


def certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Certificate | None, issuer_key: ec.EllipticCurvePrivateKey, *,
                usage: x509.ObjectIdentifier | None = None, expired: bool = False,
                valid: tuple[datetime.datetime, datetime.datetime] | None = None) -> x509.Certificate:  # fmt: skip
    """A certificate for ``subject``; ``valid`` (not before, not after) overrides the default day around now."""
    now = datetime.datetime.now(datetime.UTC)
    start, end = (
        (now - datetime.timedelta(days=10), now - datetime.timedelta(days=1))
        if expired
        else (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1))
    )
    if valid is not None:
        start, end = valid
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder().subject_name(name).issuer_name(issuer.subject if issuer else name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=0 if issuer is None else None), critical=True)
    )  # fmt: skip
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if usage == ExtendedKeyUsageOID.SERVER_AUTH:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def write_pair(
    directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> tuple[Path, Path]:
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@dataclass
class OwnPki:
    """A CA whose key the test keeps (the dev PKI throws its CA key away), with a server and a client certificate."""

    ca: x509.Certificate
    ca_key: ec.EllipticCurvePrivateKey
    pki: DevPki

    @classmethod
    def make(cls, directory: Path) -> OwnPki:
        directory.mkdir(parents=True, exist_ok=True)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = certificate("test CA", ca_key, None, ca_key)
        ca_path = directory / "ca.crt"
        ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        server_key, client_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
        server = write_pair(
            directory,
            "server",
            certificate("localhost", server_key, ca, ca_key, usage=ExtendedKeyUsageOID.SERVER_AUTH),
            server_key,
        )
        client = write_pair(
            directory,
            "client",
            certificate("client", client_key, ca, ca_key, usage=ExtendedKeyUsageOID.CLIENT_AUTH),
            client_key,
        )
        return cls(ca, ca_key, DevPki(directory, ca_path, *server, *client))

    def issue_server(
        self, directory: Path, stem: str, valid: tuple[datetime.datetime, datetime.datetime]
    ) -> tuple[Path, Path]:
        """A server certificate for 127.0.0.1 from this CA, valid from ``valid[0]`` to ``valid[1]``."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = certificate("localhost", key, self.ca, self.ca_key, usage=ExtendedKeyUsageOID.SERVER_AUTH, valid=valid)
        return write_pair(directory, stem, cert, key)

    def issue_client(self, directory: Path, *, usage: x509.ObjectIdentifier, expired: bool) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        return write_pair(
            directory, "intruder", certificate("intruder", key, self.ca, self.ca_key, usage=usage, expired=expired), key
        )
