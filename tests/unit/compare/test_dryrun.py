"""provider.compare.dryrun: the dry-run plan and the by-value comparison, on recorded API-server answers.

The recordings in ``tests/data/dryrun/create/`` are real (request, response)
pairs, so "the signed manifest" and "what the cluster made of it" here are
what a real kube-apiserver did; no cluster is contacted in this file.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from provider.compare.diff import FieldTrie, IgnoreSet, diff
from provider.compare.dryrun import (
    CRD_GROUP_PREFIX,
    DRY_RUN_SUFFIX,
    NAME_MAX,
    dry_run_name,
    plan_dry_run,
    reference_and_admitted,
    renamed_for_retry,
    target_namespace,
)
from provider.errors import MalformedMessage
from tests.support.data import DRYRUN

NOTHING_IGNORED = IgnoreSet(FieldTrie())


def exchange(stem: str) -> tuple[dict[str, Any], dict[str, Any]]:
    data = json.loads((DRYRUN / "create" / f"{stem}.json").read_text())
    return data["request"]["body"], data["response"]["body"]


def by_value(stem: str, admitted_change: Any = None) -> list[str]:
    """Diff keys between two *independent* dry-runs of one manifest (one plays the admitted object)."""
    signed, response = exchange(stem)
    plan = plan_dry_run(signed, "default")
    admitted = copy.deepcopy(response)
    if admitted_change:
        admitted_change(admitted)
    dry = _as_if_dry_run(response, plan)
    reference, real = reference_and_admitted(dry, admitted, signed, plan)
    return [item.key for item in diff(reference, real, NOTHING_IGNORED)]


def _as_if_dry_run(response: dict[str, Any], plan: Any) -> dict[str, Any]:
    """The recorded answer as a second dry-run would give it: new name, uid, allocations."""
    text = json.dumps(response)
    old = response["metadata"]
    text = text.replace(json.dumps(old["uid"]), json.dumps("0f0f0f0f-1111-2222-3333-444455556666"))
    dry = json.loads(text)
    dry["metadata"]["name"] = plan.manifest["metadata"].get("name", old.get("name"))
    spec = dry.get("spec") or {}
    for label in ("batch.kubernetes.io/job-name", "job-name"):
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        if label in labels:
            labels[label] = dry["metadata"]["name"]
    if dry["kind"] == "Namespace":
        dry["metadata"]["labels"]["kubernetes.io/metadata.name"] = dry["metadata"]["name"]
    if dry["kind"] == "CustomResourceDefinition":
        dry["spec"]["group"] = plan.manifest["spec"]["group"]
    if dry["kind"] == "Service" and spec.get("clusterIP") not in (None, "None"):
        spec["clusterIP"] = spec["clusterIPs"][0] = "10.0.77.9"
        for port in spec.get("ports", []):
            if "nodePort" in port and port["nodePort"] != 30080:
                port["nodePort"] = 31999
    for volume in spec.get("volumes") or []:
        if volume["name"].startswith("kube-api-access-"):
            old_volume = volume["name"]
            dry = json.loads(json.dumps(dry).replace(json.dumps(old_volume), json.dumps("kube-api-access-zz9zz")))
    return dry


# --- names and the plan -----------------------------------------------------------


def test_dry_run_name_appends_the_suffix() -> None:
    assert dry_run_name("test-app") == "test-app" + DRY_RUN_SUFFIX
    assert dry_run_name("test-app", "b2c4d") == "test-app-dry-run-b2c4d"


@pytest.mark.parametrize(
    "name",
    ["a" * 56, "a" * 63, "a" * 200, "x." * 40 + "y", "svc-" + "9" * 70],
    ids=["56", "63", "200", "dotted", "digits"],
)
@pytest.mark.parametrize("token", ["", "b2c4d"], ids=["first", "retry"])
def test_dry_run_name_fits_a_dns_label_and_stays_distinct(name: str, token: str) -> None:
    renamed = dry_run_name(name, token)
    assert len(renamed) <= NAME_MAX
    assert renamed.endswith(DRY_RUN_SUFFIX + (f"-{token}" if token else ""))
    assert renamed[0] == name[0] and renamed[-1].isalnum()
    assert dry_run_name(name + "z", token) != renamed


def test_plan_renames_sets_the_namespace_and_drops_server_set_metadata() -> None:
    live = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "prod", "uid": "u", "resourceVersion": "9", "generation": 3,
                     "creationTimestamp": "2020-01-01T00:00:00Z", "managedFields": [{}], "labels": {"a": "b"}},
        "data": {"k": "v"},
    }  # fmt: skip
    plan = plan_dry_run(live, "dry")
    assert plan.namespace == "dry"
    assert plan.manifest["metadata"] == {"name": "cm-dry-run", "namespace": "dry", "labels": {"a": "b"}}
    assert plan.manifest["data"] == {"k": "v"}
    assert live["metadata"]["name"] == "cm"  # the signed document is not changed


def test_plan_without_a_namespace_leaves_it_to_the_runner() -> None:
    plan = plan_dry_run({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "x"}}, None)
    assert plan.namespace is None and "namespace" not in plan.manifest["metadata"]


def test_plan_keeps_a_generate_name_only_manifest() -> None:
    plan = plan_dry_run({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "cm-"}}, "default")
    assert plan.manifest["metadata"] == {"generateName": "cm-", "namespace": "default"}


@pytest.mark.parametrize("meta", [None, "x", {}, {"labels": {}}], ids=["none", "string", "empty", "no-name"])
def test_plan_refuses_a_document_it_cannot_name(meta: Any) -> None:
    with pytest.raises(MalformedMessage):
        plan_dry_run({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}, "default")


def test_a_crd_moves_to_a_dry_run_group_and_keeps_its_name_rule() -> None:
    signed, _ = exchange("customresourcedefinition")
    plan = plan_dry_run(signed, "default")
    spec = plan.manifest["spec"]
    assert spec["group"] == CRD_GROUP_PREFIX + "example.com"
    assert plan.manifest["metadata"]["name"] == f"{spec['names']['plural']}.{spec['group']}"
    retried = renamed_for_retry(plan.manifest, "b2c4d")
    assert retried["spec"]["group"] == "dry-run-b2c4d.example.com"
    assert retried["metadata"]["name"] == "widgets.dry-run-b2c4d.example.com"


def test_a_crd_whose_name_breaks_the_rule_is_sent_so_the_server_refuses_it() -> None:
    signed, _ = exchange("customresourcedefinition")
    signed = copy.deepcopy(signed)
    signed["metadata"]["name"] = "gadgets.example.com"
    manifest = plan_dry_run(signed, None).manifest
    assert (
        manifest["metadata"]["name"] == "gadgets.example.com-dry-run"
    )  # != <plural>.<group>: a 422, as for the original


def test_retry_renames_again() -> None:
    plan = plan_dry_run({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}, "d")
    assert renamed_for_retry(plan.manifest, "xy234")["metadata"]["name"] == "cm-dry-run-xy234"
    generated = plan_dry_run({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "cm-"}}, "d")
    assert renamed_for_retry(generated.manifest, "xy234") == generated.manifest


@pytest.mark.parametrize(
    ("obj", "namespace", "configured", "expected"),
    [
        ({"metadata": {"namespace": "app"}}, "req", "dry", "dry"),
        ({"metadata": {"namespace": "app"}}, "req", "", "app"),
        ({"metadata": {}}, "req", "", "req"),
        ({"metadata": {}}, None, "", None),
    ],
    ids=["configured", "object", "request", "runner-default"],
)
def test_target_namespace(obj: dict[str, Any], namespace: str | None, configured: str, expected: str | None) -> None:
    assert target_namespace(obj, namespace, configured) == expected


# --- by value ---------------------------------------------------------------------

CREATES = sorted(p.stem for p in (DRYRUN / "create").glob("*.json"))


def test_the_recorded_creates_are_there() -> None:
    assert len(CREATES) >= 44, CREATES  # the 44 recorded dry-run creates (docs/dryrun.md)


@pytest.mark.parametrize("stem", CREATES)
def test_two_dry_runs_of_one_manifest_compare_equal(stem: str) -> None:
    """Whatever differs between two creates by construction (names, uids, allocations) is made equal -- and nothing else."""
    assert by_value(stem) == []


def _set(path: str, value: Any) -> Any:
    def change(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = obj
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        node[int(last) if last.isdigit() else last] = value

    return change


def _label(name: str, value: str) -> Any:
    return lambda obj: obj["metadata"].setdefault("labels", {}).__setitem__(name, value)


#: A change to a field the *cluster* filled in (a default) is still a difference.
DEFAULTED_FIELD_CHANGES = [
    (
        "deployment-seed-paper-figure1",
        "imagePullPolicy",
        _set("spec.template.spec.containers.0.imagePullPolicy", "Always"),
    ),
    ("deployment-seed-paper-figure1", "hostNetwork", _set("spec.template.spec.hostNetwork", True)),
    ("deployment-seed-paper-figure1", "securityContext", _set("spec.template.spec.securityContext", {"runAsUser": 0})),
    ("deployment-seed-paper-figure1", "dnsPolicy", _set("spec.template.spec.dnsPolicy", "None")),
    ("pod", "imagePullPolicy", _set("spec.containers.0.imagePullPolicy", "Never")),
    ("pod", "serviceAccountName", _set("spec.serviceAccountName", "admin")),
    ("pod", "token-expiry", _set("spec.volumes.0.projected.sources.0.serviceAccountToken.expirationSeconds", 999999)),
    ("job", "backoffLimit", _set("spec.backoffLimit", 1000)),
    ("job", "job-name-label", _set("spec.template.metadata.labels.job-name", "another-job")),
    ("service-clusterip-minimal", "headless", _set("spec.clusterIP", "None")),
    ("service-clusterip-minimal", "type", _set("spec.type", "NodePort")),
    ("service-clusterip-minimal", "internalTrafficPolicy", _set("spec.internalTrafficPolicy", "Local")),
    ("service-nodeport-explicit", "chosen-nodePort", _set("spec.ports.0.nodePort", 30081)),
    ("service-loadbalancer-minimal", "externalTrafficPolicy", _set("spec.externalTrafficPolicy", "Local")),
    ("namespace", "name-label", _label("kubernetes.io/metadata.name", "kube-system")),
    ("customresourcedefinition", "group", _set("spec.group", "evil.example.com")),
    ("storageclass", "reclaimPolicy", _set("reclaimPolicy", "Retain")),
    ("validatingwebhookconfiguration", "failurePolicy", _set("webhooks.0.failurePolicy", "Ignore")),
    ("configmap", "added-label", _label("tampered", "yes")),
]


@pytest.mark.parametrize(
    ("stem", "what", "change"), DEFAULTED_FIELD_CHANGES, ids=[f"{s}:{w}" for s, w, _ in DEFAULTED_FIELD_CHANGES]
)
def test_a_changed_default_is_caught(stem: str, what: str, change: Any) -> None:
    assert by_value(stem, change), f"{stem}: a changed {what} went unnoticed"


def test_the_name_is_mapped_only_where_the_server_derived_it() -> None:
    """A Job's job-name label follows the dry-run name; the admitted object must carry its own name there."""
    signed, response = exchange("job")
    plan = plan_dry_run(signed, "default")
    dry = _as_if_dry_run(response, plan)
    assert dry["spec"]["template"]["metadata"]["labels"]["job-name"] == "test-app-job-dry-run"
    reference, _ = reference_and_admitted(dry, response, signed, plan)
    assert reference["spec"]["template"]["metadata"]["labels"]["job-name"] == "test-app-job"
    assert (
        reference["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"]
        == response["metadata"]["uid"]
    )


def test_an_allocation_is_adopted_only_where_the_signed_manifest_left_it_to_the_server() -> None:
    signed, response = exchange("service-nodeport-explicit")  # nodePort: 30080 chosen by the author
    plan = plan_dry_run(signed, "default")
    dry = _as_if_dry_run(response, plan)
    admitted = copy.deepcopy(response)
    admitted["spec"]["ports"][0]["nodePort"] = 30099
    reference, real = reference_and_admitted(dry, admitted, signed, plan)
    assert [i.key for i in diff(reference, real, NOTHING_IGNORED)] == ["spec.ports.0.nodePort"]
    assert reference["spec"]["clusterIP"] == admitted["spec"]["clusterIP"]  # allocated: adopted


def test_headless_is_never_taken_for_an_allocation() -> None:
    signed, response = exchange("service-clusterip-minimal")
    plan = plan_dry_run(signed, "default")
    admitted = copy.deepcopy(response)
    admitted["spec"]["clusterIP"] = "None"
    admitted["spec"]["clusterIPs"] = ["None"]
    reference, real = reference_and_admitted(_as_if_dry_run(response, plan), admitted, signed, plan)
    assert {i.key for i in diff(reference, real, NOTHING_IGNORED)} == {"spec.clusterIP", "spec.clusterIPs.0"}


def test_inputs_are_not_changed() -> None:
    signed, response = exchange("job")
    plan = plan_dry_run(signed, "default")
    dry = _as_if_dry_run(response, plan)
    before = json.dumps([dry, response, signed], sort_keys=True)
    reference_and_admitted(dry, response, signed, plan)
    assert json.dumps([dry, response, signed], sort_keys=True) == before
