"""Tool-stamped metadata: the argocd, flux and helm profiles take what each tool adds, and nothing else.

A signed Deployment delivered the way each tool delivers it -- the real API
server's defaulted object (``tests/data/dryrun``), plus the tool's metadata --
verifies with the tool's profile and fails without it. Each way a looser rule
(an ignore pattern over the same keys) could be abused is a row of
``ATTACKS``: the object is not verified, and the verdict names the key.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from provider.compare.stamps import STAMPS, Stamped, check_argocd_tracking_id, take_stamps
from provider.errors import ContentMismatch, PolicyError
from provider.kube.dryrun import KubeDryRunner
from provider.objects import ObjectIdentity
from provider.policy.schema import PROFILES, BuiltinProfile, Policy, load_profile
from provider.verifier import verify
from tests.support import delivery
from tests.support.delivery import (
    HR_NAME,
    HR_NAMESPACE,
    KS_NAME,
    KS_NAMESPACE,
    MANAGED_BY,
    RELEASE_NAME,
    RELEASE_NAMESPACE,
    TRACKING,
    annotate,
    label,
)
from tests.support.fakeapi import FakeApiServer, recording, runner_for
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import sign

KEY = public_key_pem(make_key())
DEFAULTS = ["k8s-manifest-sigstore", "common"]


def policy(*profiles: str, **extra: Any) -> Policy:
    return Policy.from_dict({"keys": [KEY], "defaults": [*DEFAULTS, *profiles], **extra})


# --- how each tool delivers a signed Deployment (tests/support/delivery.py) --------------------------

DELIVERIES: list[tuple[str, Callable[[dict[str, Any]], None], tuple[str, ...]]] = [
    ("argocd", delivery.argocd, ("argocd",)),
    ("flux-kustomize-controller", delivery.flux, ("flux",)),
    ("helm", delivery.helm, ("helm",)),
    ("flux-helm-controller", delivery.flux_helm, ("flux", "helm")),
]


@pytest.fixture
def runner(fake: FakeApiServer, tmp_path: Path) -> Iterator[KubeDryRunner]:
    with runner_for(fake, tmp_path) as r:
        yield r


def delivered(stamp: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """The seed paper's Figure 1 Deployment, signed, as the real API server defaulted it, stamped by the tool."""
    rec = recording("deployment-seed-paper-figure1")
    (signed,) = sign(rec.request_body)
    admitted = copy.deepcopy(rec.body)
    admitted["metadata"]["annotations"] = dict(signed["metadata"]["annotations"])
    stamp(admitted)
    return admitted


@pytest.mark.parametrize(("tool", "stamp", "profiles"), DELIVERIES, ids=[d[0] for d in DELIVERIES])
def test_a_delivered_deployment_verifies_with_its_profile_and_only_with_it(
    runner: KubeDryRunner, tool: str, stamp: Callable[[dict[str, Any]], None], profiles: tuple[str, ...]
) -> None:
    obj = delivered(stamp)
    facts = verify(obj, policy(*profiles, dryRun={"enabled": True}), namespace="default", dry_runner=runner)
    assert facts.used_cluster  # the server's defaults were checked by value, the tool's keys by their checks
    for missing in profiles:
        rest = [p for p in profiles if p != missing]
        with pytest.raises(ContentMismatch) as caught:
            verify(obj, policy(*rest, dryRun={"enabled": True}), namespace="default", dry_runner=runner)
        assert any(item.key.startswith("metadata.") for item in caught.value.diff), caught.value.message


def test_a_delivered_deployment_with_a_smuggled_change_does_not_verify(runner: KubeDryRunner) -> None:
    for tool, stamp, profiles in DELIVERIES:
        obj = delivered(stamp)
        obj["spec"]["template"]["spec"]["containers"][0]["image"] = "evil:latest"
        with pytest.raises(ContentMismatch) as caught:
            verify(obj, policy(*profiles, dryRun={"enabled": True}), namespace="default", dry_runner=runner)
        assert [item.key for item in caught.value.diff] == ["spec.template.spec.containers.0.image"], tool


#: A smuggled change in the tool's own keys: (tool, how the stamp is bent, the key the verdict names).
BENT: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("argocd", lambda o: annotate(o, **{TRACKING: "guestbook:apps/Deployment:default/payments"}), TRACKING),
    ("flux-kustomize-controller", lambda o: label(o, **{KS_NAMESPACE: "Flux System"}), KS_NAMESPACE),
    ("helm", lambda o: annotate(o, **{RELEASE_NAMESPACE: "kube-system"}), RELEASE_NAMESPACE),
    ("flux-helm-controller", lambda o: label(o, **{HR_NAME: "web", HR_NAMESPACE: ""}), HR_NAMESPACE),
]


@pytest.mark.parametrize(("tool", "bend", "key"), BENT, ids=[b[0] for b in BENT])
def test_a_delivered_deployment_with_a_change_smuggled_into_the_tools_keys_does_not_verify(
    runner: KubeDryRunner, tool: str, bend: Callable[[dict[str, Any]], None], key: str
) -> None:
    (stamp, profiles) = next((d[1], d[2]) for d in DELIVERIES if d[0] == tool)
    obj = delivered(stamp)
    bend(obj)
    with pytest.raises(ContentMismatch) as caught:
        verify(obj, policy(*profiles, dryRun={"enabled": True}), namespace="default", dry_runner=runner)
    assert any(key in item.key for item in caught.value.diff), caught.value.message
    assert "metadata not taken" in caught.value.message


# --- attacks: what an ignore pattern over the same keys would let through ------------------------------


def deployment(namespace: str | None = "shop", **signed_meta: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A signed Deployment and the admitted copy (equal to it, in ``shop``): only what a test stamps differs."""
    doc: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", **({"namespace": namespace} if namespace else {}), **signed_meta},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "shop/web:1.0"}]},
            },
        },
    }
    (signed,) = sign(doc)
    admitted = copy.deepcopy(signed)
    admitted["metadata"]["namespace"] = "shop"
    return doc, admitted


def stamped(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """The signed Deployment (rendered without a namespace, as a chart or base leaves it) admitted in ``shop``."""
    _, obj = deployment(namespace=None)
    label(obj, **(labels or {}))
    annotate(obj, **(annotations or {}))
    return obj


GOOD_TRACKING = {TRACKING: "guestbook:apps/Deployment:shop/web"}
GOOD_HELM_LABELS, GOOD_HELM = {MANAGED_BY: "Helm"}, {RELEASE_NAME: "web", RELEASE_NAMESPACE: "shop"}
GOOD_FLUX = {KS_NAME: "apps", KS_NAMESPACE: "flux-system"}
GOOD_HR = {HR_NAME: "web", HR_NAMESPACE: "flux-system"}

#: (id, profiles, labels, annotations, the key the verdict must name): none of these verifies.
ATTACKS: list[tuple[str, tuple[str, ...], dict[str, str], dict[str, str], str]] = [
    # Argo CD: the tracking id decides which application owns (and prunes) an object, and any string
    # would ride in an ignored annotation.
    ("tracking-id-names-another-name", ("argocd",), {}, {TRACKING: "guestbook:apps/Deployment:shop/api"}, TRACKING),
    ("tracking-id-names-another-namespace", ("argocd",), {}, {TRACKING: "guestbook:apps/Deployment:prod/web"}, TRACKING),
    ("tracking-id-names-another-kind", ("argocd",), {}, {TRACKING: "guestbook:apps/StatefulSet:shop/web"}, TRACKING),
    ("tracking-id-names-another-group", ("argocd",), {}, {TRACKING: "guestbook:extensions/Deployment:shop/web"}, TRACKING),
    ("tracking-id-core-group-for-apps", ("argocd",), {}, {TRACKING: "guestbook:/Deployment:shop/web"}, TRACKING),
    ("content-after-the-tracking-id", ("argocd",), {}, {TRACKING: "guestbook:apps/Deployment:shop/web\nrun: x"}, TRACKING),
    ("extra-segment-in-the-tracking-id", ("argocd",), {}, {TRACKING: "guestbook:apps/Deployment:shop/web/x"}, TRACKING),
    ("content-in-the-application-name", ("argocd",), {}, {TRACKING: "evil payload:apps/Deployment:shop/web"}, TRACKING),
    ("huge-application-name", ("argocd",), {}, {TRACKING: "a" * 400 + ":apps/Deployment:shop/web"}, TRACKING),
    ("tracking-id-without-application", ("argocd",), {}, {TRACKING: ":apps/Deployment:shop/web"}, TRACKING),
    ("another-argocd-annotation", ("argocd",), {}, {**GOOD_TRACKING, "argocd.argoproj.io/sync-options": "Prune=false"},
     "argocd.argoproj.io/sync-options"),
    ("a-key-named-like-the-tracking-id", ("argocd",), {}, {**GOOD_TRACKING, TRACKING + "-2": "x"}, TRACKING + "-2"),
    ("tracking-id-as-a-label", ("argocd",), {TRACKING: "guestbook"}, {}, TRACKING),
    ("tracking-id-without-the-argocd-profile", ("flux", "helm"), {}, GOOD_TRACKING, TRACKING),
    # Helm: the release annotations decide which release adopts and uninstalls an object.
    ("release-namespace-not-the-objects", ("helm",), GOOD_HELM_LABELS, {**GOOD_HELM, RELEASE_NAMESPACE: "prod"},
     RELEASE_NAMESPACE),
    ("release-without-managed-by", ("helm",), {}, GOOD_HELM, RELEASE_NAME),
    ("managed-by-another-tool", ("helm",), {MANAGED_BY: "Tiller"}, GOOD_HELM, MANAGED_BY),
    ("managed-by-lowercase-helm", ("helm",), {MANAGED_BY: "helm"}, GOOD_HELM, MANAGED_BY),
    ("managed-by-alone", ("helm",), GOOD_HELM_LABELS, {}, MANAGED_BY),
    ("release-name-without-namespace", ("helm",), GOOD_HELM_LABELS, {RELEASE_NAME: "web"}, RELEASE_NAME),
    ("release-name-not-a-release-name", ("helm",), GOOD_HELM_LABELS, {**GOOD_HELM, RELEASE_NAME: "Web Release"},
     RELEASE_NAME),
    ("release-name-too-long", ("helm",), GOOD_HELM_LABELS, {**GOOD_HELM, RELEASE_NAME: "r" * 54}, RELEASE_NAME),
    ("content-in-the-release-name", ("helm",), GOOD_HELM_LABELS, {**GOOD_HELM, RELEASE_NAME: "web\nimage: evil"},
     RELEASE_NAME),
    ("helm-keep-policy-added", ("helm",), GOOD_HELM_LABELS, {**GOOD_HELM, "meta.helm.sh/resource-policy": "keep"},
     "meta.helm.sh/resource-policy"),
    ("release-annotations-as-labels", ("helm",), {**GOOD_HELM_LABELS, RELEASE_NAME: "web", RELEASE_NAMESPACE: "shop"},
     {}, RELEASE_NAME),
    # Flux: the owner labels decide what a Kustomization prunes; other keys under its prefix steer it.
    ("kustomization-name-without-namespace", ("flux",), {KS_NAME: "apps"}, {}, KS_NAME),
    ("kustomization-name-not-a-name", ("flux",), {**GOOD_FLUX, KS_NAME: "Apps_1"}, {}, KS_NAME),
    ("kustomization-namespace-not-a-namespace", ("flux",), {**GOOD_FLUX, KS_NAMESPACE: "flux.system"}, {},
     KS_NAMESPACE),
    ("prune-disabled-added", ("flux",), GOOD_FLUX, {"kustomize.toolkit.fluxcd.io/prune": "disabled"},
     "kustomize.toolkit.fluxcd.io/prune"),
    ("ssa-ignore-added", ("flux",), GOOD_FLUX, {"kustomize.toolkit.fluxcd.io/ssa": "Ignore"},
     "kustomize.toolkit.fluxcd.io/ssa"),
    ("owner-labels-as-annotations", ("flux",), {}, GOOD_FLUX, KS_NAME),
    ("helmrelease-labels-without-the-flux-profile", ("helm",), GOOD_HELM_LABELS,
     GOOD_HELM, HR_NAME),  # the HelmRelease labels are added below
    # helm-controller installs through Helm: its origin labels on an object without Helm's release metadata
    # claim for a HelmRelease an object no HelmRelease installed.
    ("helmrelease-labels-without-helm-metadata", ("flux", "helm"), GOOD_HR, {}, HR_NAME),
    ("helmrelease-labels-beside-bent-helm-metadata", ("flux", "helm"), {**GOOD_HR, **GOOD_HELM_LABELS},
     {**GOOD_HELM, RELEASE_NAMESPACE: "prod"}, HR_NAME),
    ("helmrelease-labels-beside-managed-by-another-tool", ("flux", "helm"), {**GOOD_HR, MANAGED_BY: "kustomize"},
     GOOD_HELM, HR_NAME),
]  # fmt: skip


@pytest.mark.parametrize(("case", "profiles", "labels", "annotations", "key"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_an_attack_on_stamped_metadata_is_a_difference(
    case: str, profiles: tuple[str, ...], labels: dict[str, str], annotations: dict[str, str], key: str
) -> None:
    obj = stamped(labels, annotations)
    if case == "helmrelease-labels-without-the-flux-profile":
        label(obj, **{HR_NAME: "web", HR_NAMESPACE: "flux-system"})
    with pytest.raises(ContentMismatch) as caught:
        verify(obj, policy(*profiles), namespace="shop")
    assert any(key in item.key for item in caught.value.diff), (caught.value.message, key)


#: (profile, labels, annotations) a tool writes on the object itself, never in its Pod template.
IN_THE_TEMPLATE: list[tuple[str, dict[str, str], dict[str, str]]] = [
    ("argocd", {}, GOOD_TRACKING),
    ("flux", GOOD_FLUX, {}),
    ("flux", {**GOOD_HR, **GOOD_HELM_LABELS}, GOOD_HELM),
    ("helm", GOOD_HELM_LABELS, GOOD_HELM),
]


@pytest.mark.parametrize(
    ("profile", "labels", "annotations"), IN_THE_TEMPLATE, ids=["argocd", "flux", "flux-helmrelease", "helm"]
)
def test_a_tools_keys_in_the_pod_template_are_a_difference(
    profile: str, labels: dict[str, str], annotations: dict[str, str]
) -> None:
    """The profile takes the keys from the object's own metadata only: in the Pod template they select Pods."""
    profiles = ("flux", "helm") if HR_NAME in labels else (profile,)
    obj = stamped(labels, annotations)
    verify(obj, policy(*profiles), namespace="shop")  # on the object itself: taken
    template = obj["spec"]["template"]["metadata"]
    template["labels"] = {**template["labels"], **labels}
    template["annotations"] = dict(annotations)
    with pytest.raises(ContentMismatch) as caught:
        verify(obj, policy(*profiles), namespace="shop")
    keys = [item.key for item in caught.value.diff]
    assert keys and all(key.startswith("spec.template.metadata.") for key in keys), keys


def test_the_verdict_says_why_the_profile_did_not_take_a_stamp() -> None:
    obj = stamped(annotations={TRACKING: "guestbook:apps/Deployment:prod/web"})
    with pytest.raises(ContentMismatch) as caught:
        verify(obj, policy("argocd"), namespace="shop")
    assert "Argo CD metadata not taken" in caught.value.message
    assert "does not name this object (guestbook:apps/Deployment:shop/web)" in caught.value.message


# --- what the profiles take ----------------------------------------------------------------------------

#: (id, profiles, labels, annotations): each verifies.
TAKEN: list[tuple[str, tuple[str, ...], dict[str, str], dict[str, str]]] = [
    ("tracking-id", ("argocd",), {}, GOOD_TRACKING),
    ("tracking-id-app-in-any-namespace", ("argocd",), {}, {TRACKING: "team-a_guestbook:apps/Deployment:shop/web"}),
    ("helm-release", ("helm",), GOOD_HELM_LABELS, GOOD_HELM),
    ("flux-kustomization", ("flux",), GOOD_FLUX, {}),
    ("flux-helmrelease", ("flux", "helm"), {**GOOD_HELM_LABELS, HR_NAME: "web", HR_NAMESPACE: "flux-system"}, GOOD_HELM),
    ("all-three-tools", ("argocd", "flux", "helm"), {**GOOD_HELM_LABELS, **GOOD_FLUX}, {**GOOD_HELM, **GOOD_TRACKING}),
]  # fmt: skip


@pytest.mark.parametrize(("case", "profiles", "labels", "annotations"), TAKEN, ids=[t[0] for t in TAKEN])
def test_a_profile_takes_its_tools_metadata(
    case: str, profiles: tuple[str, ...], labels: dict[str, str], annotations: dict[str, str]
) -> None:
    verify(stamped(labels, annotations), policy(*profiles), namespace="shop")


def test_a_key_the_signer_wrote_is_compared_as_signed() -> None:
    """Signing a stamp's key pins it: the same value verifies, another one (valid for the tool) does not."""
    _, obj = deployment(annotations={TRACKING: "guestbook:apps/Deployment:shop/web"}, labels={MANAGED_BY: "Helm"})
    annotate(obj, **GOOD_HELM)
    verify(obj, policy("argocd", "helm"), namespace="shop")
    obj["metadata"]["annotations"][TRACKING] = "other-app:apps/Deployment:shop/web"
    with pytest.raises(ContentMismatch) as caught:
        verify(obj, policy("argocd", "helm"), namespace="shop")
    assert [item.key for item in caught.value.diff] == [f"metadata.annotations.{TRACKING}"]


def test_a_signed_namespace_frees_the_release_namespace() -> None:
    """A chart that names the namespace (``namespace: shop``) may be installed from another release namespace."""
    _, obj = deployment(namespace="shop")
    label(obj, **GOOD_HELM_LABELS)
    annotate(obj, **{**GOOD_HELM, RELEASE_NAMESPACE: "platform"})
    verify(obj, policy("helm"), namespace="shop")
    _, unnamed = deployment(namespace=None)
    label(unnamed, **GOOD_HELM_LABELS)
    annotate(unnamed, **{**GOOD_HELM, RELEASE_NAMESPACE: "platform"})
    with pytest.raises(ContentMismatch):
        verify(unnamed, policy("helm"), namespace="shop")


@pytest.mark.parametrize(
    ("value", "holds"),
    [
        ("guestbook:rbac.authorization.k8s.io/ClusterRole:argocd/reader", True),
        ("guestbook:rbac.authorization.k8s.io/ClusterRole:/reader", True),
        ("guestbook:rbac.authorization.k8s.io/ClusterRole:Not_A_Namespace/reader", False),
        ("guestbook:rbac.authorization.k8s.io/ClusterRole:argocd/writer", False),
        ("guestbook:rbac.authorization.k8s.io/Role:argocd/reader", False),
    ],
    ids=["destination-namespace", "no-destination", "bad-namespace", "other-name", "other-kind"],
)
def test_a_cluster_scoped_objects_tracking_id_carries_the_applications_namespace(value: str, holds: bool) -> None:
    ident = ObjectIdentity("rbac.authorization.k8s.io", "v1", "ClusterRole", "reader", "")
    problem = check_argocd_tracking_id(Stamped({}, {TRACKING: value}, ident, signed_namespace=False))
    assert (problem == "") is holds, problem


def test_nothing_is_taken_by_default_and_inputs_are_not_changed() -> None:
    obj = stamped(GOOD_HELM_LABELS, {**GOOD_HELM, **GOOD_TRACKING})
    before = copy.deepcopy(obj)
    doc, _ = deployment(namespace=None)
    ident = ObjectIdentity.of(obj)
    assert take_stamps(obj, doc, (), ident) == (obj, ())
    taken, refused = take_stamps(obj, doc, (STAMPS["argocd-tracking-id"], STAMPS["helm-release"]), ident)
    assert refused == () and obj == before
    assert TRACKING not in taken["metadata"]["annotations"] and "labels" not in taken["metadata"]
    with pytest.raises(ContentMismatch):
        verify(obj, policy(), namespace="shop")


# --- the profiles compile ------------------------------------------------------------------------------


def test_the_tool_profiles_are_built_in_and_opt_in() -> None:
    assert {"argocd", "flux", "helm"} <= set(PROFILES)
    assert not Policy.from_dict({"keys": [KEY]}).tool_metadata
    assert {s.name for s in policy("argocd", "flux", "helm").tool_metadata} == set(STAMPS)
    for name in ("argocd", "flux", "helm"):
        profile = load_profile(name)
        assert profile.tool_metadata and not profile.ignore_fields and not profile.skip_users


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"check": "argocd-tracking-ids", "annotations": [TRACKING]}, "unknown check"),
        ({"check": "argocd-tracking-id", "annotations": [TRACKING, "argocd.argoproj.io/installation-id"]}, "exactly"),
        ({"check": "argocd-tracking-id", "labels": [TRACKING]}, "exactly"),
        ({"check": "helm-release", "labels": [MANAGED_BY], "annotations": [RELEASE_NAME]}, "exactly"),
        ({"check": "argocd-tracking-id", "annotations": [TRACKING], "pattern": "*"}, "unknown field"),
    ],
    ids=["unknown-check", "extra-key", "label-for-annotation", "missing-key", "unknown-field"],
)
def test_a_profile_entry_must_name_exactly_the_checks_keys(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        BuiltinProfile.from_dict("test", {"toolMetadata": [entry]})
