"""Held policies watched in a cluster: the app against the fake API server, the real ``kubernetes`` client.

The fake serves the CRDs of ``manifests/crds`` (writes validated against their
schemas, ``status`` through the status subresource) and a watch as the API
server's watch cache does (``tests/support/fakestore.py``). Each test waits for
something to happen at all (:data:`PATIENCE`), never for how fast.
"""

from __future__ import annotations

import base64
import copy
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from provider.service.app import create_app
from provider.service.state import EXTENSION, Service
from tests.support.fakeapi import FakeApiServer
from tests.support.heldpolicies import admission_review, cluster_policy, crds, tenant_policy
from tests.support.keys import make_key, public_key_pem
from tests.support.kube_schema import validate_object
from tests.support.manifests import configmap, sign

PATIENCE = 60.0
KEY = make_key("ecdsa-p256", 341)
TEAM = make_key("ecdsa-p256", 342)
(SIGNED,) = sign(configmap("app", "shop", mode="prod"), KEY)
UNSIGNED = configmap("app", "shop", mode="prod")
PATH = "/v1/admission/validate"
CRDS = {crd["spec"]["names"]["kind"]: crd for crd in crds()}


def keys(*private: Any) -> dict[str, Any]:
    return {"keys": [public_key_pem(k) for k in private]}


def wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {PATIENCE} s: {what}")
        time.sleep(0.02)


class Cluster:
    def __init__(self, fake: FakeApiServer, client: FlaskClient, service: Service) -> None:
        self.fake, self.client, self.service = fake, client, service

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create a policy as kubectl would: refused as the API server refuses an invalid one."""
        assert validate_object(obj, CRDS[obj["kind"]]) == []
        return self.fake.add(obj)

    def answer(self, obj: dict[str, Any], **fields: Any) -> dict[str, Any]:
        response = self.client.post(PATH, json=admission_review(obj, **fields))
        assert response.status_code == 200
        body: dict[str, Any] = response.get_json()["response"]
        return body

    def ready(self) -> bool:
        return self.client.get("/readyz").status_code == 200

    def stored(self, kind: str) -> dict[str, dict[str, Any]]:
        return {o["metadata"]["name"]: o for o in self.fake.stored("manifest-provider.io/v1alpha1", kind)}

    def condition(self, kind: str, name: str) -> dict[str, Any] | None:
        obj = self.stored(kind).get(name)
        conditions = ((obj or {}).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Ready"), None)


def start(
    fake: FakeApiServer, tmp_path: Path, *, install: bool = True, **settings: Any
) -> tuple[Cluster, Callable[[], None]]:
    if install:
        for crd in CRDS.values():
            fake.install_crd(crd)
    for name, labels in (("shop", {"env": "prod"}), ("lab", {"env": "test"})):
        fake.add({"apiVersion": "v1", "kind": "Namespace",
                  "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}}})  # fmt: skip
    app = create_app({"KUBECONFIG": str(fake.kubeconfig(tmp_path / "kubeconfig")), "WATCH_POLICIES": True,
                      "DEADLINE_SECONDS": 20, "TESTING": True, **settings})  # fmt: skip
    service: Service = app.extensions[EXTENSION]
    return Cluster(fake, app.test_client(), service), service.held.stop


@pytest.fixture
def cluster(fake: FakeApiServer, tmp_path: Path) -> Iterator[Cluster]:
    running, stop = start(fake, tmp_path)
    try:
        yield running
    finally:
        stop()


def test_until_the_first_list_completes_it_is_not_ready_and_denies_with_why(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    running, stop = start(fake, tmp_path, install=False)
    try:
        assert not running.ready()
        wait_for(lambda: "not found" in running.answer(SIGNED).get("status", {}).get("message", ""), "the list failed")
        answer = running.answer(SIGNED)
        assert answer["allowed"] is False and answer["status"]["reason"] == "transient-error"
        assert "has not finished reading the ClusterManifestPolicy objects" in answer["status"]["message"]
        body = running.client.get("/readyz").get_json()
        assert body == {"status": "not ready", "reason": "policies-not-read"}
        for crd in CRDS.values():
            fake.install_crd(crd)
        wait_for(running.ready, "ready once the CRDs serve")
        answer = running.answer(SIGNED)
        assert answer["allowed"] is True and answer["auditAnnotations"]["reason"] == "out-of-scope"
    finally:
        stop()


def test_a_policy_added_applies_and_its_status_says_it_compiled(cluster: Cluster) -> None:
    wait_for(cluster.ready, "ready")
    assert cluster.answer(UNSIGNED)["allowed"] is True
    cluster.add(cluster_policy("signed-configmaps", keys(KEY),
                               match={"kinds": [{"apiGroups": [""], "kinds": ["ConfigMap"]}]}))  # fmt: skip
    wait_for(lambda: cluster.answer(UNSIGNED)["allowed"] is False, "the policy applies")
    denied = cluster.answer(UNSIGNED)
    assert denied["status"]["reason"] == "unsigned"
    assert denied["auditAnnotations"]["policy"] == "ClusterManifestPolicy signed-configmaps"
    assert cluster.answer(SIGNED)["allowed"] is True
    wait_for(lambda: cluster.condition("ClusterManifestPolicy", "signed-configmaps") is not None, "status written")
    condition = cluster.condition("ClusterManifestPolicy", "signed-configmaps")
    assert condition is not None and condition["status"] == "True" and condition["reason"] == "Compiled"
    assert condition["observedGeneration"] == 1
    writes = [r for r in cluster.fake.requests if r.method == "PUT" and r.path.endswith("/status")]
    assert writes and {r.user for r in writes} == {cluster.fake.username}  # the service's own identity
    stored = cluster.stored("ClusterManifestPolicy")["signed-configmaps"]
    assert validate_object(stored, CRDS["ClusterManifestPolicy"]) == []


def test_a_policy_that_does_not_compile_says_why_in_status_and_denies_what_it_matches(cluster: Cluster) -> None:
    wait_for(cluster.ready, "ready")
    cluster.add(tenant_policy("broken", "shop", {"keys": []}))
    wait_for(lambda: cluster.answer(SIGNED)["allowed"] is False, "the broken policy denies")
    answer = cluster.answer(SIGNED)
    assert answer["status"]["reason"] == "policy-invalid"
    assert answer["status"]["message"].startswith("ManifestPolicy shop/broken cannot be used: spec.policy: no keys")
    wait_for(lambda: cluster.condition("ManifestPolicy", "broken") is not None, "status written")
    condition = cluster.condition("ManifestPolicy", "broken")
    assert condition is not None and condition["status"] == "False" and condition["reason"] == "PolicyInvalid"
    assert "no keys or signers" in condition["message"]
    lab = copy.deepcopy(SIGNED)
    lab["metadata"]["namespace"] = "lab"
    assert cluster.answer(lab)["allowed"] is True  # a tenant's policy, even broken, stays in its namespace


def test_a_change_is_judged_again_and_a_deletion_stops_it(cluster: Cluster) -> None:
    wait_for(cluster.ready, "ready")
    stored = cluster.add(cluster_policy("p", keys(TEAM)))
    wait_for(lambda: cluster.answer(SIGNED).get("status", {}).get("reason") == "signature-invalid", "applies")
    changed = copy.deepcopy(stored)
    changed["spec"]["policy"] = keys(KEY)
    cluster.fake.change(changed)
    wait_for(lambda: cluster.answer(SIGNED)["allowed"] is True, "the change applies")
    wait_for(
        lambda: (cluster.condition("ClusterManifestPolicy", "p") or {}).get("observedGeneration") == 2, "status follows"
    )
    cluster.fake.remove("manifest-provider.io/v1alpha1", "ClusterManifestPolicy", "", "p")
    wait_for(lambda: cluster.answer(UNSIGNED)["allowed"] is True, "the deletion applies")


def test_after_a_410_it_lists_again_and_misses_nothing(cluster: Cluster) -> None:
    wait_for(cluster.ready, "ready")
    watches = [w for w in cluster.fake.watches() if "clustermanifestpolicies" in w.path]
    assert watches and all(w.query.get("allowWatchBookmarks") == ["true"] for w in watches)
    lists_before = sum(
        1 for r in cluster.fake.requests if r.path.endswith("/clustermanifestpolicies") and "watch" not in r.query
    )
    cluster.fake.store.compact()
    cluster.fake.add(cluster_policy("while-cut", keys(TEAM)))
    cluster.fake.store.compact()  # the event is gone from the window too: only a new list can show it
    cluster.fake.drop_watches()
    wait_for(
        lambda: cluster.answer(SIGNED).get("status", {}).get("reason") == "signature-invalid", "seen after the relist"
    )
    lists_after = sum(
        1 for r in cluster.fake.requests if r.path.endswith("/clustermanifestpolicies") and "watch" not in r.query
    )
    assert lists_after > lists_before


def test_namespace_labels_are_watched_for_namespace_selectors(cluster: Cluster) -> None:
    wait_for(cluster.ready, "ready")
    cluster.add(cluster_policy("prod-only", keys(KEY), match={"namespaceSelector": {"matchLabels": {"env": "prod"}}}))
    wait_for(lambda: cluster.answer(UNSIGNED)["allowed"] is False, "applies in shop (env=prod)")
    (shop,) = [n for n in cluster.fake.stored("v1", "Namespace") if n["metadata"]["name"] == "shop"]
    shop["metadata"]["labels"]["env"] = "test"
    cluster.fake.change(shop)
    wait_for(lambda: cluster.answer(UNSIGNED)["allowed"] is True, "no longer applies once shop is env=test")


def test_policy_objects_are_refused_at_admission_when_they_would_not_compile(cluster: Cluster) -> None:
    wait_for(cluster.ready, "ready")
    answer = cluster.answer(
        tenant_policy("t", "shop", {"keys": [public_key_pem(KEY)], "signatureResourceRef": "k8s://ConfigMap/lab/sigs"})
    )
    assert answer["allowed"] is False and answer["status"]["reason"] == "policy-invalid"
    assert "its own namespace" in answer["status"]["message"]
    assert cluster.answer(tenant_policy("t", "shop", keys(TEAM)))["allowed"] is True


def test_the_service_threads_stop(fake: FakeApiServer, tmp_path: Path) -> None:
    running, stop = start(fake, tmp_path)
    wait_for(running.ready, "ready")
    before = {t.name for t in threading.enumerate() if t.name.startswith(("watch-", "policy-"))}
    assert {"watch-namespaces", "watch-clustermanifestpolicies", "watch-manifestpolicies", "policy-status"} <= before
    stop()
    wait_for(lambda: not {t.name for t in threading.enumerate() if t.name.startswith(("watch-", "policy-"))} & before,
             "the threads end")  # fmt: skip


def test_every_request_the_service_made_is_one_the_shipped_rbac_allows(cluster: Cluster) -> None:
    """The webhook overlay's ClusterRole (and the chart's, tests/manifests/test_chart.py) against what was really asked."""
    import re

    import yaml

    from tests.support.data import REPO

    wait_for(cluster.ready, "ready")
    cluster.add(cluster_policy("p", keys(KEY)))
    cluster.add(tenant_policy("t", "shop", keys(TEAM)))
    wait_for(lambda: cluster.condition("ManifestPolicy", "t") is not None, "status written")
    (role,) = [d for d in yaml.safe_load_all((REPO / "manifests/overlays/webhook/rbac.yaml").read_text())
               if (d["kind"], d["metadata"]["name"]) == ("ClusterRole", "manifest-provider-policies")]  # fmt: skip
    path = re.compile(
        r"/(?:api/v1|apis/(?P<g>[^/]+)/[^/]+)(?:/namespaces/[^/]+)?/(?P<res>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>status))?\Z"
    )
    asked = set()
    for logged in cluster.fake.requests:
        if logged.user != cluster.fake.username:
            continue
        found = path.match(logged.path)
        assert found is not None, logged.path
        resource = found["res"] + ("/status" if found["sub"] else "")
        if logged.method == "GET":
            verb = "watch" if logged.query.get("watch") else ("get" if found["name"] else "list")
        else:
            verb = {"PUT": "update", "POST": "create", "PATCH": "patch", "DELETE": "delete"}[logged.method]
        asked.add((verb, found["g"] or "", resource))
    assert {
        ("list", "", "namespaces"),
        ("watch", "", "namespaces"),
        ("update", "manifest-provider.io", "manifestpolicies/status"),
    } <= asked
    for verb, group, resource in sorted(asked):
        assert any(verb in r["verbs"] and group in r["apiGroups"] and resource in r["resources"] for r in role["rules"]), (
            verb, group, resource,
        )  # fmt: skip


def test_one_request_reads_at_most_max_keys_secrets_whatever_the_policies_matching_it_name(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    """Two policies of 40 Secret-held keys each: the first is read, the second runs out and denies, never skipped."""
    fake.namespaces.add("keys")
    pem = public_key_pem(KEY)
    for i in range(80):
        fake.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"k{i}", "namespace": "keys"},
                  "type": "Opaque", "data": {"cosign.pub": base64.b64encode(pem.encode()).decode()}})  # fmt: skip
        fake.granted_names.setdefault("secrets", set()).add(("keys", f"k{i}"))
    running, stop = start(fake, tmp_path, KEY_SECRET_NAMESPACES="keys")
    try:
        configmaps = {"kinds": [{"apiGroups": [""], "kinds": ["ConfigMap"]}]}
        for n in range(2):
            refs = [f"k8s://keys/k{n * 40 + i}" for i in range(40)]
            running.add(cluster_policy(f"many-keys-{n}", {"keys": refs}, match=configmaps))
        wait_for(lambda: running.ready() and len(running.service.held.store.policies) == 2, "both policies held")
        answer = running.answer(SIGNED)
        assert answer["allowed"] is False and answer["status"]["reason"] == "policy-invalid"
        assert "at most 64 are read for one request" in answer["status"]["message"]
        reads = [
            r for r in fake.requests if r.method == "GET" and r.path.startswith("/api/v1/namespaces/keys/secrets/")
        ]
        assert len({r.path for r in reads}) == 64
    finally:
        stop()
