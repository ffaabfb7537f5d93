"""Attack class 1 -- empty containers are not absent (docs/security.md, "What equals what").

An attacker copies a legitimately signed object's message and signature annotations and adds
fields that change what the object does while looking "empty": ``ingress: [{}]``,
``namespaceSelector: {}``, ``clusterRoleSelectors: [{}]``, a PDB ``selector: {}``, a ``{}``
container. The comparison used to treat ``{}``, ``[]`` and ``null`` as absent, recursively, so
each verified. The rule now is the API server's own, recorded on a real kube-apiserver in
``tests/data/dryrun/edge/empties-*.json``: ``null`` and ``[]`` vanish, ``{}`` vanishes only where
the kind's schema has a map, a list keeps its length.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from provider import Policy, Review, decide
from provider.compare.diff import FieldTrie, IgnoreSet, diff
from provider.compare.kindschema import object_shape, shape_of
from tests.support.data import DRYRUN
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import sign

KEY = make_key("ecdsa-p256", 7)
POLICY = Policy.from_dict({"keys": [public_key_pem(KEY)]})
NOTHING_IGNORED = IgnoreSet(FieldTrie())

DENY_ALL = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "deny-all", "namespace": "shop"},
    "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
}
PEER = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "db", "namespace": "shop"},
    "spec": {
        "podSelector": {"matchLabels": {"app": "db"}},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "fe"}}}]}],
    },
}
CLUSTER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "reader"},
    "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
}
PDB = {
    "apiVersion": "policy/v1",
    "kind": "PodDisruptionBudget",
    "metadata": {"name": "web", "namespace": "shop"},
    "spec": {"maxUnavailable": 0},
}
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "shop"},
    "spec": {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
        },
    },
}
CUSTOM = {
    "apiVersion": "example.com/v1",
    "kind": "Widget",
    "metadata": {"name": "w", "namespace": "shop"},
    "spec": {"size": 1},
}


def _set(obj: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    target = changed
    for step in path[:-1]:
        target = target[step]
    if isinstance(target, list) and path[-1] == len(target):
        target.append(value)  # an element appended
    else:
        target[path[-1]] = value
    return changed


#: (signed object, path, the value the attacker adds, what it does)
ATTACKS = [
    (DENY_ALL, ("spec", "ingress"), [{}], "one empty ingress rule allows all ingress"),
    (DENY_ALL, ("spec", "ingress"), [None], "a null rule decodes to an empty rule: all ingress"),
    (
        PEER,
        ("spec", "ingress", 0, "from", 1),
        {"namespaceSelector": {}},
        "an empty namespaceSelector admits every namespace",
    ),
    (
        PEER,
        ("spec", "ingress", 0, "from", 0, "namespaceSelector"),
        {},
        "a peer's empty namespaceSelector: every namespace",
    ),
    (
        PEER,
        ("spec", "ingress", 0, "from", 0, "namespaceSelector"),
        {"matchLabels": {}},
        "a selector whose only map is empty is still {}",
    ),
    (
        PEER,
        ("spec", "ingress", 0, "from", 0, "namespaceSelector"),
        {"matchLabels": None},
        "a selector of nulls is still {}",
    ),
    (
        CLUSTER_ROLE,
        ("aggregationRule",),
        {"clusterRoleSelectors": [{}]},
        "aggregates every ClusterRole, cluster-admin included",
    ),
    (PDB, ("spec", "selector"), {}, "an empty selector pins every pod of the namespace"),
    (DEPLOYMENT, ("spec", "template", "spec", "containers", 1), {}, "a container list gains an element"),
    (DEPLOYMENT, ("spec", "template", "spec", "securityContext"), {}, "an empty struct added to a pod spec"),
    (CUSTOM, ("spec", "policy"), {}, "a custom resource's unknown field: {} is a value (fail closed)"),
    # The API server stores a custom resource as JSON and keeps ``[]``; a controller may
    # read an empty list as "none" where an absent one means its default ("all").
    (CUSTOM, ("spec", "allowedNamespaces"), [], "a custom resource's [] is kept by the server: a value"),
    (CUSTOM, ("spec", "rules"), [[]], "a custom resource's list of one empty list"),
]


@pytest.mark.parametrize(("signed", "path", "value", "why"), ATTACKS, ids=[a[3] for a in ATTACKS])
def test_an_added_empty_container_is_a_difference(
    signed: dict[str, Any], path: tuple[str | int, ...], value: Any, why: str
) -> None:
    (good,) = sign(signed, KEY)
    assert decide(Review.for_object(good), POLICY).verified
    tampered = _set(good, path, value)
    result = decide(Review.for_object(tampered), POLICY)
    assert (result.allowed, result.reason) == (False, "content-mismatch"), why
    assert result.diff, why


#: The attacks that add a field (not an element): the other way round is a removal.
REMOVALS = [a for a in ATTACKS if not isinstance(a[1][-1], int)]


@pytest.mark.parametrize(("signed", "path", "value", "why"), REMOVALS, ids=[a[3] for a in REMOVALS])
def test_a_removed_empty_container_is_a_difference(
    signed: dict[str, Any], path: tuple[str | int, ...], value: Any, why: str
) -> None:
    """The other way round: the signer wrote the empty container, the admitted object lacks it."""
    with_empty = _set(signed, path, value)
    (good,) = sign(with_empty, KEY)
    stripped = copy.deepcopy(good)
    target = stripped
    for step in path[:-1]:
        target = target[step]
    del target[path[-1]]
    result = decide(Review.for_object(stripped), POLICY)
    assert (result.allowed, result.reason) == (False, "content-mismatch"), why


# --- what the API server itself treats as absent verifies -------------------------


def _exchange(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    data = json.loads((DRYRUN / "edge" / f"empties-{name}.json").read_text())
    return data["request"]["body"], data["response"]["body"]


def _server_differences(request: dict[str, Any], response: dict[str, Any]) -> set[str]:
    """Every path where the stored object differs from the sent manifest (defaults included)."""
    return {item.key for item in diff(request, response, NOTHING_IGNORED, object_shape(request))}


EMPTIES = sorted(p.stem.removeprefix("empties-") for p in (DRYRUN / "edge").glob("empties-*.json"))


def test_the_recordings_are_there() -> None:
    assert len(EMPTIES) >= 10, EMPTIES


@pytest.mark.parametrize(
    ("recording", "path"),
    [
        ("configmap", "metadata.labels"),
        ("configmap", "metadata.annotations"),
        ("configmap", "data"),
        ("configmap", "binaryData"),
        ("configmap-nulls", "metadata.labels"),
        ("configmap-nulls", "data"),
        ("networkpolicy-ingress-empty-list", "spec.ingress"),
        ("clusterrole-aggregation", "rules"),
        ("service-selector", "spec.selector"),
        ("deployment", "spec.template.metadata.annotations"),
        ("deployment", "spec.template.spec.nodeSelector"),
        ("deployment", "spec.template.spec.tolerations"),
        ("deployment", "spec.template.spec.containers.0.args"),
    ],
)
def test_what_the_api_server_drops_equals_absent(recording: str, path: str) -> None:
    """The server dropped (or nulled) these empties: sent and stored compare equal there."""
    request, response = _exchange(recording)
    differences = _server_differences(request, response)
    assert not any(key == path or key.startswith(path + ".") for key in differences), differences


@pytest.mark.parametrize(
    ("recording", "path"),
    [
        ("networkpolicy-ingress-empty-rule", "spec.ingress"),
        ("networkpolicy-peer-namespace-selector", "spec.ingress.0.from.1.namespaceSelector"),
        ("pdb-selector", "spec.selector"),
        ("clusterrole-aggregation", "aggregationRule.clusterRoleSelectors.0"),
        ("deployment", "spec.template.spec.securityContext"),
        ("deployment", "spec.template.spec.containers.0.securityContext"),
        ("deployment", "spec.template.spec.containers.0.resources"),
    ],
)
def test_what_the_api_server_keeps_is_a_value(recording: str, path: str) -> None:
    """The server kept these empties: taking them away is a difference."""
    _request, response = _exchange(recording)
    stored = response
    for step in path.split("."):
        stored = stored[int(step)] if isinstance(stored, list) else stored[step]
    assert stored in ({}, [{}]), f"the recording no longer shows {path} kept"
    parent_path, _, last = path.rpartition(".")
    without = copy.deepcopy(response)
    parent = without
    for step in parent_path.split(".") if parent_path else ():
        parent = parent[int(step)] if isinstance(parent, list) else parent[step]
    if isinstance(parent, list):
        parent.pop(int(last))
    else:
        del parent[last]
    assert diff(response, without, NOTHING_IGNORED, object_shape(response)), path


def test_a_pdb_with_selector_differs_from_one_without() -> None:
    """Two real recordings: the same PDB with ``selector: {}`` (every pod) and without one (no pod)."""
    _, with_selector = _exchange("pdb-selector")
    _, without = _exchange("pdb-no-selector")
    keys = {
        item.key
        for item in diff(
            without["spec"],
            with_selector["spec"],
            NOTHING_IGNORED,
            shape_of("policy/v1", "PodDisruptionBudget").child("spec"),
        )
    }
    assert "selector" in keys


def test_the_schema_knows_maps_from_structs() -> None:
    pod = shape_of("v1", "Pod").child("spec")
    assert pod is not None
    assert pod.child("nodeSelector") is not None and pod.child("nodeSelector").is_map  # type: ignore[union-attr]
    security = pod.child("securityContext")
    assert security is None or not security.is_map
    peer = (
        shape_of("networking.k8s.io/v1", "NetworkPolicy").child("spec").child("ingress").child(0).child("from").child(0)
    )  # type: ignore[union-attr]
    assert peer is not None and not peer.child("namespaceSelector").is_map  # type: ignore[union-attr]
    assert peer.child("namespaceSelector").child("matchLabels").is_map  # type: ignore[union-attr]
    assert not shape_of("example.com/v1", "Widget").fields.get("spec")


@pytest.mark.parametrize("name", ["data", "binaryData"])
def test_an_empty_configmap_map_verifies_against_the_stored_object(name: str) -> None:
    """Signed with ``data: {}``, stored without it (the server drops empty maps): verified."""
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "shop", "labels": {}},
        name: {},
    }
    (signed,) = sign(manifest, KEY)
    stored = copy.deepcopy(signed)
    del stored[name]
    del stored["metadata"]["labels"]
    assert decide(Review.for_object(stored), POLICY).verified


def test_an_unknown_kind_keeps_every_empty_mapping() -> None:
    """Without a schema, ``{}`` is a value even where a custom resource might mean a map."""
    manifest = {**CUSTOM, "spec": {"labels": {}}}
    (signed,) = sign(manifest, KEY)
    stored = copy.deepcopy(signed)
    del stored["spec"]["labels"]
    assert decide(Review.for_object(stored), POLICY).reason == "content-mismatch"


def test_a_custom_resource_list_emptied_under_an_ignore_rule_still_differs() -> None:
    """The ignore trie walks beside the objects: an unignored ``[]`` added next to it is still a value."""
    policy = Policy.from_dict({"keys": [public_key_pem(KEY)], "ignoreFields": [{"fields": ["spec.note"]}]})
    (signed,) = sign({**CUSTOM, "spec": {"note": "a"}}, KEY)
    assert decide(Review.for_object(signed), policy).verified
    both_empty = _set(_set(signed, ("spec", "note"), "b"), ("spec", "allowedNamespaces"), [])
    result = decide(Review.for_object(both_empty), policy)
    assert (result.reason, [d.key for d in result.diff]) == ("content-mismatch", ["spec.allowedNamespaces"])


def test_metadata_of_a_custom_resource_drops_empty_lists_as_the_server_does() -> None:
    """``metadata`` is an ObjectMeta in every kind: ``finalizers: []`` is dropped by the server, so it is absent."""
    (signed,) = sign(CUSTOM, KEY)
    assert decide(Review.for_object(_set(signed, ("metadata", "finalizers"), [])), POLICY).verified
