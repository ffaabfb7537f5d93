"""Masks exactly as narrow as their reason (issue "One signer counts once", item 4; docs/security.md).

* The ``deprecated.daemonset.template.generation`` annotation was masked on every kind,
  whatever its value: a ConfigMap carried any unsigned string there and verified with dry-run.
  It is now taken only on an ``apps`` DaemonSet, and only when it restates the object's
  own generation.
* The default profile ignored a Service's ``clusterIP``, ``clusterIPs`` and node ports, so a
  signed headless Service (``clusterIP: None``) admitted with a virtual IP verified. They are
  now taken from the admitted object only where the signer left them open and the value
  has the shape the API server allocates.
* The dry-run answer's kind was checked, but not the object it names: an answer for another
  object became the reference.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from provider import Policy, Review, decide
from provider.compare.allocations import DAEMONSET_GENERATION
from provider.errors import TransientError
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign

KEY = make_key("ecdsa-p256", 31)
POLICY = Policy.from_dict({"keys": [public_key_pem(KEY)]})
DRY_RUN = Policy.from_dict({"keys": [public_key_pem(KEY)], "dryRun": {"enabled": True}})

HEADLESS = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "db", "namespace": "shop"},
    "spec": {
        "clusterIP": "None",
        "selector": {"app": "db"},
        "ports": [{"port": 5432, "protocol": "TCP", "targetPort": 5432}],
    },
}


def _service(**spec: Any) -> dict[str, Any]:
    return {
        **copy.deepcopy(HEADLESS),
        "spec": {"selector": {"app": "db"}, "ports": [{"port": 5432, "protocol": "TCP", "targetPort": 5432}], **spec},
    }


def test_a_headless_service_admitted_with_a_virtual_ip_is_a_mismatch() -> None:
    (signed,) = sign(HEADLESS, KEY)
    admitted = copy.deepcopy(signed)
    admitted["spec"]["clusterIP"] = "10.96.0.12"
    admitted["spec"]["clusterIPs"] = ["10.96.0.12"]
    result = decide(Review.for_object(admitted), POLICY)
    assert result.reason == "content-mismatch"
    assert "spec.clusterIP" in result.message


def test_an_address_the_signer_left_open_is_the_servers() -> None:
    (signed,) = sign(_service(type="ClusterIP"), KEY)
    admitted = copy.deepcopy(signed)
    admitted["spec"]["clusterIP"] = "10.96.0.12"
    admitted["spec"]["clusterIPs"] = ["10.96.0.12"]
    assert decide(Review.for_object(admitted), POLICY).verified


@pytest.mark.parametrize("value", ["None", "not-an-address", 12, "10.0.0.1; rm -rf"])
def test_only_an_address_is_adopted(value: Any) -> None:
    (signed,) = sign(_service(type="ClusterIP"), KEY)
    admitted = copy.deepcopy(signed)
    admitted["spec"]["clusterIP"] = value
    assert decide(Review.for_object(admitted), POLICY).reason == "content-mismatch"


def test_a_chosen_node_port_is_compared() -> None:
    chosen = _service(type="NodePort", ports=[{"port": 80, "nodePort": 30080, "protocol": "TCP", "targetPort": 80}])
    (signed,) = sign(chosen, KEY)
    admitted = copy.deepcopy(signed)
    admitted["spec"]["ports"][0]["nodePort"] = 31999
    assert decide(Review.for_object(admitted), POLICY).reason == "content-mismatch"
    left_open = _service(type="NodePort", ports=[{"port": 80, "protocol": "TCP", "targetPort": 80}])
    (signed,) = sign(left_open, KEY)
    admitted = copy.deepcopy(signed)
    admitted["spec"]["ports"][0]["nodePort"] = 31999
    assert decide(Review.for_object(admitted), POLICY).verified


# --- the DaemonSet generation annotation ------------------------------------------------

DAEMONSET = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "agent", "namespace": "kube-system"},
    "spec": {
        "selector": {"matchLabels": {"app": "agent"}},
        "template": {
            "metadata": {"labels": {"app": "agent"}},
            "spec": {"containers": [{"name": "a", "image": "agent:1"}]},
        },
    },
}


def _with_generation(obj: dict[str, Any], generation: int, value: str) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["metadata"]["generation"] = generation
    changed["metadata"]["annotations"][DAEMONSET_GENERATION] = value
    return changed


def test_the_daemonset_annotation_that_restates_the_generation_verifies() -> None:
    (signed,) = sign(DAEMONSET, KEY)
    assert decide(Review.for_object(_with_generation(signed, 3, "3")), POLICY).verified


@pytest.mark.parametrize("value", ["4", "anything at all", ""])
def test_any_other_value_there_is_content(value: str) -> None:
    (signed,) = sign(DAEMONSET, KEY)
    assert decide(Review.for_object(_with_generation(signed, 3, value)), POLICY).reason == "content-mismatch"


class _EchoDryRunner:
    """A runner that answers with the manifest it was given, as a server that adds nothing would."""

    def __init__(self, answer: Any = None) -> None:
        self.answer = answer

    def dry_run(self, manifest: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        result = copy.deepcopy(self.answer if self.answer is not None else manifest)
        result.setdefault("metadata", {}).update({"uid": "u", "generation": 1})
        return result  # type: ignore[no-any-return]


def test_a_configmap_cannot_carry_the_daemonset_annotation_even_with_dry_run() -> None:
    (signed,) = sign(configmap("c", "shop", mode="a"), KEY)
    admitted = copy.deepcopy(signed)
    admitted["metadata"]["annotations"][DAEMONSET_GENERATION] = "unsigned payload"
    admitted["metadata"]["generation"] = 1
    result = decide(Review.for_object(admitted), DRY_RUN, dry_runner=_EchoDryRunner())
    assert result.reason == "content-mismatch"
    assert DAEMONSET_GENERATION in result.message


# --- the dry-run answer names the object asked for ----------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "someone-else", "namespace": "shop"},
            "data": {"mode": "b"},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "c-dry-run", "namespace": "kube-system"},
            "data": {"mode": "b"},
        },
        {
            "apiVersion": "example.com/v1",
            "kind": "ConfigMap",
            "metadata": {"name": "c-dry-run", "namespace": "shop"},
            "data": {"mode": "b"},
        },
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c-dry-run", "namespace": "shop"}},
    ],
    ids=["other-name", "other-namespace", "other-group", "other-kind"],
)
def test_an_answer_for_another_object_is_never_the_reference(answer: dict[str, Any]) -> None:
    (signed,) = sign(configmap("c", "shop", mode="a"), KEY)
    tampered = copy.deepcopy(signed)
    tampered["data"]["mode"] = "b"
    with pytest.raises(TransientError, match="dry-run"):
        decide(Review.for_object(tampered), DRY_RUN, dry_runner=_EchoDryRunner(answer))
