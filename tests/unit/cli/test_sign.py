"""``manifest-provider sign`` in pipelines: standard input to standard output, Helm's post-renderer, the size limit."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.cli import main
from provider.keys.pem import generate_key, private_pem, public_pem
from provider.policy.schema import Policy
from provider.signatures.signing import TOTAL_ANNOTATION_SIZE_LIMIT, annotations_size
from provider.verifier import verify
from tests.support.pipelines import HELM_TEMPLATE, KUSTOMIZE_BUILD, two_hundred_objects


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Policy]:
    key = generate_key("ecdsa-p256")
    path = tmp_path / "signing.key"
    path.write_bytes(private_pem(key, None))
    return path, Policy.from_dict({"keys": [public_pem(key).decode()]})


def run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str | Path, stdin: str = ""
) -> tuple[int, str, str]:
    for name in ("MANIFEST_PROVIDER_PASSWORD", "COSIGN_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def test_standard_input_to_standard_output(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], keys: tuple[Path, Policy]
) -> None:
    key, policy = keys
    code, out, err = run(monkeypatch, capsys, "sign", "-f", "-", "-k", key, stdin=KUSTOMIZE_BUILD.read_text())
    assert (code, err) == (0, "")
    signed = documents(out)
    assert [d["kind"] for d in signed] == [d["kind"] for d in documents(KUSTOMIZE_BUILD.read_text())]
    for obj in signed:
        verify(obj, policy)


def test_standard_input_to_a_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], keys: tuple[Path, Policy], tmp_path: Path
) -> None:
    key, _ = keys
    out_file = tmp_path / "signed.yaml"
    code, out, err = run(monkeypatch, capsys, "sign", "-f", "-", "-k", key, "-o", out_file,
                         stdin=KUSTOMIZE_BUILD.read_text())  # fmt: skip
    assert (code, out) == (0, "") and "signed 7 objects" in err
    assert len(documents(out_file.read_text())) == 7


def test_the_post_renderer_signs_helms_stream_and_drops_its_empty_documents(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], keys: tuple[Path, Policy]
) -> None:
    key, policy = keys
    rendered = HELM_TEMPLATE.read_text()
    assert None in list(yaml.safe_load_all(rendered))  # the stream holds an empty document
    code, out, err = run(monkeypatch, capsys, "sign", "--post-renderer", "-k", key, stdin=rendered)
    assert (code, err) == (0, "")
    signed = documents(out)
    assert [d["kind"] for d in signed] == ["ServiceAccount", "Service", "Deployment"]
    for obj in signed:
        verify(obj, policy)


def test_the_post_renderer_passes_an_empty_release_through(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], keys: tuple[Path, Policy]
) -> None:
    """A chart of hooks only renders no manifest; Helm still runs the post-renderer, which must not fail it."""
    assert run(monkeypatch, capsys, "sign", "--post-renderer", "-k", keys[0], stdin="---\n# Source: x\n") == (0, "", "")
    code, out, err = run(monkeypatch, capsys, "sign", "-f", "-", "-k", keys[0], stdin="---\n")
    assert (code, out) == (2, "") and "nothing to sign" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--post-renderer", "-f", "x.yaml"], "drop -f and -o"),
        (["--post-renderer", "-o", "out.yaml"], "drop -f and -o"),
        (["--post-renderer", "--tarball"], "do not apply"),
        (["--post-renderer", "--append-signature"], "do not apply"),
        (["-f", "-", "--tarball"], "standard input has none"),
        (["--per-object", "--tarball", "-f", "-"], "standard input has none"),
        ([], "give the manifests to sign"),
        (["--post-renderer", "-i", "registry.example/shop/web:1"], "do not apply"),
        (["-f", "-", "-k", "-"], "give the key as a file or env://VAR"),
        (["--post-renderer", "-k", "-"], "give the key as a file or env://VAR"),
    ],
    ids=["post-renderer-with-file", "post-renderer-with-output", "post-renderer-tarball",
         "post-renderer-append", "stdin-tarball", "per-object-tarball", "no-input", "post-renderer-image",
         "stdin-key-from-stdin", "post-renderer-key-from-stdin"],
)  # fmt: skip
def test_options_that_do_not_fit_are_refused(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    keys: tuple[Path, Policy],
    args: list[str],
    message: str,
) -> None:
    code, out, err = run(monkeypatch, capsys, "sign", "-k", keys[0], *args, stdin=KUSTOMIZE_BUILD.read_text())
    assert (code, out) == (2, "") and message in err


def test_a_key_from_the_environment_signs_standard_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], keys: tuple[Path, Policy]
) -> None:
    """A CI secret in a variable (cosign's env://), the manifests on standard input: nothing touches the disk."""
    key, policy = keys
    monkeypatch.setenv("SIGNING_KEY", key.read_text())
    code, out, err = run(monkeypatch, capsys, "sign", "-f", "-", "-k", "env://SIGNING_KEY",
                         stdin=KUSTOMIZE_BUILD.read_text())  # fmt: skip
    assert (code, err) == (0, "")
    for obj in documents(out):
        verify(obj, policy)


def test_an_encrypted_key_without_a_password_fails_instead_of_reading_standard_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Standard input is the manifest stream: a password is never read from it, and nothing is written."""
    key = tmp_path / "encrypted.key"
    key.write_bytes(private_pem(generate_key("ecdsa-p256"), b"s3cret"))
    stream = "s3cret\n" + KUSTOMIZE_BUILD.read_text()  # a password smuggled at the head of the stream is not one
    code, out, err = run(monkeypatch, capsys, "sign", "-f", "-", "-k", key, stdin=stream)
    assert code == 2 and out == "" and "password" in err.lower()


def test_a_document_that_is_no_object_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], keys: tuple[Path, Policy]
) -> None:
    code, out, err = run(monkeypatch, capsys, "sign", "-f", "-", "-k", keys[0], stdin="a: 1\n---\n- not an object\n")
    assert (code, out) == (2, "") and "standard input: document 2 is a list" in err


@pytest.mark.slow
def test_200_objects_in_one_message_are_refused_with_the_way_out(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], keys: tuple[Path, Policy]
) -> None:
    """The issue's case: 200 objects whose one message (438 KB) would be copied onto each of them."""
    key, policy = keys
    objects = two_hundred_objects()
    stream = yaml.safe_dump_all(objects)
    code, out, err = run(monkeypatch, capsys, "sign", "-f", "-", "-k", key, stdin=stream)
    assert (code, out) == (2, "")  # nothing written
    shared = sum(1 for obj in objects if obj["kind"] != "Secret")  # Secrets are signed apart
    assert f"CustomResourceDefinition v0.clusterpolicies.kyverno.io, signed together with {shared - 1} other" in err
    assert "262144" in err and "--per-object" in err

    code, out, err = run(monkeypatch, capsys, "sign", "-f", "-", "-k", key, "--per-object", stdin=stream)
    assert code == 0
    signed = documents(out)
    assert len(signed) == 200
    sizes = [annotations_size(d) for d in signed]
    assert max(sizes) <= TOTAL_ANNOTATION_SIZE_LIMIT
    # The big CRD fits the API server's limit, but not twice over: kubectl's client-side apply would fail.
    assert max(sizes) * 2 > TOTAL_ANNOTATION_SIZE_LIMIT and "apply server-side" in err
    for obj in signed[:2] + signed[-2:]:
        verify(obj, policy)
