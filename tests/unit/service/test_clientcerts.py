"""The per-request client-certificate check: validity windows along the path, the current CA file, the names.

Certificates are real (``cryptography``), the clock is given: each case is a
moment in a certificate's life, or a path the CA file does or does not complete.
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from provider.service.clientcerts import ClientCertificates

NOW = datetime.datetime(2030, 6, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Issued:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

    @property
    def der(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.DER)

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def issue(name: str, issuer: Issued | None, *, ca: bool, start: datetime.datetime = NOW - 10 * DAY,
          end: datetime.datetime = NOW + 10 * DAY, dns: tuple[str, ...] = (), rsa_key: bool = False) -> Issued:  # fmt: skip
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey = (
        rsa.generate_private_key(65537, 2048) if rsa_key else ec.generate_private_key(ec.SECP256R1())
    )
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(issuer.cert.subject if issuer else subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )  # fmt: skip
    if dns:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False)
    return Issued(builder.sign((issuer or Issued(None, key)).key, hashes.SHA256()), key)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def root() -> Issued:
    return issue("root", None, ca=True)


def checker(tmp_path: Path, *cas: Issued, at: datetime.datetime = NOW) -> ClientCertificates:
    path = tmp_path / "client-ca.crt"
    path.write_bytes(b"".join(ca.pem for ca in cas))
    return ClientCertificates(str(path), clock=at.timestamp)


def test_a_certificate_of_the_ca_is_usable_and_answers_to_its_dns_names_then_its_cn(
    tmp_path: Path, root: Issued
) -> None:
    leaf = issue("gatekeeper-webhook-service.gatekeeper-system.svc", root, ca=False, dns=("a.svc", "b.svc"))
    result = checker(tmp_path, root).check(leaf.der)
    assert result.problem == ""
    assert result.names == ("a.svc", "b.svc", "gatekeeper-webhook-service.gatekeeper-system.svc")
    assert result.common_name == "gatekeeper-webhook-service.gatekeeper-system.svc"


def test_gatekeepers_rsa_certificate_from_its_rsa_ca_is_usable(tmp_path: Path) -> None:
    """cert-controller makes RSA-2048 keys for the CA and the webhook certificate."""
    ca = issue("gatekeeper-ca", None, ca=True, rsa_key=True)
    leaf = issue("gatekeeper-webhook-service.gatekeeper-system.svc", ca, ca=False, rsa_key=True,
                 dns=("gatekeeper-webhook-service.gatekeeper-system.svc",))  # fmt: skip
    assert checker(tmp_path, ca).check(leaf.der).problem == ""


@pytest.mark.parametrize(
    ("at", "problem"),
    [(NOW, ""), (NOW + 11 * DAY, "certificate-expired"), (NOW - 11 * DAY, "certificate-not-yet-valid")],
    ids=["inside-the-window", "after-it", "before-it"],
)
def test_the_leaf_window_is_checked_against_the_clock(
    tmp_path: Path, root: Issued, at: datetime.datetime, problem: str
) -> None:
    leaf = issue("client", root, ca=False)
    assert checker(tmp_path, root, at=at).check(leaf.der).problem == problem


def test_the_ca_window_is_checked_too(tmp_path: Path) -> None:
    short_root = issue("short root", None, ca=True, end=NOW + DAY)
    leaf = issue("client", short_root, ca=False, end=NOW + 30 * DAY)
    assert checker(tmp_path, short_root, at=NOW).check(leaf.der).problem == ""
    assert checker(tmp_path, short_root, at=NOW + 2 * DAY).check(leaf.der).problem == "certificate-expired"


def test_a_path_through_an_intermediate_needs_the_intermediate_and_the_root_in_the_file(
    tmp_path: Path, root: Issued
) -> None:
    intermediate = issue("intermediate", root, ca=True)
    leaf = issue("client", intermediate, ca=False)
    assert checker(tmp_path, intermediate, root).check(leaf.der).problem == ""
    assert (
        checker(tmp_path, root).check(leaf.der).problem == "certificate-untrusted"
    )  # Python shows the server the leaf only
    assert checker(tmp_path, intermediate).check(leaf.der).problem == "certificate-untrusted"  # no self-signed end


@pytest.mark.parametrize("case", ["another-ca", "same-name-other-key", "not-der"])
def test_anything_the_current_file_does_not_vouch_for_is_untrusted(tmp_path: Path, root: Issued, case: str) -> None:
    if case == "another-ca":
        der = issue("client", issue("stranger", None, ca=True), ca=False).der
    elif case == "same-name-other-key":
        der = issue("client", issue("root", None, ca=True), ca=False).der  # a CA named like ours, signed by another key
    else:
        der = b"\x30\x03junk"
    assert checker(tmp_path, root).check(der).problem == "certificate-untrusted"


def test_a_rotated_ca_file_is_read_again(tmp_path: Path, root: Issued) -> None:
    leaf = issue("client", root, ca=False)
    check = checker(tmp_path, root)
    assert check.check(leaf.der).problem == ""
    path = tmp_path / "client-ca.crt"
    staging = tmp_path / "new.crt"
    staging.write_bytes(issue("new root", None, ca=True).pem)
    os.replace(staging, path)
    later = time.time() + 5
    os.utime(path, (later, later))
    assert check.check(leaf.der).problem == "certificate-untrusted"


def test_a_ca_file_that_stops_loading_keeps_the_last_good_one(tmp_path: Path, root: Issued) -> None:
    leaf = issue("client", root, ca=False)
    check = checker(tmp_path, root)
    assert check.check(leaf.der).problem == ""
    path = tmp_path / "client-ca.crt"
    path.write_bytes(b"-----BEGIN CERTIFICATE-----\nhalf written")
    later = time.time() + 5
    os.utime(path, (later, later))
    assert (
        check.check(leaf.der).problem == ""
    )  # as the TLS context does: the previous CA stays until a good file arrives


def test_a_missing_ca_file_trusts_nobody(tmp_path: Path, root: Issued) -> None:
    leaf = issue("client", root, ca=False)
    assert ClientCertificates(str(tmp_path / "missing.crt")).check(leaf.der).problem == "certificate-untrusted"


def test_a_ca_file_that_does_not_load_is_read_again_only_once_it_changes(
    tmp_path: Path, root: Issued, caplog: pytest.LogCaptureFixture
) -> None:
    """A bad file is not read, parsed and logged again on every request; a new one is read at once."""
    leaf = issue("client", root, ca=False)
    path = tmp_path / "client-ca.crt"
    path.write_bytes(b"-----BEGIN CERTIFICATE-----\nhalf written")
    check = ClientCertificates(str(path), clock=NOW.timestamp)
    with caplog.at_level(logging.ERROR):
        for _ in range(5):
            assert check.check(leaf.der).problem == "certificate-untrusted"
    assert len([r for r in caplog.records if "does not load" in r.getMessage()]) == 1
    path.write_bytes(root.pem)
    later = time.time() + 5
    os.utime(path, (later, later))
    assert check.check(leaf.der).problem == ""
