"""The real CLI, as a user runs it: interop outcomes, sign/verify round trips, exit codes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.keys.pem import KEY_TYPES, generate_key, public_pem
from tests.support.controlplane import TAMPERINGS, first, stored, tampered
from tests.support.data import KYVERNO, UPSTREAM
from tests.support.gator import review_as_audited
from tests.support.interop_cases import ALL_CASES, Case
from tests.support.live import PUBLIC_KEY
from tests.support.manifests import configmap

pytestmark = pytest.mark.integration


def cli(
    *args: str | Path, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "COLUMNS": "100", **(env or {})}
    for name in ("MANIFEST_PROVIDER_PASSWORD", "COSIGN_PASSWORD"):  # a developer's own must not leak in
        if name not in (env or {}):
            full_env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "provider.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=full_env,
        input=stdin,
        timeout=60,
        check=False,
    )


def results(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return json.loads(proc.stdout)["results"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.id for c in ALL_CASES])
def test_interop_case_through_the_cli(case: Case, tmp_path: Path) -> None:
    args: list[str | Path] = ["verify", "-f", case.file, "-o", "json"]
    for key in case.keys:
        args += ["--key", key]
    if case.config:
        config = tmp_path / "policy.yaml"
        config.write_text(yaml.safe_dump(case.config))
        args += ["--config", config]
    proc = cli(*args)
    assert proc.returncode == (0 if case.reason == "verified" else 1), proc.stderr
    assert {r["reason"] for r in results(proc)} == {case.reason}


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_keygen_sign_verify_round_trip(key_type: str, tmp_path: Path) -> None:
    prefix = tmp_path / "k"
    assert cli("keygen", "--type", key_type, "-o", prefix).returncode == 0
    assert stat.S_IMODE((tmp_path / "k.key").stat().st_mode) == 0o600
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(yaml.safe_dump_all([configmap("a"), configmap("b")]))
    assert cli("sign", "-f", manifest, "--key", tmp_path / "k.key").returncode == 0
    proc = cli("verify", "-f", tmp_path / "cm.yaml.signed", "--key", tmp_path / "k.pub", "-o", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r["reason"] for r in results(proc)] == ["verified", "verified"]


def test_tampered_unsigned_and_text_output(tmp_path: Path) -> None:
    cli("keygen", "-o", tmp_path / "k")
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(yaml.safe_dump(configmap("a", key="good")))
    cli("sign", "-f", manifest, "-k", tmp_path / "k.key", "-o", tmp_path / "signed.yaml")
    tampered = tmp_path / "tampered.yaml"
    tampered.write_text((tmp_path / "signed.yaml").read_text().replace("key: good", "key: evil"))
    proc = cli("verify", "-f", tampered, "-k", tmp_path / "k.pub")
    assert proc.returncode == 1
    assert (
        "FAIL [content-mismatch]" in proc.stdout and "data.key differs: signed 'good', admitted 'evil'" in proc.stdout
    )
    proc = cli("verify", "-f", manifest, "-k", tmp_path / "k.pub", "-o", "json")
    assert proc.returncode == 1 and results(proc)[0]["reason"] == "unsigned"


def test_a_stored_object_is_named_stored_and_a_file_admitted(tmp_path: Path) -> None:
    """An AdmissionRequest as Gatekeeper's audit builds it (no operation, no user) is about a stored object."""
    cli("keygen", "-o", tmp_path / "k")
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(yaml.safe_dump(configmap("a", key="good")))
    cli("sign", "-f", manifest, "-k", tmp_path / "k.key", "-o", tmp_path / "signed.yaml")
    tampered = tmp_path / "tampered.yaml"
    tampered.write_text((tmp_path / "signed.yaml").read_text().replace("key: good", "key: evil"))
    audit = tmp_path / "audit.json"
    audit.write_text(json.dumps(review_as_audited(yaml.safe_load(tampered.read_text()))))
    stored = cli("verify", "-f", audit, "-k", tmp_path / "k.pub")
    assert stored.returncode == 1
    assert "data.key differs: signed 'good', stored 'evil'" in stored.stdout
    assert '    data.key: signed "good" -> stored "evil"' in stored.stdout and "admitted" not in stored.stdout
    admitted = cli("verify", "-f", tampered, "-k", tmp_path / "k.pub")
    assert '    data.key: signed "good" -> admitted "evil"' in admitted.stdout


def test_a_control_plane_object_in_an_audit_review_is_allowed_unverified(tmp_path: Path) -> None:
    """Exit 3 ("allowed without verification"), 0 with --admission; changed, exit 1 with the field."""
    (tmp_path / "k.pub").write_text(PUBLIC_KEY)
    honest = tmp_path / "honest.json"
    honest.write_text(json.dumps(review_as_audited(stored(first("root-ca-cert-publisher"), "demo"))))
    proc = cli("verify", "-f", honest, "-k", tmp_path / "k.pub")
    assert proc.returncode == 3 and proc.stdout.startswith(
        "ALLOW [control-plane-object] ConfigMap demo/kube-root-ca.crt"
    )
    assert cli("verify", "-f", honest, "-k", tmp_path / "k.pub", "--admission").returncode == 0
    label = next(t for t in TAMPERINGS if t.name == "label")
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(review_as_audited(tampered(label))))
    proc = cli("verify", "-f", changed, "-k", tmp_path / "k.pub")
    assert proc.returncode == 1 and proc.stdout.startswith("FAIL [control-plane-object-changed]")
    assert '    metadata.labels: written null -> stored {"team": "payments"}' in proc.stdout


def test_sign_directory_tarball_and_append(tmp_path: Path) -> None:
    cli("keygen", "-o", tmp_path / "a")
    cli("keygen", "--type", "ed25519", "-o", tmp_path / "b")
    app = tmp_path / "app"
    (app / "sub").mkdir(parents=True)
    (app / "cm.yaml").write_text(yaml.safe_dump(configmap("one")))
    (app / "sub" / "more.yml").write_text(yaml.safe_dump(configmap("two")))
    (app / "notes.txt").write_text("ignored")
    assert cli("sign", "-f", app, "-k", tmp_path / "a.key", "--tarball", "-o", tmp_path / "app.yaml").returncode == 0
    assert (
        cli(
            "sign",
            "-f",
            tmp_path / "app.yaml",
            "-k",
            tmp_path / "b.key",
            "--append-signature",
            "-o",
            tmp_path / "both.yaml",
        ).returncode
        == 0
    )
    proc = cli(
        "verify",
        "-f",
        tmp_path / "both.yaml",
        "-k",
        tmp_path / "a.pub",
        "-k",
        tmp_path / "b.pub",
        "--key-operation",
        "MustAll",
        "-o",
        "json",
    )
    assert proc.returncode == 0, proc.stdout
    assert all(len(r["signers"]) == 2 for r in results(proc))


def test_threshold_counts_distinct_signers_through_the_cli(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        assert cli("keygen", "-o", tmp_path / name).returncode == 0
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(yaml.safe_dump(configmap()))
    cli("sign", "-f", manifest, "-k", tmp_path / "a.key", "-o", tmp_path / "one.yaml")
    cli(
        "sign", "-f", tmp_path / "one.yaml", "-k", tmp_path / "b.key", "--append-signature", "-o", tmp_path / "two.yaml"
    )
    keys = ["-k", tmp_path / "a.pub", "-k", tmp_path / "b.pub", "-k", tmp_path / "c.pub"]
    two = cli("verify", "-f", tmp_path / "two.yaml", *keys, "--threshold", "2", "-o", "json")
    assert two.returncode == 0 and len(results(two)[0]["signers"]) == 2, two.stdout
    three = cli("verify", "-f", tmp_path / "two.yaml", *keys, "--threshold", "3", "-o", "json")
    assert three.returncode == 1 and results(three)[0]["reason"] == "key-threshold-not-met", three.stdout
    one = cli("verify", "-f", tmp_path / "one.yaml", *keys, "--threshold", "2", "-o", "json")
    assert one.returncode == 1 and results(one)[0]["reason"] == "key-threshold-not-met"
    impossible = cli("verify", "-f", tmp_path / "two.yaml", *keys, "--threshold", "4")
    assert impossible.returncode == 2 and "threshold" in impossible.stderr


def test_a_custom_annotation_domain_signs_and_verifies_only_under_that_domain(tmp_path: Path) -> None:
    cli("keygen", "-o", tmp_path / "k")
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(yaml.safe_dump(configmap()))
    domain = "integrity.example.com"
    assert (
        cli(
            "sign", "-f", manifest, "-k", tmp_path / "k.key", "--annotation-domain", domain, "-o", tmp_path / "s.yaml"
        ).returncode
        == 0
    )
    (signed,) = yaml.safe_load_all((tmp_path / "s.yaml").read_text())
    assert {k.split("/")[0] for k in signed["metadata"]["annotations"]} == {domain}
    ours = cli(
        "verify", "-f", tmp_path / "s.yaml", "-k", tmp_path / "k.pub", "--annotation-domain", domain, "-o", "json"
    )
    assert ours.returncode == 0 and results(ours)[0]["reason"] == "verified"
    default = cli("verify", "-f", tmp_path / "s.yaml", "-k", tmp_path / "k.pub", "-o", "json")
    assert default.returncode == 1 and results(default)[0]["reason"] == "unsigned"


def test_encrypted_key_and_stdout(tmp_path: Path) -> None:
    env = {"MANIFEST_PROVIDER_PASSWORD": "pw"}
    assert cli("keygen", "-o", tmp_path / "k", env=env).returncode == 0
    assert b"ENCRYPTED" in (tmp_path / "k.key").read_bytes()
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(yaml.safe_dump(configmap()))
    no_password = cli("sign", "-f", manifest, "-k", tmp_path / "k.key", "-o", "-")
    assert no_password.returncode == 2 and "MANIFEST_PROVIDER_PASSWORD" in no_password.stderr
    proc = cli("sign", "-f", manifest, "-k", tmp_path / "k.key", "-o", "-", env=env)
    assert proc.returncode == 0 and "cosign.sigstore.dev/signature" in proc.stdout
    verify = cli("verify", "-f", "-", "-k", tmp_path / "k.pub", stdin=proc.stdout)
    assert verify.returncode == 0, verify.stdout


@pytest.mark.parametrize("key_type", ["ecdsa-p256", "ed25519"])
def test_cosign_key_files_from_keygen_sign_and_cosign_password_opens_them(key_type: str, tmp_path: Path) -> None:
    assert (
        cli(
            "keygen",
            "--type",
            key_type,
            "--format",
            "cosign",
            "-o",
            tmp_path / "k",
            env={"MANIFEST_PROVIDER_PASSWORD": "pw"},
        ).returncode
        == 0
    )
    assert (tmp_path / "k.key").read_text().startswith("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n")
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(yaml.safe_dump(configmap()))
    no_password = cli("sign", "-f", manifest, "-k", tmp_path / "k.key", "-o", "-")
    assert no_password.returncode == 2 and "COSIGN_PASSWORD" in no_password.stderr
    proc = cli("sign", "-f", manifest, "-k", tmp_path / "k.key", "-o", "-", env={"COSIGN_PASSWORD": "pw"})
    assert proc.returncode == 0, proc.stderr
    verify = cli("verify", "-f", "-", "-k", tmp_path / "k.pub", "-o", "json", stdin=proc.stdout)
    assert verify.returncode == 0 and results(verify)[0]["reason"] == "verified", verify.stdout


def test_a_cosign_key_with_an_empty_password_signs_without_one(tmp_path: Path) -> None:
    from tests.support.cosign import pkcs8_der, seal

    key = generate_key("ecdsa-p256")
    (tmp_path / "cosign.key").write_bytes(seal(pkcs8_der(key), b"", label="ENCRYPTED COSIGN PRIVATE KEY"))
    (tmp_path / "cosign.pub").write_bytes(public_pem(key))
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(yaml.safe_dump(configmap()))
    assert cli("sign", "-f", manifest, "-k", tmp_path / "cosign.key").returncode == 0
    assert cli("verify", "-f", tmp_path / "cm.yaml.signed", "-k", tmp_path / "cosign.pub").returncode == 0


def test_upstream_config_file_with_skip_objects(tmp_path: Path) -> None:
    config = UPSTREAM / "configs" / "example-config.yaml"
    unsigned = tmp_path / "root-ca.yaml"
    unsigned.write_text(yaml.safe_dump(configmap("kube-root-ca.crt")))
    proc = cli("verify", "-f", unsigned, "--config", config, "-k", UPSTREAM / "keys" / "testpub.pem", "-o", "json")
    assert proc.returncode == 3 and results(proc)[0]["reason"] == "skipped-object"  # allowed, not verified
    admission = cli(
        "verify", "-f", unsigned, "--config", config, "-k", UPSTREAM / "keys" / "testpub.pem", "--admission"
    )
    assert admission.returncode == 0 and admission.stdout.startswith("ALLOW [skipped-object]")


def test_admission_review_input(tmp_path: Path) -> None:
    request = json.loads((KYVERNO / "manifests" / "cm-signed-admissionrequest.json").read_text())
    review = tmp_path / "review.json"
    review.write_text(json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}))
    proc = cli("verify", "-f", review, "-k", KYVERNO / "keys" / "key1.pub", "-o", "json")
    assert proc.returncode == 0 and results(proc)[0]["reason"] == "verified"


USAGE = [
    ("no-keys", ["verify", "-f", UPSTREAM / "manifests" / "cm-unsigned.yaml"], "no keys or signers"),
    ("missing-file", ["verify", "-f", "/nonexistent.yaml", "-k", UPSTREAM / "keys" / "testpub.pem"], "No such file"),
    (
        "bad-key-file",
        ["verify", "-f", UPSTREAM / "manifests" / "cm-unsigned.yaml", "-k", UPSTREAM / "README.md"],
        "no PEM block",
    ),
    (
        "bad-config",
        [
            "verify",
            "-f",
            UPSTREAM / "manifests" / "cm-unsigned.yaml",
            "-k",
            UPSTREAM / "keys" / "testpub.pem",
            "--config",
            UPSTREAM / "expected.json",
        ],
        "unknown field",
    ),
    ("bad-yaml-input", ["verify", "-f", UPSTREAM / "README.md", "-k", UPSTREAM / "keys" / "testpub.pem"], ""),
    ("bad-flag", ["verify", "-f", "x.yaml", "--frobnicate"], "unrecognized arguments"),
    ("no-command", [], "required"),
    (
        "sign-public-key",
        ["sign", "-f", UPSTREAM / "manifests" / "cm-unsigned.yaml", "-k", UPSTREAM / "keys" / "testpub.pem"],
        "could not be read",
    ),
]


@pytest.mark.parametrize(("name", "args", "fragment"), USAGE, ids=[u[0] for u in USAGE])
def test_usage_errors_exit_2(name: str, args: list[str | Path], fragment: str) -> None:
    proc = cli(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert fragment in proc.stderr
    assert "Traceback" not in proc.stderr


def test_keygen_refuses_to_overwrite(tmp_path: Path) -> None:
    assert cli("keygen", "-o", tmp_path / "k").returncode == 0
    again = cli("keygen", "-o", tmp_path / "k")
    assert again.returncode == 2 and "--force" in again.stderr
    assert cli("keygen", "-o", tmp_path / "k", "--force").returncode == 0


# --- exit 0 means verified (docs/cli.md, "Exit codes") -------------------------------------


def _admission_review(obj: dict[str, Any], **request: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u", "object": obj, **request},
    }


@pytest.mark.parametrize(
    ("request_fields", "reason"),
    [
        ({"dryRun": True, "operation": "CREATE"}, "dry-run-request"),
        (
            {
                "operation": "DELETE",
                "oldObject": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}},
            },
            "unverifiable-operation",
        ),
        (
            {
                "operation": "CREATE",
                "userInfo": {
                    "username": "system:serviceaccount:kube-system:replicaset-controller",
                    "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system"],
                },
            },
            "skipped-user",
        ),
    ],
    ids=["dry-run", "delete", "skipped-user"],
)
def test_a_document_allowed_without_verification_never_exits_0(
    tmp_path: Path, request_fields: dict[str, Any], reason: str
) -> None:
    """A CI gate over untrusted files must not pass on an AdmissionReview that says dryRun: true."""
    unsigned = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "c", "image": "evil"}]},
    }
    path = tmp_path / "review.json"
    path.write_text(json.dumps(_admission_review(unsigned, **request_fields)))
    proc = cli("verify", "-f", path, "-k", UPSTREAM / "keys" / "testpub.pem", "-o", "json")
    assert proc.returncode == 3, proc.stderr
    assert results(proc)[0]["reason"] == reason
    assert cli("verify", "-f", path, "-k", UPSTREAM / "keys" / "testpub.pem", "--admission").returncode == 0


def test_one_denied_document_among_unverified_ones_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all([_admission_review(configmap("a"), dryRun=True), configmap("b")]))
    proc = cli("verify", "-f", path, "-k", UPSTREAM / "keys" / "testpub.pem")
    assert proc.returncode == 1
    assert cli("verify", "-f", path, "-k", UPSTREAM / "keys" / "testpub.pem", "--admission").returncode == 1
