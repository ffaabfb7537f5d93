"""``manifest-provider verify --signer ... --trusted-root ...``: the real CLI in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.data import REPO, UPSTREAM
from tests.support.keyless import GOOGLE, World
from tests.support.manifests import configmap

pytestmark = pytest.mark.integration

TRUST = str(UPSTREAM / "trust" / "sigstore-public-good-trusted_root.json")
MULTI = str(UPSTREAM / "manifests" / "cm-plain-keyless-multi-signed.yaml")
TARBALL = str(UPSTREAM / "manifests" / "cm-tarball-keyless-signed.yaml")

#: Runs the CLI with every way of opening a connection disabled.
AIR_GAPPED = """
import socket, sys
def refuse(*args, **kwargs):
    raise OSError("network access attempted during verification")
socket.socket = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
from provider.cli import main
sys.exit(main(sys.argv[1:]))
"""


def cli(*args: str, air_gapped: bool = False) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", AIR_GAPPED, *args] if air_gapped else [sys.executable, "-m", "provider.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120, check=False)


def results(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    parsed: list[dict[str, Any]] = json.loads(proc.stdout)["results"]
    return parsed


@pytest.mark.parametrize(
    ("signer", "code", "reason"),
    [
        ("hkitahar@redhat.com", 0, "verified"),
        ("hirokuni.kitahara1@ibm.com,https://github.com/login/oauth", 0, "verified"),
        ("hkitahar@redhat.com,https://github.com/login/oauth", 1, "identity-mismatch"),
        ("someone@example.com", 1, "identity-mismatch"),
    ],
    ids=["subject", "subject-and-issuer", "wrong-issuer", "stranger"],
)
def test_upstream_fixture_offline(signer: str, code: int, reason: str) -> None:
    proc = cli("verify", "-f", MULTI, "--signer", signer, "--trusted-root", TRUST, "-o", "json", air_gapped=True)
    assert proc.returncode == code, proc.stderr
    (result,) = results(proc)
    assert result["reason"] == reason
    if code == 0:
        assert result["signers"][0]["subject"] == signer.split(",", maxsplit=1)[0]


def test_shipped_root_is_the_default() -> None:
    proc = cli("verify", "-f", TARBALL, "--signer", "hirokuni.kitahara1@gmail.com")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("PASS [verified]")
    assert "signed by hirokuni.kitahara1@gmail.com" in proc.stdout


def test_policy_file_with_regexp_and_root_path(tmp_path: Path) -> None:
    config = tmp_path / "policy.yaml"
    config.write_text(
        yaml.safe_dump({"signers": [{"subjectRegExp": r"hirokuni\.kitahara1@(gmail|ibm)\.com"}], "trustedRoot": TRUST})
    )
    proc = cli("verify", "-f", MULTI, "--config", str(config), "-o", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (signer,) = results(proc)[0]["signers"]
    assert signer == {
        "subject": "hirokuni.kitahara1@ibm.com",
        "issuer": "https://github.com/login/oauth",
        "key": signer["key"],
    }
    assert signer["key"].startswith("sha256:")  # the certificate's key: who signed, as a threshold counts it


def test_own_world_honest_and_forged(tmp_path: Path) -> None:
    world = World()
    root = tmp_path / "root.json"
    root.write_text(json.dumps(world.trusted_root()))
    honest = world.sign(configmap("honest"))
    key, cert = world.forged_leaf(email="jane@example.com")
    forged = world.sign(configmap("forged"), key=key, cert=cert)
    manifests = tmp_path / "objects.yaml"
    manifests.write_text(yaml.safe_dump_all([honest, forged]))
    proc = cli(
        "verify",
        "-f",
        str(manifests),
        "--signer",
        f"jane@example.com,{GOOGLE}",
        "--trusted-root",
        str(root),
        "-o",
        "json",
        air_gapped=True,
    )
    assert proc.returncode == 1, proc.stderr
    assert [r["reason"] for r in results(proc)] == ["verified", "certificate-untrusted"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "No such file"),
        ("{not json", "not a TrustedRoot JSON document"),
        ('{"tlogs": []}', "trustedRoot"),
        # Past json's recursion limit and int()'s 4300 digits: their own errors escaped as tracebacks.
        ("[" * 100_000 + "]" * 100_000, "not a TrustedRoot JSON document (the file is nested deeper than 100 levels)"),
        ('{"tlogs": 1' + "0" * 4999 + "}", "(5000 digits) is not finite as a float64"),
    ],
    ids=["missing-file", "not-json", "not-a-trusted-root", "too-deep", "5000-digit-number"],
)
def test_unusable_trusted_root_is_a_usage_error(tmp_path: Path, content: str | None, message: str) -> None:
    root = tmp_path / "root.json"
    if content is not None:
        root.write_text(content)
    proc = cli("verify", "-f", MULTI, "--signer", "hkitahar@redhat.com", "--trusted-root", str(root))
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
