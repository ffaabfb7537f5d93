"""One input, one verdict: the library, classify, the CLI and the three HTTP routes decide alike.

Every verdict is decided once, inside the verifier; the entry points only translate
(docs/architecture.md). One table of inputs -- an admission request and a policy -- goes
through all of them, and each must report the same reason: a difference here is a second
decision hiding in a face (as "dry-run enabled but no cluster" once was). The admission
webhook route holds its policy instead of receiving it: each case's policy is written as a
ClusterManifestPolicy to the file the server reads (``--policy-file``), and the request is
the API server's AdmissionReview.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider import Policy, Review, decide
from provider.audit.classify import Classifier
from provider.audit.events import parse_event
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign
from tests.support.server import Server

pytestmark = pytest.mark.integration

KEY = make_key("ecdsa-p256", 61)
OTHER = make_key("ecdsa-p256", 62)
SA = "system:serviceaccount:kube-system:"
SA_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]
(SIGNED,) = sign(configmap("app", "shop", mode="prod"), KEY)
TAMPERED = copy.deepcopy(SIGNED)
TAMPERED["data"]["mode"] = "debug"
UNSIGNED = configmap("app", "shop", mode="prod")
GAP = copy.deepcopy(SIGNED)
GAP["metadata"]["annotations"]["cosign.sigstore.dev/signature_3"] = "smuggled"
SCALE = {
    "apiVersion": "autoscaling/v1",
    "kind": "Scale",
    "metadata": {"name": "web", "namespace": "shop"},
    "spec": {"replicas": 5},
}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web-1", "namespace": "shop"},
    "spec": {"containers": [{"name": "c", "image": "x"}]},
}


def policy(key: Any = KEY, **extra: Any) -> dict[str, Any]:
    return {"keys": [public_key_pem(key)], **extra}


def request(obj: dict[str, Any] | None, *, operation: str = "CREATE", user: str = "alice@example.com",
            groups: list[str] | None = None, **fields: Any) -> dict[str, Any]:  # fmt: skip
    target = obj or fields.get("oldObject") or {}
    meta = target.get("metadata", {})
    group, _, version = str(target.get("apiVersion", "v1")).rpartition("/")
    return {
        "uid": "u-1",
        # The object's own type, as the API server names it (a scale request's is autoscaling/v1 Scale).
        "kind": {"group": group, "version": version, "kind": target.get("kind")},
        "resource": {"group": "", "version": "v1", "resource": f"{str(target.get('kind')).lower()}s"},
        "operation": operation,
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "userInfo": {"username": user, "groups": groups if groups is not None else ["system:authenticated"]},
        "object": obj,
        **fields,
    }


#: (case, admission request, policy, the one reason every entry point must give)
CASES = [
    ("verified", request(SIGNED), policy(), "verified"),
    ("tampered", request(TAMPERED), policy(), "content-mismatch"),
    ("unsigned", request(UNSIGNED), policy(), "unsigned"),
    ("other-key", request(SIGNED), policy(OTHER), "signature-invalid"),
    ("unread-envelope-entry", request(GAP), policy(), "content-mismatch"),
    ("dry-run-policy-no-cluster", request(TAMPERED), policy(dryRun={"enabled": True}), "dry-run-failed"),
    ("skipped-user", request(UNSIGNED, user="ci-bot"), policy(skipUsers=[{"users": ["ci-bot"]}]), "skipped-user"),
    ("skipped-object", request(UNSIGNED), policy(skipObjects=[{"group": "-", "kind": "ConfigMap", "name": "app"}]), "skipped-object"),
    ("common-profile", request(POD, user=SA + "replicaset-controller", groups=SA_GROUPS), policy(), "skipped-user"),
    ("controller-name-alone", request(POD, user=SA + "replicaset-controller"), policy(), "unsigned"),
    ("dry-run-request", request(UNSIGNED, dryRun=True), policy(), "dry-run-request"),
    ("delete", request(None, operation="DELETE", oldObject=UNSIGNED), policy(), "unverifiable-operation"),
    ("scale", {**request(SCALE, operation="UPDATE", oldObject={**SCALE, "spec": {"replicas": 2}}, subResource="scale"),
               "resource": {"group": "apps", "version": "v1", "resource": "deployments"}}, policy(), "unverifiable-subresource"),
]  # fmt: skip
IDS = [case[0] for case in CASES]


def test_the_table_covers_allow_deny_and_the_decisions_once_split() -> None:
    reasons = {case[3] for case in CASES}
    assert {"verified", "content-mismatch", "dry-run-failed", "skipped-user", "unverifiable-subresource"} <= reasons


@pytest.mark.parametrize(("case", "admission", "raw_policy", "reason"), CASES, ids=IDS)
def test_the_library(case: str, admission: dict[str, Any], raw_policy: dict[str, Any], reason: str) -> None:
    assert decide(Review.from_admission(admission), Policy.from_dict(raw_policy)).reason == reason


def _audit_event(admission: dict[str, Any]) -> dict[str, Any]:
    """The audit event the API server writes for this request (level Request)."""
    verb = {"CREATE": "create", "UPDATE": "update", "DELETE": "delete"}[admission["operation"]]
    resource = admission["resource"]
    ref = {
        "resource": resource["resource"],
        "apiVersion": resource["version"],
        "namespace": admission["namespace"],
        "name": admission["name"],
    }
    if resource["group"]:
        ref["apiGroup"] = resource["group"]
    if admission.get("subResource"):
        ref["subresource"] = admission["subResource"]
    uri = "/api/v1/x?dryRun=All" if admission.get("dryRun") else "/api/v1/x"
    event = {"apiVersion": "audit.k8s.io/v1", "kind": "Event", "level": "Request", "auditID": "a", "stage": "ResponseComplete",
             "requestURI": uri, "verb": verb, "user": admission["userInfo"], "objectRef": ref}  # fmt: skip
    if admission["object"] is not None:
        event["requestObject"] = admission["object"]
    return event


@pytest.mark.parametrize(("case", "admission", "raw_policy", "reason"), CASES, ids=IDS)
def test_classify(case: str, admission: dict[str, Any], raw_policy: dict[str, Any], reason: str) -> None:
    verdict = Classifier(Policy.from_dict(raw_policy)).classify(parse_event(_audit_event(admission)))
    assert verdict.result.reason == reason  # type: ignore[union-attr]


@pytest.mark.parametrize(("case", "admission", "raw_policy", "reason"), CASES, ids=IDS)
def test_the_cli(case: str, admission: dict[str, Any], raw_policy: dict[str, Any], reason: str, tmp_path: Path) -> None:
    review = tmp_path / "review.json"
    review.write_text(
        json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": admission})
    )
    config = tmp_path / "policy.yaml"
    config.write_text(yaml.safe_dump(raw_policy))
    proc = subprocess.run([sys.executable, "-m", "provider.cli", "verify", "-f", str(review), "--config", str(config), "-o", "json"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode in (0, 1, 3), proc.stderr
    (result,) = json.loads(proc.stdout)["results"]
    assert result["reason"] == reason


@pytest.mark.parametrize(("case", "admission", "raw_policy", "reason"), CASES, ids=IDS)
def test_both_routes(
    case: str, admission: dict[str, Any], raw_policy: dict[str, Any], reason: str, provider_server: Server
) -> None:
    kyverno = provider_server.post_json("/v1/kyverno/verify", {"request": admission, "policy": raw_policy})
    assert kyverno["reason"] == reason
    key = json.dumps({"review": admission, "policy": raw_policy})
    body = {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest", "request": {"keys": [key]}}
    gatekeeper = provider_server.post_json("/v1/gatekeeper/verify", body)
    (item,) = gatekeeper["response"]["items"]
    assert item["value"]["reason"] == reason


# --- the service as its own admission webhook: the policy held, the request the API server's --------------


@pytest.fixture(scope="module")
def webhook_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    from tests.support.heldpolicies import cluster_policy, write_policies
    from tests.support.server import running_server

    path = write_policies(tmp_path_factory.mktemp("held") / "policies.yaml", cluster_policy("start", policy()))
    env = {"MANIFEST_PROVIDER_POLICY_FILE": str(path), "MANIFEST_PROVIDER_POLICY_FILE_POLL_SECONDS": "0.1"}
    with running_server(env=env) as server:
        yield server, path


@pytest.mark.parametrize(("case", "admission", "raw_policy", "reason"), CASES, ids=IDS)
def test_the_admission_webhook(
    case: str, admission: dict[str, Any], raw_policy: dict[str, Any], reason: str, webhook_server: tuple[Server, Path]
) -> None:
    import time

    from tests.support.apiserver_webhook import read_answer
    from tests.support.heldpolicies import cluster_policy, write_policies

    server, path = webhook_server
    name = f"case-{case}"
    write_policies(path, cluster_policy(name, raw_policy))  # Enforce, every kind: this case's policy alone
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": admission}
    deadline = time.monotonic() + 60
    while True:
        outcome = read_answer(server.post_json("/v1/admission/validate", body), admission["uid"])
        if outcome.annotations.get("manifests.manifest-provider.io/policy") == f"ClusterManifestPolicy {name}":
            break
        assert time.monotonic() < deadline, f"the server did not read {name} within 60 s"
        time.sleep(0.05)
    assert outcome.annotations["manifests.manifest-provider.io/reason"] == reason
    if outcome.status is not None:
        assert outcome.status["reason"] == reason
