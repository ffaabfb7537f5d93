"""The fake API server's status subresource behaves as the API server's for a CRD that declares it.

k8s.io/apiextensions-apiserver ``pkg/registry/customresource/strategy.go``: with a status
subresource, ``PrepareForCreate`` drops ``status`` and ``PrepareForUpdate`` keeps the stored one;
``statusStrategy.PrepareForUpdate`` keeps everything of the stored object but ``status``. A
version without the subresource serves no ``/status`` (404).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tests.support.fakeapi import FakeApiServer, runner_for
from tests.support.heldpolicies import cluster_policy, crds
from tests.support.keys import make_key, public_key_pem

KEYS = {"keys": [public_key_pem(make_key("ecdsa-p256", 351))]}
COLLECTION = "/apis/manifest-provider.io/v1alpha1/clustermanifestpolicies"
STATUS = {"conditions": [{"type": "Ready", "status": "True", "reason": "Compiled", "message": "ok"}]}


def call(runner: Any, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    query = None if method == "GET" else [("fieldManager", "test")]
    status, answer = runner.request(method, path, timeout=30, what=f"{method} {path}", query=query, body=body)
    return status, answer


def test_status_is_written_through_the_subresource_only(fake: FakeApiServer, tmp_path: Path) -> None:
    for crd in crds():
        fake.install_crd(crd)
    runner = runner_for(fake, tmp_path)
    status, created = call(runner, "POST", COLLECTION, {**cluster_policy("p", KEYS), "status": STATUS})
    assert status == 201 and "status" not in created  # dropped on create
    status, written = call(
        runner,
        "PUT",
        f"{COLLECTION}/p/status",
        {**created, "status": STATUS, "spec": {"action": "Audit", "policy": KEYS}},
    )
    assert status == 200 and written["status"] == STATUS and written["spec"]["action"] == "Enforce"  # spec ignored
    stale = copy.deepcopy(created)
    status, conflict = call(runner, "PUT", f"{COLLECTION}/p/status", {**stale, "status": {}})
    assert status == 409 and conflict["reason"] == "Conflict"
    changed = copy.deepcopy(written)
    changed["spec"]["action"] = "Audit"
    changed["status"] = {"conditions": []}
    status, updated = call(runner, "PUT", f"{COLLECTION}/p", changed)
    assert status == 200 and updated["spec"]["action"] == "Audit" and updated["status"] == STATUS  # status kept
    bad = {**updated, "status": {"conditions": [{"type": "Ready"}]}}
    status, invalid = call(runner, "PUT", f"{COLLECTION}/p/status", bad)
    assert status == 422 and "'status' is required" in invalid["message"]
    assert call(runner, "PUT", f"{COLLECTION}/absent/status", {**updated, "metadata": {"name": "absent"}})[0] == 404


def test_no_status_subresource_no_status_path(fake: FakeApiServer, tmp_path: Path) -> None:
    crd = copy.deepcopy(crds()[0])
    del crd["spec"]["versions"][0]["subresources"]
    fake.install_crd(crd)
    runner = runner_for(fake, tmp_path)
    status, created = call(runner, "POST", COLLECTION, {**cluster_policy("p", KEYS), "status": STATUS})
    assert status == 201 and created["status"] == STATUS  # an ordinary field then
    assert call(runner, "GET", f"{COLLECTION}/p/status")[0] == 404
