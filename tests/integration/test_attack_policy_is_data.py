"""A policy is data, on the real server: gunicorn over TLS, both routes (issue 25).

The unit side of these attack classes is in the files of what each attacks
(``tests/unit/keyless/test_trust_files.py``, ``tests/unit/kube/test_configmap_tenants.py``,
``tests/unit/oci/test_registry_redirects.py``, ...); here the same bodies reach a real worker. Before the fix, a body whose
``trustedRoot`` named a FIFO or ``/proc/self/fd/N`` (the worker's own pipes)
blocked the verifying thread for ever, and after bodies naming fds 0-31 every
request on that worker answered ``deadline-exceeded`` on both routes, the honest
signed object included; the answer told the server's TLS key (a readable file)
from a missing path and a directory; one registry's broken redirect failed a
whole Gatekeeper batch; a policy in namespace A read B's signature ConfigMap.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provider.signatures.signing import sign_documents
from tests.support.fakeapi import FakeApiServer
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap
from tests.support.registry import Misbehaving
from tests.support.server import Server, running_server

pytestmark = [pytest.mark.integration]

GATEKEEPER = "/v1/gatekeeper/verify"
KYVERNO_ROUTE = "/v1/kyverno/verify"
KEY = make_key("ecdsa-p256", 251)
#: The worker's own descriptors: stdin, its listening and accepted sockets, gunicorn's pipes, the log.
OWN_DESCRIPTORS = [f"/proc/self/fd/{n}" for n in range(32)]


def admission(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": obj["kind"]},
            "operation": "CREATE", "namespace": meta.get("namespace"), "name": meta["name"],
            "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]}, "object": obj}  # fmt: skip


def provider_request(keys: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest",
            "request": {"keys": [json.dumps(k) for k in keys]}}  # fmt: skip


def honest() -> tuple[dict[str, Any], dict[str, Any]]:
    (signed,) = sign_documents([configmap("app", "team-a", mode="production")], KEY)
    return admission(signed), {"keys": [public_key_pem(KEY)]}


def keyless(root: str) -> dict[str, Any]:
    return {"signers": ["jane@example.com"], "trustedRoot": root}


def assert_honest_objects_verify(server: Server) -> None:
    """Every thread of the worker still answers: more requests than it has threads, on both routes."""
    review, policy = honest()
    for _ in range(8):
        answer = server.post_json(KYVERNO_ROUTE, {"request": review, "policy": policy})
        assert (answer["allowed"], answer["reason"]) == (True, "verified"), answer
        items = server.post_json(GATEKEEPER, provider_request([{"review": review, "policy": policy}]))
        assert not items["response"].get("systemError"), items
        (item,) = items["response"]["items"]
        assert item["value"]["reason"] == "verified", item


@pytest.fixture(scope="module")
def fifo(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("fifo") / "root.json"
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize("operator", ["allows-none", "lists-them-by-mistake"])
def test_trust_root_paths_that_never_end_never_stop_a_worker(fifo: str, operator: str) -> None:
    """A FIFO and the worker's fds 0-31, on both routes; then the honest object verifies on both."""
    paths = [fifo, *OWN_DESCRIPTORS]
    env = {"MANIFEST_PROVIDER_TRUSTED_ROOT_FILES": ",".join(paths)} if operator != "allows-none" else {}
    review, _ = honest()
    with running_server(env=env) as server:
        batch = server.post_json(
            GATEKEEPER, provider_request([{"review": review, "policy": keyless(p)} for p in paths])
        )
        assert not batch["response"].get("systemError"), batch["response"]
        errors = [item.get("error", "") for item in batch["response"]["items"]]
        assert len(errors) == len(paths) and all(e.startswith("policy-invalid: trustedRoot") for e in errors), errors
        for path in paths:
            answer = server.post_json(KYVERNO_ROUTE, {"request": review, "policy": keyless(path)})
            assert (answer["allowed"], answer["reason"]) == (False, "policy-invalid"), answer
        assert_honest_objects_verify(server)


@pytest.fixture(scope="module")
def server_and_paths(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, str]]]:
    with running_server() as server:
        key_dir = server.pki.server_key.parent
        yield (
            server,
            {
                "the-servers-tls-key": str(server.pki.server_key),
                "missing-beside-it": str(key_dir / "no-such-file.json"),
                "its-directory": str(key_dir),
                "a-system-file": "/etc/passwd",
                "the-process-environment": "/proc/self/environ",
            },
        )


def test_the_answer_does_not_tell_the_servers_files_apart(server_and_paths: tuple[Server, dict[str, str]]) -> None:
    server, paths = server_and_paths
    review, _ = honest()
    kyverno, gatekeeper = {}, {}
    for what, path in paths.items():
        answer = server.post_json(KYVERNO_ROUTE, {"request": review, "policy": keyless(path)})
        assert answer["reason"] == "policy-invalid", answer
        kyverno[what] = answer["message"].replace(repr(path), "<path>")
        items = server.post_json(GATEKEEPER, provider_request([{"review": review, "policy": keyless(path)}]))
        (item,) = items["response"]["items"]
        gatekeeper[what] = item["error"].replace(repr(path), "<path>")
    assert len(set(kyverno.values())) == 1, kyverno
    assert len(set(gatekeeper.values())) == 1, gatekeeper
    for leak in ("No such file", "is a directory", "Permission", "JSON", "column", "PRIVATE KEY"):
        assert leak not in next(iter(kyverno.values()))


# --- one registry's broken answer is one key's answer -----------------------------------------------------------


@pytest.mark.parametrize(
    "location", ["http://[::1/v2/x", "http://127.0.0.1:99999/x"], ids=["broken-ipv6", "port-99999"]
)
def test_a_registrys_broken_redirect_fails_its_own_key_not_the_batch(location: str) -> None:
    def redirect(handler: Any) -> None:
        handler.send_response(302)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    registry = Misbehaving(redirect)
    bundled = configmap("bundled", "team-a")
    bundled["metadata"]["annotations"] = {"cosign.sigstore.dev/resourceBundleRef": f"{registry.host}/bundles/x:v1"}
    bundle_policy = {"keys": [public_key_pem(KEY)], "resourceBundleRef": {"repositories": [f"{registry.host}/bundles"]}}
    review, policy = honest()
    try:
        with running_server(env={"MANIFEST_PROVIDER_BUNDLE_REPOSITORIES": registry.host}) as server:
            keys = [{"review": admission(bundled), "policy": bundle_policy}, {"review": review, "policy": policy}]
            answer = server.post_json(GATEKEEPER, provider_request(keys))
            assert not answer["response"].get("systemError"), answer["response"]
            broken, fine = (item["value"] for item in answer["response"]["items"])
            assert (broken["allowed"], broken["reason"]) == (False, "bundle-invalid"), broken
            assert (fine["allowed"], fine["reason"]) == (True, "verified"), fine
            alone = server.post_json(KYVERNO_ROUTE, {"request": admission(bundled), "policy": bundle_policy})
            assert (alone["allowed"], alone["reason"]) == (False, "bundle-invalid"), alone
    finally:
        registry.stop()


def test_by_default_no_policy_makes_the_server_fetch_a_bundle() -> None:
    asked: list[str] = []

    def record(handler: Any) -> None:
        asked.append(handler.path)
        handler.send_response(404)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    registry = Misbehaving(record)
    bundled = configmap("bundled", "team-a")
    bundled["metadata"]["annotations"] = {"cosign.sigstore.dev/resourceBundleRef": f"{registry.host}/bundles/x:v1"}
    bundle_policy = {"keys": [public_key_pem(KEY)], "resourceBundleRef": {"repositories": [f"{registry.host}/bundles"]}}
    try:
        with running_server() as server:
            answer = server.post_json(KYVERNO_ROUTE, {"request": admission(bundled), "policy": bundle_policy})
    finally:
        registry.stop()
    assert (answer["allowed"], answer["reason"]) == (False, "policy-invalid"), answer
    assert "MANIFEST_PROVIDER_BUNDLE_REPOSITORIES" in answer["message"]
    assert asked == []


# --- a policy in one namespace reads nothing of another's ------------------------------------------------------


def test_a_policy_in_one_namespace_gets_nothing_of_anothers_signature_configmap(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    (signed_b,) = sign_documents([configmap("app", None, endpoint="tenant-b-secret.internal")], KEY)
    annotations = signed_b["metadata"]["annotations"]
    fake.namespaces |= {"tenant-a", "tenant-b"}
    fake.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b-signatures", "namespace": "tenant-b"},
              "data": {n: annotations[f"cosign.sigstore.dev/{n}"] for n in ("message", "signature")}})  # fmt: skip
    admitted = configmap("app", "tenant-a", endpoint="guess")
    messages = []
    with running_server(env={"MANIFEST_PROVIDER_KUBECONFIG": str(fake.kubeconfig(tmp_path / "kubeconfig"))}) as server:
        for name in ("b-signatures", "does-not-exist"):
            policy = {"keys": [public_key_pem(KEY)], "signatureResourceRef": f"k8s://ConfigMap/tenant-b/{name}"}
            answer = server.post_json(KYVERNO_ROUTE, {"request": admission(admitted), "policy": policy})
            assert (answer["allowed"], answer["reason"]) == (False, "policy-invalid"), answer
            assert "tenant-b-secret" not in json.dumps(answer)
            messages.append(answer["message"].replace(name, "<name>"))
            items = server.post_json(GATEKEEPER, provider_request([{"review": admission(admitted), "policy": policy}]))
            (item,) = items["response"]["items"]
            assert item["error"].startswith("policy-invalid: signatureResourceRef"), item
        assert_honest_objects_verify(server)
    assert messages[0] == messages[1]
    assert not [r.path for r in fake.requests if "/configmaps/" in r.path]  # tenant-b was never asked about
