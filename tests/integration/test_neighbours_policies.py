"""The cluster-info and kubelet-serving CSR policies, Gatekeeper and Kyverno, against the real service.

Gatekeeper: each template's Rego is its ``src.rego``, every ``src_test.rego``
rule passes under OPA, and the samples give what their names say with
``external_data`` calling the running service over HTTPS as Gatekeeper does.
Kyverno: the body each ClusterPolicy builds goes to the running service
without a Content-Type, the answer goes through the policy's own
``jmesPath`` and deny condition, and the ``.kyverno-test`` values are exactly
what the service answers. The service reads bootstrap-token Secrets from the
fake API server, which holds the samples' token ``07401b``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.neighbours.bootstrap import ClusterInfoPolicy
from provider.neighbours.csr import CsrPolicy
from tests.support.bootstrap import SAMPLE_TOKEN_ID, SAMPLE_TOKEN_SECRET, jws, serving_with_sample_token
from tests.support.data import REPO, load_yaml
from tests.support.kyverno import (
    STANDARD_FUNCTIONS,
    api_call,
    denied,
    deny_message,
    function_names,
    request_body,
    stored_verdict,
)
from tests.support.opa import (
    ConstraintTemplateEngine,
    GatekeeperExternalData,
    gatekeeper_client_context,
    package_of,
    template_rego,
)
from tests.support.server import VERDICT_CLIENT_TIMEOUT, Server

pytestmark = pytest.mark.integration

GATEKEEPER = REPO / "policies" / "gatekeeper"
KYVERNO = REPO / "policies" / "kyverno"
NAMES = ("verify-cluster-info", "verify-kubelet-serving-csr")
SCHEMAS = {"verify-cluster-info": ClusterInfoPolicy, "verify-kubelet-serving-csr": CsrPolicy}
#: The example token of the Kubernetes documentation, which the cluster-info samples are signed with.
#: What each disallowed sample's name promises.
EXPECTED = {
    "tampered": "signature-invalid",
    "unknown_token": "token-unknown",
    "forged_name": "csr-dns-name-not-prefixed",
    "system_masters": "csr-organization-invalid",
    "ip_outside": "csr-ip-not-allowed",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving_with_sample_token(Path(tmp_path_factory.mktemp("kube"))) as running:
        yield running


def sample_dir(name: str) -> Path:
    (directory,) = (GATEKEEPER / name / "samples").iterdir()
    return directory


def samples(name: str) -> dict[str, dict[str, Any]]:
    """``allowed`` / ``disallowed_<why>`` -> the object."""
    found = {}
    for path in sorted(sample_dir(name).glob("example_*.yaml")):
        (doc,) = load_yaml(path)
        found[path.stem.removeprefix("example_")] = doc
    assert "allowed" in found and len(found) >= 2, f"{sample_dir(name)}: no allowed and disallowed examples"
    return found


def constraint(name: str) -> dict[str, Any]:
    (doc,) = load_yaml(sample_dir(name) / "constraint.yaml")
    return dict(doc)


def review(obj: dict[str, Any]) -> dict[str, Any]:
    """input.review as Gatekeeper builds it: the node creates its CSR; the bootstrap signer updates cluster-info."""
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    meta = obj["metadata"]
    username = (
        obj["spec"]["username"]
        if obj["kind"] == "CertificateSigningRequest"
        else "system:serviceaccount:kube-system:bootstrap-signer"
    )
    return {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "name": meta["name"],
        "namespace": meta.get("namespace"),
        "operation": "CREATE" if obj["kind"] == "CertificateSigningRequest" else "UPDATE",
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
    }


def expected_reason(case: str) -> str:
    return "verified" if case == "allowed" else EXPECTED[case.removeprefix("disallowed_")]


# --- Gatekeeper ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_template_is_its_src_rego(name: str) -> None:
    directory = GATEKEEPER / name
    source = (directory / "src.rego").read_text()
    assert template_rego(directory / "template.yaml") == source
    template = yaml.safe_load((directory / "template.yaml").read_text())
    kind = template["spec"]["crd"]["spec"]["names"]["kind"]
    assert template["metadata"]["name"] == kind.lower() == package_of(source)
    assert "import rego.v1" not in source  # Gatekeeper's framework refuses it (test_gatekeeper_ingest.py)
    assert constraint(name)["kind"] == kind
    assert constraint(name)["spec"]["enforcementAction"] == "dryrun"


@pytest.mark.parametrize("name", NAMES)
def test_parameter_schema_mirrors_the_check_policy(name: str) -> None:
    template = yaml.safe_load((GATEKEEPER / name / "template.yaml").read_text())
    properties = template["spec"]["crd"]["spec"]["validation"]["openAPIV3Schema"]["properties"]
    from provider.neighbours import bootstrap, csr

    fields = bootstrap._POLICY_FIELDS if name == "verify-cluster-info" else csr._POLICY_FIELDS
    assert set(properties) == set(fields)
    SCHEMAS[name].from_dict(constraint(name)["spec"]["parameters"])


def rego_cases() -> list[tuple[str, str]]:
    cases = []
    for name in NAMES:
        directory = GATEKEEPER / name
        engine = ConstraintTemplateEngine(
            (directory / "src.rego").read_text(), tests=(directory / "src_test.rego").read_text()
        )
        cases += [(name, test) for test in engine.test_names]
        engine.close()
    return cases


@pytest.mark.parametrize(("name", "test"), rego_cases(), ids=lambda v: v)
def test_rego_unit_tests_pass(name: str, test: str) -> None:
    directory = GATEKEEPER / name
    engine = ConstraintTemplateEngine(
        (directory / "src.rego").read_text(), tests=(directory / "src_test.rego").read_text()
    )
    try:
        assert engine.passes(test)
    finally:
        engine.close()


@pytest.mark.parametrize("name", NAMES)
def test_rego_tests_catch_a_policy_that_fails_open(name: str) -> None:
    directory = GATEKEEPER / name
    broken = (directory / "src.rego").read_text().replace('error != ""', 'error == "never"')
    engine = ConstraintTemplateEngine(broken, tests=(directory / "src_test.rego").read_text())
    try:
        assert not all(engine.passes(test) for test in engine.test_names)
    finally:
        engine.close()


def test_cluster_info_samples_are_signed_as_their_names_say() -> None:
    found = samples("verify-cluster-info")
    allowed = found["allowed"]["data"]
    assert allowed[f"jws-kubeconfig-{SAMPLE_TOKEN_ID}"] == jws(
        allowed["kubeconfig"], SAMPLE_TOKEN_ID, SAMPLE_TOKEN_SECRET
    )
    tampered = found["disallowed_tampered"]["data"]
    assert tampered[f"jws-kubeconfig-{SAMPLE_TOKEN_ID}"] == allowed[f"jws-kubeconfig-{SAMPLE_TOKEN_ID}"]
    assert tampered["kubeconfig"] != allowed["kubeconfig"]
    assert not any(k.endswith(SAMPLE_TOKEN_ID) for k in found["disallowed_unknown_token"]["data"])


@pytest.mark.parametrize("name", NAMES)
def test_samples_through_gatekeeper_and_the_service(server: Server, name: str) -> None:
    pki = server.pki
    # Verdicts, not timeouts: the stand-in waits as long as the server's VERDICT_DEADLINE allows.
    external = GatekeeperExternalData({"manifest-provider": f"{server.url}/v1/gatekeeper/verify"},
                                      gatekeeper_client_context(pki.ca_cert, pki.client_cert, pki.client_key),
                                      timeout=VERDICT_CLIENT_TIMEOUT)  # fmt: skip
    directory = GATEKEEPER / name
    engine = ConstraintTemplateEngine(template_rego(directory / "template.yaml"), external)
    parameters = constraint(name)["spec"]["parameters"]
    try:
        for case, obj in samples(name).items():
            violations = engine.violations(review(obj), parameters)
            if case == "allowed":
                assert violations == [], violations
            else:
                assert [v["details"]["reason"] for v in violations] == [expected_reason(case)], (case, violations)
    finally:
        engine.close()
    sent = json.loads(external.sent[0]["request"]["keys"][0])
    assert sent["check"] == ("cluster-info" if name == "verify-cluster-info" else "kubelet-serving-csr")


# --- Kyverno -----------------------------------------------------------------------------------


def kyverno_policy(name: str) -> dict[str, Any]:
    (doc,) = load_yaml(KYVERNO / name / f"{name}.yaml")
    return dict(doc)


def kyverno_tests(name: str) -> list[Path]:
    found = sorted((KYVERNO / name / ".kyverno-test").rglob("kyverno-test.yaml"))
    assert found, f"{KYVERNO / name}/.kyverno-test holds no kyverno-test.yaml"
    return found


def admission_request(obj: dict[str, Any]) -> dict[str, Any]:
    """{{ request }}: the AdmissionRequest Kyverno hands the policy."""
    request = review(obj)
    plural = "certificatesigningrequests" if obj["kind"] == "CertificateSigningRequest" else "configmaps"
    request["resource"] = {**{k: request["kind"][k] for k in ("group", "version")}, "resource": plural}
    request["options"] = {
        "apiVersion": "meta.k8s.io/v1",
        "kind": "CreateOptions" if request["operation"] == "CREATE" else "UpdateOptions",
    }
    return request


@pytest.mark.parametrize("name", NAMES)
def test_kyverno_policy_shape(name: str) -> None:
    doc = kyverno_policy(name)
    annotations = doc["metadata"]["annotations"]
    for key in ("title", "category", "severity", "subject", "minversion", "description"):
        assert annotations[f"policies.kyverno.io/{key}"]
    (rule,) = doc["spec"]["rules"]
    assert rule["validate"]["failureAction"] == "Audit"
    assert doc["spec"]["failurePolicy"] == "Fail"
    call = api_call(doc)
    assert call["method"] == "POST"
    assert call["service"]["url"].endswith("/v1/kyverno/verify")
    assert {"key": "Content-Type", "value": "application/json"} in call["service"]["headers"]
    data = {item["key"]: item["value"] for item in call["data"]}
    assert data["check"] == ("cluster-info" if name == "verify-cluster-info" else "kubelet-serving-csr")
    SCHEMAS[name].from_dict(data["policy"])
    assert function_names(call["jmesPath"]) <= STANDARD_FUNCTIONS
    # The default denies, and reads the same through jmesPath as without it.
    default = call["default"]
    assert stored_verdict(doc, default) == default
    assert denied(doc, default)
    assert "could not be reached" in deny_message(doc, default)


def test_kyverno_csr_policy_matches_the_constraint() -> None:
    data = {item["key"]: item["value"] for item in api_call(kyverno_policy("verify-kubelet-serving-csr"))["data"]}
    assert data["policy"] == constraint("verify-kubelet-serving-csr")["spec"]["parameters"]


@pytest.mark.parametrize("name", NAMES)
def test_kyverno_tests_use_the_gatekeeper_samples(name: str) -> None:
    resources = [doc for test in kyverno_tests(name) for doc in load_yaml(test.parent / "resource.yaml")]
    key = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731
    assert sorted(map(key, resources)) == sorted(map(key, samples(name).values()))
    for test in kyverno_tests(name):
        (spec,) = load_yaml(test)
        assert (test.parent / spec["policies"][0]).resolve() == (KYVERNO / name / f"{name}.yaml").resolve()
        (rule,) = kyverno_policy(name)["spec"]["rules"]
        assert {r["rule"] for r in spec["results"]} == {rule["name"]}


@pytest.mark.parametrize("name", NAMES)
def test_kyverno_through_the_service(server: Server, name: str) -> None:
    doc = kyverno_policy(name)
    for test in kyverno_tests(name):
        (spec,) = load_yaml(test)
        (values,) = load_yaml(test.parent / spec["variables"])
        outcome = {r: res["result"] for res in spec["results"] for r in res["resources"]}
        objects = load_yaml(test.parent / "resource.yaml")
        assert objects, test.parent
        for obj in objects:
            status, _, body = server.post(
                "/v1/kyverno/verify", request_body(doc, admission_request(obj))
            )  # no Content-Type
            assert status == 200
            answer = json.loads(body)
            verdict = stored_verdict(doc, answer)
            (mocked,) = [
                r["values"] for p in values["policies"] for r in p["resources"] if r["name"] == obj["metadata"]["name"]
            ]
            assert (verdict["allowed"], verdict["reason"], verdict["message"]) == (
                mocked["verdict.allowed"], mocked["verdict.reason"], mocked["verdict.message"]), obj["metadata"]["name"]  # fmt: skip
            assert denied(doc, verdict) == (outcome[obj["metadata"]["name"]] == "fail")
            if denied(doc, verdict):
                assert deny_message(doc, verdict).endswith(f"(reason: {answer['reason']})")
