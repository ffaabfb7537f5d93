"""A TLS file that does not load is named in the error, with why; ``make run`` on a busy port says so first."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from provider.errors import ConfigError
from provider.keys.pem import generate_key, private_pem
from provider.service.devcerts import DevPki, make_dev_pki
from provider.service.serve import tls_context
from tests.support.data import REPO


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[DevPki, DevPki, Path]:
    root = tmp_path_factory.mktemp("tls")
    (root / "garbage.pem").write_text("not a PEM file\n")
    (root / "encrypted.key").write_bytes(private_pem(generate_key("ecdsa-p256"), b"pw"))
    return make_dev_pki(root / "a"), make_dev_pki(root / "b"), root


CASES = [
    ("missing-cert", "{root}/nope.crt", "{a.server_key}", None, "the certificate {root}/nope.crt (No such file"),
    ("missing-key", "{a.server_cert}", "{root}/nope.key", None, "the key {root}/nope.key (No such file"),
    ("cert-not-pem", "{root}/garbage.pem", "{a.server_key}", None, "the certificate {root}/garbage.pem (not a PEM"),
    ("key-as-cert", "{a.server_key}", "{a.server_key}", None, "the certificate {a.server_key} (not a PEM"),
    ("key-not-pem", "{a.server_cert}", "{root}/garbage.pem", None, "the key {root}/garbage.pem (not an unencrypted"),
    ("key-encrypted", "{a.server_cert}", "{root}/encrypted.key", None, "the key {root}/encrypted.key (it is encrypted"),
    ("mismatch", "{a.server_cert}", "{b.server_key}", None, "certificate {a.server_cert} with the key {b.server_key}"),
    (
        "missing-ca",
        "{a.server_cert}",
        "{a.server_key}",
        "{root}/nope-ca.crt",
        "the client CA {root}/nope-ca.crt (No such",
    ),
    ("ca-not-pem", "{a.server_cert}", "{a.server_key}", "{root}/garbage.pem", "the client CA {root}/garbage.pem"),
]


@pytest.mark.parametrize(("case", "cert", "key", "ca", "message"), CASES, ids=[c[0] for c in CASES])
def test_the_error_names_the_file_that_failed(
    pki: tuple[DevPki, DevPki, Path], case: str, cert: str, key: str, *, ca: str | None, message: str
) -> None:
    a, b, root = pki

    def fill(text: str) -> str:
        return text.format(a=a, b=b, root=root)

    with pytest.raises(ConfigError) as exc:
        tls_context(fill(cert), fill(key), fill(ca) if ca else None)
    assert exc.value.message.startswith("TLS: cannot load ")
    assert fill(message) in exc.value.message


def test_good_files_still_load(pki: tuple[DevPki, DevPki, Path]) -> None:
    a, _, _ = pki
    tls_context(str(a.server_cert), str(a.server_key), str(a.ca_cert))


# --- make run on a busy port --------------------------------------------------------------------


@pytest.fixture
def busy_port() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


@pytest.mark.integration
def test_make_run_on_a_busy_port_says_so_before_anything_else(busy_port: int, tmp_path: Path) -> None:
    proc = subprocess.run(
        ["make", "--no-print-directory", "run", f"RUN_PORT={busy_port}", f"PYTHON={sys.executable}"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "MANIFEST_PROVIDER_DEV_DIR": str(tmp_path / "dev")},
    )  # fmt: skip
    assert proc.returncode != 0
    first = (proc.stdout + proc.stderr).strip().splitlines()[0]
    assert first.startswith(f"make run: port {busy_port} (the API) on 127.0.0.1 is not free"), proc.stdout + proc.stderr
    assert first.endswith(f"make run RUN_PORT={busy_port + 1}")
    assert "curl" not in proc.stdout + proc.stderr
    assert not (tmp_path / "dev").exists()  # nothing written either


@pytest.mark.integration
def test_the_dev_server_takes_the_port_before_writing_or_printing(busy_port: int, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "provider.service.dev"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "MANIFEST_PROVIDER_PORT": str(busy_port), "MANIFEST_PROVIDER_DEV_DIR": str(tmp_path / "dev")},
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert f"port {busy_port} (the API) on 127.0.0.1 is not free" in proc.stderr
    assert not (tmp_path / "dev").exists()
