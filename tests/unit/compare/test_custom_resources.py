"""A signed custom resource: every change is denied, and an empty list in it is a value (attack class 1 probed
again with other inputs).

From an attack pass without any signing key (docs/security.md): each test is named by the attack; a table
row's id names the input.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.manifests import sign
from tests.support.one_key import KEY, verdict

# --- profile-ignored fields that carry behaviour (left open: each is upstream's default) ------------------------


WIDGET = {
    "apiVersion": "example.com/v1",
    "kind": "Widget",
    "metadata": {"name": "w", "namespace": "shop"},
    "spec": {"size": 1},
}


# --- the earlier classes, probed again with other inputs (each held) ------------------------------------------


def _put(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        node = obj
        for step in path[:-1]:
            node = node.setdefault(step, {})
        node[path[-1]] = value

    return change


def _annotate(key: str, value: str) -> Callable[[dict[str, Any]], None]:
    return lambda obj: obj["metadata"]["annotations"].__setitem__(key, value)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (_put(("spec", "selector"), {}), "content-mismatch"),
        (_put(("spec", "selector"), [{}]), "content-mismatch"),
        (_put(("spec", "size"), 1.0000001), "content-mismatch"),
        (_put(("spec", "size"), "1"), "content-mismatch"),
        (_put(("spec", "size"), True), "content-mismatch"),
        (_annotate("cosign.sigstore.dev/signature_2", "junk"), "content-mismatch"),
        (_annotate("cosign.sigstore.dev/bundle_1", "junk"), "content-mismatch"),
        (_annotate("cosign.sigstore.dev/other", "junk"), "content-mismatch"),
        (_put(("metadata", "namespace"), "kube-system"), "no-matching-manifest"),
        (_put(("metadata", "generateName"), "w"), "content-mismatch"),
        (_put(("metadata", "ownerReferences"), [{}]), "content-mismatch"),
        (_put(("metadata", "deletionGracePeriodSeconds"), 0), "content-mismatch"),
        (_put(("apiVersion",), "example.com/v2"), "content-mismatch"),
        (_put(("kind",), "Gadget"), "no-matching-manifest"),
    ],
    ids=[
        "crd-empty-map-no-schema",
        "crd-list-of-empty-map",
        "number-off-by-a-little",
        "number-as-string",
        "number-as-bool",
        "signature-past-a-gap",
        "bundle-past-a-gap",
        "unknown-annotation-under-the-domain",
        "other-namespace",
        "generate-name-added",
        "owner-reference-empty",
        "deletion-grace-added",
        "other-version-same-group",
        "other-kind",
    ],
)
def test_changes_to_a_signed_custom_resource_are_denied(change: Callable[[dict[str, Any]], None], reason: str) -> None:
    (signed,) = sign(WIDGET, KEY)
    changed = copy.deepcopy(signed)
    change(changed)
    result = verdict(changed)
    assert (result.allowed, result.reason) == (False, reason), result.message


CNP = {
    "apiVersion": "cilium.io/v2",
    "kind": "CiliumNetworkPolicy",
    "metadata": {"name": "web", "namespace": "shop"},
    "spec": {
        "endpointSelector": {"matchLabels": {"app": "web"}},
        "ingress": [{"fromCIDR": [], "toPorts": [{"ports": [{"port": "80"}]}]}],
    },
}


def _drop_from_cidr(obj: dict[str, Any]) -> None:
    del obj["spec"]["ingress"][0]["fromCIDR"]


def _empty_from_endpoints(obj: dict[str, Any]) -> None:
    obj["spec"]["ingress"][0]["fromEndpoints"] = []


def _empty_spec_list(obj: dict[str, Any]) -> None:
    obj["spec"]["egress"] = []


@pytest.mark.parametrize(
    "change",
    [_drop_from_cidr, _empty_from_endpoints, _empty_spec_list],
    ids=["empty-source-list-removed-admits-every-source", "empty-list-added", "empty-top-level-list-added"],
)
def test_an_empty_list_in_a_custom_resource_is_a_value(change: Callable[[dict[str, Any]], None]) -> None:
    # The API server keeps a custom resource's JSON as sent, [] included, and Cilium reads an explicit
    # fromCIDR: [] as "no source" but an absent one as "every source" (cilium/cilium pull request 29608).
    # "[] equals absent" held only for built-in kinds, whose encoder drops empty lists.
    (signed,) = sign(CNP, KEY)
    assert verdict(signed).verified
    changed = copy.deepcopy(signed)
    change(changed)
    result = verdict(changed)
    assert (result.allowed, result.reason) == (False, "content-mismatch"), result.message


def test_an_empty_list_in_a_custom_resource_metadata_still_equals_absent() -> None:
    # metadata is an ObjectMeta in every kind: the server drops its empty lists, as for built-in kinds.
    (signed,) = sign({**WIDGET, "metadata": {**WIDGET["metadata"], "finalizers": []}}, KEY)
    changed = copy.deepcopy(signed)
    del changed["metadata"]["finalizers"]
    assert verdict(changed).verified
