"""The background-scan variant of the Kyverno signature policy, and how the service reads a background scan.

The variant is the admission policy scanning what is stored: background scans
on, admission off, the stored kinds without the subresources (which Kyverno
refuses in a policy with background scans), and its name and description;
nothing else may differ, or the two would verify differently. In a background scan Kyverno sends the stored object as
``{{ request }}`` = ``{object, namespace, operation: CREATE}`` with no ``uid``
and no ``userInfo`` (``tests/support/kyverno.py``, ``background_scan_request``,
from Kyverno's source); the service reads that as the stored object, so a change
an exempt controller made is named and passes, and anything else fails --
while the same object in a real admission CREATE (``uid``, ``userInfo``) is a
difference like any other.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from provider.policy.schema import Policy
from provider.review import Review, is_background_scan
from provider.service.wire.kyverno import read_body
from provider.verifier import decide
from tests.support.data import load_yaml
from tests.support.kyverno import (
    APICALL,
    BACKGROUND,
    VARIABLE,
    admission_request,
    api_call,
    background_scan_request,
    denied,
    expected_results,
    policy_doc,
    request_body,
    stored_verdict,
)
from tests.support.live import PUBLIC_KEY, deployment, reimaged, scaled, signed

#: Variables Kyverno refuses in a policy with background scans (kyverno/kyverno
#: pkg/validation/policy/background.go, ``forbidden``).
FORBIDDEN_IN_BACKGROUND = [
    re.compile(r"[^\.](serviceAccountName)\b"),
    re.compile(r"[^\.](serviceAccountNamespace)\b"),
    re.compile(r"[^\.](request.userInfo)\b"),
    re.compile(r"[^\.](request.roles)\b"),
    re.compile(r"[^\.](request.clusterRoles)\b"),
]


def kinds(doc: dict[str, Any]) -> list[str]:
    return [k for rule in doc["spec"]["rules"] for block in rule["match"]["any"] for k in block["resources"]["kinds"]]


def test_the_variant_is_the_admission_policy_scanning_what_is_stored() -> None:
    """Background scans on, admission off, the stored kinds only; nothing else may differ."""
    admission, background = policy_doc(APICALL), policy_doc(BACKGROUND)
    assert (admission["spec"]["background"], background["spec"]["background"]) == (False, True)
    assert (admission["spec"].get("admission", True), background["spec"]["admission"]) == (True, False)
    assert kinds(background) == [k for k in kinds(admission) if k.count("/") < 3]  # group/version/kind/sub
    same = copy.deepcopy(background)
    same["metadata"]["name"] = admission["metadata"]["name"]
    same["spec"]["background"] = False
    del same["spec"]["admission"]
    for annotation in ("policies.kyverno.io/title", "policies.kyverno.io/description"):
        same["metadata"]["annotations"][annotation] = admission["metadata"]["annotations"][annotation]
    for rule, theirs in zip(same["spec"]["rules"], admission["spec"]["rules"], strict=True):
        for block, their_block in zip(rule["match"]["any"], theirs["match"]["any"], strict=True):
            block["resources"]["kinds"] = their_block["resources"]["kinds"]
    assert same == admission


def test_it_names_no_subresource_which_kyverno_refuses_in_background_scans() -> None:
    """kyverno/kyverno pkg/validation/policy/validate.go (validateKinds): "background scan enabled with subresource".

    A policy naming one is refused when it is created; the admission policy keeps the subresources.
    """
    assert kinds(policy_doc(BACKGROUND)) == ["ConfigMap", "apps/v1/Deployment"]
    assert "apps/v1/Deployment/scale" in kinds(policy_doc(APICALL))


def test_it_uses_no_variable_kyverno_refuses_in_background_mode() -> None:
    text = json.dumps(policy_doc(BACKGROUND))
    variables = VARIABLE.findall(text)
    assert "request" in variables  # the whole request is what the service reads
    for variable in variables:
        # Kyverno matches the regexes against the variable as it appears in ``{{ ... }}``, a space before it.
        assert not any(f.search(" " + variable) for f in FORBIDDEN_IN_BACKGROUND), variable


def test_its_kyverno_cli_test_objects_are_the_admission_policys() -> None:
    mine, theirs = (load_yaml(d / ".kyverno-test" / "resource.yaml") for d in (BACKGROUND, APICALL))
    assert mine == theirs


def test_its_kyverno_cli_test_values_are_what_a_background_scan_gets() -> None:
    """Each mocked ``verdict`` is the service's answer to a background scan of that stored object, through the
    Kyverno wire, and gives the result kyverno-test.yaml expects. A scan reads the object as stored, so the
    messages say "stored" where the admission policy's say "admitted" (make_samples.py writes both).
    """
    doc = policy_doc(BACKGROUND)
    policy = Policy.from_dict(api_call(doc)["data"][1]["value"])
    (values,) = load_yaml(BACKGROUND / ".kyverno-test" / "values.yaml")
    ((entry,),) = [[p for p in values["policies"] if p["name"] == doc["metadata"]["name"]]]
    mocked = {r["name"]: {k.removeprefix("verdict."): v for k, v in r["values"].items()} for r in entry["resources"]}
    expected = expected_results(BACKGROUND)
    objects = load_yaml(BACKGROUND / ".kyverno-test" / "resource.yaml")
    assert len(objects) >= 3 and set(mocked) == {o["metadata"]["name"] for o in objects}
    stored = 0
    for obj in objects:
        name = obj["metadata"]["name"]
        question, _ = read_body(request_body(doc, background_scan_request(obj)))
        assert question.review.live, name
        answer = decide(question.review, policy).to_dict()
        assert mocked[name] == {k: answer[k] for k in ("allowed", "reason", "message")}, name
        assert ("fail" if denied(doc, stored_verdict(doc, mocked[name])) else "pass") == expected[name], name
        stored += "stored" in answer["message"]
    assert stored  # the tampered object's difference is named as stored


SIGNED = signed(deployment())


def verdict(request: dict[str, Any]) -> Any:
    """The body Kyverno posts for ``request``, read by the service's Kyverno wire, decided (keys: the test key)."""
    doc = policy_doc(BACKGROUND)
    body = json.loads(request_body(doc, request))
    policy = Policy.from_dict({**api_call(doc)["data"][1]["value"], "keys": [PUBLIC_KEY]})
    question, _ = read_body(json.dumps(body).encode())
    return question.review, decide(question.review, policy)


def test_a_background_scan_of_a_scaled_deployment_passes_naming_spec_replicas() -> None:
    review, result = verdict(background_scan_request(scaled(SIGNED)))
    assert (review.live, review.operation, review.is_audit) == (True, None, True)
    assert result.verified and "spec.replicas" in result.message


def test_a_background_scan_of_a_changed_image_fails() -> None:
    _, result = verdict(background_scan_request(reimaged(scaled(SIGNED))))
    assert (result.allowed, result.reason) == (False, "content-mismatch")


def test_the_same_object_in_an_admission_create_is_a_difference() -> None:
    review, result = verdict(admission_request(scaled(SIGNED)))
    assert (review.live, review.operation) == (False, "CREATE")
    assert (result.allowed, result.reason) == (False, "content-mismatch")


SHAPES = [
    ("kyverno-background-scan", {}, True),
    ("with-a-uid", {"uid": "2a5f4c3e"}, False),
    ("with-user-info", {"userInfo": {"username": "alice"}}, False),
    ("with-empty-user-info", {"userInfo": {}}, False),
    ("an-update", {"operation": "UPDATE"}, False),
    ("with-an-old-object", {"oldObject": {"kind": "Deployment"}}, False),
    ("a-dry-run", {"dryRun": True}, False),
]


@pytest.mark.parametrize(("extra", "background"), [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES])
def test_only_the_background_scans_shape_is_read_as_the_stored_object(extra: dict[str, Any], background: bool) -> None:
    """Every admission request has a uid and userInfo (admission.k8s.io/v1): none can pass for a scan."""
    request = {**background_scan_request(scaled(SIGNED)), **extra}
    assert is_background_scan(request) is background
    review = Review.from_admission(request)
    assert review.live is background
    assert decide(review, Policy.from_dict({"keys": [PUBLIC_KEY]})).verified is background
