"""``verify -o json|yaml`` says which object each result is about, with a summary; every file error names the file.

The JSON shape is ``verify-resource -o json``'s (``{results: [{object, result, ...}], summary}``;
tests/integration/test_verify_resource_cli.py compares the two outputs for one object).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from provider.cli import main
from provider.keys.pem import generate_key, private_pem, public_pem
from tests.support.live import KEY, PUBLIC_KEY, deployment, reimaged, signed, signed_configmap


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory: team.pub, two signed manifest files, a tampered one, and key files of every wrong kind."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MANIFEST_PROVIDER_PASSWORD", raising=False)
    monkeypatch.delenv("COSIGN_PASSWORD", raising=False)
    Path("team.pub").write_text(PUBLIC_KEY)
    Path("app.yaml").write_text(yaml.safe_dump_all([signed_configmap("settings"), signed(deployment("web"))]))
    listed = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [signed(deployment("api")), reimaged(signed(deployment("db")))],
    }
    Path("more.yaml").write_text(yaml.safe_dump_all([listed, "not an object"]))
    Path("deploy").mkdir()
    Path("deploy/a.yaml").write_text(yaml.safe_dump(signed(deployment("a"))))
    Path("deploy/b.yml").write_text(yaml.safe_dump(signed(deployment("b", namespace="other"))))
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_results_name_their_object_and_end_with_a_summary(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "verify", "-f", "app.yaml", "-k", "team.pub", "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert [r["object"] for r in data["results"]] == [
        {"apiVersion": "v1", "group": "", "version": "v1", "kind": "ConfigMap", "name": "settings",
         "namespace": "shop", "document": 1},
        {"apiVersion": "apps/v1", "group": "apps", "version": "v1", "kind": "Deployment", "name": "web",
         "namespace": "shop", "document": 2},
    ]  # fmt: skip
    first = data["results"][0]
    # The fields a result had before stay, beside object and result.
    assert list(first) == ["object", "result", "allowed", "verified", "reason", "message", "signers", "diff"]
    assert first["result"] == "pass"
    summary = data["summary"]
    assert (summary["objects"], summary["verified"], summary["denied"], summary["errors"]) == (2, 2, 0, 0)
    assert set(summary) == {
        "objects",
        "verified",
        "allowedUnverified",
        "denied",
        "errors",
        "notFound",
        "reasons",
        "seconds",
    }


def test_lists_are_counted_as_expanded_and_unusable_documents_are_errors(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "verify", "-f", "more.yaml", "-k", "team.pub", "-o", "json")
    assert code == 1
    results = json.loads(out)["results"]
    assert [(r["object"].get("name"), r["object"]["document"], r["result"]) for r in results] == [
        ("api", 1, "pass"),
        ("db", 2, "fail"),
        ("", 3, "error"),
    ]
    assert results[2]["reason"] == "request-invalid" and "document 3" in results[2]["message"]
    assert "file" not in results[0]["object"]  # one file: nothing to tell apart
    summary = json.loads(out)["summary"]
    assert (summary["verified"], summary["denied"], summary["errors"], summary["reasons"]) == (
        1,
        1,
        1,
        {"content-mismatch": 1, "request-invalid": 1},
    )


def test_several_files_and_directories_name_the_file(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "verify", "-f", "app.yaml", "-f", "deploy", "-k", "team.pub", "-o", "yaml")
    assert code == 0
    data = yaml.safe_load(out)
    assert [(r["object"]["file"], r["object"]["document"], r["object"]["name"]) for r in data["results"]] == [
        ("app.yaml", 1, "settings"),
        ("app.yaml", 2, "web"),
        (os.path.join("deploy", "a.yaml"), 1, "a"),
        (os.path.join("deploy", "b.yml"), 1, "b"),
    ]
    assert data["results"][3]["object"]["namespace"] == "other"
    assert data["summary"]["objects"] == 4
    code, out, _ = run(capsys, "verify", "-f", "app.yaml", "-f", "more.yaml", "-k", "team.pub")
    assert code == 1
    assert "FAIL [content-mismatch] more.yaml: Deployment shop/db" in out


def test_an_admission_review_names_the_object_it_carries(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    obj = signed(deployment("web"))
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "1",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "namespace": "shop",
            "name": "web",
            "operation": "DELETE",
            "userInfo": {"username": "alice"},
            "object": None,
            "oldObject": obj,
        },
    }
    Path("review.json").write_text(json.dumps(review))
    code, out, _ = run(capsys, "verify", "-f", "review.json", "-k", "team.pub", "-o", "json")
    assert code == 3  # a DELETE is allowed without a verification
    (result,) = json.loads(out)["results"]
    assert result["object"] == {"apiVersion": "apps/v1", "group": "apps", "version": "v1", "kind": "Deployment",
                                "name": "web", "namespace": "shop", "document": 1}  # fmt: skip
    assert result["result"] == "skip"


# --- every error about a file names it ----------------------------------------------------------------

SIGN = ["sign", "-f", "app.yaml", "-o", "out.yaml"]


def _wrong_files() -> None:
    Path("garbage.pem").write_text("not a key\n")
    Path("binary.pem").write_bytes(b"\xff\xfe\x00")
    Path("private.pem").write_bytes(private_pem(KEY, None))
    Path("folder").mkdir()
    Path("unknown-field.yaml").write_text("keys: []\nkeyz: [x]\n")
    Path("bad-key-inside.yaml").write_text("keys: [not a key]\n")
    Path("broken.yaml").write_text("a: [\n")
    Path("root.json").write_text('{"mediaType": "x"}')
    Path("broken.gz").write_bytes(b"not gzip")
    Path("other.pub").write_bytes(public_pem(generate_key("ecdsa-p256")))


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["verify", "-f", "app.yaml", "-k", "missing.pub"], "missing.pub"),
        (["verify", "-f", "app.yaml", "-k", "garbage.pem"], "garbage.pem: no PEM block"),
        (["verify", "-f", "app.yaml", "-k", "binary.pem"], "binary.pem: not a PEM text file"),
        (["verify", "-f", "app.yaml", "-k", "private.pem"], "private.pem: a private key was given"),
        (["verify", "-f", "app.yaml", "-k", "team.pub,folder"], "folder"),
        (["verify", "-f", "app.yaml", "-k", "team.pub", "-c", "missing.yaml"], "missing.yaml"),
        (["verify", "-f", "app.yaml", "-k", "team.pub", "-c", "broken.yaml"], "broken.yaml is not valid YAML"),
        (
            ["verify", "-f", "app.yaml", "-k", "team.pub", "-c", "unknown-field.yaml"],
            "unknown-field.yaml: policy: unknown field 'keyz'",
        ),
        (
            ["verify", "-f", "app.yaml", "-c", "bad-key-inside.yaml"],
            "bad-key-inside.yaml: policy.keys[0]: no PEM block",
        ),
        (["verify", "-f", "app.yaml", "-k", "team.pub", "--trusted-root", "root.json"], "root.json: trustedRoot"),
        (["verify", "-f", "app.yaml", "-k", "team.pub", "--trusted-root", "missing.json"], "missing.json"),
        (["verify", "-f", "missing.yaml", "-k", "team.pub"], "missing.yaml"),
        (["verify", "-f", "broken.yaml", "-k", "team.pub"], "broken.yaml is not valid YAML"),
        (["verify", "-f", "folder", "-k", "team.pub"], "folder holds no .yaml"),
        ([*SIGN, "-k", "missing.key"], "missing.key"),
        ([*SIGN, "-k", "garbage.pem"], "garbage.pem: the private key could not be read"),
        ([*SIGN, "-k", "team.pub"], "team.pub: the private key could not be read"),
        (["sign", "-f", "app.yaml", "-k", "private.pem", "-o", "no-such-dir/out.yaml"], "no-such-dir/out.yaml"),
        (["sign", "-f", "missing.yaml", "-k", "private.pem"], "missing.yaml"),
        (["keygen", "-o", "no-such-dir/team"], "no-such-dir/team.key"),
        (["keygen", "-o", "team"], "team.pub"),  # exists (team.pub does; team.key is checked first when present)
        (["policy", "kyverno", "-k", "garbage.pem", "--without-ca"], "garbage.pem: no PEM block"),
        (["policy", "kyverno", "-k", "team.pub", "--ca-file", "missing.crt"], "missing.crt"),
        (["policy", "kyverno", "-k", "team.pub", "--ca-file", "other.pub"], "other.pub: not a PEM CA certificate"),
        (
            ["policy", "kyverno", "-c", "unknown-field.yaml", "--without-ca"],
            "unknown-field.yaml: policy: unknown field",
        ),
        (["policy", "kyverno", "-k", "team.pub", "--without-ca", "--policies", "folder"], "folder/kyverno/"),
        (["convert-policy", "-f", "missing.yaml"], "missing.yaml"),
        (["convert-policy", "-f", "broken.yaml"], "broken.yaml is not valid YAML"),
        (["convert-policy", "-f", "app.yaml"], "app.yaml: expected one document"),
        (["classify", "-f", "missing.jsonl"], "missing.jsonl"),
        (["classify", "-f", "broken.gz"], "broken.gz: not a complete gzip file"),
        (["classify", "-f", "folder"], "folder"),
        (
            ["classify", "-f", "missing.jsonl", "-c", "unknown-field.yaml", "-k", "team.pub"],
            "unknown-field.yaml: policy",
        ),
        (["serve", "--cert", "missing.crt", "--key", "private.pem", "--port", "0"], "missing.crt"),
        (["serve", "--cert", "other.pub", "--key", "private.pem", "--port", "0"], "other.pub"),
    ],
    ids=lambda value: value if isinstance(value, str) else " ".join(value[:3]),
)
def test_every_file_error_names_the_file(
    files: Path, capsys: pytest.CaptureFixture[str], args: list[str], named: str
) -> None:
    _wrong_files()
    code, _, err = run(capsys, *args)
    assert code == 2, err
    assert named in err, err
