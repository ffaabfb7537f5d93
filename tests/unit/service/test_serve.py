"""Serving: the gunicorn options, TLS settings, refusing to start without a certificate, the CLI, dev certificates and samples."""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import socket
import ssl
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from gunicorn.workers.gthread import ThreadWorker

from provider.cli import build_parser
from provider.cli import serve as serve_command
from provider.errors import ConfigError
from provider.service.app import create_app
from provider.service.config import load_config
from provider.service.dev import curl_command, write_samples
from provider.service.devcerts import CLIENT_NAME, DevPki, make_dev_pki
from provider.service.serve import (
    TLS12_CIPHERS,
    _RotatingContext,
    bind_address,
    check_serving,
    gunicorn_options,
    metrics_port,
    tls_context,
)
from provider.service.worker import GuardedThreadWorker


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> DevPki:
    return make_dev_pki(tmp_path_factory.mktemp("pki"))


# --- TLS --------------------------------------------------------------------------


def test_tls_context_refuses_anything_older_than_tls_1_2(pki: DevPki) -> None:
    context = tls_context(str(pki.server_cert), str(pki.server_key))
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE
    assert all(c["name"].startswith("ECDHE-") or c["protocol"] == "TLSv1.3" for c in context.get_ciphers())
    assert TLS12_CIPHERS == "ECDHE+AESGCM:ECDHE+CHACHA20"


def test_tls_context_with_a_client_ca_asks_for_certificates(pki: DevPki) -> None:
    context = tls_context(str(pki.server_cert), str(pki.server_key), str(pki.ca_cert))
    assert context.verify_mode == ssl.CERT_OPTIONAL  # required by the app on every route but the probes
    assert context.cert_store_stats()["x509_ca"] == 1


@pytest.mark.parametrize("broken", ["cert", "key", "client_ca"])
def test_unusable_tls_files_are_config_errors(pki: DevPki, tmp_path: Path, broken: str) -> None:
    files = {"cert": str(pki.server_cert), "key": str(pki.server_key), "client_ca": str(pki.ca_cert)}
    files[broken] = str(tmp_path / "missing.pem")
    with pytest.raises(ConfigError, match="TLS: cannot load"):
        tls_context(files["cert"], files["key"], files["client_ca"])


def test_the_tls_context_is_shared_and_rebuilt_when_a_file_changes(tmp_path: Path) -> None:
    pki = make_dev_pki(tmp_path / "rotating")
    rotating = _RotatingContext(str(pki.server_cert), str(pki.server_key), None)
    first = rotating.get()
    assert rotating.hook(None, ssl.create_default_context) is first
    fresh = make_dev_pki(tmp_path / "fresh")
    os.replace(fresh.server_cert, pki.server_cert)
    os.replace(fresh.server_key, pki.server_key)
    later = time.time() + 5
    os.utime(pki.server_cert, (later, later))
    second = rotating.get()
    assert second is not first
    pki.server_key.write_text("not a key")  # a rotation gone wrong: keep serving with what works
    os.utime(pki.server_key, (later + 5, later + 5))
    assert rotating.get() is second


def test_a_worker_whose_first_connection_meets_a_broken_rotation_serves_the_start_certificate(tmp_path: Path) -> None:
    """The context is built before gunicorn forks: a worker never has to build its first one from bad files."""
    pki = make_dev_pki(tmp_path / "start")
    rotating = _RotatingContext(str(pki.server_cert), str(pki.server_key), str(pki.ca_cert))
    worker = copy.copy(rotating)  # what a forked worker holds before its first connection
    pki.server_cert.write_text("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
    later = time.time() + 5
    os.utime(pki.server_cert, (later, later))
    context = worker.hook(None, ssl.create_default_context)
    assert context.get_ca_certs() and context.minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(ConfigError, match="TLS: cannot load"):
        _RotatingContext(str(pki.server_cert), str(pki.server_key), None)  # at start, bad files stop the server


# --- refusing to start ------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({}, "HTTPS only: give --cert and --key"),
        ({"CERT": "/c.pem"}, "HTTPS only"),
        ({"UNSAFE_HTTP": True, "CERT": "/c.pem"}, "not both"),
    ],
    ids=["nothing", "cert-without-key", "unsafe-http-and-cert"],
)
def test_the_server_refuses_to_start_without_tls(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_serving(load_config(overrides, {}))


def test_unsafe_http_needs_no_certificate() -> None:
    check_serving(load_config({"UNSAFE_HTTP": True}, {}))


# --- gunicorn options -------------------------------------------------------------


def test_gunicorn_runs_gthread_workers_preloaded_with_tls(pki: DevPki) -> None:
    config = load_config({"CERT": str(pki.server_cert), "KEY": str(pki.server_key), "CLIENT_CA": str(pki.ca_cert),
                          "WORKERS": 3, "THREADS": 5, "BIND": "127.0.0.1", "PORT": 9443}, {})  # fmt: skip
    options = gunicorn_options(config)
    assert issubclass(options["worker_class"], ThreadWorker) and issubclass(
        options["worker_class"], GuardedThreadWorker
    )
    assert options["worker_class"].head_timeout == config.head_timeout_seconds
    assert options["worker_class"].body_timeout == config.deadline_seconds
    assert (
        options["workers"] == 3 and options["threads"] == 5 and options["worker_connections"] == config.max_connections
    )
    assert options["preload_app"] is True and options["accesslog"] is None
    assert options["bind"] == ["127.0.0.1:9443"]
    assert options["certfile"] == str(pki.server_cert) and options["ca_certs"] == str(pki.ca_cert)
    assert options["cert_reqs"] == ssl.CERT_OPTIONAL
    assert options["ssl_context"](None, None).minimum_version == ssl.TLSVersion.TLSv1_2
    assert options["control_socket_disable"] is True
    # the same parser whatever else is installed (gunicorn's "auto" picks gunicorn_h1c when present)
    assert options["http_parser"] == "python"


def test_the_gthread_internals_the_worker_extends_are_there() -> None:
    """provider/service/worker.py builds on these; a gunicorn that renames them must fail here, not under load."""
    from gunicorn.http.unreader import Unreader
    from gunicorn.workers import gthread

    for name in ("enqueue_req", "finish_request", "murder_pending", "on_client_socket_readable", "_keepalive_after",
                 "handle_request", "accept", "handle"):  # fmt: skip
        assert callable(getattr(gthread.ThreadWorker, name)), name
    assert all(callable(getattr(gthread.TConn, name)) for name in ("init", "set_timeout", "close"))
    assert callable(Unreader.take_buffered) and callable(Unreader.unread)


def test_unsafe_http_options_carry_no_tls() -> None:
    options = gunicorn_options(load_config({"UNSAFE_HTTP": True}, {}))
    assert "certfile" not in options and "ssl_context" not in options


@pytest.mark.parametrize(
    ("bind", "port", "expected"),
    [
        ("0.0.0.0", 8443, "0.0.0.0:8443"),
        ("::", 8443, "[::]:8443"),
        ("fd://3", 8443, "fd://3"),
        ("unix:/run/p.sock", 1, "unix:/run/p.sock"),
    ],
    ids=["ipv4", "ipv6", "inherited-socket", "unix-socket"],
)
def test_bind_address(bind: str, port: int, expected: str) -> None:
    assert bind_address(load_config({"BIND": bind, "PORT": port}, {})) == expected


# --- the serve command ------------------------------------------------------------


def test_serve_flags_become_settings_and_unset_flags_leave_the_environment_alone() -> None:
    args = build_parser().parse_args(["serve", "--port", "9443", "--cert", "c.pem", "--key", "k.pem", "--client-ca", "ca.pem",
                                      "--workers", "2", "--deadline-seconds", "1.5", "--unsafe-http"])  # fmt: skip
    assert serve_command.overrides(args) == {
        "PORT": 9443, "CERT": "c.pem", "KEY": "k.pem", "CLIENT_CA": "ca.pem", "WORKERS": 2, "DEADLINE_SECONDS": 1.5, "UNSAFE_HTTP": True,
    }  # fmt: skip
    assert serve_command.overrides(build_parser().parse_args(["serve"])) == {}


def test_every_serve_flag_names_its_environment_variable_and_is_a_setting() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    serve_command.register(sub)
    help_text = sub.choices["serve"].format_help()
    for flag, setting, *_ in serve_command.FLAGS:
        assert flag in help_text and f"MANIFEST_PROVIDER_{setting.upper()}" in help_text
        load_config({setting.upper(): None}, {})  # a known setting


# --- dev certificates and samples -------------------------------------------------


def test_dev_certificates_are_for_loopback_and_their_purposes(pki: DevPki) -> None:
    server = x509.load_pem_x509_certificate(pki.server_cert.read_bytes())
    client = x509.load_pem_x509_certificate(pki.client_cert.read_bytes())
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(a) for a in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert list(server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH
    ]
    assert list(client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH
    ]
    assert client.subject.rfc4514_string().startswith(f"CN={CLIENT_NAME}")
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    server.verify_directly_issued_by(ca)
    client.verify_directly_issued_by(ca)
    assert pki.server_key.stat().st_mode & 0o777 == 0o600 and pki.client_key.stat().st_mode & 0o777 == 0o600


def test_dev_samples_verify_through_both_routes(tmp_path: Path) -> None:
    paths = write_samples(tmp_path)
    client = create_app({"TESTING": True, "LOG_LEVEL": "warning"}).test_client()
    kyverno = client.post("/v1/kyverno/verify", data=paths["kyverno"].read_bytes()).get_json()
    assert (kyverno["allowed"], kyverno["reason"]) == (True, "verified")
    gatekeeper = client.post("/v1/gatekeeper/verify", data=paths["gatekeeper"].read_bytes()).get_json()
    assert gatekeeper["response"]["items"][0]["value"]["reason"] == "verified"
    assert "cosign.sigstore.dev/signature" in paths["signed sample"].read_text()
    assert json.loads(paths["kyverno"].read_text())["policy"]["keys"] == [paths["public key"].read_text()]


def test_the_printed_curl_names_the_dev_certificates(pki: DevPki, tmp_path: Path) -> None:
    text = curl_command(pki, tmp_path / "body.json", "/v1/kyverno/verify", 8443)
    assert text.startswith("curl --cacert ")
    for part in (
        str(pki.ca_cert),
        str(pki.client_cert),
        str(pki.client_key),
        "https://127.0.0.1:8443/v1/kyverno/verify",
        "--data-binary",
    ):
        assert part in text


def test_a_metrics_port_that_is_taken_stops_the_server_naming_the_port_and_the_way_out() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        config = load_config({"METRICS_PORT": port, "METRICS_BIND": "127.0.0.1"}, {})
        with pytest.raises(ConfigError, match=f"port {port}.*--metrics-port.*--no-metrics-port"):
            metrics_port(config)
    assert metrics_port(load_config({"METRICS_PORT": 0}, {})) is None


def test_rotated_files_that_do_not_load_are_tried_again_only_once_they_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Not read, parsed and logged on every new connection while the bad files stay."""
    pki = make_dev_pki(tmp_path / "rotating")
    rotating = _RotatingContext(str(pki.server_cert), str(pki.server_key), None)
    first = rotating.get()
    pki.server_key.write_text("not a key")
    later = time.time() + 5
    os.utime(pki.server_key, (later, later))
    with caplog.at_level(logging.ERROR):
        assert all(rotating.get() is first for _ in range(5))
    assert len([r for r in caplog.records if "do not load" in r.getMessage()]) == 1
    fresh = make_dev_pki(tmp_path / "fresh")
    os.replace(fresh.server_cert, pki.server_cert)
    os.replace(fresh.server_key, pki.server_key)
    os.utime(pki.server_cert, (later + 5, later + 5))
    os.utime(pki.server_key, (later + 5, later + 5))
    assert rotating.get() is not first
