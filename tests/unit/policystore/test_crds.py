"""The CRDs of ClusterManifestPolicy and ManifestPolicy: generated, structural, and what they accept.

Objects are checked with ``tests/support/kube_schema.py`` as the API server checks a
write (strict fields, the structural rules); the policy body's schema is the one the
shipped Gatekeeper ConstraintTemplate gives its parameters, unchanged.
"""

from __future__ import annotations

import copy
import importlib.util
from datetime import UTC, datetime
from typing import Any

import pytest

from provider.bounds import SERVICE
from provider.policy.schema import Policy
from provider.policystore.objects import API_GROUP, API_VERSION_NAME, KINDS, read_policy_object, status_for
from tests.support.data import REPO, load_yaml
from tests.support.heldpolicies import CRD_FILES, cluster_policy, crds, tenant_policy
from tests.support.keys import make_key, public_key_pem
from tests.support.kube_schema import structural_problems, unsupported_keywords, validate_object

KEYS = {"keys": [public_key_pem(make_key("ecdsa-p256", 331))]}


def _make_crds() -> Any:
    spec = importlib.util.spec_from_file_location("make_crds", REPO / "tools" / "make_crds.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKE = _make_crds()
BY_KIND = {crd["spec"]["names"]["kind"]: crd for crd in crds()}


def test_the_committed_crds_are_what_the_generator_writes() -> None:
    assert len(MAKE.CRDS) == len(CRD_FILES) == 2
    for path in CRD_FILES:
        assert path.read_text() == MAKE.render(path.name), f"{path} is stale: python tools/make_crds.py"


def test_the_crds_name_what_the_service_reads() -> None:
    assert set(BY_KIND) == set(KINDS)
    for kind, (plural, scope) in KINDS.items():
        crd = BY_KIND[kind]
        assert crd["metadata"]["name"] == f"{plural}.{API_GROUP}"  # the API server requires <plural>.<group>
        assert crd["spec"]["group"] == API_GROUP and crd["spec"]["names"]["plural"] == plural
        assert crd["spec"]["scope"] == ("Cluster" if scope == "cluster" else "Namespaced")
        (version,) = crd["spec"]["versions"]
        assert version["name"] == API_VERSION_NAME and version["served"] and version["storage"]
        assert version["subresources"] == {"status": {}}  # the service writes status through the subresource


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_schema_is_structural_and_uses_only_what_the_validator_implements(kind: str) -> None:
    schema = BY_KIND[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert structural_problems(schema) == []
    assert unsupported_keywords(schema) == set()


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        (
            {"type": "object", "properties": {"a": {"description": "no type"}}},
            "must not be empty for specified object fields",
        ),
        ({"type": "object", "properties": {"a": {"type": "array"}}}, "items: must be specified"),
        ({"type": "object", "additionalProperties": {"type": "string"}}, "must not be used at the root"),
        ({"type": "string"}, "must be object at the root"),
        (
            {
                "type": "object",
                "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}},
            },
            "name and generateName",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string", "anyOf": [{"type": "string"}]}}},
            "must be undefined",
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}}},
            },
            "mutually exclusive",
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object"}}},
            },
            "needs x-kubernetes-list-map-keys",
        ),
    ],
)
def test_the_structural_check_can_fail(schema: dict[str, Any], words: str) -> None:
    assert any(words in problem for problem in structural_problems(schema)), structural_problems(schema)


def test_the_policy_body_is_the_projects_policy_schema_unchanged() -> None:
    template = load_yaml(REPO / "policies/gatekeeper/verify-manifest-signature/template.yaml")[0]
    parameters = template["spec"]["crd"]["spec"]["validation"]["openAPIV3Schema"]
    for crd in BY_KIND.values():
        body = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["policy"]
        assert {k: v for k, v in body.items() if k != "description"} == {
            k: v for k, v in parameters.items() if k != "description"
        }


FULL_MATCH = {
    "kinds": [{"apiGroups": ["", "apps"], "kinds": ["ConfigMap", "Deployment"]}],
    "namespaces": ["shop"],
    "namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]},
    "objectSelector": {"matchLabels": {"app": "web"}},
}


def test_valid_objects_are_accepted() -> None:
    assert validate_object(cluster_policy("p", KEYS, match=FULL_MATCH), BY_KIND["ClusterManifestPolicy"]) == []
    tenant = tenant_policy("p", "shop", KEYS, action="Audit", match={"objectSelector": {"matchLabels": {"app": "web"}}})
    assert validate_object(tenant, BY_KIND["ManifestPolicy"]) == []


@pytest.mark.parametrize(
    ("kind", "change", "words"),
    [
        ("ClusterManifestPolicy", {"spec": {"policy": KEYS}}, "'action' is required"),
        ("ClusterManifestPolicy", {"spec": {"action": "Warn", "policy": KEYS}}, "is not one of"),
        ("ClusterManifestPolicy", {"spec": {"action": "Audit"}}, "'policy' is required"),
        (
            "ClusterManifestPolicy",
            {"spec": {"action": "Audit", "policy": {**KEYS, "keyOperation": "Any"}}},
            "is not one of",
        ),
        (
            "ClusterManifestPolicy",
            {"spec": {"action": "Audit", "policy": KEYS, "match": {"kinds": [{"apiGroups": [""]}]}}},
            "'kinds' is required",
        ),
        (
            "ClusterManifestPolicy",
            {"spec": {"action": "Audit", "policy": KEYS, "match": {"namespaces": ["Shop"]}}},
            "does not match",
        ),
        (
            "ManifestPolicy",
            {"spec": {"action": "Audit", "policy": KEYS, "match": {"namespaces": ["shop"]}}},
            "unknown field",
        ),
        (
            "ManifestPolicy",
            {"spec": {"action": "Audit", "policy": KEYS, "match": {"namespaceSelector": {}}}},
            "unknown field",
        ),
        ("ClusterManifestPolicy", {"spec": {"action": "Audit", "policy": KEYS, "mode": "x"}}, "unknown field"),
    ],
)
def test_the_schema_refuses(kind: str, change: dict[str, Any], words: str) -> None:
    base = cluster_policy("p", KEYS) if kind == "ClusterManifestPolicy" else tenant_policy("p", "shop", KEYS)
    errors = validate_object({**base, **change}, BY_KIND[kind])
    assert any(words in error for error in errors), errors


def test_the_status_the_service_writes_fits_the_schema() -> None:
    now = datetime(2026, 5, 1, tzinfo=UTC)
    for obj in (cluster_policy("good", KEYS), tenant_policy("bad", "shop", {"keys": []})):
        obj["metadata"]["generation"] = 1
        held = read_policy_object(obj, lambda raw, b: Policy.from_dict(raw, bounds=b), SERVICE)
        status = status_for(held, None, now)
        assert status is not None
        written = copy.deepcopy(obj)
        written["status"] = status
        assert validate_object(written, BY_KIND[obj["kind"]]) == []
