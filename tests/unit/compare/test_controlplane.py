"""Objects the control plane writes into every namespace, judged where no request names a writer.

The objects are the real ones: every create by the root CA publisher, OpenShift's
service CA publisher and the ServiceAccount controller in ``tests/data/audit``,
stored as the API server stores them, and reviewed as Gatekeeper's audit, a
Kyverno background scan and ``verify-resource`` review them. Exactly what the
writer writes is ``control-plane-object`` (allowed, not verified); anything else
is ``control-plane-object-changed``, naming the field; a request at admission is
never judged by content.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

import pytest

from provider import Policy, Review, decide
from provider.audit.live import check
from provider.compare.controlplane import CONTROL_PLANE_OBJECTS, ca_bundle, deviations
from provider.errors import PolicyError
from provider.limits import Limits
from provider.policy.schema import PROFILES, BuiltinProfile, load_profile
from provider.result import ALLOWING_REASONS, Result
from tests.support.audit import REAL_LOG
from tests.support.controlplane import (
    NAMESPACES,
    TAMPERINGS,
    WRITERS,
    Tampering,
    first,
    stored,
    tampered,
    written,
)
from tests.support.data import REPO
from tests.support.gator import review_as_audited
from tests.support.kyverno import background_scan_request
from tests.support.live import KEY, PUBLIC_KEY
from tests.support.manifests import sign

POLICY = Policy.from_dict({"keys": [PUBLIC_KEY]})
#: The policy for an OpenShift cluster, whose service CA ConfigMap is the opt-in profile's.
OPENSHIFT = Policy.from_dict({"keys": [PUBLIC_KEY], "defaults": ["k8s-manifest-sigstore", "common", "openshift"]})


def audit(obj: dict[str, Any], policy: Policy = OPENSHIFT) -> Result:
    """The verdict Gatekeeper's audit gets for ``obj`` (the review read as the Gatekeeper route reads it)."""
    return decide(Review.from_admission(review_as_audited(obj)), policy)


def admission(obj: dict[str, Any], user: str = "alice@example.com", operation: str = "CREATE") -> Result:
    review = review_as_audited(obj) | {
        "uid": "1b4e28ba-0000-4000-8000-000000000000",
        "operation": operation,
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "resource": {"group": "", "version": "v1", "resource": obj["kind"].lower() + "s"},
    }
    return decide(Review.from_admission(review), POLICY)


def injected(obj: dict[str, Any], bundle: str) -> dict[str, Any]:
    """openshift-service-ca.crt once the service CA operator filled it (and added its annotations)."""
    out = copy.deepcopy(obj)
    out["data"] = {"service-ca.crt": bundle}
    out["metadata"]["annotations"] |= {
        "openshift.io/owning-component": "service-ca",
        "openshift.io/description": "Configmap is added/updated with a data item containing the CA signing bundle "
        "that can be used to verify service-serving certificates",
    }
    return out


ROOT_CA_PEM = first("root-ca-cert-publisher")["data"]["ca.crt"]


# --- exactly what the writer writes: not a violation -----------------------------------------------


def test_the_log_holds_each_object_in_every_namespace() -> None:
    found = written()
    for writer in WRITERS:
        assert sorted(o["metadata"]["namespace"] for w, o in found if w == writer) == sorted(NAMESPACES)


@pytest.mark.parametrize("writer", WRITERS)
def test_each_object_as_written_is_a_control_plane_object_in_every_namespace(writer: str) -> None:
    objects = [obj for who, obj in written() if who == writer]
    assert len(objects) == len(NAMESPACES)
    for obj in objects:
        result = audit(stored(obj))
        assert (result.allowed, result.verified, result.reason) == (True, False, "control-plane-object"), result
        assert result.profile == "common" and result.traffic_class == "common-profile"
        assert obj["metadata"]["name"] in result.message and "nobody signs it" in result.message
        assert result.diff == ()


def test_the_defaults_take_upstreams_objects() -> None:
    for writer in ("root-ca-cert-publisher", "service-account-controller"):
        assert audit(stored(first(writer), "demo"), POLICY).reason == "control-plane-object"


def test_openshifts_service_ca_needs_its_profile_and_the_verdict_says_so() -> None:
    """On any other cluster nobody writes openshift-service-ca.crt: a person's would go unlisted."""
    result = audit(stored(first("service-ca-cert-publisher"), "demo"), POLICY)
    assert result.reason == "unsigned"
    assert "enable the built-in profile 'openshift'" in result.message


def test_the_service_ca_bundle_once_injected_is_a_control_plane_object() -> None:
    obj = injected(stored(first("service-ca-cert-publisher")), ROOT_CA_PEM + ROOT_CA_PEM)
    assert audit(obj).reason == "control-plane-object"
    # ... and with the publisher's annotations alone (it sets them back after the injector's update).
    obj["metadata"]["annotations"] = {"service.beta.openshift.io/inject-cabundle": "true"}
    assert audit(obj).reason == "control-plane-object"


def test_a_background_scan_and_verify_resource_see_the_same() -> None:
    obj = stored(first("root-ca-cert-publisher"), "demo")
    scan = decide(Review.from_admission(background_scan_request(obj)), POLICY)
    live = check(obj, POLICY).result
    assert scan.reason == live.reason == "control-plane-object"
    assert scan.allowed and not scan.verified


def test_control_plane_object_allows_without_verifying() -> None:
    assert "control-plane-object" in ALLOWING_REASONS


# --- anything else: a violation naming the field ----------------------------------------------------


@pytest.mark.parametrize("tampering", TAMPERINGS, ids=[t.name for t in TAMPERINGS])
def test_tampering_is_listed_with_the_field(tampering: Tampering) -> None:
    result = audit(tampered(tampering))
    assert (result.allowed, result.reason) == (False, "control-plane-object-changed"), result
    assert tampering.field in [item.key for item in result.diff], result.diff
    assert tampering.field in result.message
    assert result.message.startswith(f"{tampering_kind(tampering)} demo/")
    assert result.traffic_class == "invalid-signature"


def tampering_kind(tampering: Tampering) -> str:
    return str(first(tampering.writer)["kind"])


def test_the_field_comes_first_in_the_message() -> None:
    """Gatekeeper keeps 256 bytes of a violation's message in the constraint's status (pkg/audit/manager.go)."""
    label = next(t for t in TAMPERINGS if t.name == "label")
    message = audit(tampered(label)).message
    assert message.index("metadata.labels") < 100
    assert "was added: stored" in message


def test_every_difference_is_counted() -> None:
    obj = stored(first("root-ca-cert-publisher"), "demo")
    obj["metadata"]["labels"] = {"a": "b"}
    obj["data"]["extra"] = "x"
    obj["binaryData"] = {"b": "eA=="}
    result = audit(obj)
    assert [item.key for item in result.diff] == ["binaryData", "metadata.labels", "data.extra"]
    assert result.diff_count == 3 and "2 more differences: metadata.labels, data.extra" in result.message


def test_a_sensitive_field_is_named_not_quoted() -> None:
    policy = Policy.from_dict({"keys": [PUBLIC_KEY], "sensitiveFields": [{"fields": ["data.*"]}]})
    obj = stored(first("root-ca-cert-publisher"), "demo")
    obj["data"]["token"] = "s3cr3t"
    result = audit(obj, policy)
    assert result.reason == "control-plane-object-changed" and "s3cr3t" not in result.message
    assert [item.to_dict() for item in result.diff] == [
        {"key": "data.token", "values": {"before": None, "after": "<redacted>"}}
    ]


def test_a_forged_ca_of_the_right_form_is_not_told_apart() -> None:
    """The documented limit (docs/security.md): which CA is right is the publisher's to restore, not ours to know."""
    forged = stored(first("root-ca-cert-publisher"), "demo")
    forged["data"]["ca.crt"] = ROOT_CA_PEM + ROOT_CA_PEM  # any certificates at all
    assert audit(forged).reason == "control-plane-object"


# --- where it does not apply ----------------------------------------------------------------------------


@pytest.mark.parametrize("writer", WRITERS)
def test_a_write_at_admission_is_verified(writer: str) -> None:
    """The same honest content, written by someone other than its writer: unsigned, whatever it holds."""
    obj = stored(first(writer), "demo")
    assert admission(obj).reason == "unsigned"
    assert admission(obj, operation="UPDATE").reason == "unsigned"
    assert admission(obj, user=f"system:serviceaccount:kube-system:{writer}").reason != "control-plane-object"


def test_its_writer_at_admission_is_the_common_profiles_exemption() -> None:
    obj = stored(first("root-ca-cert-publisher"), "demo")
    review = review_as_audited(obj) | {
        "uid": "1b4e28ba-0000-4000-8000-000000000000",
        "operation": "UPDATE",
        "userInfo": {
            "username": "system:serviceaccount:kube-system:root-ca-cert-publisher",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
        },
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
    }
    assert decide(Review.from_admission(review), POLICY).reason == "skipped-user"


def test_a_file_given_to_the_cli_is_not_the_stored_object() -> None:
    obj = stored(first("root-ca-cert-publisher"), "demo")
    assert decide(Review.for_object(obj), POLICY).reason == "unsigned"


def test_without_the_common_profile_it_is_unsigned() -> None:
    policy = Policy.from_dict({"keys": [PUBLIC_KEY], "defaults": ["k8s-manifest-sigstore"]})
    result = audit(stored(first("root-ca-cert-publisher"), "demo"), policy)
    assert result.reason == "unsigned" and "enable the built-in profile 'common'" in result.message


def test_no_hint_where_no_profile_would_help() -> None:
    obj = stored(first("root-ca-cert-publisher"), "demo")
    assert "profile" not in admission(obj).message  # a request: its writer is exempt by identity, nobody else
    obj["metadata"]["name"] = "app-config"
    assert "profile" not in audit(obj, POLICY).message


def test_the_policys_own_rules_come_first() -> None:
    obj = stored(first("root-ca-cert-publisher"), "demo")
    skip = Policy.from_dict({"keys": [PUBLIC_KEY], "skipObjects": [{"kind": "ConfigMap", "name": "kube-root-ca.crt"}]})
    scope = Policy.from_dict({"keys": [PUBLIC_KEY], "inScopeObjects": [{"kind": "Deployment"}]})
    assert audit(obj, skip).reason == "skipped-object"
    assert audit(obj, scope).reason == "out-of-scope"


@pytest.mark.parametrize(
    ("kind", "name"),
    [("ConfigMap", "kube-root-ca.crt2"), ("Secret", "kube-root-ca.crt"), ("ServiceAccount", "builder")],
    ids=["other-name", "other-kind", "other-account"],
)
def test_only_the_writers_own_object_by_kind_and_name(kind: str, name: str) -> None:
    obj = stored(first("root-ca-cert-publisher"), "demo")
    obj["kind"], obj["metadata"]["name"] = kind, name
    if kind == "ServiceAccount":
        obj = stored(first("service-account-controller"), "demo")
        obj["metadata"]["name"] = name
    assert audit(obj).reason == "unsigned"


def test_another_group_is_not_the_core_object() -> None:
    obj = stored(first("root-ca-cert-publisher"), "demo")
    obj["apiVersion"] = "example.com/v1"
    assert audit(obj).reason == "unsigned"


def test_a_signed_object_is_verified_like_any_other() -> None:
    """Signing it is the other way out: the signature, not the content rule, decides then."""
    obj = stored(first("root-ca-cert-publisher"), "demo")
    obj["metadata"]["labels"] = {"team": "platform"}
    (signed,) = sign(obj, KEY)
    assert audit(signed).reason == "verified"
    signed["data"]["ca.crt"] = "changed"
    result = audit(signed)
    assert result.reason == "content-mismatch" and "data.ca.crt differs" in result.message


# --- the rules themselves ---------------------------------------------------------------------------


def test_each_check_is_listed_by_one_profile() -> None:
    listed = {name: [w.check for w in load_profile(name).control_plane_objects] for name in PROFILES}
    assert listed["common"] == ["root-ca-cert-publisher", "service-account-controller"]
    assert listed["openshift"] == ["service-ca-cert-publisher"]
    assert sorted(c for checks in listed.values() for c in checks) == sorted(CONTROL_PLANE_OBJECTS)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"check": "rootca", "group": "-", "kind": "ConfigMap", "name": "kube-root-ca.crt"}, "unknown check"),
        ({"check": "root-ca-cert-publisher", "group": "-", "kind": "ConfigMap", "name": "*"}, "is for ConfigMap"),
        ({"check": "root-ca-cert-publisher", "group": "", "kind": "ConfigMap", "name": "kube-root-ca.crt"}, "is for"),
        ({"check": "root-ca-cert-publisher", "kind": "ConfigMap", "name": "kube-root-ca.crt"}, "group"),
        (
            {"check": "root-ca-cert-publisher", "group": "-", "kind": "ConfigMap", "name": "x", "namespace": "a"},
            "namespace",
        ),
    ],
    ids=["unknown-check", "pattern-name", "empty-group", "no-group", "unknown-field"],
)
def test_a_profile_entry_must_name_exactly_its_checks_object(entry: dict[str, str], message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        BuiltinProfile.from_dict("p", {"controlPlaneObjects": [entry]})


def test_a_ca_bundle_is_bounded() -> None:
    limits = Limits(max_ca_bundle_chars=len(ROOT_CA_PEM))
    assert ca_bundle(ROOT_CA_PEM, limits) == ""
    assert "more than a CA bundle" in ca_bundle(ROOT_CA_PEM + "\n", limits)
    assert "more than a CA bundle" in ca_bundle("x" * 10_000_000, Limits())


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (None, "is a NoneType"),
        (["pem"], "is a list"),
        ("   \n", "is empty"),
        ("-----BEGIN CERTIFICATE-----\nAAAA", "text outside"),
        ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "text outside"),
        ("-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n", "text outside"),
        ("-----BEGIN CERTIFICATE-----\nTUlJ\n-----END CERTIFICATE-----\n", "the first) that is not an X.509"),
    ],
    ids=["null", "list", "blank", "unterminated", "public-key", "not-base64", "not-x509"],
)
def test_a_ca_bundle_is_pem_certificates_only(value: Any, why: str) -> None:
    assert why in ca_bundle(value, Limits())


def test_a_ca_bundle_takes_several_certificates_and_whitespace() -> None:
    assert ca_bundle(f"\n{ROOT_CA_PEM}\n\n{ROOT_CA_PEM.replace(chr(10), chr(13) + chr(10))}  \n", Limits()) == ""
    second_bad = ROOT_CA_PEM + "-----BEGIN CERTIFICATE-----\nTUlJ\n-----END CERTIFICATE-----\n"
    assert "the second" in ca_bundle(second_bad, Limits())


def test_a_hostile_bundle_is_checked_in_linear_time() -> None:
    """A long run the certificate pattern could backtrack on: one pass, a verdict, no hang."""
    value = "-----BEGIN CERTIFICATE-----\n" + "A" * 100_000
    assert "text outside" in ca_bundle(value, Limits())


def test_deviations_are_empty_only_for_the_exact_object() -> None:
    for writer, obj in written():
        assert deviations(CONTROL_PLANE_OBJECTS[writer], stored(obj)) == []


# --- everything the components created in the real log, accounted for -----------------------------

#: What the control plane makes from a user's objects, carrying none of their signatures
#: (docs/policy.md, "Objects the control plane writes": match the kinds you sign instead).
MADE_FROM_YOURS = {"Pod", "ReplicaSet", "ControllerRevision", "Job", "PersistentVolumeClaim", "Endpoints",
                   "EndpointSlice"}  # fmt: skip
#: Where the API server keeps its own objects (the same section: keep them out of the match).
SYSTEM_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}
POLICY_DOC = (REPO / "docs" / "policy.md").read_text()


def test_every_object_a_component_created_in_the_log_is_accounted_for() -> None:
    """Go through the log: each stored object a component created is one the docs account for.

    In a user's namespace only the control plane's own objects (as written: not a violation)
    and what it makes from the user's objects; in the API server's namespaces and cluster-wide,
    its own; Events and Leases out of scope.
    """
    groups: Counter[str] = Counter()
    made = set()
    for line in REAL_LOG.read_text().splitlines():
        event = json.loads(line)
        ref, body = event["objectRef"], event.get("requestObject")
        if event["verb"] != "create" or event["user"]["username"] == "kubernetes-admin" or ref.get("subresource"):
            continue
        if event.get("responseStatus", {}).get("code") != 201:
            continue
        namespace = ref.get("namespace")
        obj = stored(body, namespace)
        obj["metadata"]["name"] = obj["metadata"].get("name") or obj["metadata"]["generateName"] + "x7k2p"
        verdict = audit(obj)
        if verdict.reason in ("control-plane-object", "out-of-scope"):
            groups[verdict.reason] += 1
        elif body["kind"] in MADE_FROM_YOURS:
            groups["made-from-yours"] += 1
            made.add(body["kind"])
        else:
            assert namespace in SYSTEM_NAMESPACES or not namespace, (body["kind"], namespace, verdict.message)
            groups["the-api-servers-own"] += 1
    assert groups["control-plane-object"] == 3 * len(NAMESPACES)
    assert made == MADE_FROM_YOURS and all(kind in POLICY_DOC for kind in made)
    assert groups["out-of-scope"] > 0 and groups["the-api-servers-own"] > 0
