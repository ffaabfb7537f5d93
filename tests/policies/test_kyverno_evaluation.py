"""Kyverno's evaluation of the signature ClusterPolicy, release by release, with the real verifier as the service.

Kyverno cannot run here, so its admission flow is reproduced from its source
(``tests/support/kyverno.py``, :func:`admit` and :func:`scan`, each rule cited
there with file and tag) for every supported release, and the service it calls
is the project's own verifier reading the body Kyverno would send. Each test
below pins one rule of that flow; the first ones are what the policies must get
right: a tampered UPDATE is a denial, a re-signed one is not.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from provider.cli._generate import Request, build
from provider.cli.convert_policy import convert
from provider.policy.schema import Policy
from provider.review import Review
from provider.verifier import decide
from tests.support.data import CRDS, load_yaml
from tests.support.data import KYVERNO as KYVERNO_INTEROP
from tests.support.kube_schema import validate_object
from tests.support.kyverno import (
    APICALL,
    BACKGROUND,
    VERSIONS,
    CallFailed,
    NotModelled,
    admit,
    policy_doc,
    resource_request,
    scan,
)
from tests.support.live import PUBLIC_KEY, deployment, reimaged, signed, signed_configmap

ALL = list(VERSIONS)


def service(calls: list[dict[str, Any]] | None = None) -> Any:
    """The project's verifier answering the body Kyverno posts."""

    def answer(url: str, body: bytes, headers: dict[str, str]) -> Any:
        data = json.loads(body)
        if calls is not None:
            calls.append(data)
        return decide(Review.from_admission(data["request"]), Policy.from_dict(data["policy"])).to_dict()

    return answer


def unreachable(url: str, body: bytes, headers: dict[str, str]) -> Any:
    raise CallFailed("dial tcp: connection refused")


def generated(enforce: bool = True) -> dict[str, Any]:
    """``manifest-provider policy kyverno -k <test key> --match-namespace shop [--enforce]``."""
    (doc,) = build(Request(engine="kyverno", policy={"keys": [PUBLIC_KEY]}, enforce=enforce, namespaces=("shop",)))
    return doc


def shipped_enforcing(directory: Any = APICALL) -> dict[str, Any]:
    """The shipped policy as the quickstart tells to enforce it: ``failureAction: Enforce``, the test key."""
    doc = copy.deepcopy(policy_doc(directory))
    (rule,) = doc["spec"]["rules"]
    rule["validate"]["failureAction"] = "Enforce"
    rule["match"]["any"][0]["resources"]["namespaces"] = ["shop"]
    rule["context"][0]["apiCall"]["data"][1]["value"] = {"keys": [PUBLIC_KEY]}
    return doc


def tampered_configmap() -> tuple[dict[str, Any], dict[str, Any]]:
    """The quickstart's step 4: ``data.mode`` changed on the stored, signed ConfigMap (old, new)."""
    old = signed_configmap("app-config", mode="production")
    new = copy.deepcopy(old)
    new["data"]["mode"] = "debug"
    return old, new


def tampered_deployment() -> tuple[dict[str, Any], dict[str, Any]]:
    old = signed(deployment())
    return old, reimaged(old)


TAMPERED = {"configmap-data": tampered_configmap, "deployment-image": tampered_deployment}
POLICIES = {"generated": generated, "shipped-enforcing": shipped_enforcing}


# --- what the policies must do --------------------------------------------------------------------


@pytest.mark.parametrize("version", ALL)
@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("change", list(TAMPERED))
def test_a_tampered_update_is_denied(version: str, policy: str, change: str) -> None:
    """The service says content-mismatch for the new object; Kyverno must refuse, not skip the rule."""
    old, new = TAMPERED[change]()
    decision = admit(POLICIES[policy](), resource_request(new, "UPDATE", old=old), service(), version)
    assert not decision.allowed, decision
    (rule,) = decision.rules
    assert rule.status == "fail"
    assert "(reason: content-mismatch)" in rule.message


@pytest.mark.parametrize("version", ALL)
@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_re_signed_update_is_admitted(version: str, policy: str) -> None:
    old, tampered = tampered_configmap()
    resigned = signed(
        {k: v for k, v in tampered.items() if k != "metadata"}
        | {"metadata": {"name": "app-config", "namespace": "shop"}}
    )
    decision = admit(POLICIES[policy](), resource_request(resigned, "UPDATE", old=old), service(), version)
    assert decision.allowed, decision
    assert [r.status for r in decision.rules] == ["pass"]


@pytest.mark.parametrize("version", ALL)
def test_an_update_while_the_service_is_unreachable_is_denied(version: str) -> None:
    """The default answer fails the new object and, with the same context, the old one: it must not be skipped."""
    old, new = tampered_configmap()
    decision = admit(generated(), resource_request(new, "UPDATE", old=old), unreachable, version)
    assert not decision.allowed
    (rule,) = decision.rules
    assert (rule.status, rule.message.endswith("(reason: provider-unavailable)")) == ("fail", True)


@pytest.mark.parametrize("version", ALL)
def test_an_update_of_an_unsigned_object_is_denied(version: str) -> None:
    """An object stored before the policy, unsigned, and changed: the change is refused like any other."""
    old = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "legacy", "namespace": "shop"}, "data": {}}
    new = copy.deepcopy(old) | {"data": {"mode": "debug"}}
    decision = admit(generated(), resource_request(new, "UPDATE", old=old), service(), version)
    assert not decision.allowed
    assert "(reason: unsigned)" in decision.rules[0].message


@pytest.mark.parametrize("version", ALL)
def test_creates_are_decided_by_the_service(version: str) -> None:
    old, tampered = tampered_configmap()
    assert admit(generated(), resource_request(old), service(), version).allowed
    assert not admit(generated(), resource_request(tampered), service(), version).allowed


@pytest.mark.parametrize("version", ALL)
def test_the_shipped_policies_judge_an_update_on_the_new_object_alone(version: str) -> None:
    for directory in (APICALL, BACKGROUND):
        (rule,) = policy_doc(directory)["spec"]["rules"]
        assert rule["validate"]["allowExistingViolations"] is False, directory.name


# --- Kyverno's rules, one test each --------------------------------------------------------------


@pytest.mark.parametrize("version", ALL)
def test_by_default_an_update_that_fails_like_its_old_object_is_skipped(version: str) -> None:
    """validate_resource.go ``validate``: Enforce, UPDATE and ``allowExistingViolations`` (default true) re-run the
    rule on the old object with the context loaded for the new one; both fail, so the rule is skipped and the
    tampered UPDATE admitted -- what real Kyverno 1.18.1 logged ("pre-existing violations are allowed")."""
    doc = generated()
    doc["spec"]["rules"][0]["validate"].pop("allowExistingViolations", None)
    calls: list[dict[str, Any]] = []
    old, new = tampered_configmap()
    decision = admit(doc, resource_request(new, "UPDATE", old=old), service(calls), version)
    assert decision.allowed
    assert [(r.status, r.message) for r in decision.rules] == [("skip", "pre-existing violations are allowed")]
    assert len(calls) == 1 and calls[0]["request"]["object"] == new  # one call, for the new object only
    # ... and the same while the service is down: the default fails both.
    assert admit(doc, resource_request(new, "UPDATE", old=old), unreachable, version).allowed


@pytest.mark.parametrize("version", ALL)
def test_the_old_object_is_only_re_evaluated_for_enforce(version: str) -> None:
    """In Audit the old object is never re-evaluated: the failure is reported (audit handler), nothing blocked."""
    doc = generated(enforce=False)
    doc["spec"]["rules"][0]["validate"].pop("allowExistingViolations", None)
    old, new = tampered_configmap()
    decision = admit(doc, resource_request(new, "UPDATE", old=old), service(), version)
    assert (decision.allowed, decision.handler, [r.status for r in decision.rules]) == (True, "audit", ["fail"])


@pytest.mark.parametrize("version", ALL)
def test_an_old_object_the_rule_does_not_match_is_not_a_pre_existing_violation(version: str) -> None:
    """handlers/validation/utils.go ``matchResource``: the old object must match the rule as a CREATE."""
    doc = generated()
    doc["spec"]["rules"][0]["validate"].pop("allowExistingViolations", None)
    doc["spec"]["rules"][0]["match"]["any"][0]["resources"]["operations"] = ["UPDATE"]
    old, new = tampered_configmap()
    decision = admit(doc, resource_request(new, "UPDATE", old=old), service(), version)
    assert not decision.allowed


@pytest.mark.parametrize("version", ALL)
def test_delete_is_not_matched(version: str) -> None:
    """match.any[].resources.operations: CREATE and UPDATE only; a DELETE never reaches the service."""
    old, _ = tampered_configmap()
    request = resource_request(old, "DELETE") | {"object": None, "oldObject": old}
    calls: list[dict[str, Any]] = []
    decision = admit(generated(), request, service(calls), version)
    assert (decision.allowed, decision.rules, calls) == (True, (), [])


@pytest.mark.parametrize("version", ALL)
def test_a_call_error_without_default_blocks_under_failure_policy_fail(version: str) -> None:
    doc = generated()
    del doc["spec"]["rules"][0]["context"][0]["apiCall"]["default"]
    old, _ = tampered_configmap()
    decision = admit(doc, resource_request(old), unreachable, version)
    assert not decision.allowed and decision.rules[0].status == "error"
    doc["spec"]["failurePolicy"] = "Ignore"
    assert admit(doc, resource_request(old), unreachable, version).allowed


@pytest.mark.parametrize("version", ALL)
def test_which_rules_action_blocks(version: str) -> None:
    """1.17 and 1.18 block on the first validate rule's action (engineresponse.go ``GetValidationFailureAction``);
    1.19 on the failed rule's own (``HasEnforcedFailure``). The signature policies have one rule, so all agree."""
    doc = generated()
    audit_rule = copy.deepcopy(doc["spec"]["rules"][0]) | {"name": "audit-first"}
    audit_rule["validate"] = audit_rule["validate"] | {"failureAction": "Audit"}
    audit_rule["match"]["any"][0]["resources"]["namespaces"] = ["elsewhere"]  # never fails here
    doc["spec"]["rules"].insert(0, audit_rule)
    _, tampered = tampered_configmap()
    decision = admit(doc, resource_request(tampered), service(), version)
    assert decision.allowed is (version in ("1.17", "1.18"))
    assert admit(generated(), resource_request(tampered), service(), version).allowed is False


@pytest.mark.parametrize("version", ALL)
def test_admission_false_is_not_applied_at_admission(version: str) -> None:
    _, tampered = tampered_configmap()
    decision = admit(shipped_enforcing(BACKGROUND), resource_request(tampered), service(), version)
    assert (decision.allowed, decision.handler) == (True, None)


@pytest.mark.parametrize("version", ALL)
def test_a_background_scan_reports_the_stored_object_as_a_create(version: str) -> None:
    """controllers/report/utils/scanner.go: the stored object as a CREATE, so no old object, nothing skipped."""
    calls: list[dict[str, Any]] = []
    old, tampered = tampered_configmap()
    assert [r.status for r in scan(shipped_enforcing(BACKGROUND), tampered, service(calls), version)] == ["fail"]
    assert [r.status for r in scan(shipped_enforcing(BACKGROUND), old, service(calls), version)] == ["pass"]
    assert all(c["request"]["operation"] == "CREATE" and "oldObject" not in c["request"] for c in calls)
    assert scan(shipped_enforcing(APICALL), old, service(), version) == ()  # background: false


UNKNOWN = [
    ("preconditions", lambda r: r.update(preconditions={"all": []})),
    ("pattern", lambda r: r["validate"].update(pattern={"data": {"mode": "production"}})),
    ("operator", lambda r: r["validate"]["deny"]["conditions"]["any"][0].update(operator="AnyIn")),
    ("context-variable", lambda r: r["context"].append({"name": "x", "variable": {"value": 1}})),
    ("exclude", lambda r: r.update(exclude={"any": []})),
]


@pytest.mark.parametrize("change", [u[1] for u in UNKNOWN], ids=[u[0] for u in UNKNOWN])
def test_the_model_refuses_what_it_does_not_reproduce(change: Any) -> None:
    doc = generated()
    change(doc["spec"]["rules"][0])
    old, _ = tampered_configmap()
    with pytest.raises(NotModelled):
        admit(doc, resource_request(old), service(), "1.19")
    with pytest.raises(NotModelled):
        admit(generated(), resource_request(old), service(), "1.20")


# --- a policy converted from Kyverno's own validate.manifests rule ------------------------------------

UPSTREAM = sorted((KYVERNO_INTEROP / "policies").glob("cpol-*.yaml"))
#: Whether Kyverno's own rule admits the ConfigMap its test signed with key1 alone (tests/data/interop/kyverno
#: README: ANY = count 1 passes; ALL = MustAll is an error, which blocks under failurePolicy Fail).
UPSTREAM_ADMITS_SIGNED = {"cpol-count1-two-keys": True, "cpol-mustall-two-keys": False}


@pytest.mark.parametrize("version", ALL)
@pytest.mark.parametrize("path", UPSTREAM, ids=lambda p: p.stem)
def test_a_converted_manifests_rule_works_on_every_release(version: str, path: Any) -> None:
    """``convert-policy`` of an upstream ``validate.manifests`` ClusterPolicy, then ``policy kyverno --enforce``:
    valid against the release's CRD; it decides Kyverno's own test's signed ConfigMap as Kyverno's rule does, and
    denies the tampered one -- as a CREATE and as an UPDATE of the signed one."""
    assert len(UPSTREAM) == len(UPSTREAM_ADMITS_SIGNED)
    (upstream,) = load_yaml(path)
    # Kyverno's test policies match Services; its signed and tampered admission requests are ConfigMaps.
    # The converter carries the rule's scope, so the rule is pointed at ConfigMaps first.
    assert convert(upstream)[0]["inScopeObjects"] == [{"kind": "Service", "subresource": "-"}]
    for rule in upstream["spec"]["rules"]:
        for entry in rule["match"]["any"]:
            entry["resources"]["kinds"] = ["ConfigMap"]
    converted, _lost = convert(upstream)
    (doc,) = build(Request(engine="kyverno", policy=converted, enforce=True, namespaces=()))
    crds = {
        crd["spec"]["names"]["kind"]: crd
        for f in sorted((CRDS / "kyverno" / f"v{version}").glob("*.yaml"))
        for crd in load_yaml(f)
    }
    assert validate_object(doc, crds["ClusterPolicy"]) == []
    signed_request, tampered_request = (
        json.loads((KYVERNO_INTEROP / "manifests" / f"cm-{n}-admissionrequest.json").read_text())
        for n in ("signed", "tampered")
    )
    assert admit(doc, signed_request, service(), version).allowed is UPSTREAM_ADMITS_SIGNED[path.stem]
    assert not admit(doc, tampered_request, service(), version).allowed
    update = tampered_request | {"operation": "UPDATE", "oldObject": signed_request["object"]}
    assert not admit(doc, update, service(), version).allowed
