"""Reading the policy objects: match and selectors as the API server reads them, the held policy, its status."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from provider.bounds import SERVICE
from provider.errors import PolicyError
from provider.objects import ObjectIdentity
from provider.policy.schema import Policy
from provider.policystore.match import MAX_ENTRIES, LabelSelector, Match
from provider.policystore.objects import read_policy_object, ready_condition, status_for
from tests.support.heldpolicies import cluster_policy, tenant_policy
from tests.support.keys import make_key, public_key_pem

KEYS = {"keys": [public_key_pem(make_key("ecdsa-p256", 311))]}
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def compile_(raw: Any, bounds: Any) -> Policy:
    return Policy.from_dict(raw, bounds=bounds)


# --- label selectors: metav1.LabelSelector ---------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ({}, {}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchLabels": {"a": ""}}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "example.com/a", "operator": "Exists"}]}, {"example.com/a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "x"}, False),
        ({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]}, {"a": "1"}, False),
    ],
)
def test_label_selectors(selector: dict[str, Any], labels: dict[str, str], matches: bool) -> None:
    assert LabelSelector.from_dict(selector, "s").matches(labels) is matches


@pytest.mark.parametrize(
    ("selector", "words"),
    [
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "needs at least one value"),
        ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}, "takes no values"),
        ({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]}, "is not one of"),
        ({"matchLabels": {"a b": "1"}}, "is not a label key"),
        ({"matchLabels": {"a": "x" * 64}}, "is not a label value"),
        ({"matchLabels": ["a"]}, "expected a mapping"),
        ({"matchLable": {}}, "did you mean 'matchLabels'"),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["v"] * (MAX_ENTRIES + 1)}]}, "at most"),
    ],
)
def test_a_selector_that_is_not_one_is_an_error_never_matches_nothing(selector: dict[str, Any], words: str) -> None:
    with pytest.raises(PolicyError, match=words):
        LabelSelector.from_dict(selector, "s")


@pytest.mark.parametrize(
    ("match", "words"),
    [
        ({"kinds": []}, "leave it out to match every kind"),
        ({"kinds": [{"apiGroups": [], "kinds": ["ConfigMap"]}]}, "name at least one group"),
        ({"kinds": [{"apiGroups": [""]}]}, "name at least one kind"),
        ({"namespaces": ["shop*"]}, "no patterns"),
        ({"namespaces": []}, "leave it out"),
        ({"namespace": ["shop"]}, "did you mean 'namespaces'"),
    ],
)
def test_match_errors(match: dict[str, Any], words: str) -> None:
    with pytest.raises(PolicyError, match=words):
        Match.from_dict(match, "spec.match", "cluster")


def test_a_kind_the_request_cannot_name_matches_its_group() -> None:
    """A custom resource's scale subresource names its resource, not its kind: the policy applies (fail closed)."""
    match = Match.from_dict({"kinds": [{"apiGroups": ["example.com"], "kinds": ["Widget"]}]}, "m", "cluster")
    unknown = ObjectIdentity("example.com", "v1", "", "w", "shop", subresource="scale", kind_known=False)
    assert match.matches_kind(unknown)
    other_group = ObjectIdentity("other.com", "v1", "", "w", "shop", subresource="scale", kind_known=False)
    assert not match.matches_kind(other_group)


# --- the held policy ------------------------------------------------------------------------------


def test_a_policy_object_is_held_compiled() -> None:
    held = read_policy_object(tenant_policy("team", "shop", KEYS, action="Audit"), compile_, SERVICE)
    assert held.ready and held.policy is not None and held.action == "Audit"
    assert (held.kind, held.namespace, held.name, held.scope) == ("ManifestPolicy", "shop", "team", "namespace")
    assert held.ref == "ManifestPolicy shop/team"


def test_a_cluster_policy_drops_a_namespace_as_the_api_server_does() -> None:
    obj = cluster_policy("p", KEYS)
    obj["metadata"]["namespace"] = "shop"
    held = read_policy_object(obj, compile_, SERVICE)
    assert held.namespace == "" and held.scope == "cluster"


@pytest.mark.parametrize(
    ("spec", "words", "action"),
    [
        ({"policy": KEYS}, "spec.action: expected a string", "Enforce"),
        ({"action": "Audit"}, "spec.policy: required", "Audit"),
        ({"action": "Audit", "policy": KEYS, "extra": 1}, "unknown field 'extra'", "Enforce"),
        ({"action": "Audit", "policy": {"keys": []}}, "spec.policy: no keys or signers", "Audit"),
        (None, "spec: expected a mapping", "Enforce"),
    ],
)
def test_a_policy_that_does_not_compile_is_held_with_its_error_and_its_action_fails_closed(
    spec: Any, words: str, action: str
) -> None:
    held = read_policy_object({**cluster_policy("p", KEYS), "spec": spec}, compile_, SERVICE)
    assert not held.ready and words in held.error
    assert held.action == action  # unreadable: enforced


@pytest.mark.parametrize(
    "obj",
    [
        {"kind": "ConfigMap", "metadata": {"name": "x"}},
        {"kind": "ManifestPolicy", "metadata": {"name": "x"}},
        {"kind": "ClusterManifestPolicy", "metadata": {}},
        ["not", "an", "object"],
    ],
)
def test_an_object_that_cannot_be_named_is_refused(obj: Any) -> None:
    with pytest.raises(PolicyError):
        read_policy_object(obj, compile_, SERVICE)


def test_status_says_compiled_or_why_not_and_changes_only_when_the_verdict_does() -> None:
    obj = cluster_policy("p", KEYS)
    obj["metadata"]["generation"] = 3
    good = read_policy_object(obj, compile_, SERVICE)
    status = status_for(good, None, NOW)
    assert status is not None
    (condition,) = status["conditions"]
    assert condition == {"type": "Ready", "status": "True", "reason": "Compiled", "message": "compiled; Enforces what it matches",
                         "observedGeneration": 3, "lastTransitionTime": "2026-05-01T12:00:00Z"}  # fmt: skip
    assert status_for(good, status, NOW.replace(hour=13)) is None  # written already: nothing to write
    bad = read_policy_object({**obj, "spec": {"action": "Enforce", "policy": {"keys": []}}}, compile_, SERVICE)
    changed = status_for(bad, status, NOW.replace(hour=13))
    assert changed is not None
    (condition,) = changed["conditions"]
    assert condition["status"] == "False" and condition["reason"] == "PolicyInvalid"
    assert (
        condition["message"].startswith("spec.policy: no keys or signers")
        and "denies what it matches" in condition["message"]
    )
    assert condition["lastTransitionTime"] == "2026-05-01T13:00:00Z"


def test_status_keeps_other_conditions_and_the_transition_time_when_only_the_message_changes() -> None:
    held = read_policy_object(cluster_policy("p", KEYS), compile_, SERVICE)
    current = {"conditions": [{"type": "Other", "status": "True"},
                              {**ready_condition(held), "message": "old words", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}  # fmt: skip
    status = status_for(held, current, NOW)
    assert status is not None
    other, ready = status["conditions"]
    assert other == {"type": "Other", "status": "True"}
    assert (
        ready["lastTransitionTime"] == "2026-01-01T00:00:00Z" and ready["message"] == ready_condition(held)["message"]
    )
