"""Attack class: **convert-policy writes a looser policy and says nothing.**

A converter is trusted to carry a policy across. It wrote ``count: min(count, 1)`` for a
``keys`` entry Kyverno expands into several (so "keys A and B" became "A alone"), dropped
the rule's ``match`` (a rule for Services became a constraint for every kind) and its
``failureAction``, and carried entries whose narrowing fields (required annotations, a
bundle repository, a certificate's checks) it dropped -- all with exit 0. Now the converted
policy never admits what the source would deny, and every difference is listed with exit 3.

The property test generates Kyverno policies and requests, and compares what Kyverno
decides (``tests/support/kyverno_manifests.py``, its rules from its source, each entry's
check answered by ``decide()``) with what the converted Gatekeeper constraint decides
(its ``match``, its ``enforcementAction``, ``decide()`` on its parameters).
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from provider.cli import main
from provider.cli.convert_policy import convert_document, not_in_the_output, outputs
from provider.errors import PolicyError
from provider.policy.schema import Policy
from provider.review import Review
from provider.signatures.signing import append_signature, sign_documents
from provider.verifier import decide
from tests.support import kyverno_manifests as kyverno
from tests.support.keys import make_key, public_key_pem

KEYS = [make_key("ecdsa-p256", 40 + i) for i in range(3)]
PEMS = [public_key_pem(k).strip() for k in KEYS]
A, B, C = PEMS


def cpol(rules: list[dict[str, Any]], *, kind: str = "ClusterPolicy", namespace: str | None = None,
         spec: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    meta: dict[str, Any] = {"name": "converted-here"}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "kyverno.io/v1", "kind": kind, "metadata": meta, "spec": {"rules": rules, **(spec or {})}}


def rule(attestors: list[dict[str, Any]], *, kinds: list[str] | None = None, action: str = "Enforce",
         name: str = "check", **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {"name": name, "match": {"any": [{"resources": {"kinds": kinds or ["ConfigMap"]}}]},
            "validate": {"failureAction": action, "manifests": {"attestors": attestors}}, **extra}  # fmt: skip


def keys(*pems: str, **extra: Any) -> dict[str, Any]:
    return {"keys": {"publicKeys": "\n".join(pems), **extra}}


# --- objects and what each side decides -------------------------------------------------------


def obj(kind: str = "ConfigMap", namespace: str = "shop", name: str = "a") -> dict[str, Any]:
    api = {"Deployment": "apps/v1"}.get(kind, "v1")
    meta: dict[str, Any] = {"name": name} if name else {"generateName": "gen-"}
    if kind != "Namespace":
        meta["namespace"] = namespace
    body: dict[str, Any] = {"apiVersion": api, "kind": kind, "metadata": meta}
    if kind == "ConfigMap":
        body["data"] = {"mode": "fast"}
    return body


@functools.cache
def _signed(kind: str, namespace: str, name: str, signers: tuple[int, ...]) -> dict[str, Any]:
    doc = obj(kind, namespace, name)
    if not signers:
        return doc
    (signed,) = sign_documents([doc], KEYS[signers[0]])
    for index in signers[1:]:
        (signed,) = append_signature([signed], KEYS[index])
    return signed


def signed(
    kind: str = "ConfigMap", namespace: str = "shop", name: str = "a", signers: tuple[int, ...] = ()
) -> dict[str, Any]:
    return copy.deepcopy(_signed(kind, namespace, name, signers))


def review(body: dict[str, Any], operation: str = "CREATE") -> Review:
    meta = body["metadata"]
    group, _, version = body["apiVersion"].rpartition("/")
    return Review.from_admission({
        "uid": "u", "operation": operation, "namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
        "kind": {"group": group, "version": version, "kind": body["kind"]},
        "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]}, "object": body,
    })  # fmt: skip


def request_of(body: dict[str, Any], operation: str = "CREATE") -> kyverno.Request:
    meta = body["metadata"]
    group, _, version = body["apiVersion"].rpartition("/")
    return kyverno.Request(group, version, body["kind"], meta.get("namespace", ""), meta.get("name", ""),
                           meta.get("generateName", ""), operation)  # fmt: skip


@functools.cache
def _entry_policy(pem: str) -> Policy:
    # What one Kyverno entry runs: k8s-manifest-sigstore with that key and Kyverno's default ignore fields.
    return Policy.from_dict({"keys": [pem], "defaults": ["k8s-manifest-sigstore", "kyverno"]})


def kyverno_denies(doc: dict[str, Any], body: dict[str, Any], operation: str = "CREATE") -> bool:
    rev = review(body, operation)
    return kyverno.denies(doc, request_of(body, operation), lambda pem: decide(rev, _entry_policy(pem)).verified)


def constraints_deny(constraints: list[dict[str, Any]], body: dict[str, Any], operation: str = "CREATE") -> bool:
    """Gatekeeper with the converted constraints: matched by ``spec.match.kinds``, enforced when ``deny``."""
    group = body["apiVersion"].rpartition("/")[0]
    for constraint in constraints:
        spec = constraint["spec"]
        if spec.get("enforcementAction", "deny") != "deny":
            continue
        kinds = (spec.get("match") or {}).get("kinds")
        if kinds and not any(
            ("*" in k["apiGroups"] or group in k["apiGroups"]) and ("*" in k["kinds"] or body["kind"] in k["kinds"])
            for k in kinds
        ):
            continue
        try:
            policy = Policy.from_dict(spec["parameters"])
        except PolicyError:
            return True  # an invalid policy denies every object it is asked about
        if not decide(review(body, operation), policy).allowed:
            return True
    return False


def converted(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    conversion = convert_document(doc)
    return outputs(conversion, "gatekeeper"), conversion.lost + not_in_the_output(conversion, "gatekeeper")


# --- the cases of the issue, each a class ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("attestors", "short"),
    [
        ([{"count": 2, "entries": [keys(A, B)]}], (0,)),
        ([{"count": 2, "entries": [keys(A, B, C)]}], (2,)),
        ([{"count": 1, "entries": [{"attestor": {"count": 2, "entries": [keys(A, B)]}}]}], (1,)),
        ([{"count": 3, "entries": [keys(A, B), keys(C)]}], (0, 2)),
    ],
    ids=["two-keys-in-one-entry", "count-2-of-three-keys-in-one-entry", "inside-a-nested-attestor",
         "count-3-over-an-expanded-entry-and-another"],
)  # fmt: skip
def test_kyverno_expands_a_keys_entry_before_counting_and_so_does_the_conversion(
    attestors: list[Any], short: tuple[int, ...]
) -> None:
    doc = cpol([rule(attestors)])
    constraints, _ = converted(doc)
    too_few = signed(signers=short)
    assert kyverno_denies(doc, too_few)
    assert constraints_deny(constraints, too_few), "fewer keys than the count satisfied the converted policy"
    every = signed(signers=(0, 1, 2))
    assert not kyverno_denies(doc, every) and not constraints_deny(constraints, every)


def test_a_rule_for_services_converts_to_a_constraint_for_services() -> None:
    doc = cpol([rule([{"entries": [keys(A)]}], kinds=["Service"])])
    (constraint,), lost = converted(doc)
    assert constraint["spec"]["match"] == {"kinds": [{"apiGroups": ["*"], "kinds": ["Service"]}]}
    assert constraint["spec"]["parameters"]["inScopeObjects"] == [{"kind": "Service", "subresource": "-"}]
    assert not constraints_deny([constraint], obj("ConfigMap"))  # Kyverno never looks at a ConfigMap here
    assert constraints_deny([constraint], obj("Service"))
    assert lost == []


@pytest.mark.parametrize(("action", "enforcement"), [("Enforce", "deny"), ("Audit", "dryrun")])
def test_the_failure_action_is_the_constraints_enforcement_action(action: str, enforcement: str) -> None:
    (constraint,), lost = converted(cpol([rule([{"entries": [keys(A)]}], action=action)]))
    assert constraint["spec"]["enforcementAction"] == enforcement and lost == []
    # A policy file carries no enforcement: an Enforce source says so.
    conversion = convert_document(cpol([rule([{"entries": [keys(A)]}], action=action)]))
    assert any("Enforce" in item for item in not_in_the_output(conversion, "policy")) is (action == "Enforce")


def test_the_deprecated_policy_wide_failure_action_counts_too() -> None:
    doc = cpol([rule([{"entries": [keys(A)]}])], spec={"validationFailureAction": "enforce"})
    del doc["spec"]["rules"][0]["validate"]["failureAction"]
    (constraint,), _ = converted(doc)
    assert constraint["spec"]["enforcementAction"] == "deny"


@pytest.mark.parametrize(
    ("narrowed", "why"),
    [
        ({**keys(A), "annotations": {"team": "shop"}}, "annotations"),
        ({**keys(A), "repository": "registry.example.com/bundles/app"}, "repository"),
        ({"certificates": {"cert": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"}}, "certificates"),
        ({"keyless": {"subject": "a@example.com", "issuer": "https://i", "additionalExtensions": {"x": "y"}}},
         "additionalExtensions"),
        ({"keys": {"kms": "awskms://k"}}, "KMS"),
    ],
    ids=["required-annotations", "bundle-repository", "certificate-checked-by-kyverno", "keyless-extensions",
         "a-kms-key"],
)  # fmt: skip
def test_an_entry_narrowed_by_what_has_no_equivalent_is_left_out_whole(narrowed: dict[str, Any], why: str) -> None:
    """An entry converted without its narrowing field would accept more; left out, it accepts nothing."""
    doc = cpol([rule([{"count": 1, "entries": [narrowed, keys(B)]}])])
    constraints, lost = converted(doc)
    assert any(why in item for item in lost), lost
    assert constraints[0]["spec"]["parameters"]["attestors"][0]["entries"] == [keys(B)]
    assert constraints_deny(constraints, signed(signers=(0,)))  # A alone: never enough without its narrowing
    assert not constraints_deny(constraints, signed(signers=(1,)))  # B still is


def test_an_entry_left_out_of_a_set_that_needs_every_entry_keeps_the_set_unmet() -> None:
    doc = cpol([rule([{"entries": [{"keys": {"kms": "awskms://k"}}, keys(A)]}])])
    constraints, lost = converted(doc)
    assert constraints_deny(constraints, signed(signers=(0,)))  # before: "every entry" of [A] alone
    assert any("can never be met" in item for item in lost), lost


def test_every_manifests_rule_becomes_a_constraint() -> None:
    doc = cpol([rule([{"entries": [keys(A)]}], kinds=["ConfigMap"], name="configmaps"),
                rule([{"entries": [keys(B)]}], kinds=["ConfigMap"], name="also-configmaps")])  # fmt: skip
    constraints, lost = converted(doc)
    assert [c["metadata"]["name"] for c in constraints] == ["converted-configmaps", "converted-also-configmaps"]
    assert constraints_deny(constraints, signed(signers=(0,)))  # the second rule needs B
    assert not constraints_deny(constraints, signed(signers=(0, 1)))
    assert any("2 manifests rules" in item for item in lost)


def test_exclusions_carry_to_skip_objects_only_as_narrow_as_kyvernos() -> None:
    excluded = rule([{"entries": [keys(A)]}], exclude={"any": [
        {"resources": {"kinds": ["ConfigMap"], "namespaces": ["kube-system"]}},
        {"resources": {"kinds": ["ConfigMap"], "names": ["cfg-?"]}},
        {"subjects": [{"kind": "User", "name": "admin"}]},
    ]})  # fmt: skip
    doc = cpol([excluded])
    constraints, lost = converted(doc)
    (constraint,) = constraints
    assert constraint["spec"]["parameters"]["skipObjects"] == [
        {"kind": "ConfigMap", "subresource": "-", "namespace": "kube-system"}
    ]
    assert not constraints_deny(constraints, obj(namespace="kube-system"))
    assert constraints_deny(constraints, obj(name="cfg-1"))  # the '?' exclusion is not widened: checked
    assert sum("exclude" in item for item in lost) == 2, lost


def test_a_namespaced_policy_applies_in_its_namespace_only() -> None:
    doc = cpol([rule([{"entries": [keys(A)]}])], kind="Policy", namespace="shop")
    constraints, lost = converted(doc)
    assert constraints[0]["spec"]["parameters"]["inScopeObjects"][0]["namespace"] == "shop"
    assert not constraints_deny(constraints, obj(namespace="web")) and constraints_deny(constraints, obj())
    assert lost == []


@pytest.mark.parametrize(
    ("resources", "listed"),
    [
        ({"kinds": ["ConfigMap"], "names": ["a"]}, "names"),
        ({"kinds": ["ConfigMap"], "operations": ["CREATE"]}, "operations"),
        ({"kinds": ["ConfigMap"], "selector": {"matchLabels": {"app": "x"}}}, "selector"),
        ({"kinds": ["ConfigMap"], "namespaceSelector": {"matchLabels": {"env": "prod"}}}, "namespaceSelector"),
        ({"kinds": ["ConfigMap"], "annotations": {"a": "b"}}, "annotations"),
    ],
)
def test_a_scope_narrower_than_inscopeobjects_can_say_is_widened_and_listed(
    resources: dict[str, Any], listed: str
) -> None:
    doc = cpol([{**rule([{"entries": [keys(A)]}]), "match": {"any": [{"resources": resources}]}}])
    constraints, lost = converted(doc)
    assert any(f"resources.{listed}" in item for item in lost), lost
    assert constraints_deny(constraints, obj(name="b"))  # checked, although Kyverno may not have


def test_preconditions_are_listed_and_the_rule_checks_everything_it_matches() -> None:
    doc = cpol([{**rule([{"entries": [keys(A)]}]), "preconditions": {"all": [
        {"key": "{{ request.operation }}", "operator": "Equals", "value": "CREATE"}]}}])  # fmt: skip
    constraints, lost = converted(doc)
    assert any("preconditions" in item for item in lost)
    assert constraints_deny(constraints, obj(), "UPDATE")


def test_the_cli_exits_3_and_lists_each_loss_on_standard_error(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    source = tmp_path / "cpol.yaml"
    source.write_text(yaml.safe_dump(cpol([rule([{"count": 2, "entries": [keys(A, B)]}], kinds=["Service"])])))
    assert main(["convert-policy", "-f", str(source), "-o", "gatekeeper"]) == 3
    out, err = capsys.readouterr()
    (constraint,) = yaml.safe_load_all(out)
    assert constraint["spec"]["parameters"]["attestors"][0]["count"] == 2
    assert "not carried over:" in err and "every key after the first" in err  # Kyverno's own slip, said


# --- Integrity Shield and kubectl sigstore: the same class ---------------------------------------------


def _ishield(**parameters: Any) -> dict[str, Any]:
    return {"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "ManifestIntegrityConstraint",
            "metadata": {"name": "cm"}, "spec": {"parameters": {"signers": ["a@example.com"], **parameters}}}  # fmt: skip


def test_integrity_shield_detect_mode_and_enforcement_action_carry() -> None:
    doc = _ishield(action={"mode": "detect"})
    doc["spec"]["match"] = {"kinds": [{"apiGroups": [""], "kinds": ["ConfigMap"]}]}
    (constraint,), lost = converted(doc)
    assert constraint["spec"]["enforcementAction"] == "dryrun"
    assert constraint["spec"]["match"] == doc["spec"]["match"] and lost == []
    doc = _ishield()
    doc["spec"]["enforcementAction"] = "warn"
    assert converted(doc)[0][0]["spec"]["enforcementAction"] == "warn"


def test_integrity_shield_empty_pattern_fields_mean_any_not_an_error() -> None:
    """Upstream's MatchPattern reads "" as any: {kind: ConfigMap, name: ""} skips every ConfigMap."""
    conversion = convert_document(_ishield(skipObjects=[{"kind": "ConfigMap", "name": ""}]))
    (rule_,) = conversion.rules
    assert rule_.policy["skipObjects"] == [{"kind": "ConfigMap"}] and conversion.lost == []
    Policy.from_dict(rule_.policy)


@pytest.mark.parametrize(
    ("parameters", "listed"),
    [
        ({"signatureRef": {"signatureResourceRef": {"name": "sigs"}}}, "signatureResourceRef"),
        ({"signers": ["a@example.com", {"subject": "b"}]}, "signers"),
        ({"signatureBaseName": "sig"}, "signatureBaseName"),
        ({"action": {"mode": "enforce", "admissionOnly": True}}, "admissionOnly"),
    ],
    ids=["signature-configmap-without-namespace", "a-signer-that-is-no-string", "annotation-base-name",
         "admission-only"],
)  # fmt: skip
def test_integrity_shield_fields_without_an_equivalent_are_listed(parameters: dict[str, Any], listed: str) -> None:
    _, lost = converted(_ishield(**parameters))
    assert any(listed in item for item in lost), lost


@pytest.mark.parametrize(
    "parameters",
    [
        {"skipObjects": [{"kind": "ConfigMap", "name": "web-*-db"}]},
        {"skipUsers": [{"objects": [{"kind": "ConfigMap"}]}]},
        {"skipUsers": [{"users": ["alice*@example.com,bob"], "objects": [{"kind": "ConfigMap"}]}]},
        {"skipUsers": [{"users": ["alice@example.com"], "objects": [{"kind": "ConfigMap", "name": "web-*-db"}]}]},
    ],
    ids=["skip-object-with-a-literal-star", "exemption-without-users", "exemption-with-a-star-before-a-comma",
         "exemption-whose-object-has-a-literal-star"],
)  # fmt: skip
def test_an_upstream_exemption_is_never_read_wider_than_upstream_reads_it(parameters: dict[str, Any]) -> None:
    """MatchPattern (k8s-manifest-sigstore pkg/util): '*' is a wildcard only at a pattern's end, before any comma
    split; an ObjectUserBinding without users exempts nobody. Read as ours, each would exempt more."""
    conversion = convert_document(_ishield(**parameters))
    policy = Policy.from_dict(conversion.rules[0].policy)
    body = obj(name="web-x-db")
    result = decide(review(body), policy)
    assert not result.allowed and result.reason == "unsigned", result.message


def test_an_ignore_rule_whose_objects_are_all_left_out_is_left_out() -> None:
    """Without objects an ignore rule covers every object: a rule whose references cannot be read exactly goes."""
    conversion = convert_document(_ishield(ignoreFields=[{"objects": [{"kind": "Config*Map"}], "fields": ["data"]}]))
    assert "ignoreFields" not in conversion.rules[0].policy and conversion.lost


def test_a_kubectl_sigstore_config_with_other_annotation_names_is_listed() -> None:
    _, lost = converted({"signers": ["a@example.com"], "annotationConfig": {"messageBaseName": "msg"}})
    assert any("messageBaseName" in item for item in lost), lost


# --- the property: never admits what the source denies -------------------------------------------------

_SELECTORS = ["ConfigMap", "v1/ConfigMap", "Service", "apps/v1/Deployment", "Deploy*", "*", "Namespace", "Conf?gMap"]
_NAMESPACES = ["shop", "web", "sh*", "kube-system"]


@st.composite
def _sets(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    entries: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["keys", "keys", "multi", "attestor", "kms"] if depth < 1 else ["keys", "multi"]))
        if kind == "keys":
            entries.append(keys(draw(st.sampled_from(PEMS))))
        elif kind == "multi":
            entries.append(keys(*draw(st.lists(st.sampled_from(PEMS), min_size=2, max_size=3, unique=True))))
        elif kind == "kms":
            entries.append({"keys": {"kms": "gcpkms://k"}})
        else:
            entries.append({"attestor": draw(_sets(depth + 1))})
    expanded = sum(max(1, e["keys"]["publicKeys"].count("END PUBLIC KEY")) if "keys" in e and "publicKeys" in
                   e["keys"] else 1 for e in entries)  # fmt: skip
    count = draw(st.one_of(st.none(), st.integers(1, expanded)))
    return {"entries": entries, **({"count": count} if count else {})}


@st.composite
def _policies(draw: st.DrawFn) -> dict[str, Any]:
    filters = []
    for _ in range(draw(st.integers(1, 2))):
        resources: dict[str, Any] = {"kinds": draw(st.lists(st.sampled_from(_SELECTORS), min_size=1, max_size=2))}
        if draw(st.booleans()):
            resources["namespaces"] = draw(st.lists(st.sampled_from(_NAMESPACES), min_size=1, max_size=2))
        if draw(st.booleans()):
            resources["names"] = [draw(st.sampled_from(["a", "gen-*", "b"]))]
        if draw(st.booleans()):
            resources["operations"] = [draw(st.sampled_from(["CREATE", "UPDATE"]))]
        filters.append({"resources": resources})
    body = rule(draw(st.lists(_sets(), min_size=1, max_size=2)), action=draw(st.sampled_from(["Enforce", "Audit"])))
    body["match"] = {draw(st.sampled_from(["any", "all"])): filters}
    if draw(st.booleans()):
        body["exclude"] = {"any": [{"resources": {"kinds": [draw(st.sampled_from(_SELECTORS))],
                                                  "namespaces": [draw(st.sampled_from(_NAMESPACES))]}}]}  # fmt: skip
    namespaced = draw(st.booleans())
    return cpol([body], kind="Policy" if namespaced else "ClusterPolicy", namespace="shop" if namespaced else None)


_REQUESTS = st.tuples(
    st.sampled_from(["ConfigMap", "Service", "Deployment", "Namespace"]),
    st.sampled_from(["shop", "web", "kube-system"]),
    st.sampled_from(["a", "b", ""]),
    st.lists(st.integers(0, 2), max_size=3, unique=True).map(lambda s: tuple(sorted(s))),
    st.sampled_from(["CREATE", "UPDATE"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=_policies(), requests=st.lists(_REQUESTS, min_size=1, max_size=4))
@example(
    doc=cpol([rule([{"count": 2, "entries": [keys(A, B)]}])]), requests=[("ConfigMap", "shop", "a", (0,), "CREATE")]
)
def test_the_converted_policy_never_admits_what_kyverno_denies(
    doc: dict[str, Any], requests: list[tuple[str, str, str, tuple[int, ...], str]]
) -> None:
    constraints, _ = converted(doc)
    for kind, namespace, name, signers, operation in requests:
        body = signed(kind, namespace, name, signers)
        if kyverno_denies(doc, body, operation):
            assert constraints_deny(constraints, body, operation), (kind, namespace, name, signers, operation)
