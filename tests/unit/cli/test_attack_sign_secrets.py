"""Attack class: **signing a stream copies every Secret into every object.**

A message is copied onto every object it signs. ``kustomize build | manifest-provider sign -f -``
of a Secret and a ConfigMap put the Secret's data into the ConfigMap's
``cosign.sigstore.dev/message``, readable by anyone who may read ConfigMaps. Now each sensitive
object gets a message of its own (with a note saying so), and the modes that cannot do that
(``--tarball``, ``--image``, ``--append-signature`` onto a message already holding a Secret)
refuse with the reason.
"""

from __future__ import annotations

import base64
import io
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.cli import main
from provider.errors import RequestError
from provider.keys.pem import generate_key, private_pem, public_pem, sign_bytes
from provider.policy.schema import Policy
from provider.signatures.envelope import decode_message, encode_message
from provider.signatures.signing import dump_yaml, sign_documents
from provider.verifier import verify

PLAINTEXT = "hunter2-the-database-password"
ENCODED = base64.b64encode(PLAINTEXT.encode()).decode()
DOMAIN = "cosign.sigstore.dev"


def secret(name: str = "db", *, string_data: bool = False, value: str = PLAINTEXT) -> dict[str, Any]:
    body: dict[str, Any] = (
        {"stringData": {"password": value}}
        if string_data
        else {"data": {"password": base64.b64encode(value.encode()).decode()}}
    )
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "shop"}, "type": "Opaque",
            **body}  # fmt: skip


def configmap(name: str = "settings") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "shop"},
            "data": {"mode": "fast"}}  # fmt: skip


def deployment() -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"replicas": 1}}  # fmt: skip


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


def message_text(obj: dict[str, Any]) -> str:
    return decode_message(obj["metadata"]["annotations"][f"{DOMAIN}/message"]).data.decode()


def leaks(obj: dict[str, Any], *secrets: str) -> bool:
    """Whether ``obj``'s annotations carry a secret value, plain or base64."""
    text = yaml.safe_dump(obj["metadata"].get("annotations", {})) + message_text(obj)
    return any(s in text or base64.b64encode(s.encode()).decode() in text for s in secrets)


STREAMS = {
    "secret-and-configmap": [secret(), configmap()],
    "string-data-secret-in-a-stream": [deployment(), secret(string_data=True), configmap()],
    "secret-inside-a-list": [
        configmap(),
        {"apiVersion": "v1", "kind": "List", "items": [secret(), configmap("inner")]},
    ],
    "two-secrets": [secret("a", value="first-secret-value"), secret("b", value="second-secret-value")],
}


@pytest.mark.parametrize("objects", list(STREAMS.values()), ids=list(STREAMS))
def test_no_object_carries_another_objects_secret(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], keys: tuple[Path, Policy],
    objects: list[dict[str, Any]],
) -> None:  # fmt: skip
    key, policy = keys
    code, out, err = run(monkeypatch, capsys, "sign", "-f", "-", "-k", key, stdin=yaml.safe_dump_all(objects))
    assert code == 0, err
    signed = [d for d in yaml.safe_load_all(out) if d]
    # the order is kept; a List is read as its items, as kubectl reads it
    objects = [item for d in objects for item in (d["items"] if d["kind"] == "List" else [d])]
    assert [d["kind"] for d in signed] == [d["kind"] for d in objects]
    values = [PLAINTEXT, "first-secret-value", "second-secret-value"]
    for obj, original in zip(signed, objects, strict=True):
        verify(obj, policy)
        own = [v for v in values if v in yaml.safe_dump(original) or base64.b64encode(v.encode()).decode()
               in yaml.safe_dump(original)]  # fmt: skip
        assert not leaks(obj, *(v for v in values if v not in own)), f"{obj['kind']} carries another's secret"
    assert "signed in a message of its own" in err and "secret values" in err


def test_a_kind_named_sensitive_is_signed_apart_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], keys: tuple[Path, Policy]
) -> None:
    key, policy = keys
    token = {"apiVersion": "vault.example.com/v1", "kind": "VaultToken", "metadata": {"name": "t", "namespace": "shop"},
             "spec": {"token": PLAINTEXT}}  # fmt: skip
    stream = yaml.safe_dump_all([token, configmap()])
    code, out, err = run(monkeypatch, capsys, "sign", "-f", "-", "-k", key, "--sensitive-kind", "VaultToken",
                         stdin=stream)  # fmt: skip
    assert code == 0, err
    signed_token, signed_cm = [d for d in yaml.safe_load_all(out) if d]
    assert not leaks(signed_cm, PLAINTEXT) and "VaultToken shop/t" in err
    verify(signed_token, policy)
    verify(signed_cm, policy)


def test_tarball_mode_refuses_a_secret_beside_other_files(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], keys: tuple[Path, Policy], tmp_path: Path
) -> None:
    key, _ = keys
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "secret.yaml").write_text(yaml.safe_dump(secret()))
    (folder / "cm.yaml").write_text(yaml.safe_dump(configmap()))
    code, out, err = run(monkeypatch, capsys, "sign", "-f", folder, "-k", key, "--tarball", "-o", "-")
    assert (code, out) == (2, "")
    assert "Secret shop/db" in err and "copied onto every object" in err and "--tarball" in err
    assert not (tmp_path / "app.signed").exists()


def test_image_mode_refuses_a_secret_before_anything_is_pushed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], keys: tuple[Path, Policy], tmp_path: Path
) -> None:
    """Even alone: the message would sit in a registry for anyone who may pull it (nothing listens here)."""
    key, _ = keys
    path = tmp_path / "secret.yaml"
    path.write_text(yaml.safe_dump(secret()))
    code, out, err = run(monkeypatch, capsys, "sign", "-f", path, "-k", key, "-i", "127.0.0.1:9/bundles/app:1")
    assert (code, out) == (2, "")
    assert "--image pushes the message" in err and "Secret shop/db" in err


def test_appending_to_a_message_that_already_copies_a_secret_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], keys: tuple[Path, Policy], tmp_path: Path
) -> None:
    """Input signed the old way (one message over a Secret and a ConfigMap): no new signature endorses it."""
    key, _ = keys
    other = generate_key("ecdsa-p256")
    objects = [secret(), configmap()]
    payload = dump_yaml(objects).encode()
    annotations = {f"{DOMAIN}/message": encode_message(payload),
                   f"{DOMAIN}/signature": base64.b64encode(sign_bytes(other, payload)).decode()}  # fmt: skip
    for obj in objects:
        obj["metadata"]["annotations"] = dict(annotations)
    path = tmp_path / "signed.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    for extra in ([], ["--per-object"]):
        code, out, err = run(monkeypatch, capsys, "sign", "-f", path, "-k", key, "--append-signature", "-o", "-",
                             *extra)  # fmt: skip
        assert (code, out) == (2, ""), extra
        assert "Secret shop/db" in err and "sign the objects again" in err


def test_the_library_refuses_one_message_over_a_secret_and_another_object() -> None:
    with pytest.raises(RequestError, match="Secret shop/db would be signed in one message with 1 other object"):
        sign_documents([configmap(), secret()], generate_key("ecdsa-p256"))
    (alone,) = sign_documents([secret()], generate_key("ecdsa-p256"))  # alone, it is its own
    assert ENCODED in message_text(alone)
