"""``sign -o k8s://ConfigMap/NS/NAME``: the signature ConfigMap as ``kubectl sigstore sign`` writes it, read back.

Upstream's format (provider/cli/_signature_configmap.py cites it): ``data`` holds
``message`` (base64 of gzip of the payload) and ``signature`` (base64), the
annotation values under their base names; the file is named
``k8s_ConfigMap_<ns>_<name>.yaml``. Read back through the real client from the
fake API server by ``signatureResourceRef``.
"""

from __future__ import annotations

import base64
import copy
import gzip
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from provider.bounds import Bounds
from provider.cli import main
from provider.keys.pem import generate_key, private_pem, public_pem
from provider.kube.configmaps import KubeConfigMapReader
from provider.policy.schema import Policy
from provider.result import Result
from provider.review import Review
from provider.signatures.sources import Sources
from provider.verifier import decide
from tests.support.fakeapi import FakeApiServer, runner_for

INTEROP = Path(__file__).resolve().parents[2] / "data" / "interop" / "k8s-manifest-sigstore"
BOUNDS = Bounds(signature_namespaces=("sigs",))
APP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app", "namespace": "shop"},
       "data": {"mode": "production"}}  # fmt: skip


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, str]:
    key = generate_key("ecdsa-p256")
    (tmp_path / "team.key").write_bytes(private_pem(key, None))
    return tmp_path / "team.key", public_pem(key).decode()


def verdict(fake: FakeApiServer, tmp_path: Path, obj: dict[str, Any], pem: str, ref: str) -> Result:
    reader = KubeConfigMapReader(lambda: runner_for(fake, tmp_path))
    policy = Policy.from_dict({"keys": [pem], "signatureResourceRef": ref}, bounds=BOUNDS)
    return decide(Review.for_object(obj), policy, sources=Sources(configmaps=reader))


def sign_to_configmap(tmp_path: Path, key: Path, monkeypatch: pytest.MonkeyPatch, *extra: str) -> dict[str, Any]:
    (tmp_path / "app.yaml").write_text(yaml.safe_dump(APP))
    monkeypatch.chdir(tmp_path)
    assert main(["sign", "-f", "app.yaml", "-k", str(key), "-o", "k8s://ConfigMap/sigs/app-sig", *extra]) == 0
    (written,) = yaml.safe_load_all((tmp_path / "k8s_ConfigMap_sigs_app-sig.yaml").read_text())
    return dict(written)


def test_the_file_form_holds_upstreams_data_and_verifies_back(
    fake: FakeApiServer, tmp_path: Path, keys: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key, pem = keys
    written = sign_to_configmap(tmp_path, key, monkeypatch)
    assert set(written["data"]) == {"message", "signature"}
    assert (written["metadata"]["namespace"], written["metadata"]["name"]) == ("sigs", "app-sig")
    assert not (tmp_path / "app.yaml.signed").exists()  # the objects carry nothing: upstream writes only the ConfigMap
    fake.namespaces.add("sigs")
    fake.add(written)
    assert verdict(fake, tmp_path, APP, pem, "k8s://ConfigMap/sigs/app-sig").reason == "verified"
    tampered = copy.deepcopy(APP)
    tampered["data"]["mode"] = "debug"
    assert verdict(fake, tmp_path, tampered, pem, "k8s://ConfigMap/sigs/app-sig").reason == "content-mismatch"


def test_ours_reads_the_way_upstream_reads_it(
    tmp_path: Path, keys: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upstream's getSignatureSets: data["message"] base64 -> gunzip -> the payload; data["signature"] base64 -> DER
    ECDSA over it. Decoded here with the standard library, not with our envelope reader."""
    key, pem = keys
    written = sign_to_configmap(tmp_path, key, monkeypatch)
    payload = gzip.decompress(base64.b64decode(written["data"]["message"], validate=True))
    assert list(yaml.safe_load_all(payload)) == [APP]
    public = serialization.load_pem_public_key(pem.encode())
    assert isinstance(public, ec.EllipticCurvePublicKey)
    public.verify(base64.b64decode(written["data"]["signature"]), payload, ec.ECDSA(hashes.SHA256()))


def test_a_configmap_shaped_exactly_as_upstream_writes_it_verifies(fake: FakeApiServer, tmp_path: Path) -> None:
    """Upstream's real signed sample, its message and signature moved into a ConfigMap as generateSignatureConfigMap
    builds it (name, namespace, data; no labels, no annotations) and its client creates it."""
    (signed,) = yaml.safe_load_all((INTEROP / "manifests" / "cm-tarball-key-signed.yaml").read_text())
    annotations = signed["metadata"].pop("annotations")
    data = {k: annotations[f"cosign.sigstore.dev/{k}"] for k in ("message", "signature")}
    fake.namespaces.add("sigs")
    fake.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "upstream-sig", "namespace": "sigs"},
              "data": data})  # fmt: skip
    pem = (INTEROP / "keys" / "testpub.pem").read_text()
    result = verdict(fake, tmp_path, signed, pem, "k8s://cm/sigs/upstream-sig")  # upstream's short kind
    assert result.reason == "verified", result.message


def test_apply_creates_then_updates_its_own_configmap_and_leaves_others_alone(
    fake: FakeApiServer, tmp_path: Path, keys: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key, pem = keys
    fake.namespaces.add("sigs")
    fake.writable_configmaps()
    kubeconfig = str(fake.kubeconfig(tmp_path / "kubeconfig"))
    apply = ("--apply-signature-configmap", "--kubeconfig", kubeconfig)
    (tmp_path / "app.yaml").write_text(yaml.safe_dump(APP))
    monkeypatch.chdir(tmp_path)
    assert main(["sign", "-f", "app.yaml", "-k", str(key), "-o", "k8s://ConfigMap/sigs/app-sig", *apply]) == 0
    assert verdict(fake, tmp_path, APP, pem, "k8s://ConfigMap/sigs/app-sig").reason == "verified"
    changed = {**APP, "data": {"mode": "canary"}}
    (tmp_path / "app.yaml").write_text(yaml.safe_dump(changed))
    assert main(["sign", "-f", "app.yaml", "-k", str(key), "-o", "k8s://ConfigMap/sigs/app-sig", *apply]) == 0
    assert verdict(fake, tmp_path, changed, pem, "k8s://ConfigMap/sigs/app-sig").reason == "verified"
    assert verdict(fake, tmp_path, APP, pem, "k8s://ConfigMap/sigs/app-sig").reason == "content-mismatch"
    fake.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-config", "namespace": "sigs"},
              "data": {"theirs": "x"}})  # fmt: skip
    assert main(["sign", "-f", "app.yaml", "-k", str(key), "-o", "k8s://ConfigMap/sigs/app-config", *apply]) == 2
    (theirs,) = [c for c in fake.stored("v1", "ConfigMap") if c["metadata"]["name"] == "app-config"]
    assert theirs["data"] == {"theirs": "x"}  # left alone: not written by manifest-provider


def test_a_secret_is_never_signed_into_a_configmap(tmp_path: Path, keys: tuple[Path, str],
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    key, _ = keys
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "shop"},
              "stringData": {"password": "hunter2"}}  # fmt: skip
    (tmp_path / "app.yaml").write_text(yaml.safe_dump_all([APP, secret]))
    monkeypatch.chdir(tmp_path)
    assert main(["sign", "-f", "app.yaml", "-k", str(key), "-o", "k8s://ConfigMap/sigs/app-sig"]) == 2
    assert "Secret shop/db holds secret values" in capsys.readouterr().err
    assert not (tmp_path / "k8s_ConfigMap_sigs_app-sig.yaml").exists()
