"""The Gatekeeper ConstraintTemplates under a real OPA engine.

* each template's inlined Rego is byte for byte its ``src.rego``;
* every ``src_test.rego`` rule passes (and a broken policy makes its test fail);
* ``external_data`` answers in Gatekeeper's shape -- system_error, null
  responses, cache hits with status_code 0, missing keys -- give the right
  violations;
* the samples give what their names say, with ``external_data`` answered by
  the real verifier in-process (the HTTPS round trip is in
  ``tests/integration/test_gatekeeper_provider.py``);
* the template's parameter schema mirrors the policy schema.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.bounds import LOCAL
from provider.objects import _REF_FIELDS
from provider.policy import schema as policy_module
from provider.policy.schema import KEY_OPERATIONS, OPERATIONS, PROFILES, Policy
from provider.review import Review
from provider.verifier import decide
from tests.support.data import REPO, load_yaml
from tests.support.gatekeeper_framework import provider_problems
from tests.support.opa import ConstraintTemplateEngine, handle_error, package_of, template_rego

GATEKEEPER = REPO / "policies" / "gatekeeper"
SIGNATURE = GATEKEEPER / "verify-manifest-signature"
PULL = GATEKEEPER / "always-pull-private-images"
POLICY_DIRS = [SIGNATURE, PULL]


def rego_tests(directory: Path) -> list[tuple[Path, str]]:
    engine = ConstraintTemplateEngine(
        (directory / "src.rego").read_text(), tests=(directory / "src_test.rego").read_text()
    )
    names = engine.test_names
    engine.close()
    return [(directory, name) for name in names]


ALL_REGO_TESTS = [case for d in POLICY_DIRS for case in rego_tests(d)]


def template(directory: Path) -> dict[str, Any]:
    return dict(yaml.safe_load((directory / "template.yaml").read_text()))


def samples(directory: Path) -> Path:
    (sample_dir,) = (directory / "samples").iterdir()
    return sample_dir


def constraint(directory: Path) -> dict[str, Any]:
    (doc,) = load_yaml(samples(directory) / "constraint.yaml")
    return dict(doc)


def review_of(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    meta = obj.get("metadata", {})
    gvk = {"group": "", "version": "v1", "kind": obj["kind"]}
    gvr = {"group": "", "version": "v1", "resource": obj["kind"].lower() + "s"}
    return {
        "uid": "b0b6b2a4-0000-4000-8000-000000000000",
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "operation": operation,
        "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
    }


# --- the template is its src.rego ---------------------------------------------------


@pytest.mark.parametrize("directory", POLICY_DIRS, ids=lambda d: d.name)
def test_template_rego_equals_src_rego(directory: Path) -> None:
    assert template_rego(directory / "template.yaml") == (directory / "src.rego").read_text()


@pytest.mark.parametrize("directory", POLICY_DIRS, ids=lambda d: d.name)
def test_template_names_follow_gatekeeper_rules(directory: Path) -> None:
    doc = template(directory)
    kind = doc["spec"]["crd"]["spec"]["names"]["kind"]
    assert doc["apiVersion"] == "templates.gatekeeper.sh/v1"
    assert doc["metadata"]["name"] == kind.lower()  # Gatekeeper requires it
    assert package_of((directory / "src.rego").read_text()) == kind.lower()
    assert constraint(directory)["kind"] == kind
    assert constraint(directory)["spec"]["enforcementAction"] == "dryrun"  # shipped in audit mode


def test_the_sample_constraint_is_what_make_samples_writes() -> None:
    """The constraint file and its generator agree (the kinds it protects, its header), the key aside."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_samples", SIGNATURE / "make_samples.py")
    assert spec is not None and spec.loader is not None
    make_samples = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_samples)
    path = samples(SIGNATURE) / "constraint.yaml"
    key = constraint(SIGNATURE)["spec"]["parameters"]["keys"][0]
    assert load_yaml(path) == [make_samples.constraint(key)]
    assert path.read_text().startswith(make_samples.CONSTRAINT_HEADER)


# --- src_test.rego ------------------------------------------------------------------


@pytest.fixture(scope="module")
def engines() -> dict[Path, ConstraintTemplateEngine]:
    return {
        d: ConstraintTemplateEngine((d / "src.rego").read_text(), tests=(d / "src_test.rego").read_text())
        for d in POLICY_DIRS
    }


@pytest.mark.parametrize(("directory", "name"), ALL_REGO_TESTS, ids=[f"{d.name}:{n}" for d, n in ALL_REGO_TESTS])
def test_src_test_rego(engines: dict[Path, ConstraintTemplateEngine], directory: Path, name: str) -> None:
    assert engines[directory].passes(name)


def test_enough_rego_tests_ran() -> None:
    assert len([t for t in ALL_REGO_TESTS if t[0] == SIGNATURE]) >= 15
    assert len([t for t in ALL_REGO_TESTS if t[0] == PULL]) >= 15


@pytest.mark.parametrize(
    ("clause", "replacement", "test_name"),
    [
        ('error := object.get(response, "system_error", "")', 'error := ""', "test_system_error_wins_over_an_answer"),
        ('not is_array(object.get(response, "responses", null))', "false", "test_null_responses_are_a_violation"),
        ("count(errors) > 0", "false", "test_per_key_error_is_a_violation"),
        ("not code in {0, 200}", "not code in {200}", "test_cache_hit_with_status_code_zero_is_an_answer"),
    ],
    ids=["system_error", "null-responses", "key-error", "status-0"],
)
def test_src_test_rego_catches_a_broken_policy(clause: str, replacement: str, test_name: str) -> None:
    source = (SIGNATURE / "src.rego").read_text()
    assert clause in source
    broken = source.replace(clause, replacement, 1)
    engine = ConstraintTemplateEngine(broken, tests=(SIGNATURE / "src_test.rego").read_text())
    try:
        assert not engine.passes(test_name)
    finally:
        engine.close()


# --- external_data answers in Gatekeeper's shape (mocked) -----------------------------

ALLOWED = {
    "allowed": True,
    "verified": True,
    "reason": "verified",
    "message": "ConfigMap demo/a matches its signed manifest",
    "signers": [],
    "diff": [],
}
DENIED = {
    "allowed": False,
    "verified": False,
    "reason": "unsigned",
    "message": "ConfigMap demo/a: the object carries no signature",
    "signers": [],
    "diff": [],
}


def answer(value: Any, status: int = 200, system_error: str = "") -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda req: {
        "responses": [[req["keys"][0], value]],
        "errors": [],
        "status_code": status,
        "system_error": system_error,
    }


MOCKS: list[tuple[str, Callable[[dict[str, Any]], dict[str, Any]], str | None]] = [
    ("allowed", answer(ALLOWED), None),
    ("cache-hit-status-0", answer(ALLOWED, status=0), None),
    ("denied", answer(DENIED), "the object carries no signature (reason: unsigned)"),
    ("cache-hit-denied", answer(DENIED, status=0), "reason: unsigned"),
    (
        "system-error",
        lambda req: handle_error(500, 'Post "https://manifest-provider": dial tcp: connection refused'),
        "connection refused",
    ),
    ("system-error-beside-items", answer(ALLOWED, system_error="deadline-exceeded: 2.5 s"), "deadline-exceeded"),
    (
        "null-responses",
        lambda req: {"responses": None, "errors": None, "status_code": 200, "system_error": ""},
        "responses: null",
    ),
    (
        "missing-key",
        lambda req: {"responses": [["{}", ALLOWED]], "errors": [], "status_code": 200, "system_error": ""},
        "0 answers",
    ),
    (
        "per-key-error",
        lambda req: {
            "responses": [],
            "errors": [[req["keys"][0], "policy-invalid: policy: no keys or signers"]],
            "status_code": 200,
            "system_error": "",
        },
        "no keys or signers",
    ),
    ("allowed-not-boolean", answer({**ALLOWED, "allowed": "true"}), "reason: verified"),
    ("value-not-object", answer(["allowed"]), "malformed"),
]


@pytest.mark.parametrize(("case", "mock", "expected"), MOCKS, ids=[m[0] for m in MOCKS])
def test_external_data_answers(
    case: str, mock: Callable[[dict[str, Any]], dict[str, Any]], expected: str | None
) -> None:
    calls: list[dict[str, Any]] = []

    def external_data(request: dict[str, Any]) -> dict[str, Any]:
        calls.append(request)
        return mock(request)

    engine = ConstraintTemplateEngine((SIGNATURE / "src.rego").read_text(), external_data)
    try:
        obj = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "demo"},
            "data": {"k": "v"},
        }
        violations = engine.violations(review_of(obj), {"keys": ["PEM"]})
    finally:
        engine.close()
    assert len(calls) == 1
    assert calls[0]["provider"] == "manifest-provider"
    if expected is None:
        assert violations == []
    else:
        assert len(violations) == 1
        assert expected in violations[0]["msg"]


def test_key_is_a_json_string_of_review_fields_and_parameters() -> None:
    seen: list[str] = []

    def external_data(request: dict[str, Any]) -> dict[str, Any]:
        seen.extend(request["keys"])
        return answer(ALLOWED)(request)

    engine = ConstraintTemplateEngine((SIGNATURE / "src.rego").read_text(), external_data)
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "demo"}}
    review = review_of(obj)
    try:
        engine.violations(review, {"keys": ["PEM"], "skipUsers": [{"users": ["ci-bot"]}]})
    finally:
        engine.close()
    (key,) = seen
    decoded = json.loads(key)
    assert decoded["policy"] == {"keys": ["PEM"], "skipUsers": [{"users": ["ci-bot"]}]}
    assert set(decoded["review"]) == {
        "object",
        "oldObject",
        "operation",
        "userInfo",
        "namespace",
        "name",
        "kind",
        "dryRun",
        "resource",
        "requestKind",
        "requestResource",
    }
    assert "uid" not in decoded["review"]  # a uid would defeat Gatekeeper's per-key cache


#: ``kubectl scale deployment/web --replicas 5``: an UPDATE of the scale subresource, whose object is
#: an autoscaling/v1 Scale. Only the resource fields say which object it changes.
SCALE_REVIEW: dict[str, Any] = {
    "uid": "0c9f1b7e-0000-4000-8000-000000000000",
    "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
    "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
    "subResource": "scale",
    "requestKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
    "requestResource": {"group": "apps", "version": "v1", "resource": "deployments"},
    "requestSubResource": "scale",
    "name": "web",
    "namespace": "demo",
    "operation": "UPDATE",
    "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]},
    "object": {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {"name": "web", "namespace": "demo"},
        "spec": {"replicas": 5},
    },
    "oldObject": {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {"name": "web", "namespace": "demo"},
        "spec": {"replicas": 2},
    },
    "dryRun": False,
    "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"},
}


@pytest.mark.parametrize(
    "directory",
    [SIGNATURE, GATEKEEPER / "verify-cluster-info", GATEKEEPER / "verify-kubelet-serving-csr"],
    ids=lambda d: d.name,
)
def test_a_subresource_request_reaches_the_provider_with_its_resource_fields(directory: Path) -> None:
    seen: list[str] = []

    def external_data(request: dict[str, Any]) -> dict[str, Any]:
        seen.extend(request["keys"])
        return answer(ALLOWED)(request)

    engine = ConstraintTemplateEngine((directory / "src.rego").read_text(), external_data)
    try:
        engine.violations(SCALE_REVIEW, {})
    finally:
        engine.close()
    (key,) = seen
    sent = json.loads(key)["review"]
    for field in (
        "kind",
        "resource",
        "subResource",
        "requestKind",
        "requestResource",
        "requestSubResource",
        "operation",
        "oldObject",
    ):
        assert sent[field] == SCALE_REVIEW[field], field
    assert "uid" not in sent and "options" not in sent


# --- the samples, with external_data answered by the real verifier ---------------------


def in_process_provider(request: dict[str, Any]) -> dict[str, Any]:
    """What the service computes for each key, without HTTP (the wire is tested in integration)."""
    responses, errors = [], []
    for key in request["keys"]:
        data = json.loads(key)
        try:
            result = decide(Review.from_admission(data["review"]), Policy.from_dict(data["policy"]))
        except Exception as exc:  # a per-key error, as the service gives
            errors.append([key, str(exc)])
            continue
        responses.append([key, result.to_dict()])
    return {"responses": responses, "errors": errors, "status_code": 200, "system_error": ""}


SIGNATURE_SAMPLES = sorted(p.name for p in samples(SIGNATURE).glob("example_*.yaml"))
PULL_SAMPLES = sorted(p.name for p in samples(PULL).glob("example_*.yaml"))


@pytest.mark.parametrize("sample", SIGNATURE_SAMPLES)
def test_signature_samples(sample: str) -> None:
    (obj,) = load_yaml(samples(SIGNATURE) / sample)
    engine = ConstraintTemplateEngine((SIGNATURE / "src.rego").read_text(), in_process_provider)
    try:
        violations = engine.violations(review_of(obj), constraint(SIGNATURE)["spec"]["parameters"])
    finally:
        engine.close()
    if sample.startswith("example_allowed"):
        assert violations == []
    else:
        assert len(violations) == 1
        expected_reason = {"tampered": "content-mismatch", "unsigned": "unsigned"}[
            sample.removesuffix(".yaml").rsplit("_", 1)[1]
        ]
        assert violations[0]["details"]["reason"] == expected_reason


def test_signature_samples_cover_allowed_tampered_unsigned() -> None:
    assert SIGNATURE_SAMPLES == [
        "example_allowed.yaml",
        "example_disallowed_tampered.yaml",
        "example_disallowed_unsigned.yaml",
    ]


@pytest.mark.parametrize("sample", PULL_SAMPLES)
def test_pull_policy_samples(sample: str) -> None:
    (obj,) = load_yaml(samples(PULL) / sample)
    engine = ConstraintTemplateEngine((PULL / "src.rego").read_text())
    try:
        violations = engine.violations(review_of(obj), constraint(PULL)["spec"]["parameters"])
    finally:
        engine.close()
    assert (violations == []) == sample.startswith("example_allowed")


@pytest.mark.parametrize(
    ("clause", "replacement", "test_name"),
    [
        (
            'tagged(image) if contains(substring(image, indexof(image, "/") + 1, -1), ":")',
            'tagged(image) if contains(image, ":")',
            "test_registry_port_is_not_a_tag",
        ),
        ('latest(image) if contains(image, ":latest@")', "latest(image) if false", "test_tag_and_digest"),
        (
            'is_set(value) if not value in {null, false, "", [], {}}',
            "is_set(value) if not value in {null, false}",
            "test_empty_policy_counts_as_missing",
        ),
        (
            'default_pull_policy(image) := "IfNotPresent" if not always_by_default(image)',
            "",
            "test_malformed_reference_is_not_a_pass",
        ),
    ],
    ids=["port-is-a-tag", "latest-with-digest", "empty-policy", "no-default"],
)
def test_pull_src_test_rego_catches_a_broken_policy(clause: str, replacement: str, test_name: str) -> None:
    source = (PULL / "src.rego").read_text()
    assert clause in source
    engine = ConstraintTemplateEngine(
        source.replace(clause, replacement, 1), tests=(PULL / "src_test.rego").read_text()
    )
    try:
        assert not engine.passes(test_name)
    finally:
        engine.close()


# --- the parameter schema mirrors the policy schema ----------------------------------------


def parameter_schema() -> dict[str, Any]:
    return dict(template(SIGNATURE)["spec"]["crd"]["spec"]["validation"]["openAPIV3Schema"])


def test_schema_properties_are_the_policy_fields() -> None:
    assert set(parameter_schema()["properties"]) == set(policy_module._POLICY_FIELDS)


def test_schema_enums_are_the_policy_enums() -> None:
    props = parameter_schema()["properties"]
    assert tuple(props["keyOperation"]["enum"]) == KEY_OPERATIONS
    assert tuple(props["defaults"]["items"]["enum"]) == PROFILES
    assert set(props["skipObjects"]["items"]["properties"]) == set(_REF_FIELDS)
    assert set(props["ignoreFields"]["items"]["properties"]["objects"]["items"]["properties"]) == set(_REF_FIELDS)
    assert tuple(props["skipUsers"]["items"]["properties"]["operations"]["items"]["enum"]) == OPERATIONS


def test_every_schema_field_is_accepted_by_the_policy() -> None:
    """An example with every property the schema names, nested ones included, is a valid policy."""
    pem = constraint(SIGNATURE)["spec"]["parameters"]["keys"][0]
    props = parameter_schema()["properties"]
    ref = {name: "*" for name in props["skipObjects"]["items"]["properties"]}
    field_scoped = {
        "users": ["ci-bot"],
        "groups": ["ci"],
        "operations": ["UPDATE"],
        "objects": [ref],
        "fields": ["spec.replicas"],
        "description": "CI",
    }
    example = {
        "keys": [{"publicKey": pem, "name": "team"}],
        "signers": [{"subject": "jane@example.com", "issuer": "https://accounts.google.com"}],
        "keyOperation": "AtLeastOne",
        "threshold": 1,
        "trustedRoot": json.loads((REPO / "provider" / "data" / "trusted_root.json").read_text()),
        "annotationDomain": "cosign.sigstore.dev",
        "ignoreFields": [
            {
                name: ([ref] if name == "objects" else ["data.note"])
                for name in props["ignoreFields"]["items"]["properties"]
            }
        ],
        "sensitiveFields": [
            {
                name: ([ref] if name == "objects" else ["data.token"])
                for name in props["sensitiveFields"]["items"]["properties"]
            }
        ],
        "skipObjects": [{**ref, "kind": "ConfigMap"}],  # an entry matching every object is refused
        "inScopeObjects": [ref],
        "skipUsers": [{name: field_scoped[name] for name in props["skipUsers"]["items"]["properties"]}],
        "dryRun": {name: {"enabled": False, "namespace": "scratch"}[name] for name in props["dryRun"]["properties"]},
        "defaults": list(props["defaults"]["items"]["enum"]),
        "unsafeUnanchoredIgnoreFields": False,
        "resourceBundleRef": {"repositories": ["registry.example.com/bundles"], "timeoutSeconds": 1},
        "signatureResourceRef": "k8s://ConfigMap/ns/signatures",
    }
    attestors = [{"name": "team", "count": 1, "entries": [{"keys": {"publicKeys": pem}}]}]
    assert set(example) | {"attestors"} == set(props)
    Policy.from_dict(example, bounds=LOCAL)  # raises PolicyError on any field the policy does not accept
    # attestors replace keys, signers, keyOperation and threshold: checked on their own
    flat = ("keys", "signers", "keyOperation", "threshold")
    Policy.from_dict({**{k: v for k, v in example.items() if k not in flat}, "attestors": attestors}, bounds=LOCAL)


# --- the Provider -------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [SIGNATURE / "provider.yaml", REPO / "manifests" / "overlays" / "gatekeeper" / "provider.yaml"],
    ids=["policy-dir", "overlay"],
)
def test_provider_resource(path: Path) -> None:
    (provider,) = load_yaml(path)
    assert provider["apiVersion"] == "externaldata.gatekeeper.sh/v1beta1"
    assert provider["kind"] == "Provider"
    assert "namespace" not in provider["metadata"]  # cluster-scoped
    rego = (SIGNATURE / "src.rego").read_text()
    assert f'provider_name := "{provider["metadata"]["name"]}"' in rego
    spec = provider["spec"]
    assert spec["url"] == "https://manifest-provider.gatekeeper-system.svc:8443/v1/gatekeeper/verify"
    # Whole seconds; the order of the budgets is tests/unit/test_deadlines.py's.
    assert isinstance(spec["timeout"], int)
    # No placeholder Gatekeeper's webhook would refuse: manifests/scripts/ca-bundle.sh adds the CA
    # (tests/manifests/test_deployment.py checks what it renders against Gatekeeper's rules).
    assert "caBundle" not in spec
    assert provider_problems(provider) == ["caBundle should be set for HTTPS scheme"]
    assert "insecureTLSSkipVerify" not in spec
