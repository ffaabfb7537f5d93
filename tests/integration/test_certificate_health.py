"""Certificate health on the real server (gunicorn, TLS, client certificates): start, rotation, ``/readyz``, the gauge.

* Expired, mismatched and dead-CA material stops ``manifest-provider serve`` with
  exit 2 and one line naming the file (and the date).
* A certificate about to expire, or not valid yet, starts with a warning naming
  the file and the date; the not-yet-valid one is served but not ready.
* A rotation to an expired certificate while running keeps the previous one.
* A served certificate that expires while running makes ``/readyz`` answer 503;
  the server keeps serving, as a kubelet's probe (which does not verify) sees.
* ``manifest_provider_certificate_expiry_timestamp_seconds`` shows each file's
  certificates, the CA bundle's included, from the first scrape.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import http.client
import json
import os
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from prometheus_client.parser import text_string_to_metric_families

from tests.support import server as server_module
from tests.support.pki import OwnPki, certificate
from tests.support.server import Server, command, running_server

pytestmark = pytest.mark.integration

EXPIRY = "manifest_provider_certificate_expiry_timestamp_seconds"
DAY = datetime.timedelta(days=1)


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def stamp(when: datetime.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def whole_seconds(when: datetime.datetime) -> datetime.datetime:
    return when.replace(microsecond=0)  # X.509 dates have whole seconds


@pytest.fixture
def own(tmp_path: Path) -> OwnPki:
    return OwnPki.make(tmp_path / "pki")


@contextlib.contextmanager
def serving(own: OwnPki, until: str = "ready") -> Iterator[Server]:
    """The real server with ``own``'s files (one worker, so every connection meets the same process)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(server_module, "make_dev_pki", lambda _directory: own.pki)
        with running_server(
            args=("--workers", "1"), env={"MANIFEST_PROVIDER_CALLERS": "cert:client"}, until=until
        ) as s:
            yield s


def serve_once(*args: str) -> subprocess.CompletedProcess[str]:
    """``manifest-provider serve`` that is expected to stop at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MANIFEST_PROVIDER_")}
    return subprocess.run(
        [*command(), "serve", "--bind", "127.0.0.1", "--port", str(port), "--no-metrics-port", *args],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip


def unverified(server: Server, path: str) -> tuple[int, dict[str, object]]:
    """GET ``path`` as a kubelet probe does: TLS without verifying the server's certificate, no client certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def presented(server: Server) -> str:
    """SHA-256 of the certificate the server presents now (not verified: it may be outside its dates)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


def fingerprint(path: Path) -> str:
    der = x509.load_pem_x509_certificate(path.read_bytes()).public_bytes(serialization.Encoding.DER)
    return hashlib.sha256(der).hexdigest()


def expiry_gauge(server: Server) -> dict[tuple[str, str, str, str], float]:
    conn = http.client.HTTPConnection("127.0.0.1", server.metrics_port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return {
        (s.labels["file"], s.labels["role"], s.labels["index"], s.labels["subject"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == EXPIRY
    }


def replace(target: Path, data: bytes) -> None:
    """Write ``data`` as a Secret update lands: a new file renamed into place."""
    staging = target.with_suffix(".new")
    staging.write_bytes(data)
    os.replace(staging, target)


# --- refusing to start ------------------------------------------------------------------------


def test_an_expired_serving_certificate_stops_serve_with_exit_2_and_one_line(own: OwnPki, tmp_path: Path) -> None:
    expired_at = whole_seconds(now() - 30 * DAY)
    cert, key = own.issue_server(tmp_path, "expired", (expired_at - 60 * DAY, expired_at))
    proc = serve_once("--cert", str(cert), "--key", str(key))
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("manifest-provider serve: TLS: the certificate ")
    assert str(cert) in line and f"expired on {stamp(expired_at)}" in line


def test_a_certificate_and_a_key_that_do_not_belong_together_stop_serve_with_exit_2(
    own: OwnPki, tmp_path: Path
) -> None:
    cert, _ = own.issue_server(tmp_path, "one", (now() - DAY, now() + 80 * DAY))
    _, other_key = own.issue_server(tmp_path, "other", (now() - DAY, now() + 80 * DAY))
    proc = serve_once("--cert", str(cert), "--key", str(other_key))
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert str(cert) in line and str(other_key) in line and "belong together" in line


def test_a_client_ca_whose_every_certificate_expired_stops_serve_with_exit_2(own: OwnPki, tmp_path: Path) -> None:
    expired_at = whole_seconds(now() - 2 * DAY)
    key = ec.generate_private_key(ec.SECP256R1())
    dead_ca = tmp_path / "dead-ca.crt"
    dead_ca.write_bytes(
        certificate("old CA", key, None, key, valid=(expired_at - 300 * DAY, expired_at)).public_bytes(
            serialization.Encoding.PEM
        )
    )
    proc = serve_once("--cert", str(own.pki.server_cert), "--key", str(own.pki.server_key), "--client-ca", str(dead_ca))
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"client CA {dead_ca} expired on {stamp(expired_at)}" in line


# --- starting with a warning ------------------------------------------------------------------


def test_a_certificate_about_to_expire_is_warned_about_served_ready_and_on_the_gauge(own: OwnPki) -> None:
    expires = whole_seconds(now() + 3 * DAY)
    own.issue_server(own.pki.directory, "server", (now() - DAY, expires))
    with serving(own) as server:
        warnings = [r["message"] for r in server.log_records() if r.get("level") == "warning"]
        # One line for the server's certificate (the test CA, which lives a day, gets its own).
        (warning,) = [w for w in warnings if "expires on" in w and str(own.pki.server_cert) in w]
        assert stamp(expires) in warning and "in 3.0 days" in warning
        assert unverified(server, "/readyz") == (200, {"status": "ready"})
        gauge = expiry_gauge(server)
    assert gauge == {
        (str(own.pki.server_cert), "serving", "0", "CN=localhost"): expires.timestamp(),
        (str(own.pki.ca_cert), "client-ca", "0", "CN=test CA"): own.ca.not_valid_after_utc.timestamp(),
    }


def test_a_certificate_not_yet_valid_is_served_but_not_ready(own: OwnPki) -> None:
    starts = whole_seconds(now() + DAY)
    own.issue_server(own.pki.directory, "server", (starts, starts + 80 * DAY))
    with serving(own, until="listening") as server:
        assert unverified(server, "/readyz") == (503, {"status": "not ready", "reason": "certificate-not-yet-valid"})
        assert unverified(server, "/healthz") == (200, {"status": "ok"})  # still serving
        assert presented(server) == fingerprint(own.pki.server_cert)
        messages = [r["message"] for r in server.log_records()]
        assert any(str(own.pki.server_cert) in m and f"not valid before {stamp(starts)}" in m for m in messages)


# --- while running ------------------------------------------------------------------------------


def test_a_rotation_to_an_expired_certificate_keeps_the_previous_one(own: OwnPki, tmp_path: Path) -> None:
    with serving(own) as server:
        good = presented(server)
        expired_at = whole_seconds(now() - 5 * DAY)
        cert, key = own.issue_server(tmp_path, "expired", (expired_at - 60 * DAY, expired_at))
        replace(own.pki.server_key, key.read_bytes())
        replace(own.pki.server_cert, cert.read_bytes())
        for _ in range(3):
            assert presented(server) == good
        assert unverified(server, "/readyz") == (200, {"status": "ready"})
        deadline = time.monotonic() + 10  # the worker looks at the files once a second, connection or not
        while time.monotonic() < deadline and not [r for r in server.log_records() if r.get("level") == "error"]:
            time.sleep(0.2)
        (error,) = [r for r in server.log_records() if r.get("level") == "error"]
        assert error["message"] == "new certificate files do not load; serving with the previous ones"
        assert f"{own.pki.server_cert} expired on {stamp(expired_at)}" in error["detail"]
        # The gauge reads the file: the expired date is there for an alert to see.
        gauge = expiry_gauge(server)
        assert gauge[(str(own.pki.server_cert), "serving", "0", "CN=localhost")] == expired_at.timestamp()


#: Seconds the short-lived certificate is valid after it is written: one handshake must reach the
#: worker in that time (it reloads on its next connection), far more than one takes on a busy machine.
SHORT_LIFE = 15


def test_readyz_fails_once_the_served_certificate_expires_and_the_server_keeps_serving(
    own: OwnPki, tmp_path: Path
) -> None:
    with serving(own) as server:
        expires = whole_seconds(now()) + datetime.timedelta(seconds=SHORT_LIFE)
        cert, key = own.issue_server(tmp_path, "short", (now() - DAY, expires))
        replace(own.pki.server_key, key.read_bytes())
        replace(own.pki.server_cert, cert.read_bytes())
        assert presented(server) == fingerprint(cert), "the rotation was not taken before the certificate expired"
        assert unverified(server, "/readyz") == (200, {"status": "ready"})
        time.sleep(max(0.0, (expires - now()).total_seconds()) + 1.5)
        assert unverified(server, "/readyz") == (503, {"status": "not ready", "reason": "certificate-expired"})
        assert unverified(server, "/healthz") == (200, {"status": "ok"})
        assert presented(server) == fingerprint(cert)  # still serving it
        (record,) = [r for r in server.log_records() if r.get("message") == "not ready"][:1]
        assert record["reason"] == "certificate-expired" and stamp(expires) in record["detail"]
