"""Every subresource through which a protected object can change reaches the policy, in both engines.

For each shipped policy: the kinds it protects (read from its own match), and
for each of them every subresource whose request the service must see
(``tests/support/subresources.py``: verified, or denied unless the requester is
exempt). Each such request must

* Gatekeeper: be sent to Gatekeeper at all by the webhook rules of
  ``manifests/overlays/gatekeeper/gatekeeper-values.yaml``, and match the
  sample constraint (whose kinds must name the request's *object* kind: a
  Scale, not the Deployment);
* Kyverno ``ClusterPolicy``: match a rule's kinds in Kyverno's
  ``Kind/subresource`` syntax, its operations and namespaces;
* Kyverno ``ValidatingPolicy``: match ``matchConstraints.resourceRules``.

The policy that needs no service (``always-pull-private-images``) cares about
images only, which change through ``pods/ephemeralcontainers`` alone. The
tests of the reproduced matchers show each one refusing what the real one
refuses, and the table of old configurations shows these checks catching
what shipped before (a ConfigMap-and-Deployment constraint without Scale, the
chart's default webhook rules).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.data import REPO, load_yaml
from tests.support.subresources import (
    KINDS,
    MUST_REACH_SERVICE,
    SUBRESOURCES,
    Subresource,
    admission_request,
    gatekeeper_matches,
    kyverno_kind_matches,
    kyverno_kind_selector,
    rules_send,
    subresources_of,
)

GATEKEEPER = REPO / "policies" / "gatekeeper"
KYVERNO = REPO / "policies" / "kyverno"
VALUES = REPO / "manifests" / "overlays" / "gatekeeper" / "gatekeeper-values.yaml"
POLICY_DOC = REPO / "docs" / "policy.md"

#: Gatekeeper chart's default webhook rule (open-policy-agent/gatekeeper, charts/gatekeeper/templates/
#: gatekeeper-validating-webhook-configuration-validatingwebhookconfiguration.yaml; the same list is the
#: kubebuilder marker in pkg/webhook/policy.go), without enableDeleteOperations.
CHART_DEFAULT_RULES = [
    {
        "apiGroups": ["*"],
        "apiVersions": ["*"],
        "operations": ["CREATE", "UPDATE"],
        "resources": [
            "*",
            "pods/ephemeralcontainers",
            "pods/exec",
            "pods/log",
            "pods/eviction",
            "pods/portforward",
            "pods/proxy",
            "pods/attach",
            "pods/binding",
            "deployments/scale",
            "replicasets/scale",
            "statefulsets/scale",
            "replicationcontrollers/scale",
            "services/proxy",
            "nodes/proxy",
            "services/status",
        ],
    }
]

#: Policies that need no service, and the subresources that can change what they check.
CONTENT_SUBRESOURCES = {"always-pull-private-images": {"ephemeralcontainers"}}


def relevant(policy: str, kind: str) -> list[Subresource]:
    subs = subresources_of(kind)
    if policy in CONTENT_SUBRESOURCES:
        return [s for s in subs if s.name in CONTENT_SUBRESOURCES[policy]]
    return [s for s in subs if s.decision in MUST_REACH_SERVICE]


def webhook_rules() -> list[dict[str, Any]]:
    return list(yaml.safe_load(VALUES.read_text())["validatingWebhookCustomRules"])


def request_for(kind: str, sub: Subresource | None, namespaces: list[str] | None) -> dict[str, Any]:
    cluster_scoped = kind in ("Namespace", "CertificateSigningRequest")
    namespace = None if cluster_scoped else (namespaces[0] if namespaces else "default")
    return admission_request(kind, sub, namespace=namespace)


# --- Gatekeeper ------------------------------------------------------------------------------------

CONSTRAINTS = sorted(GATEKEEPER.glob("*/samples/*/constraint.yaml"))


def constraint_cases() -> list[tuple[str, str, str | None]]:
    cases = []
    for path in CONSTRAINTS:
        policy = path.parents[2].name
        (doc,) = load_yaml(path)
        kinds = {k for entry in doc["spec"]["match"]["kinds"] for k in entry["kinds"] if k in KINDS}
        for kind in sorted(kinds):
            cases.append((policy, kind, None))
            cases.extend((policy, kind, sub.name) for sub in relevant(policy, kind))
    return cases


GATEKEEPER_CASES = constraint_cases()


def test_the_cases_cover_the_kinds_that_have_subresources() -> None:
    covered = {(policy, kind) for policy, kind, sub in GATEKEEPER_CASES if sub}
    assert ("verify-manifest-signature", "Deployment") in covered
    assert ("verify-kubelet-serving-csr", "CertificateSigningRequest") in covered
    assert ("always-pull-private-images", "Pod") in covered
    assert len(GATEKEEPER_CASES) >= 9


@pytest.mark.parametrize(
    ("policy", "kind", "sub"), GATEKEEPER_CASES, ids=[f"{p}:{k}/{s or '-'}" for p, k, s in GATEKEEPER_CASES]
)
def test_gatekeeper_is_sent_the_request_and_the_constraint_matches_it(policy: str, kind: str, sub: str | None) -> None:
    (constraint,) = load_yaml(GATEKEEPER / policy / "samples" / f"k8s{policy.replace('-', '')}" / "constraint.yaml")
    match = constraint["spec"]["match"]
    subresource = next((s for s in SUBRESOURCES if s.name == sub and kind in s.parents), None)
    request = request_for(kind, subresource, match.get("namespaces"))
    assert rules_send(webhook_rules(), request), "the webhook rules do not send it to Gatekeeper"
    assert gatekeeper_matches(match, request), f"the constraint does not match a {request['kind']['kind']}"


def test_the_values_keep_the_charts_rule_and_add_to_it() -> None:
    (rule,) = webhook_rules()
    (default,) = CHART_DEFAULT_RULES
    assert {k: v for k, v in rule.items() if k != "resources"} == {k: v for k, v in default.items() if k != "resources"}
    assert rule["resources"][: len(default["resources"])] == default["resources"]


@pytest.mark.parametrize(
    ("what", "rules", "match", "admission", "sent", "matched"),
    [
        (
            "old-constraint-without-scale",
            CHART_DEFAULT_RULES,
            {"kinds": [{"apiGroups": [""], "kinds": ["ConfigMap"]}, {"apiGroups": ["apps"], "kinds": ["Deployment"]}]},
            admission_request("Deployment", next(s for s in SUBRESOURCES if s.name == "scale")),
            True,
            False,
        ),
        (
            "chart-rules-without-status",
            CHART_DEFAULT_RULES,
            {"kinds": [{"apiGroups": ["apps"], "kinds": ["Deployment"]}]},
            admission_request("Deployment", next(s for s in SUBRESOURCES if s.name == "status")),
            False,
            True,
        ),
        (
            "chart-rules-without-approval",
            CHART_DEFAULT_RULES,
            {"kinds": [{"apiGroups": ["certificates.k8s.io"], "kinds": ["CertificateSigningRequest"]}]},
            admission_request(
                "CertificateSigningRequest", next(s for s in SUBRESOURCES if s.name == "approval"), namespace=None
            ),
            False,
            True,
        ),
        (
            "other-namespace",
            CHART_DEFAULT_RULES,
            {"kinds": [{"apiGroups": ["*"], "kinds": ["*"]}], "namespaces": ["demo"]},
            admission_request("Deployment", None, namespace="prod"),
            True,
            False,
        ),
        (
            "connect-is-not-a-write",
            CHART_DEFAULT_RULES,
            {"kinds": [{"apiGroups": ["*"], "kinds": ["*"]}]},
            admission_request("Pod", next(s for s in SUBRESOURCES if s.name == "exec")),
            False,
            True,
        ),
    ],
    ids=[
        "old-constraint-without-scale",
        "chart-rules-without-status",
        "chart-rules-without-approval",
        "other-namespace",
        "connect-is-not-a-write",
    ],
)
def test_the_checks_catch_what_used_to_ship(
    what: str,
    rules: list[dict[str, Any]],
    match: dict[str, Any],
    *,
    admission: dict[str, Any],
    sent: bool,
    matched: bool,
) -> None:
    assert rules_send(rules, admission) is sent
    assert gatekeeper_matches(match, admission) is matched


@pytest.mark.parametrize(
    ("entry", "sub", "sent"),
    [
        ("*", "", True),
        ("*", "scale", False),
        ("*/*", "scale", True),
        ("deployments/*", "status", True),
        ("*/scale", "scale", True),
        ("*/scale", "status", False),
        ("deployments/scale", "scale", True),
        ("replicasets/scale", "scale", False),
        ("deployments", "", True),
        ("deployments", "scale", False),
    ],
)
def test_webhook_resource_wildcards(entry: str, sub: str, sent: bool) -> None:
    """The API server's rule matching (k8s.io/apiserver ``rules.Matcher.resource``), as reproduced."""
    subresource = next((s for s in SUBRESOURCES if s.name == sub and "Deployment" in s.parents), None)
    request = admission_request("Deployment", subresource)
    rule = {"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": [entry]}
    assert rules_send([rule], request) is sent


# --- Kyverno ClusterPolicy ---------------------------------------------------------------------------

CLUSTER_POLICIES = sorted(p for p in KYVERNO.glob("*/*.yaml") if load_yaml(p)[0]["kind"] == "ClusterPolicy")


def kyverno_cases() -> list[tuple[str, str, str | None]]:
    cases = []
    for path in CLUSTER_POLICIES:
        (doc,) = load_yaml(path)
        # A scan-only policy (admission: false) sees stored objects, never a request on a subresource.
        admits = doc["spec"].get("admission", True)
        for rule in doc["spec"]["rules"]:
            for block in rule["match"].get("any", []) + rule["match"].get("all", []):
                for selector in block["resources"]["kinds"]:
                    _, _, kind, sub = kyverno_kind_selector(selector)
                    if sub or kind not in KINDS:
                        continue
                    cases.append((path.parent.name, kind, None))
                    if admits:
                        cases.extend((path.parent.name, kind, s.name) for s in relevant(path.parent.name, kind))
    return cases


KYVERNO_CASES = kyverno_cases()


def test_the_kyverno_cases_cover_the_kinds_that_have_subresources() -> None:
    covered = {(policy, kind) for policy, kind, sub in KYVERNO_CASES if sub}
    assert {
        ("verify-manifest-signature", "Deployment"),
        ("verify-kubelet-serving-csr", "CertificateSigningRequest"),
        ("always-pull-private-images", "Pod"),
    } <= covered


@pytest.mark.parametrize(
    ("policy", "kind", "sub"), KYVERNO_CASES, ids=[f"{p}:{k}/{s or '-'}" for p, k, s in KYVERNO_CASES]
)
def test_the_cluster_policy_matches_the_request(policy: str, kind: str, sub: str | None) -> None:
    (doc,) = load_yaml(KYVERNO / policy / f"{policy}.yaml")
    subresource = next((s for s in SUBRESOURCES if s.name == sub and kind in s.parents), None)
    hits = []
    for rule in doc["spec"]["rules"]:
        for block in rule["match"].get("any", []):
            resources = block["resources"]
            request = request_for(kind, subresource, resources.get("namespaces"))
            if kyverno_kind_matches(resources["kinds"], request) and request["operation"] in resources.get(
                "operations", ["CREATE", "UPDATE", "DELETE", "CONNECT"]
            ):
                hits.append(rule["name"])
    assert hits, f"no rule of {policy} matches {kind}/{sub}"


@pytest.mark.parametrize("path", CLUSTER_POLICIES, ids=lambda p: p.parent.name)
def test_a_policy_matching_subresources_is_admission_only(path: Path) -> None:
    """Kyverno refuses background scanning for a policy that names a subresource (kyverno/website#652, Kyverno 1.9+)."""
    (doc,) = load_yaml(path)
    selectors = [
        s
        for rule in doc["spec"]["rules"]
        for block in rule["match"].get("any", [])
        for s in block["resources"]["kinds"]
    ]
    if any(kyverno_kind_selector(s)[3] for s in selectors):
        assert doc["spec"]["background"] is False


@pytest.mark.parametrize(
    ("selectors", "kind", "sub", "matched"),
    [
        (["ConfigMap"], "ConfigMap", None, True),
        (["Deployment"], "Deployment", "scale", False),  # the bypass: a kind alone matches no subresource
        (["Deployment/scale"], "Deployment", "scale", True),
        (["apps/v1/Deployment/scale"], "Deployment", "scale", True),
        (["Deployment.scale"], "Deployment", "scale", True),
        (["apps/v1/Deployment/scale"], "Deployment", "status", False),
        (["Deployment/*"], "Deployment", "status", True),
        (["*/scale"], "StatefulSet", "scale", True),
        (["Scale"], "Deployment", "scale", False),  # the subresource's own kind is not a selector (Kyverno 1.10+)
        (["Pod"], "Pod", "ephemeralcontainers", True),  # validate rules: CheckKind's allowEphemeralContainers
        (["Pod"], "Pod", "resize", False),  # kyverno/kyverno#17060
        (["certificates.k8s.io/v1/CertificateSigningRequest"], "CertificateSigningRequest", "approval", False),
    ],
)
def test_kyverno_kind_selectors(selectors: list[str], kind: str, sub: str | None, matched: bool) -> None:
    subresource = next((s for s in SUBRESOURCES if s.name == sub and kind in s.parents), None)
    assert kyverno_kind_matches(selectors, admission_request(kind, subresource)) is matched


# --- Kyverno ValidatingPolicy -------------------------------------------------------------------------

VALIDATING_POLICIES = sorted(p for p in KYVERNO.glob("*/*.yaml") if load_yaml(p)[0]["kind"] == "ValidatingPolicy")


def test_there_is_a_validating_policy() -> None:
    assert [p.parent.name for p in VALIDATING_POLICIES] == ["verify-manifest-signature-cel"]


@pytest.mark.parametrize("path", VALIDATING_POLICIES, ids=lambda p: p.parent.name)
def test_the_validating_policy_matches_every_subresource_the_service_needs(path: Path) -> None:
    (doc,) = load_yaml(path)
    rules = doc["spec"]["matchConstraints"]["resourceRules"]
    kinds = [
        k.kind
        for k in KINDS.values()
        for rule in rules
        if k.group in rule["apiGroups"] and k.resource in rule["resources"]
    ]
    assert set(kinds) == {"ConfigMap", "Deployment"}
    checked = 0
    for kind in kinds:
        for sub in [None, *relevant(path.parent.name, kind)]:
            assert rules_send(rules, admission_request(kind, sub)), f"{kind}/{sub.name if sub else '-'}"
            checked += 1
    assert checked >= 4


# --- the table in docs/policy.md ------------------------------------------------------------------------

DOC_WORDS = {
    "verified": "verified",
    "denied-unless-exempt": "denied unless exempt",
    "unverifiable-operation": "`unverifiable-operation`",
    "harmless": "not sent",
}


def doc_section() -> str:
    text = POLICY_DOC.read_text()
    start = text.index("## Subresources")
    end = text.find("\n## ", start + 1)
    return text[start:] if end == -1 else text[start:end]


@pytest.mark.parametrize("sub", SUBRESOURCES, ids=lambda s: s.name)
def test_the_docs_table_states_each_decision(sub: Subresource) -> None:
    rows = [
        line for line in doc_section().splitlines() if line.startswith("|") and f"`{sub.name}`" in line.split("|")[1]
    ]
    assert len(rows) == 1, sub.name
    (row,) = rows
    assert DOC_WORDS[sub.decision] in row
    for parent in sub.parents:
        assert parent in row, (sub.name, parent)


# --- what the service is told ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", [p for p in CLUSTER_POLICIES if "apiCall" in p.read_text()], ids=lambda p: p.parent.name
)
def test_every_service_call_sends_the_whole_request(path: Path) -> None:
    """``{{ request }}`` alone is the AdmissionRequest's JSON: subResource, resource, requestKind and the rest."""
    (doc,) = load_yaml(path)
    calls = [
        entry["apiCall"] for rule in doc["spec"]["rules"] for entry in rule.get("context", []) if "apiCall" in entry
    ]
    assert calls
    for call in calls:
        data = {item["key"]: item["value"] for item in call["data"]}
        assert data["request"] == "{{ request }}"
