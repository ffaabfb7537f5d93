"""Attack class 12 (docs/security.md): a policy's ``signatureResourceRef`` names another tenant's ConfigMap.

The policy arrives with each request, and a namespaced Kyverno ``Policy`` is a namespace admin's, sent with
Kyverno's own token: the service cannot tell it from the operator's. Every test here failed on the code
before the fix. The real gunicorn server's side is ``tests/integration/test_attack_policy_is_data.py``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from provider import Bounds, Policy, Review, decide
from provider.bounds import SERVICE
from provider.errors import PolicyError
from provider.kube.configmaps import KubeConfigMapReader
from provider.result import Result
from provider.signatures.signing import sign_documents
from provider.signatures.sources import Sources
from tests.support.fakeapi import FakeApiServer, runner_for
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap

KEY = make_key("ecdsa-p256", 250)


# --- signatureResourceRef names another tenant's ConfigMap ------------------------------------------------------

#: B's signature: a document signed without a namespace (so it matches an object of that name anywhere), whose
#: values are B's own.
B_SECRET_VALUE = "tenant-b-private-endpoint.internal"


@pytest.fixture
def tenant_b(fake: FakeApiServer) -> FakeApiServer:
    signed_b = configmap("app", namespace=None, endpoint=B_SECRET_VALUE)
    (signed,) = sign_documents([signed_b], KEY)
    annotations = signed["metadata"]["annotations"]
    data = {name: annotations[f"cosign.sigstore.dev/{name}"] for name in ("message", "signature")}
    fake.namespaces |= {"tenant-a", "tenant-b"}
    fake.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b-signatures", "namespace": "tenant-b"},
              "data": data})  # fmt: skip
    fake.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b-settings", "namespace": "tenant-b"},
              "data": {"colour": "blue"}})  # fmt: skip
    return fake


def configmap_verdict(
    fake: FakeApiServer,
    tmp_path: Path,
    ref: str,
    obj: dict[str, Any],
    *,
    bounds: Bounds = SERVICE,
    namespace: str | None = None,
) -> Result:
    reader = KubeConfigMapReader(lambda: runner_for(fake, tmp_path))
    policy = Policy.from_dict({"keys": [public_key_pem(KEY)], "signatureResourceRef": ref}, bounds=bounds)
    return decide(Review(object=obj, namespace=namespace), policy, sources=Sources(configmaps=reader))


def _configmap_gets(fake: FakeApiServer) -> list[str]:
    return [r.path for r in fake.requests if "/configmaps/" in r.path]


@pytest.mark.parametrize("name", ["b-signatures", "b-settings", "does-not-exist"])
def test_a_policy_gets_nothing_of_another_namespaces_configmaps(
    tenant_b: FakeApiServer, tmp_path: Path, name: str
) -> None:
    """Before: B's signed values came back in A's diff, and 'does not exist' against 'has no message entry' told
    which of B's ConfigMaps exist."""
    admitted = configmap("app", namespace="tenant-a", endpoint="attacker-guess")
    with pytest.raises(PolicyError) as refused:
        configmap_verdict(tenant_b, tmp_path, f"k8s://ConfigMap/tenant-b/{name}", admitted)
    message = refused.value.message.replace(name, "<name>")
    assert refused.value.reason == "policy-invalid"
    assert B_SECRET_VALUE not in message and "blue" not in message
    assert "namespace 'tenant-b'" in message
    assert _configmap_gets(tenant_b) == []  # the API server was never asked
    expected = (
        "signatureResourceRef: policies may not read signature ConfigMaps in namespace 'tenant-b' "
        "(k8s://ConfigMap/tenant-b/<name>); they may read the admitted object's own namespace and the namespaces "
        "the operator lists (MANIFEST_PROVIDER_SIGNATURE_NAMESPACES)"
    )
    assert message == expected


def test_the_review_cannot_borrow_a_namespace_the_object_does_not_have(tenant_b: FakeApiServer, tmp_path: Path) -> None:
    admitted = configmap("app", namespace="tenant-a")
    with pytest.raises(PolicyError):
        configmap_verdict(tenant_b, tmp_path, "k8s://ConfigMap/tenant-b/b-signatures", admitted, namespace="tenant-b")
    cluster_scoped = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}
    with pytest.raises(PolicyError):
        configmap_verdict(tenant_b, tmp_path, "k8s://ConfigMap/tenant-b/b-signatures", cluster_scoped)
    assert _configmap_gets(tenant_b) == []


def test_own_and_listed_namespaces_are_read_and_the_operator_can_take_the_own_one_away(
    tenant_b: FakeApiServer, tmp_path: Path
) -> None:
    ref = "k8s://ConfigMap/tenant-b/b-signatures"
    own = configmap("app", namespace="tenant-b", endpoint=B_SECRET_VALUE)
    assert configmap_verdict(tenant_b, tmp_path, ref, own).reason == "verified"
    listed = configmap("app", namespace="tenant-a", endpoint=B_SECRET_VALUE)
    shared = Bounds(signature_namespaces=("tenant-b",))
    assert configmap_verdict(tenant_b, tmp_path, ref, listed, bounds=shared).reason == "verified"
    with pytest.raises(PolicyError, match="only the namespaces the operator lists"):
        configmap_verdict(tenant_b, tmp_path, ref, own, bounds=Bounds(own_namespace_signatures=False))


def test_a_missing_configmap_and_one_without_a_signature_read_alike(tenant_b: FakeApiServer, tmp_path: Path) -> None:
    admitted = configmap("app", namespace="tenant-b")
    missing = configmap_verdict(tenant_b, tmp_path, "k8s://ConfigMap/tenant-b/does-not-exist", admitted)
    unsigned = configmap_verdict(tenant_b, tmp_path, "k8s://ConfigMap/tenant-b/b-settings", admitted)
    assert missing.reason == unsigned.reason == "unsigned"
    assert missing.message.replace("does-not-exist", "X") == unsigned.message.replace("b-settings", "X")


class _Recording:
    """A ConfigMap reader that records the deadline it is given (the port, not the cluster, is under test)."""

    def __init__(self) -> None:
        self.deadlines: list[float] = []

    def read_data(self, namespace: str, name: str, deadline: float) -> dict[str, str] | None:
        self.deadlines.append(deadline)
        return None


def test_the_configmap_read_ends_by_the_request_deadline() -> None:
    reader = _Recording()
    policy = Policy.from_dict({"keys": [public_key_pem(KEY)], "signatureResourceRef": "k8s://ConfigMap/ns/sigs"})
    deadline = time.monotonic() + 0.05  # well inside the dry-run timeout the read was given before
    decide(Review.for_object(configmap("app")), policy, sources=Sources(configmaps=reader), deadline=deadline)
    assert reader.deadlines and max(reader.deadlines) <= deadline
