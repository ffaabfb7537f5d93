"""Signatures in a ConfigMap (``kubectl sigstore sign -o k8s://ConfigMap/NS/NAME``), read through the real client.

The ConfigMap's ``data`` holds the annotation values under their base names
(``message``, ``signature``; ``pkg/k8smanifest/sign.go`` ``generateSignatureConfigMap``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from provider.bounds import Bounds
from provider.errors import PolicyError
from provider.kube.configmaps import KubeConfigMapReader
from provider.policy.schema import Policy
from provider.result import Result
from provider.review import Review
from provider.signatures.sources import Sources
from provider.verifier import decide
from tests.support.fakeapi import FakeApiServer, runner_for
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign

KEY = make_key("ecdsa-p256", 50)
PATH = "/api/v1/namespaces/sigs/configmaps/app-signature"
#: The operator lets policies read signature ConfigMaps in ``sigs`` (MANIFEST_PROVIDER_SIGNATURE_NAMESPACES).
BOUNDS = Bounds(signature_namespaces=("sigs",))


@dataclass
class Served:
    status: int
    body: Any


def serve_signature(fake: FakeApiServer, obj: dict[str, Any]) -> None:
    (signed,) = sign([obj], KEY)
    annotations = signed["metadata"]["annotations"]
    data = {
        "message": annotations["cosign.sigstore.dev/message"],
        "signature": annotations["cosign.sigstore.dev/signature"],
    }
    fake._gets[PATH] = Served(200, {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "app-signature"},
                                    "data": data})  # fmt: skip


def verdict(fake: FakeApiServer, tmp_path: Path, obj: dict[str, Any]) -> Result:
    reader = KubeConfigMapReader(lambda: runner_for(fake, tmp_path))
    policy = Policy.from_dict(
        {"keys": [public_key_pem(KEY)], "signatureResourceRef": "k8s://ConfigMap/sigs/app-signature"}, bounds=BOUNDS
    )
    return decide(Review.for_object(obj), policy, sources=Sources(configmaps=reader))


def test_an_object_verifies_against_the_signature_configmap(fake: FakeApiServer, tmp_path: Path) -> None:
    obj = configmap("app", mode="production")
    serve_signature(fake, obj)
    assert verdict(fake, tmp_path, obj).reason == "verified"
    changed = configmap("app", mode="debug")
    assert verdict(fake, tmp_path, changed).reason == "content-mismatch"


def test_a_missing_configmap_means_unsigned(fake: FakeApiServer, tmp_path: Path) -> None:
    result = verdict(fake, tmp_path, configmap("app"))
    assert (result.reason, "holds no signature" in result.message) == ("unsigned", True)


def test_a_silent_api_server_is_a_denial_by_the_deadline(fake: FakeApiServer, tmp_path: Path) -> None:
    obj = configmap("app", mode="production")
    serve_signature(fake, obj)
    fake.fault, fake.fault_scope = "slow", "all"
    started = time.monotonic()
    result = verdict(fake, tmp_path, obj)
    assert (result.allowed, result.reason) == (False, "signature-configmap-unavailable"), result.message
    assert time.monotonic() - started < 3.5  # the 1.5 s deadline (and the kubeconfig's load) plus a margin
    assert result.used_cluster  # never cached


def test_without_a_cluster_the_policy_denies(tmp_path: Path) -> None:
    policy = Policy.from_dict(
        {"keys": [public_key_pem(KEY)], "signatureResourceRef": "k8s://ConfigMap/sigs/x"}, bounds=BOUNDS
    )
    assert decide(Review.for_object(configmap("app")), policy).reason == "signature-configmap-unavailable"


@pytest.mark.parametrize(
    "ref", ["k8s://Secret/sigs/x", "k8s://ConfigMap/x", "ConfigMap/sigs/x", "k8s://cm/Sigs/x"], ids=lambda r: r
)
def test_configmap_references_are_checked(ref: str) -> None:
    with pytest.raises(PolicyError):
        Policy.from_dict({"keys": [public_key_pem(KEY)], "signatureResourceRef": ref})
