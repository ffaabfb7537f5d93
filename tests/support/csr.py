"""Kubelet-serving CertificateSigningRequests made with ``cryptography``, and each rule broken one at a time.

:func:`csr` is a CertificateSigningRequest as the API server stores it, around a
PKCS#10 request a kubelet would make (:func:`pem_request`); :data:`BROKEN` is the
table of requests breaking one rule each, with the reason each must get: the
library's tests (``tests/unit/neighbours/test_csr.py``), the CLI's and the
service's use the same rows.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from provider.limits import DEFAULT_LIMITS
from provider.neighbours.csr import MAX_EXPIRATION_SECONDS

NODE = "worker-1"
USER = f"system:node:{NODE}"
EC_KEY = ec.generate_private_key(ec.SECP256R1())
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
SERVING = ["digital signature", "server auth"]
SERVING_RSA = ["digital signature", "key encipherment", "server auth"]


def pem_request(
    *,
    cn: str | list[str] = USER,
    orgs: tuple[str, ...] = ("system:nodes",),
    dns: tuple[str, ...] = (f"{NODE}.example.com",),
    ips: tuple[str, ...] = ("10.0.0.5",),
    others: tuple[x509.GeneralName, ...] = (),
    key: Any = EC_KEY,
) -> bytes:
    """A PKCS#10 request as a kubelet makes one (client-go's certificate manager), with the given subject and SANs."""
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs += [x509.NameAttribute(NameOID.COMMON_NAME, c) for c in ([cn] if isinstance(cn, str) else cn)]
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attrs))
    names: list[x509.GeneralName] = (
        [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips] + list(others)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def csr(
    request: bytes | str | None = None,
    *,
    username: str = USER,
    signer: str = "kubernetes.io/kubelet-serving",
    usages: Any = SERVING,
    expiration: Any = None,
    name: str = "csr-x7k2p",
) -> dict[str, Any]:
    """A CertificateSigningRequest as the API server stores it (``spec.request`` is base64 of the PEM)."""
    if request is None:
        request = pem_request()
    spec: dict[str, Any] = {
        "request": b64(request) if isinstance(request, bytes) else request,
        "signerName": signer,
        "usages": usages,
        "username": username,
        "groups": ["system:nodes", "system:authenticated"],
    }
    if expiration is not None:
        spec["expirationSeconds"] = expiration
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": spec,
    }


def localhost_csr(ips: tuple[str, ...] = ("127.0.0.1",)) -> dict[str, Any]:
    return csr(pem_request(cn="system:node:localhost", dns=("localhost",), ips=ips), username="system:node:localhost")


# --- one rule broken at a time -------------------------------------------------------------


def tampered() -> bytes:
    """A request whose signed content changed after signing (CN worker-1 -> worker-2)."""
    der = x509.load_pem_x509_csr(pem_request()).public_bytes(serialization.Encoding.DER)
    assert der.count(b"worker-1") >= 1
    bad = der.replace(b"system:node:worker-1", b"system:node:worker-2")
    return b"-----BEGIN CERTIFICATE REQUEST-----\n" + base64.encodebytes(bad) + b"-----END CERTIFICATE REQUEST-----\n"


def certificate_pem() -> bytes:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, USER)])
    cert = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(EC_KEY.public_key())
        .serial_number(7).not_valid_before(dt.datetime(2020, 1, 1, tzinfo=dt.UTC)).not_valid_after(dt.datetime(2040, 1, 1, tzinfo=dt.UTC))
        .sign(EC_KEY, hashes.SHA256())
    )  # fmt: skip
    return cert.public_bytes(serialization.Encoding.PEM)


BROKEN: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("not-base64", csr("%%% not base64 %%%"), {}, "csr-malformed"),
    ("missing-request", csr(""), {}, "csr-malformed"),
    ("not-pem", csr(b"hello"), {}, "csr-malformed"),
    ("certificate-not-request", csr(certificate_pem()), {}, "csr-malformed"),
    ("two-blocks", csr(pem_request() + pem_request()), {}, "csr-malformed"),
    ("trailing-junk", csr(pem_request() + b"junk"), {}, "csr-malformed"),
    ("garbage-der", csr(b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"), {}, "csr-malformed"),
    ("bad-self-signature", csr(tampered()), {}, "csr-malformed"),
    ("oversized", csr("A" * (DEFAULT_LIMITS.max_csr_bytes * 2)), {}, "csr-malformed"),
    ("expiration-not-a-number", csr(expiration="86400"), {}, "csr-malformed"),
    ("username-not-node", csr(pem_request(cn="alice"), username="alice"), {"bypassHostnameCheck": True}, "csr-username-not-node"),
    ("username-empty-node", csr(pem_request(cn="system:node:"), username="system:node:"), {"bypassHostnameCheck": True}, "csr-username-not-node"),
    ("cn-other-node", csr(pem_request(cn="system:node:worker-2")), {}, "csr-common-name-mismatch"),
    ("two-cns", csr(pem_request(cn=[USER, USER])), {}, "csr-common-name-mismatch"),
    ("no-cn", csr(pem_request(cn=[])), {}, "csr-common-name-mismatch"),
    ("no-organization", csr(pem_request(orgs=())), {}, "csr-organization-invalid"),
    ("masters", csr(pem_request(orgs=("system:masters",))), {}, "csr-organization-invalid"),
    ("extra-organization", csr(pem_request(orgs=("system:nodes", "system:masters"))), {}, "csr-organization-invalid"),
    ("client-auth-usage", csr(usages=[*SERVING, "client auth"]), {}, "csr-usages-invalid"),
    ("no-server-auth", csr(usages=["digital signature"]), {}, "csr-usages-invalid"),
    ("usages-not-a-list", csr(usages="server auth"), {}, "csr-usages-invalid"),
    ("expiration-over-default", csr(expiration=MAX_EXPIRATION_SECONDS + 1), {}, "csr-expiration-too-long"),
    ("expiration-over-policy", csr(expiration=86401), {"maxExpirationSeconds": 86400}, "csr-expiration-too-long"),
    ("email-san", csr(pem_request(others=(x509.RFC822Name("root@example.com"),))), {}, "csr-san-forbidden"),
    ("uri-san", csr(pem_request(others=(x509.UniformResourceIdentifier("spiffe://cluster/ns/kube-system"),))), {}, "csr-san-forbidden"),
    ("no-san", csr(pem_request(dns=(), ips=())), {}, "csr-san-missing"),
    ("two-dns-names", csr(pem_request(dns=(f"{NODE}.example.com", f"{NODE}.internal"))), {}, "csr-too-many-dns-names"),
    ("dns-over-zero", csr(), {"allowedDnsNames": 0}, "csr-too-many-dns-names"),
    ("wildcard", csr(pem_request(dns=(f"*.{NODE}.example.com",))), {}, "csr-dns-name-invalid"),
    ("empty-label", csr(pem_request(dns=(f"{NODE}..example.com",))), {}, "csr-dns-name-invalid"),
    ("underscore", csr(pem_request(dns=(f"{NODE}.ex_ample.com",))), {}, "csr-dns-name-invalid"),
    ("too-long", csr(pem_request(dns=(f"{NODE}." + "a" * 60 + ".b" * 100,))), {}, "csr-dns-name-invalid"),
    ("other-host", csr(pem_request(dns=("auth.example.com",))), {}, "csr-dns-name-not-prefixed"),
    ("string-prefix-only", csr(pem_request(dns=(f"{NODE}x.example.com",))), {}, "csr-dns-name-not-prefixed"),
    ("regex", csr(pem_request(dns=(f"{NODE}.example.org",))), {"providerRegex": r"\.example\.com$"}, "csr-dns-name-not-allowed"),
    ("ip-outside", csr(pem_request(ips=("10.0.1.5",))), {"providerIpPrefixes": ["10.0.0.0/24"]}, "csr-ip-not-allowed"),
    ("ipv6-outside", csr(pem_request(ips=("2001:db8::1",))), {"providerIpPrefixes": ["10.0.0.0/8", "fc00::/7"]}, "csr-ip-not-allowed"),
    ("mapped-outside", csr(pem_request(ips=("::ffff:192.168.1.1",))), {"providerIpPrefixes": ["10.0.0.0/8"]}, "csr-ip-not-allowed"),
]  # fmt: skip
