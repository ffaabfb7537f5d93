"""TLS and client certificates on the real server: versions, mutual TLS, and rotation without a restart.

* TLS 1.0 and 1.1 are refused in the handshake (a raw ClientHello gets the
  ``protocol_version`` alert: this does not depend on what the local client library
  still allows); TLS 1.2 is accepted; a client offering 1.3 gets 1.3.
* With a client CA, a certificate the CA did not issue, an expired one it did issue,
  and one issued for servers only all fail the handshake.
* Certificates are rotated in place (cert-manager and kubelet write new files into the
  mounted Secret): the next connection presents the new server certificate and accepts
  only clients of the new CA -- same master, same workers; files that do not load are
  ignored and the previous ones kept.
"""

from __future__ import annotations

import hashlib
import os
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from provider.service.devcerts import make_dev_pki
from tests.support import server as server_module
from tests.support.pki import OwnPki
from tests.support.server import Server, running_server

pytestmark = pytest.mark.integration

#: TLS alert descriptions (RFC 8446 section 6): what the server sends for an old version.
PROTOCOL_VERSION_ALERT = 70
ALERT_RECORD = 0x15


def client_hello(version: int) -> bytes:
    """A minimal ClientHello offering only ``version`` (0x0301 TLS 1.0, 0x0302 TLS 1.1) and ECDHE suites."""
    suites = (0xC02B, 0xC02F, 0xC00A, 0xC009, 0xC014, 0xC013, 0x002F, 0x0035)
    extensions = (
        b"\x00\x0a" + struct.pack(">HHH", 4, 2, 0x0017)  # supported_groups: secp256r1
        + b"\x00\x0b" + struct.pack(">HBB", 2, 1, 0)  # ec_point_formats: uncompressed
    )  # fmt: skip
    body = (
        struct.pack(">H", version) + os.urandom(32) + b"\x00"
        + struct.pack(">H", 2 * len(suites)) + b"".join(struct.pack(">H", s) for s in suites)
        + b"\x01\x00" + struct.pack(">H", len(extensions)) + extensions
    )  # fmt: skip
    handshake = b"\x01" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x01" + struct.pack(">H", len(handshake)) + handshake


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server(args=("--workers", "2")) as started:
        yield started


@pytest.mark.parametrize("version", [0x0301, 0x0302], ids=["tls-1.0", "tls-1.1"])
def test_tls_older_than_1_2_is_refused_with_a_protocol_version_alert(server: Server, version: int) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        raw.sendall(client_hello(version))
        answer = raw.recv(64)
    assert len(answer) >= 7, answer
    assert answer[0] == ALERT_RECORD and answer[5] == 2 and answer[6] == PROTOCOL_VERSION_ALERT, (
        answer.hex()
    )  # fatal, protocol_version


def test_tls_1_2_is_accepted_and_a_client_offering_1_3_gets_1_3(server: Server) -> None:
    only_12 = server.ssl_context()
    only_12.maximum_version = ssl.TLSVersion.TLSv1_2
    with (
        socket.create_connection(("127.0.0.1", server.port)) as raw,
        only_12.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.version() == "TLSv1.2"
    with (
        socket.create_connection(("127.0.0.1", server.port)) as raw,
        server.ssl_context().wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.version() == "TLSv1.3"


# --- mutual TLS ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def own_ca_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, OwnPki]]:
    own = OwnPki.make(tmp_path_factory.mktemp("own-ca"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(server_module, "make_dev_pki", lambda _directory: own.pki)
        with running_server(
            args=("--workers", "1"), env={"MANIFEST_PROVIDER_CALLERS": "cert:intruder,cert:client"}
        ) as started:
            yield started, own


def handshake_with(server: Server, cert: Path, key: Path) -> int:
    """Status of GET /metrics with this client certificate; raises when the handshake fails."""
    context = server.ssl_context(client_cert=False)
    context.load_cert_chain(str(cert), str(key))
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        head = tls.recv(64)
    return int(head.split(b" ", 2)[1])


@pytest.mark.parametrize(("usage", "expired"), [(ExtendedKeyUsageOID.CLIENT_AUTH, False), (ExtendedKeyUsageOID.CLIENT_AUTH, True), (ExtendedKeyUsageOID.SERVER_AUTH, False)],
                         ids=["valid", "expired", "server-only"])  # fmt: skip
def test_only_a_valid_client_certificate_of_the_client_ca_gets_through_the_handshake(
    own_ca_server: tuple[Server, OwnPki], tmp_path: Path, usage: x509.ObjectIdentifier, expired: bool
) -> None:
    server, own = own_ca_server
    cert, key = own.issue_client(tmp_path, usage=usage, expired=expired)
    if usage == ExtendedKeyUsageOID.CLIENT_AUTH and not expired:
        assert handshake_with(server, cert, key) == 200
        return
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        handshake_with(server, cert, key)


def test_without_a_client_certificate_only_the_probes_answer(server: Server) -> None:
    for path, expected in (
        ("/healthz", 200),
        ("/readyz", 200),
        ("/metrics", 401),
        ("/v1/gatekeeper/verify", 401),
        ("/v1/kyverno/verify", 401),
    ):
        method = "POST" if path.startswith("/v1/") else "GET"
        status, _, _ = server.request(method, path, b"{}" if method == "POST" else None, client_cert=False)
        assert status == expected, path


# --- rotation -------------------------------------------------------------------------------


def presented_certificate(port: int, ca: Path, client: tuple[Path, Path]) -> str:
    """SHA-256 of the certificate the server presents, connecting with ``client``'s certificate (trusting ``ca``)."""
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(str(client[0]), str(client[1]))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert tls.recv(64).startswith(b"HTTP/1.1 200")
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


def fingerprint(path: Path) -> str:
    return hashlib.sha256(
        x509.load_pem_x509_certificate(path.read_bytes()).public_bytes(serialization.Encoding.DER)
    ).hexdigest()


def replace(target: Path, data: bytes) -> None:
    """Write ``data`` as cert-manager's Secret update lands: a new file renamed into place."""
    staging = target.with_suffix(".new")
    staging.write_bytes(data)
    os.replace(staging, target)


def test_rotated_certificates_are_used_by_the_next_connection_without_a_restart(tmp_path: Path) -> None:
    with running_server(args=("--workers", "2")) as server:
        old, new = server.pki, make_dev_pki(tmp_path / "new")
        master = psutil.Process(server.pid)
        deadline = time.monotonic() + 30
        while len(master.children()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = sorted(p.pid for p in master.children())
        old_client = (old.client_cert, old.client_key)
        assert presented_certificate(server.port, old.ca_cert, old_client) == fingerprint(old.server_cert)
        kept = (old.ca_cert.read_bytes(), old.client_cert, old.client_key)

        # cert-manager renews: a new server certificate and key, a new CA for clients.
        replace(old.server_key, new.server_key.read_bytes())
        replace(old.server_cert, new.server_cert.read_bytes())
        replace(old.ca_cert, new.ca_cert.read_bytes())
        old_ca = tmp_path / "old-ca.crt"
        old_ca.write_bytes(kept[0])
        for _ in range(4):  # every connection, on whichever worker accepts it
            assert presented_certificate(server.port, new.ca_cert, (new.client_cert, new.client_key)) == fingerprint(
                new.server_cert
            )
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            presented_certificate(
                server.port, new.ca_cert, (kept[1], kept[2])
            )  # the old client CA is no longer trusted
        # Every worker looks at the files once a second, connection or not: after that, each
        # one holds the new certificate, whichever served the connections above.
        time.sleep(2.5)

        # A rotation that writes something unusable changes nothing.
        replace(old.server_cert, b"-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
        assert presented_certificate(server.port, new.ca_cert, (new.client_cert, new.client_key)) == fingerprint(
            new.server_cert
        )
        assert server.pid == master.pid and sorted(p.pid for p in master.children()) == workers
        assert "new certificate files do not load; serving with the previous ones" in server.log_text()
