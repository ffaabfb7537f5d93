"""The real service with dry-run enabled, against the fake API server (recorded answers).

``manifest-provider serve`` (gunicorn, TLS, client certificates) gets
``MANIFEST_PROVIDER_KUBECONFIG`` pointing at ``tests.support.fakeapi.FakeApiServer``;
both routes must answer within the service deadline whatever the cluster does.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakeapi import FakeApiServer, recording
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import sign
from tests.support.server import Server, running_server

#: One fake API server for the module's real server (tests/conftest.py).
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.fake_api(per="module")]

GATEKEEPER = "/v1/gatekeeper/verify"
KYVERNO = "/v1/kyverno/verify"
#: The service's deadline (provider/service/config.py ``deadline_seconds``) plus slack for TLS and a loaded CI machine.
ANSWER_WITHIN = 2.5 + 1.0


@pytest.fixture(scope="module")
def service(fake: FakeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    kubeconfig = fake.kubeconfig(Path(tmp_path_factory.mktemp("kube")) / "kubeconfig")
    with running_server(env={"MANIFEST_PROVIDER_KUBECONFIG": str(kubeconfig)}) as server:
        yield server


@pytest.fixture(autouse=True)
def healthy(fake: FakeApiServer) -> Iterator[None]:
    fake.fault, fake.fault_scope = None, "post"
    fake.requests.clear()
    yield
    fake.fault = None


POLICY = {"keys": [public_key_pem(make_key())], "dryRun": {"enabled": True}}


def figure1(change: Any = None) -> dict[str, Any]:
    """The seed paper's Figure 1 Deployment, signed, admitted as the API server made it."""
    rec = recording("deployment-seed-paper-figure1")
    (signed,) = sign(rec.request_body, make_key())
    admitted = copy.deepcopy(rec.body)
    admitted["metadata"]["annotations"] = signed["metadata"]["annotations"]
    # A fresh uid per call: the service caches verdicts by object, and these tests need fresh answers.
    admitted["metadata"]["uid"] = str(uuid.uuid4())
    if change:
        change(admitted)
    return admitted


def admission(obj: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "uid": str(uuid.uuid4()), "kind": {"group": "apps", "version": "v1", "kind": obj["kind"]}, "operation": "CREATE",
        "namespace": obj["metadata"].get("namespace", "default"), "name": obj["metadata"].get("name"),
        "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]}, "object": obj, **fields,
    }  # fmt: skip


def gatekeeper(service: Server, *reviews: dict[str, Any]) -> tuple[dict[str, Any], float]:
    keys = [json.dumps({"review": review, "policy": POLICY}) for review in reviews]
    body = {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest", "request": {"keys": keys}}
    start = time.monotonic()
    answer = service.post_json(GATEKEEPER, body)
    return answer["response"], time.monotonic() - start


def kyverno(service: Server, request: dict[str, Any]) -> tuple[dict[str, Any], float]:
    start = time.monotonic()
    answer = service.post_json(KYVERNO, {"request": request, "policy": POLICY})
    return answer, time.monotonic() - start


def hostnetwork(obj: dict[str, Any]) -> None:
    obj["spec"]["template"]["spec"]["hostNetwork"] = True


def test_gatekeeper_verifies_through_the_clusters_dry_run(service: Server, fake: FakeApiServer) -> None:
    response, elapsed = gatekeeper(service, admission(figure1()), admission(figure1(hostnetwork)))
    assert response["systemError"] == ""
    good, bad = (item["value"] for item in response["items"])
    assert (good["allowed"], good["reason"]) == (True, "verified")
    assert (bad["allowed"], bad["reason"]) == (False, "content-mismatch")
    assert bad["diff"] == [{"key": "spec.template.spec.hostNetwork", "values": {"before": None, "after": True}}]
    posts = fake.creates()
    assert len(posts) == 2 and all(p.query["dryRun"] == ["All"] and p.status == 201 for p in posts)
    assert elapsed < ANSWER_WITHIN


def test_kyverno_verifies_through_the_clusters_dry_run(service: Server, fake: FakeApiServer) -> None:
    answer, elapsed = kyverno(service, admission(figure1()))
    assert (answer["allowed"], answer["reason"]) == (True, "verified")
    assert len(fake.creates()) == 1 and elapsed < ANSWER_WITHIN


@pytest.mark.parametrize(
    ("fault", "scope"),
    [("slow", "post"), ("slow", "all"), ("500", "post"), ("403", "post")],
    ids=["slow-create", "slow-discovery", "500", "403"],
)
def test_a_cluster_that_cannot_answer_is_a_gatekeeper_system_error_within_the_deadline(
    service: Server, fake: FakeApiServer, fault: str, scope: str
) -> None:
    fake.fault, fake.fault_scope = fault, scope
    response, elapsed = gatekeeper(service, admission(figure1()))
    assert elapsed < ANSWER_WITHIN
    assert "dry-run-failed" in response["systemError"], response
    # Not cached: once the cluster answers again, the same object verifies.
    fake.fault = None
    obj = figure1()
    again, _ = gatekeeper(service, admission(obj))
    assert again["systemError"] == "" and again["items"][0]["value"]["reason"] == "verified"


def test_kyverno_gets_a_deny_with_the_reason_when_the_cluster_is_slow(service: Server, fake: FakeApiServer) -> None:
    fake.fault = "slow"
    answer, elapsed = kyverno(service, admission(figure1()))
    assert (answer["allowed"], answer["reason"]) == (False, "dry-run-failed")
    assert elapsed < ANSWER_WITHIN


def test_a_manifest_the_api_server_rejects_is_a_deny_item(service: Server, fake: FakeApiServer) -> None:
    fake.fault = "422"
    response, elapsed = gatekeeper(service, admission(figure1()))
    assert response["systemError"] == ""
    (item,) = response["items"]
    assert (item["value"]["allowed"], item["value"]["reason"]) == (False, "dry-run-failed")
    assert "is invalid" in item["value"]["message"] and elapsed < ANSWER_WITHIN


def test_the_services_own_dry_run_request_is_allowed_by_the_service(service: Server, fake: FakeApiServer) -> None:
    """Our dry-run create reaches Gatekeeper/Kyverno like any create, with dryRun: true."""
    gatekeeper(service, admission(figure1()))
    (post,) = fake.creates()
    request = fake.admission_request(post)
    response, _ = gatekeeper(service, request)
    assert response["items"][0]["value"]["reason"] == "dry-run-request"
    answer, _ = kyverno(service, request)
    assert (answer["allowed"], answer["reason"]) == (True, "dry-run-request")
    assert len(fake.creates()) == 1
