"""Who may call, on the real server with mutual TLS: names, expiry, resumed sessions, a rotated client CA.

* Authorization: of the certificates the client CA issued, only those whose
  DNS SAN or CN is a configured caller may call (403 and a log line otherwise).
  The server here trusts its own CA and the callers are the shipped default
  for Gatekeeper (:data:`provider.service.config.GATEKEEPER_CALLER`); ``/metrics`` has
  its own rule, here the test's own client (``cert:client``, a scraper) only.
* An expired certificate stops working on every request: on a connection kept
  alive from before it expired, and on a new connection that offers the TLS
  session it had (a TLS 1.3 ticket, a TLS 1.2 ticket or session ID). Before,
  a resumed TLS 1.3 session was served 200 after the certificate expired, and
  every resumption issued a new ticket.
* A kept-alive connection from a client of a CA the server no longer trusts
  (the client CA file was rotated) is refused.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from prometheus_client.parser import text_string_to_metric_families

from provider.service.config import GATEKEEPER_CALLER
from tests.support import server as server_module
from tests.support.pki import OwnPki
from tests.support.server import Server, running_server

pytestmark = pytest.mark.integration

GATEKEEPER_NAME = GATEKEEPER_CALLER.removeprefix("cert:")
EMPTY_REQUEST = json.dumps({"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest",
                            "request": {"keys": []}}).encode()  # fmt: skip
ENV = {"MANIFEST_PROVIDER_CALLERS": GATEKEEPER_CALLER, "MANIFEST_PROVIDER_METRICS_CALLERS": "cert:client"}
#: Seconds a short-lived client certificate stays valid (whole seconds: X.509 times have no fractions).
SHORT_LIFE = 3


def issue(
    own: OwnPki, directory: Path, stem: str, *, cn: str | None, dns: list[str], life: float = 86400.0
) -> tuple[Path, Path]:
    """A client certificate from ``own``'s CA with this CN and these DNS SANs, valid ``life`` seconds from now."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, cn)] if cn else [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "test")]
    )
    builder = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(own.ca.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(seconds=life))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    )  # fmt: skip
    if dns:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False)
    cert = builder.sign(own.ca_key, hashes.SHA256())
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.fixture(scope="module")
def own_ca_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, OwnPki]]:
    own = OwnPki.make(tmp_path_factory.mktemp("callers-ca"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(server_module, "make_dev_pki", lambda _directory: own.pki)
        # One worker: a resumed session must reach the process whose session cache or ticket key made it.
        with running_server(args=("--workers", "1"), env=ENV) as started:
            yield started, own


def client_context(server: Server, cert: Path, key: Path, *, tls: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3,
                   tickets: bool = True) -> ssl.SSLContext:  # fmt: skip
    context = server.ssl_context(client_cert=False)
    context.load_cert_chain(str(cert), str(key))
    context.maximum_version = tls
    if not tickets:
        context.options |= ssl.OP_NO_TICKET  # TLS 1.2: ask for session-ID resumption instead
    return context


def call(tls: ssl.SSLSocket, path: str = "/v1/gatekeeper/verify") -> int:
    """One request on an open TLS connection (kept alive): POST to the verify routes, GET elsewhere; the status."""
    if path.startswith("/v1/"):
        tls.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(EMPTY_REQUEST)}\r\n\r\n".encode()
            + EMPTY_REQUEST
        )
    else:
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = tls.recv(4096)
        if not chunk:
            raise ConnectionError("closed before an answer")
        head += chunk
    status_line, _, rest = head.partition(b"\r\n")
    length = int(
        next(line.split(b":")[1] for line in rest.split(b"\r\n") if line.lower().startswith(b"content-length"))
    )
    body = head.split(b"\r\n\r\n", 1)[1]
    while len(body) < length:
        body += tls.recv(4096)
    return int(status_line.split()[1])


def connect(server: Server, context: ssl.SSLContext, session: ssl.SSLSession | None = None) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return context.wrap_socket(raw, server_hostname="127.0.0.1", session=session)


def status_or_refused(server: Server, context: ssl.SSLContext, session: ssl.SSLSession | None) -> tuple[str, bool]:
    """What a new connection offering ``session`` gets: ``"refused"`` (handshake failed) or the HTTP status; and whether it resumed."""
    try:
        tls = connect(server, context, session)
    except (ssl.SSLError, OSError):
        return "refused", False
    try:
        return str(call(tls)), tls.session_reused
    except (
        ssl.SSLError,
        OSError,
    ):  # TLS 1.3: the server's verdict on the certificate arrives after the client's handshake
        return "refused", tls.session_reused
    finally:
        tls.close()


def refusals(server: Server, reason: str) -> float:
    status, _, body = server.get("/metrics")
    assert status == 200, body[:200]
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == "manifest_provider_auth_refusals_total" and sample.labels.get("reason") == reason:
                return sample.value
    return 0.0


# --- names ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cn", "dns", "expected"),
    [
        (GATEKEEPER_NAME, [GATEKEEPER_NAME], 200),  # what Gatekeeper's cert-controller issues
        (None, [GATEKEEPER_NAME], 200),
        (GATEKEEPER_NAME, [], 200),
        ("intruder", [], 403),
        ("intruder", ["intruder.gatekeeper-system.svc"], 403),
        ("gatekeeper-webhook-service.evil-ns.svc", ["gatekeeper-webhook-service.evil-ns.svc"], 403),
        (f"{GATEKEEPER_NAME}.", [f"{GATEKEEPER_NAME}."], 403),
    ],
    ids=["gatekeeper", "san-only", "cn-only", "other-name", "other-service", "other-namespace", "trailing-dot"],
)
def test_only_a_configured_name_from_the_client_ca_may_call(own_ca_server: tuple[Server, OwnPki], tmp_path: Path,
                                                            cn: str | None, dns: list[str], expected: int) -> None:  # fmt: skip
    server, own = own_ca_server
    cert, key = issue(own, tmp_path, "client", cn=cn, dns=dns)
    offset = len(server.log_text())
    with connect(server, client_context(server, cert, key)) as tls:
        assert call(tls) == expected
    with connect(server, client_context(server, cert, key)) as tls:  # a refusal closes the connection
        assert call(tls, "/metrics") == 403  # /metrics's own rule: not the verify routes' callers
    assert server.get("/metrics")[0] == 200  # but the scraper it names
    if expected == 403:
        records = [r for r in server.log_records() if r.get("message") == "caller refused"]
        assert any(r["reason"] == "caller-not-allowed" and r["status"] == 403 for r in records)
        assert f"cert:{cn}" in server.log_text()[offset:] if cn else True


# --- expiry -----------------------------------------------------------------------------


def test_an_expired_certificate_stops_working_on_a_kept_alive_connection(
    own_ca_server: tuple[Server, OwnPki], tmp_path: Path
) -> None:
    server, own = own_ca_server
    cert, key = issue(own, tmp_path, "short", cn=GATEKEEPER_NAME, dns=[GATEKEEPER_NAME], life=SHORT_LIFE)
    before = refusals(server, "certificate-expired")
    with connect(server, client_context(server, cert, key)) as tls:
        assert call(tls) == 200
        time.sleep(SHORT_LIFE + 1.5)
        assert call(tls) == 401
    assert refusals(server, "certificate-expired") == before + 1


@pytest.mark.parametrize(
    ("version", "tickets"),
    [(ssl.TLSVersion.TLSv1_3, True), (ssl.TLSVersion.TLSv1_2, True), (ssl.TLSVersion.TLSv1_2, False)],
    ids=["tls-1.3-ticket", "tls-1.2-ticket", "tls-1.2-session-id"],
)
def test_an_expired_certificate_does_not_work_on_a_resumed_session(own_ca_server: tuple[Server, OwnPki], tmp_path: Path,
                                                                   version: ssl.TLSVersion, tickets: bool) -> None:  # fmt: skip
    """The first connection stays open: OpenSSL drops a session from its cache when its connection ends without a TLS close."""
    server, own = own_ca_server
    cert, key = issue(own, tmp_path, "short", cn=GATEKEEPER_NAME, dns=[GATEKEEPER_NAME], life=SHORT_LIFE)
    context = client_context(server, cert, key, tls=version, tickets=tickets)
    with connect(server, context) as first:
        assert call(first) == 200
        session = first.session  # read after an answer: TLS 1.3 tickets arrive after the handshake
        valid_until = x509.load_pem_x509_certificate(cert.read_bytes()).not_valid_after_utc.timestamp()
        time.sleep(max(0.0, valid_until - time.time()) + 1.5)
        outcome, resumed = status_or_refused(server, context, session)
    assert outcome in ("refused", "401")
    if not tickets:
        # TLS 1.2 session IDs are resumed (Python offers no switch for the server's session cache):
        # the session skipped certificate verification, and the per-request check refused it.
        assert resumed and outcome == "401"


def test_the_server_issues_no_session_tickets(own_ca_server: tuple[Server, OwnPki], tmp_path: Path) -> None:
    """Neither Gatekeeper's nor Kyverno's client keeps a session cache: tickets would cost every full handshake for nothing.

    TLS 1.3 has no other way to resume, so a TLS 1.3 client (Gatekeeper's minimum) never resumes.
    """
    server, own = own_ca_server
    cert, key = issue(own, tmp_path, "client", cn=GATEKEEPER_NAME, dns=[GATEKEEPER_NAME])
    for version in (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2):
        context = client_context(server, cert, key, tls=version)
        with connect(server, context) as tls:
            assert call(tls) == 200
            session = tls.session
            assert session is not None and not session.has_ticket, version
        if version == ssl.TLSVersion.TLSv1_3:
            with connect(server, context, session) as again:
                assert call(again) == 200 and not again.session_reused


# --- a rotated client CA ------------------------------------------------------------------


def test_a_kept_alive_connection_of_a_ca_no_longer_trusted_is_refused(tmp_path: Path) -> None:
    own, other = OwnPki.make(tmp_path / "first"), OwnPki.make(tmp_path / "second")
    cert, key = issue(own, tmp_path, "client", cn=GATEKEEPER_NAME, dns=[GATEKEEPER_NAME])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(server_module, "make_dev_pki", lambda _directory: own.pki)
        with running_server(args=("--workers", "1"), env=ENV) as server:
            with connect(server, client_context(server, cert, key)) as tls:
                assert call(tls) == 200
                staging = own.pki.ca_cert.with_suffix(".new")
                staging.write_bytes(other.pki.ca_cert.read_bytes())
                os.replace(staging, own.pki.ca_cert)  # Gatekeeper's cert-controller rotated its CA
                later = time.time() + 5
                os.utime(own.pki.ca_cert, (later, later))
                assert call(tls) == 401
            assert any(r.get("reason") == "certificate-untrusted" for r in server.log_records())
