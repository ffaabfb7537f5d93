"""Certificate health: what the TLS files' dates mean at start, at a reload and for ``/readyz``.

The real server's side (exit 2, the log, the probe, the gauge) is in
tests/integration/test_certificate_health.py; here the judgement itself, with a fixed clock.
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from provider.errors import ConfigError
from provider.service.app import create_app
from provider.service.certificates import MAX_CERTIFICATES_PER_FILE, expiry_series, inspect, readiness_problem
from provider.service.serve import _RotatingContext
from tests.support.pki import OwnPki, certificate

NOW = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)


def window(start_days: float, end_days: float) -> tuple[datetime.datetime, datetime.datetime]:
    return NOW + start_days * DAY, NOW + end_days * DAY


@pytest.fixture
def own(tmp_path: Path) -> OwnPki:
    return OwnPki.make(tmp_path / "pki")


def ca_bundle(path: Path, *windows: tuple[datetime.datetime, datetime.datetime]) -> Path:
    pem = b""
    for index, valid in enumerate(windows):
        key = ec.generate_private_key(ec.SECP256R1())
        pem += certificate(f"CA {index}", key, None, key, valid=valid).public_bytes(serialization.Encoding.PEM)
    path.write_bytes(pem)
    return path


def test_an_expired_serving_certificate_is_fatal_and_names_the_file_and_the_date(own: OwnPki, tmp_path: Path) -> None:
    cert, _ = own.issue_server(tmp_path, "old", window(-90, -30))
    found = inspect(str(cert), None, NOW, 14)
    (line,) = found.fatal
    assert str(cert) in line and "expired on 2026-01-30T12:00:00Z" in line and "\n" not in line
    with pytest.raises(ConfigError, match="expired on 2026-01-30"):
        found.raise_if_fatal()


def test_a_certificate_within_the_margin_is_a_warning_with_its_date(own: OwnPki, tmp_path: Path) -> None:
    cert, _ = own.issue_server(tmp_path, "soon", window(-80, 3))
    found = inspect(str(cert), None, NOW, 14)
    assert not found.fatal
    (line,) = found.warnings
    assert str(cert) in line and "2026-03-04T12:00:00Z" in line and "3.0 days" in line
    assert not inspect(str(cert), None, NOW, 2).warnings  # a smaller margin: nothing to say


def test_a_certificate_not_yet_valid_is_served_with_a_warning_and_is_not_ready(own: OwnPki, tmp_path: Path) -> None:
    cert, _ = own.issue_server(tmp_path, "early", window(1, 90))
    found = inspect(str(cert), None, NOW, 14)
    assert not found.fatal
    (line,) = found.warnings
    assert "not valid before 2026-03-02T12:00:00Z" in line
    assert readiness_problem(found.leaf, NOW) == (
        "certificate-not-yet-valid",
        f"the serving certificate {cert} is not valid before 2026-03-02T12:00:00Z",
    )
    assert readiness_problem(found.leaf, NOW + 2 * DAY) is None
    reason, _ = readiness_problem(found.leaf, NOW + 91 * DAY) or ("", "")
    assert reason == "certificate-expired"


def test_a_client_ca_bundle_is_fatal_only_when_every_certificate_has_expired(own: OwnPki, tmp_path: Path) -> None:
    cert, _ = own.issue_server(tmp_path, "server", window(-1, 80))
    rotating = ca_bundle(tmp_path / "rotating.crt", window(-400, -1), window(-10, 3650))
    found = inspect(str(cert), str(rotating), NOW, 14)
    assert not found.fatal
    (line,) = found.warnings  # the old CA, still in the bundle
    assert "client CA" in line and "certificate 0" not in line and "expired on 2026-02-28T12:00:00Z" in line
    dead = ca_bundle(tmp_path / "dead.crt", window(-400, -2), window(-400, -1))
    found = inspect(str(cert), str(dead), NOW, 14)
    (line,) = found.fatal
    assert f"client CA {dead} expired on 2026-02-28T12:00:00Z" in line
    assert not found.warnings  # said once, in the fatal line


def test_a_ca_bundle_of_more_certificates_than_the_gauge_keeps_is_refused(own: OwnPki, tmp_path: Path) -> None:
    cert, _ = own.issue_server(tmp_path, "server", window(-1, 80))
    big = ca_bundle(tmp_path / "big.crt", *[window(-1, 80)] * (MAX_CERTIFICATES_PER_FILE + 1))
    with pytest.raises(ConfigError, match=f"{big} holds {MAX_CERTIFICATES_PER_FILE + 1} certificates"):
        inspect(str(cert), str(big), NOW, 14)


def test_the_expiry_series_name_each_certificate_of_each_file(own: OwnPki, tmp_path: Path) -> None:
    cert, _ = own.issue_server(tmp_path, "server", window(-1, 80))
    bundle = ca_bundle(tmp_path / "bundle.crt", window(-400, -1), window(-10, 3650))
    series = expiry_series([("serving", str(cert)), ("client-ca", str(bundle)), ("x", str(tmp_path / "gone.crt"))])
    assert [(f, r, i, s) for f, r, i, s, _ in series] == [
        (str(cert), "serving", "0", "CN=localhost"),
        (str(bundle), "client-ca", "0", "CN=CA 0"),
        (str(bundle), "client-ca", "1", "CN=CA 1"),
    ]
    assert series[0][4] == pytest.approx((NOW + 80 * DAY).timestamp())


def _bump(*paths: Path) -> None:
    later = time.time() + 5
    for path in paths:
        os.utime(path, (later, later))


def test_a_reload_to_an_expired_certificate_keeps_the_previous_one(
    own: OwnPki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cert, key = own.issue_server(tmp_path, "live", window(-1, 80))
    rotating = _RotatingContext(str(cert), str(key), None, 14, clock=lambda: NOW)
    first, served = rotating.get(), rotating.served()
    assert served is not None and served.not_after == NOW + 80 * DAY
    own.issue_server(tmp_path, "live", window(-90, -30))  # the same files, now an expired certificate
    _bump(cert, key)
    with caplog.at_level(logging.WARNING, logger="provider.serve"):
        assert rotating.get() is first
    assert rotating.served() == served
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "serving with the previous ones" in record.getMessage()
    assert f"{cert} expired on 2026-01-30T12:00:00Z" in getattr(record, "detail", "")


def test_a_reload_to_a_soon_expiring_certificate_is_taken_and_warned_about(
    own: OwnPki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cert, key = own.issue_server(tmp_path, "live", window(-1, 80))
    with caplog.at_level(logging.WARNING, logger="provider.serve"):
        rotating = _RotatingContext(str(cert), str(key), None, 14, clock=lambda: NOW)
        assert not caplog.records
        first = rotating.get()
        own.issue_server(tmp_path, "live", window(-1, 5))
        _bump(cert, key)
        assert rotating.get() is not first
    served = rotating.served()
    assert served is not None and served.not_after == NOW + 5 * DAY
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and "expires on 2026-03-06T12:00:00Z, in 5.0 days" in record.getMessage()


def test_start_with_an_expired_certificate_is_refused(own: OwnPki, tmp_path: Path) -> None:
    cert, key = own.issue_server(tmp_path, "old", window(-90, -30))
    with pytest.raises(ConfigError, match="expired on"):
        _RotatingContext(str(cert), str(key), None, 14, clock=lambda: NOW)


def test_readyz_fails_once_the_served_certificate_has_expired(own: OwnPki, tmp_path: Path) -> None:
    cert, key = own.issue_server(tmp_path, "live", window(-1, 3))
    rotating = _RotatingContext(str(cert), str(key), None, 14, clock=lambda: NOW)
    settings = {"TESTING": True, "LOG_LEVEL": "error", "SERVING_CERTIFICATES": rotating}
    ready = create_app({**settings, "NOW": NOW}).test_client().get("/readyz")
    assert (ready.status_code, ready.json) == (200, {"status": "ready"})
    later = create_app({**settings, "NOW": NOW + 4 * DAY}).test_client().get("/readyz")
    assert (later.status_code, later.json) == (503, {"status": "not ready", "reason": "certificate-expired"})
