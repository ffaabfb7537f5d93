"""The AdmissionReview contract, from the Kubernetes API types, and the route that answers it.

``tests/support/apiserver_webhook.py`` reads every answer as the API server does
(``VerifyAdmissionResponse``, ``callHook``, ``ToStatusErr``, the warning recorder:
each rule cited there); an answer it would take for a failed call fails here.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from provider.errors import RequestError
from provider.policystore.combine import Admission
from provider.result import Result
from provider.service.app import create_app
from provider.service.state import EXTENSION
from provider.service.wire import admission
from tests.support.apiserver_webhook import (
    REQUEST_FIELDS,
    RESPONSE_FIELDS,
    RESPONSE_REQUIRED,
    STATUS_FIELDS,
    CallFailed,
    is_qualified_name,
    read_answer,
)
from tests.support.heldpolicies import admission_review, cluster_policy, review, tenant_policy, write_policies
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign

PATH = "/v1/admission/validate"
KEY = make_key("ecdsa-p256", 361)
OTHER = make_key("ecdsa-p256", 362)
(SIGNED,) = sign(configmap("app", "shop", mode="prod"), KEY)
TAMPERED = copy.deepcopy(SIGNED)
TAMPERED["data"]["mode"] = "debug"
UNSIGNED = configmap("app", "shop", mode="prod")


def keys(*private: Any) -> dict[str, Any]:
    return {"keys": [public_key_pem(k) for k in private]}


# --- the contract -----------------------------------------------------------------------------------


def test_the_requests_the_tests_send_are_admission_requests() -> None:
    request = review(SIGNED)
    assert set(request) <= set(REQUEST_FIELDS)
    for name, value in request.items():
        assert isinstance(value, REQUEST_FIELDS[name]), name
    assert {"uid", "kind", "resource", "operation", "userInfo"} <= set(request)  # no omitempty: always sent


@pytest.mark.parametrize("allowed", [True, False])
def test_an_answer_has_only_the_response_fields_of_the_api_types(allowed: bool) -> None:
    result = Result.proven("ok", ("sha256:ab",)) if allowed else Result.deny("content-mismatch", "x differs")
    answer = admission.response("u-1", Admission(allowed, result))
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = dict(answer["response"])
    assert set(response) <= set(RESPONSE_FIELDS) - {"patch", "patchType"}
    for name in RESPONSE_REQUIRED:
        assert name in response
    for name, value in response.items():
        assert isinstance(value, RESPONSE_FIELDS[name]), name
    if allowed:
        assert "status" not in response  # "IS NOT consulted in any way if Allowed is true"
    else:
        status = response["status"]
        assert set(status) <= set(STATUS_FIELDS)
        assert status == {"status": "Failure", "code": 403, "reason": "content-mismatch", "message": "x differs"}
    for key in response["auditAnnotations"]:
        assert is_qualified_name(f"manifests.manifest-provider.io/{key}")


def test_the_api_server_refuses_an_answer_with_another_uid_or_kind() -> None:
    answer = admission.response("u-1", Admission(True, Result.proven("ok")))
    read_answer(answer, "u-1")
    with pytest.raises(CallFailed, match=r"expected response\.uid"):
        read_answer(answer, "u-2")
    with pytest.raises(CallFailed, match="AdmissionReview"):
        read_answer({**answer, "apiVersion": "admission.k8s.io/v1beta1"}, "u-1")
    with pytest.raises(CallFailed, match="patch"):
        read_answer({**answer, "response": {**answer["response"], "patch": "W10="}}, "u-1")


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"{", "not valid JSON"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": review(SIGNED)}).encode(), "admissionReviewVersions"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), "no request"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {**review(SIGNED), "uid": ""}}).encode(), "request.uid"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {**review(SIGNED), "operation": None}}).encode(), "request.operation"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {**review(SIGNED), "userInfo": None}}).encode(), "request.userInfo"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {**review(SIGNED), "operation": "PATCH"}}).encode(), "is not CREATE"),
    ],
)  # fmt: skip
def test_a_request_that_is_not_one_is_an_error(body: bytes, words: str) -> None:
    with pytest.raises(RequestError, match=words):
        admission.read_review(body)


# --- the route --------------------------------------------------------------------------------------


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    return write_policies(
        tmp_path / "policies.yaml",
        cluster_policy("signed-configmaps", keys(KEY), match={"kinds": [{"apiGroups": [""], "kinds": ["ConfigMap"]}]}),
        tenant_policy("team-watch", "shop", keys(OTHER), action="Audit"),
    )


@pytest.fixture
def app(policy_file: Path) -> Iterator[Flask]:
    app = create_app({"POLICY_FILE": str(policy_file), "POLICY_FILE_POLL_SECONDS": 0.05, "TESTING": True})
    try:
        yield app
    finally:
        app.extensions[EXTENSION].held.stop()


def ready(client: FlaskClient) -> FlaskClient:
    import time

    deadline = time.monotonic() + 60
    while client.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, "not ready within 60 s"
        time.sleep(0.02)
    return client


def post(client: FlaskClient, body: Any) -> dict[str, Any]:
    response = client.post(PATH, data=json.dumps(body))
    assert response.status_code == 200
    answer: dict[str, Any] = response.get_json()
    return answer


def test_a_signed_write_is_admitted_and_a_tampered_one_denied_with_the_one_sentence(app: Flask) -> None:
    client = ready(app.test_client())
    good = admission_review(SIGNED)
    outcome = read_answer(post(client, good), good["request"]["uid"])
    assert outcome.allowed
    assert outcome.annotations["manifests.manifest-provider.io/reason"] == "verified"
    assert outcome.annotations["manifests.manifest-provider.io/policy"] == "ClusterManifestPolicy signed-configmaps"
    assert outcome.annotations["manifests.manifest-provider.io/signers"].startswith("sha256:")
    # The tenant's Audit policy trusts another key: a warning, never a denial.
    assert outcome.warnings == [
        "ManifestPolicy shop/team-watch (Audit): signature-invalid: " + outcome.warnings[0].split(": ", 2)[2]
    ]
    bad = admission_review(TAMPERED)
    outcome = read_answer(post(client, bad), bad["request"]["uid"])
    assert not outcome.allowed and outcome.status is not None
    assert outcome.status["reason"] == "content-mismatch" and outcome.status["code"] == 403
    assert outcome.status["message"] == (
        'configmaps "app" is forbidden: admission webhook "manifests.manifest-provider.io" denied the request: '
        "ConfigMap shop/app: data.mode differs: signed 'prod', admitted 'debug'"
    )


def test_an_unreadable_request_is_denied_with_its_uid_when_one_can_be_read(app: Flask) -> None:
    client = ready(app.test_client())
    body = admission_review(SIGNED)
    body["request"]["userInfo"] = "alice"
    answer = post(client, body)
    outcome = read_answer(answer, body["request"]["uid"])
    assert not outcome.allowed and outcome.status is not None
    assert outcome.status["reason"] == "request-invalid" and outcome.status["code"] == 400
    answer = post(client, {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": []})
    assert answer["response"]["uid"] == "" and answer["response"]["allowed"] is False


def test_until_the_policies_are_read_every_request_is_denied_and_not_ready(tmp_path: Path) -> None:
    missing = tmp_path / "not-yet.yaml"
    app = create_app({"POLICY_FILE": str(missing), "POLICY_FILE_POLL_SECONDS": 0.05, "TESTING": True})
    try:
        client = app.test_client()
        response = client.get("/readyz")
        assert response.status_code == 503 and response.get_json() == {
            "status": "not ready",
            "reason": "policies-not-read",
        }
        body = admission_review(SIGNED)
        answer = post(client, body)["response"]
        assert answer["allowed"] is False and answer["status"]["reason"] == "transient-error"
        assert "has not finished reading the policy files" in answer["status"]["message"]
        write_policies(missing, cluster_policy("p", keys(KEY)))
        ready(client)
        assert post(client, body)["response"]["allowed"] is True
    finally:
        app.extensions[EXTENSION].held.stop()


def test_without_held_policies_the_route_denies_and_the_service_stays_ready() -> None:
    app = create_app({"TESTING": True})
    client = app.test_client()
    assert client.get("/readyz").status_code == 200  # the other routes work: this one says why it cannot
    answer = post(client, admission_review(SIGNED))["response"]
    assert answer["allowed"] is False and answer["status"]["reason"] == "policy-invalid"
    assert "holds no policies" in answer["status"]["message"]


def test_the_deadline_is_the_services_and_never_past_the_api_servers(
    app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    client = ready(app.test_client())
    service = app.extensions[EXTENSION]
    release = threading.Event()
    original = service.held.admit

    def slow(review: Any, ctx: Any) -> Any:
        release.wait(30)
        return original(review, ctx)

    monkeypatch.setattr(service.held, "admit", slow)
    try:
        body = json.dumps(admission_review(SIGNED))
        answer = client.post(f"{PATH}?timeout=1s", data=body).get_json()["response"]
        assert answer["allowed"] is False and answer["status"]["reason"] == "deadline-exceeded"
        assert answer["status"]["code"] == 503
    finally:
        release.set()


def test_metrics_count_the_decision_each_policy_verdict_and_requests_no_policy_matched(app: Flask) -> None:
    client = ready(app.test_client())
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "lab"}, "data": {}}
    for body in (admission_review(SIGNED), admission_review(TAMPERED), admission_review(secret)):
        post(client, body)
    text = client.get("/metrics").get_data(as_text=True)
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }

    def value(name: str, **labels: str) -> float:
        return found[(name, tuple(sorted(labels.items())))]

    assert (
        value(
            "manifest_provider_decisions_total",
            route=PATH,
            check="manifest",
            reason="verified",
            **{"class": "valid-signature"},
        )
        >= 1
    )
    assert (
        value(
            "manifest_provider_decisions_total",
            route=PATH,
            check="manifest",
            reason="content-mismatch",
            **{"class": "invalid-signature"},
        )
        >= 1
    )
    assert value("manifest_provider_policy_verdicts_total", scope="cluster", action="Enforce", reason="verified") >= 1
    assert (
        value("manifest_provider_policy_verdicts_total", scope="namespace", action="Audit", reason="signature-invalid")
        >= 1
    )
    assert value("manifest_provider_admissions_unmatched_total") >= 1
    assert value("manifest_provider_requests_total", route=PATH, code="200") >= 3
    assert value("manifest_provider_held_policies", scope="cluster", state="ready") == 1


def test_a_log_line_per_decision_names_the_deciding_policy_and_nothing_of_the_object(
    app: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    client = ready(app.test_client())
    with caplog.at_level(logging.INFO, logger="provider.app"):
        post(client, admission_review(TAMPERED))
    (line,) = [r for r in caplog.records if r.getMessage() == "decision" and getattr(r, "route", "") == "admission"]
    assert line.decision == "deny" and line.reason == "content-mismatch"  # type: ignore[attr-defined]
    assert line.policy == "ClusterManifestPolicy signed-configmaps" and line.warnings == 1  # type: ignore[attr-defined]
    assert line.object == {"kind": "ConfigMap", "namespace": "shop", "name": "app"}  # type: ignore[attr-defined]
    assert "debug" not in json.dumps(vars(line), default=str)


def test_the_file_is_read_again_when_it_changes(app: Flask, policy_file: Path) -> None:
    import time

    client = ready(app.test_client())
    body = admission_review(UNSIGNED)
    assert post(client, body)["response"]["allowed"] is False
    write_policies(policy_file, cluster_policy("deployments-only", keys(KEY),
                                               match={"kinds": [{"apiGroups": ["apps"], "kinds": ["Deployment"]}]}))  # fmt: skip
    deadline = time.monotonic() + 60
    while not post(client, body)["response"]["allowed"]:
        assert time.monotonic() < deadline, "the change was not read"
        time.sleep(0.02)
    assert post(client, body)["response"]["auditAnnotations"]["reason"] == "out-of-scope"
