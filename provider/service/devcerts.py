"""Throw-away PKI for local runs and tests: a CA, a server and a client certificate.

:func:`make_dev_pki` writes, under one directory::

    ca.crt                      the CA (trust it with curl --cacert)
    server.crt, server.key      for 127.0.0.1 and localhost (SANs), serverAuth
    client.crt, client.key      CN "manifest-provider-dev-client", clientAuth

All keys are ECDSA P-256, private keys are written mode 0600, and nothing here
is meant for a cluster: the CA key is thrown away once the certificates are
signed. The certificates live 90 days, as cert-manager's do by default, so
``make run`` meets no certificate-expiry warning (14 days ahead) on a fresh run.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: How long the throw-away certificates are valid (cert-manager's default ``duration``).
LIFETIME = datetime.timedelta(days=90)
#: Back-dating, so a clock a little behind still accepts a fresh certificate.
SKEW = datetime.timedelta(minutes=5)

CLIENT_NAME = "manifest-provider-dev-client"
SERVER_NAMES = ("localhost",)
SERVER_ADDRESSES = ("127.0.0.1",)


@dataclass(frozen=True)
class DevPki:
    directory: Path
    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "manifest-provider dev"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - SKEW)
        .not_valid_after(now + LIFETIME)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )


def _leaf(
    common_name: str,
    usage: x509.ObjectIdentifier,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    sans: list[x509.GeneralName],
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        _builder(_name(common_name), ca_cert.subject, key)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)


def make_dev_pki(directory: str | os.PathLike[str]) -> DevPki:
    """Write a fresh CA, server and client certificate under ``directory`` (created if needed)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("manifest-provider dev CA")
    ca_cert = (
        _builder(ca_name, ca_name, ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in SERVER_NAMES]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in SERVER_ADDRESSES]
    server_cert, server_key = _leaf("localhost", ExtendedKeyUsageOID.SERVER_AUTH, ca_key, ca_cert, sans)
    client_cert, client_key = _leaf(CLIENT_NAME, ExtendedKeyUsageOID.CLIENT_AUTH, ca_key, ca_cert, [])
    pki = DevPki(
        directory=root,
        ca_cert=root / "ca.crt",
        server_cert=root / "server.crt",
        server_key=root / "server.key",
        client_cert=root / "client.crt",
        client_key=root / "client.key",
    )
    pki.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    pki.server_cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    pki.client_cert.write_bytes(client_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.server_key, server_key)
    _write_key(pki.client_key, client_key)
    return pki
