"""The Kyverno policies, evaluated piece by piece where Kyverno cannot run.

Kyverno itself does not run here, so its parts are reproduced from its
source: variable substitution (a value that is exactly ``{{ path }}`` becomes
the JSON at that path), the service call's body (the ``data`` list as one
object), ``jmesPath`` (standard JMESPath only, checked on the syntax tree) and
the ``default`` stored when the call fails, the deny conditions; for the
``ValidatingPolicy`` its CEL, with ``cel-python`` (``tests/support/kyverno.py``,
shared with ``tests/integration/test_kyverno_policies.py``, which sends the
bodies to the real service).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jmespath
import pytest

from provider.policy.schema import Policy
from provider.review import Review
from provider.verifier import decide
from tests.support.data import REPO, load_yaml
from tests.support.kyverno import (
    APICALL,
    BACKGROUND,
    CEL,
    POLICIES,
    SERVICE_PATH,
    STANDARD_FUNCTIONS,
    VARIABLE,
    admission_request,
    api_call,
    cel_variables,
    cel_verdict,
    denied,
    deny_message,
    expected_results,
    function_names,
    policy_doc,
    stored_verdict,
    substitute,
    to_python,
)

GATEKEEPER = REPO / "policies" / "gatekeeper"
PULL = POLICIES / "always-pull-private-images"
POLICY_DIRS = [APICALL, CEL, PULL, BACKGROUND]


# --- every policy: layout, annotations, audit mode ---------------------------------------------

ANNOTATIONS = (
    "policies.kyverno.io/title",
    "policies.kyverno.io/category",
    "policies.kyverno.io/severity",
    "policies.kyverno.io/subject",
    "policies.kyverno.io/description",
    "policies.kyverno.io/minversion",
)


@pytest.mark.parametrize("directory", POLICY_DIRS, ids=lambda d: d.name)
def test_layout_and_annotations(directory: Path) -> None:
    doc = policy_doc(directory)
    assert doc["metadata"]["name"] == directory.name
    for name in ANNOTATIONS:
        assert doc["metadata"]["annotations"].get(name), name
    for file in ("kyverno-test.yaml", "resource.yaml", "values.yaml"):
        assert (directory / ".kyverno-test" / file).is_file(), file


@pytest.mark.parametrize("directory", POLICY_DIRS, ids=lambda d: d.name)
def test_shipped_in_audit_mode(directory: Path) -> None:
    doc = policy_doc(directory)
    if doc["kind"] == "ValidatingPolicy":
        assert doc["spec"]["validationActions"] == ["Audit"]
        assert doc["spec"]["failurePolicy"] == "Fail"
    else:
        for rule in doc["spec"]["rules"]:
            assert rule["validate"]["failureAction"] == "Audit"
        assert "validationFailureAction" not in doc["spec"]


@pytest.mark.parametrize("directory", POLICY_DIRS, ids=lambda d: d.name)
def test_kyverno_test_files_agree_with_the_policy(directory: Path) -> None:
    test_dir = directory / ".kyverno-test"
    (test,) = load_yaml(test_dir / "kyverno-test.yaml")
    doc = policy_doc(directory)
    assert test["apiVersion"] == "cli.kyverno.io/v1alpha1"
    assert test["kind"] == "Test"
    assert [(test_dir / p).resolve() for p in test["policies"]] == [(directory / f"{directory.name}.yaml").resolve()]
    assert test["resources"] == ["resource.yaml"]
    assert test["variables"] == "values.yaml"
    names = {r["metadata"]["name"] for r in load_yaml(test_dir / "resource.yaml")}
    tested = [n for result in test["results"] for n in result["resources"]]
    assert sorted(tested) == sorted(names)  # every resource has an expected result, once
    rules = {r["name"] for r in doc["spec"].get("rules", [])}
    for result in test["results"]:
        assert result["policy"] == doc["metadata"]["name"]
        assert result["result"] in ("pass", "fail")
        if doc["kind"] == "ValidatingPolicy":
            assert result["isValidatingPolicy"] is True
        else:
            assert result["rule"] in rules
    (values,) = load_yaml(test_dir / "values.yaml")
    assert values["kind"] == "Values"


# --- the ClusterPolicy's service call ---------------------------------------------------------


def test_api_call_shape() -> None:
    call = api_call(policy_doc(APICALL))
    assert call["method"] == "POST"
    assert call["service"]["url"].startswith("https://")
    assert call["service"]["url"].endswith(SERVICE_PATH)
    assert {"key": "Content-Type", "value": "application/json"} in call["service"]["headers"]
    assert "-----BEGIN CERTIFICATE-----" in call["service"]["caBundle"]
    assert [d["key"] for d in call["data"]] == ["request", "policy"]
    assert call["data"][0]["value"] == "{{ request }}"
    assert policy_doc(APICALL)["spec"]["failurePolicy"] == "Fail"


def test_policy_data_is_a_valid_policy() -> None:
    Policy.from_dict(api_call(policy_doc(APICALL))["data"][1]["value"])


def test_jmespath_uses_only_standard_functions() -> None:
    for directory in (APICALL, PULL):
        doc = policy_doc(directory)
        expressions = [api_call(doc)["jmesPath"]] if directory == APICALL else []
        for rule in doc["spec"]["rules"]:
            for each in rule["validate"].get("foreach", []):
                expressions.append(each["list"])
            for condition in rule["validate"].get("deny", {}).get("conditions", {}).get("any", []) + [
                c
                for each in rule["validate"].get("foreach", [])
                for block in ("all", "any")
                for c in each["deny"]["conditions"].get(block, [])
            ]:
                expressions.extend(VARIABLE.findall(str(condition["key"])))
        for expression in expressions:
            assert function_names(expression) <= STANDARD_FUNCTIONS, expression


def test_jmespath_maps_the_default_onto_itself() -> None:
    """Whether or not a Kyverno release applies jmesPath to the default, the stored verdict is the same."""
    call = api_call(policy_doc(APICALL))
    assert stored_verdict(policy_doc(APICALL), call["default"]) == call["default"]


def test_default_denies_with_its_message() -> None:
    doc = policy_doc(APICALL)
    default = api_call(doc)["default"]
    assert denied(doc, default)
    assert deny_message(doc, default) == f"{default['message']} (reason: {default['reason']})"


ANSWERS = [
    ("allowed", {"allowed": True, "reason": "verified", "message": "ok"}, False),
    ("denied", {"allowed": False, "reason": "unsigned", "message": "no signature"}, True),
    ("allowed-missing", {"reason": "verified", "message": "ok"}, True),
    ("allowed-string", {"allowed": "true", "reason": "verified", "message": "ok"}, True),
    ("allowed-number", {"allowed": 1, "reason": "verified", "message": "ok"}, True),
    ("not-an-object", ["allowed"], True),
    ("empty", {}, True),
    ("status-code-only", {"statusCode": 200}, True),
]


@pytest.mark.parametrize(("case", "answer", "deny"), ANSWERS, ids=[a[0] for a in ANSWERS])
def test_cluster_policy_admits_only_allowed_true(case: str, answer: Any, deny: bool) -> None:
    doc = policy_doc(APICALL)
    verdict = stored_verdict(doc, answer)
    assert isinstance(verdict["allowed"], bool)
    assert denied(doc, verdict) is deny
    assert "{{" not in deny_message(doc, verdict)


@pytest.mark.parametrize(("case", "answer", "deny"), ANSWERS, ids=[a[0] for a in ANSWERS])
def test_cel_policy_admits_only_allowed_true(case: str, answer: Any, deny: bool) -> None:
    passed, message = cel_verdict(policy_doc(CEL), answer if isinstance(answer, dict) else {"items": answer})
    assert passed is not deny
    assert message and "\n" not in message  # Kyverno falls back to the static message otherwise


# --- the CEL policy's request -----------------------------------------------------------------


def test_cel_policy_posts_the_review_and_policy() -> None:
    doc = policy_doc(CEL)
    sent: list[tuple[str, Any, dict[str, str]]] = []

    def post(url: str, body: Any, headers: dict[str, str]) -> Any:
        sent.append((url, body, headers))
        return {"allowed": True, "reason": "verified", "message": "ok"}

    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "demo"}, "data": {"k": "v"}}
    request = admission_request(obj, username="bob")
    cel_variables(doc, request, post)
    ((url, body, headers),) = sent
    assert url.startswith("https://")
    assert url.endswith(SERVICE_PATH)
    assert headers == {"Content-Type": "application/json"}
    assert set(body) == {"request", "policy"}
    fields = (
        "object",
        "oldObject",
        "operation",
        "namespace",
        "name",
        "kind",
        "dryRun",
        "resource",
        "requestKind",
        "requestResource",
    )
    assert body["request"] == {k: request[k] for k in fields} | {
        "subResource": "",
        "requestSubResource": "",
        "userInfo": {"username": "bob", "groups": ["system:authenticated"]},
    }
    Policy.from_dict(body["policy"])
    assert Review.from_admission(body["request"]).username == "bob"


def test_both_kyverno_policies_trust_the_same_keys_as_the_constraint() -> None:
    (constraint,) = load_yaml(
        GATEKEEPER / "verify-manifest-signature" / "samples" / "k8sverifymanifestsignature" / "constraint.yaml"
    )
    keys = constraint["spec"]["parameters"]["keys"]
    assert api_call(policy_doc(APICALL))["data"][1]["value"]["keys"] == [keys[0].rstrip("\n")]
    policy = cel_variables(policy_doc(CEL), admission_request({"kind": "ConfigMap", "metadata": {}}), lambda *a: {})[
        "policy"
    ]
    assert to_python(policy)["keys"] == keys


# --- samples: the same objects everywhere, values that are the verifier's answers ----------------


def test_kyverno_resources_are_the_gatekeeper_samples() -> None:
    sample_dir = GATEKEEPER / "verify-manifest-signature" / "samples" / "k8sverifymanifestsignature"
    samples = [
        load_yaml(sample_dir / f"example_{n}.yaml")[0]
        for n in ("allowed", "disallowed_tampered", "disallowed_unsigned")
    ]
    for directory in (APICALL, CEL):
        assert load_yaml(directory / ".kyverno-test" / "resource.yaml") == samples


def test_values_are_what_the_verifier_answers() -> None:
    doc = policy_doc(APICALL)
    policy = Policy.from_dict(api_call(doc)["data"][1]["value"])
    (values,) = load_yaml(APICALL / ".kyverno-test" / "values.yaml")
    ((entry,),) = [[p for p in values["policies"] if p["name"] == doc["metadata"]["name"]]]
    by_name = {r["name"]: r["values"] for r in entry["resources"]}
    expected = expected_results(APICALL)
    resources = load_yaml(APICALL / ".kyverno-test" / "resource.yaml")
    assert len(resources) >= 2, resources  # a signed resource and a tampered one at least
    for obj in resources:
        name = obj["metadata"]["name"]
        result = decide(Review.from_admission(admission_request(obj)), policy).to_dict()
        mocked = {k.removeprefix("verdict."): v for k, v in by_name[name].items()}
        assert mocked == {k: result[k] for k in ("allowed", "reason", "message")}
        assert ("fail" if denied(doc, stored_verdict(doc, mocked)) else "pass") == expected[name]


# --- always-pull-private-images: the Kyverno rule, reproduced, agrees with the Rego ---------------
#
# Kyverno's parts the rule uses, from its source: the wildcard (go-wildcard v1, ``*`` and ``?``),
# the AnyIn/Equals/NotEquals operators (pkg/engine/variables/operator), ``any``/``all``
# (evaluateAnyAllConditions) and autogen (pkg/autogen: a rule matching only Pods is copied for the
# Pod controllers with ``request.object.spec`` rewritten to their pod template). The Gatekeeper
# template checks Pods; a controller reaches it through Gatekeeper's expansion of its pod template.

PULL_TEMPLATE = GATEKEEPER / "always-pull-private-images"
AUTOGEN_POD_SPEC = {
    **dict.fromkeys(
        ("DaemonSet", "Deployment", "Job", "StatefulSet", "ReplicaSet", "ReplicationController"),
        "request.object.spec.template.spec",
    ),
    "CronJob": "request.object.spec.jobTemplate.spec.template.spec",
}


def kyverno_wildcard(pattern: str, name: str) -> bool:
    """Kyverno's ``wildcard.Match``: ``*`` any run of characters, ``?`` exactly one, the rest literal."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name, re.DOTALL) is not None


def kyverno_condition(condition: dict[str, Any], context: dict[str, Any]) -> bool:
    key = substitute(condition["key"], context)
    value = substitute(condition["value"], context)
    operator = condition["operator"]
    if operator == "AnyIn":  # a string key against a list: wildcards either way round
        assert isinstance(key, str) and isinstance(value, list), condition
        return any(kyverno_wildcard(str(v), key) or kyverno_wildcard(key, str(v)) for v in value)
    assert operator in ("Equals", "NotEquals"), operator
    # A bool equals a bool; a string matches the value as a wildcard pattern (Kyverno first tries
    # durations and quantities, which no pull policy is).
    if isinstance(key, bool):
        equal = isinstance(value, bool) and key == value
    else:
        assert isinstance(key, str), condition
        equal = isinstance(value, str) and kyverno_wildcard(value, key)
    return equal if operator == "Equals" else not equal


def kyverno_conditions(conditions: dict[str, Any], context: dict[str, Any]) -> bool:
    """``any`` (when given) and ``all``."""
    any_true = any(kyverno_condition(c, context) for c in conditions["any"]) if "any" in conditions else True
    return any_true and all(kyverno_condition(c, context) for c in conditions.get("all", []))


def kyverno_pull_violations(doc: dict[str, Any], obj: dict[str, Any], patterns: list[str] | None = None) -> list[str]:
    """The containers the rule (for a Pod controller: its autogen copy) denies; ``patterns`` replace the shipped ones."""
    (rule,) = doc["spec"]["rules"]
    if obj["kind"] in AUTOGEN_POD_SPEC:
        rule = json.loads(json.dumps(rule).replace("request.object.spec", AUTOGEN_POD_SPEC[obj["kind"]]))
    else:
        assert obj["kind"] == "Pod", obj["kind"]
    (entry,) = rule["context"]
    registries = entry["variable"]["value"] if patterns is None else patterns
    (each,) = rule["validate"]["foreach"]
    bad = []
    for element in jmespath.search(each["list"], {"request": {"object": obj}}) or []:
        if kyverno_conditions(each["deny"]["conditions"], {"element": element, "privateRegistries": registries}):
            bad.append(element["name"])
    return bad


def expanded_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """The Pod the Gatekeeper constraint sees: the object, or the Pod expanded from a controller's template."""
    if obj["kind"] == "Pod":
        return obj
    template = obj["spec"]["jobTemplate"]["spec"]["template"] if obj["kind"] == "CronJob" else obj["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": template.get("metadata", {}), "spec": template["spec"]}


def rego_pull_violations(engine: Any, obj: dict[str, Any], prefixes: list[str]) -> list[str]:
    pod = expanded_pod(obj)
    review = {"kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE", "object": pod}
    return [v["details"]["container"] for v in engine.violations(review, {"privateRegistries": prefixes})]


@pytest.fixture(scope="module")
def pull_engine() -> Any:
    from tests.support.opa import ConstraintTemplateEngine

    engine = ConstraintTemplateEngine((PULL_TEMPLATE / "src.rego").read_text())
    yield engine
    engine.close()


def test_pull_policy_kyverno_results() -> None:
    doc = policy_doc(PULL)
    expected = expected_results(PULL)
    pods = load_yaml(PULL / ".kyverno-test" / "resource.yaml")
    assert len(pods) >= 2, pods  # a passing pod and a failing one at least
    for pod in pods:
        result = "fail" if kyverno_pull_violations(doc, pod) else "pass"
        assert result == expected[pod["metadata"]["name"]], pod["metadata"]["name"]


def test_pull_policy_autogen_is_on() -> None:
    """Controllers are covered by autogen: the rule matches Pods only and no annotation turns it off."""
    doc = policy_doc(PULL)
    assert "pod-policies.kyverno.io/autogen-controllers" not in doc["metadata"]["annotations"]
    (rule,) = doc["spec"]["rules"]
    assert rule["match"] == {"any": [{"resources": {"kinds": ["Pod"]}}]}


def test_pull_policy_engines_agree(pull_engine: Any) -> None:
    """The Kyverno patterns and the Gatekeeper sample prefixes name the same registries, and decide alike."""
    doc = policy_doc(PULL)
    patterns = doc["spec"]["rules"][0]["context"][0]["variable"]["value"]
    (constraint,) = load_yaml(PULL_TEMPLATE / "samples" / "k8salwayspullprivateimages" / "constraint.yaml")
    prefixes = constraint["spec"]["parameters"]["privateRegistries"]
    assert sorted(patterns) == sorted(p + "*" for p in prefixes)
    samples = sorted((PULL_TEMPLATE / "samples" / "k8salwayspullprivateimages").glob("example_*.yaml"))
    assert len(samples) >= 2, samples  # allowed and disallowed examples
    objects = load_yaml(PULL / ".kyverno-test" / "resource.yaml") + [load_yaml(path)[0] for path in samples]
    for obj in objects:
        rego = sorted(rego_pull_violations(pull_engine, obj, prefixes))
        assert rego == sorted(kyverno_pull_violations(doc, obj)), obj["metadata"]["name"]


SAMPLE_PREFIXES = ["registry.example.com/", "ghcr.io/acme/"]
DIGEST = "@sha256:" + "3b1d6e0e5a8f0f4c1a9d2b7e6c5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f"

#: (case, privateRegistries prefixes, image, imagePullPolicy or None for none, denied).
#: Without imagePullPolicy both apply the API server's default: Always for the tag latest or
#: for neither tag nor digest, IfNotPresent otherwise.
PULL_CASES = [
    ("default-no-tag", SAMPLE_PREFIXES, "registry.example.com/app", None, False),
    ("default-latest", SAMPLE_PREFIXES, "registry.example.com/app:latest", None, False),
    ("default-tag", SAMPLE_PREFIXES, "registry.example.com/app:1.0", None, True),
    ("default-digest", SAMPLE_PREFIXES, "registry.example.com/app" + DIGEST, None, True),
    ("default-tag-and-digest", SAMPLE_PREFIXES, "registry.example.com/app:1.0" + DIGEST, None, True),
    ("default-latest-and-digest", SAMPLE_PREFIXES, "registry.example.com/app:latest" + DIGEST, None, False),
    ("default-tag-is-case-sensitive", SAMPLE_PREFIXES, "registry.example.com/app:LATEST", None, True),
    ("empty-policy-is-missing-no-tag", SAMPLE_PREFIXES, "registry.example.com/app", "", False),
    ("empty-policy-is-missing-tag", SAMPLE_PREFIXES, "registry.example.com/app:1.0", "", True),
    ("always-tag-and-digest", SAMPLE_PREFIXES, "registry.example.com/app:1.0" + DIGEST, "Always", False),
    ("if-not-present-no-tag", SAMPLE_PREFIXES, "registry.example.com/app", "IfNotPresent", True),
    ("never-latest", SAMPLE_PREFIXES, "ghcr.io/acme/tool:latest", "Never", True),
    ("public-if-not-present", SAMPLE_PREFIXES, "nginx:1.27", "IfNotPresent", False),
    ("public-default-tag", SAMPLE_PREFIXES, "ghcr.io/someone/tool:1", None, False),
    # A registry port is not a tag.
    ("port-default-no-tag", ["registry.example.com:5000/"], "registry.example.com:5000/app", None, False),
    ("port-default-no-tag-nested", ["registry.example.com:5000/"], "registry.example.com:5000/team/app", None, False),
    ("port-default-tag", ["registry.example.com:5000/"], "registry.example.com:5000/app:1.0", None, True),
    ("port-default-latest", ["registry.example.com:5000/"], "registry.example.com:5000/app:latest", None, False),
    ("port-default-digest", ["registry.example.com:5000/"], "registry.example.com:5000/app" + DIGEST, None, True),
    (
        "port-default-tag-and-digest",
        ["registry.example.com:5000/"],
        "registry.example.com:5000/app:2" + DIGEST,
        None,
        True,
    ),
    # Without "/", a ":" is a tag ("localhost:5000" is the repository localhost, tag 5000).
    ("no-slash-default-tag", ["localhost"], "localhost:5000", None, True),
    ("no-slash-default-no-tag", ["localhost"], "localhost", None, False),
    # Prefixes are plain strings: with "/" one host and port; without, every name it begins.
    (
        "slash-prefix-not-other-port",
        ["registry.example.com/"],
        "registry.example.com:5000/app:1",
        "IfNotPresent",
        False,
    ),
    (
        "slash-prefix-not-longer-host",
        ["registry.example.com/"],
        "registry.example.com.evil.io/app:1",
        "IfNotPresent",
        False,
    ),
    ("bare-prefix-other-port", ["registry.example.com"], "registry.example.com:5000/app:1", "IfNotPresent", True),
    ("bare-prefix-longer-host", ["registry.example.com"], "registry.example.com.evil.io/app:1", "IfNotPresent", True),
    ("bare-prefix-port-default-no-tag", ["registry.example.com"], "registry.example.com:5000/app", None, False),
    ("org-prefix-not-other-org", ["ghcr.io/acme/"], "ghcr.io/acme-corp/app:1", "IfNotPresent", False),
    # Docker Hub: references are matched as written, each spelling needs its prefix.
    ("hub-explicit", ["docker.io/acme/"], "docker.io/acme/app:1", None, True),
    ("hub-implicit-unlisted", ["docker.io/acme/"], "acme/app:1", None, False),
    ("hub-implicit-listed", ["docker.io/acme/", "acme/"], "acme/app:1", None, True),
    ("hub-implicit-default-no-tag", ["docker.io/acme/", "acme/"], "acme/app", None, False),
    ("hub-index-unlisted", ["docker.io/acme/", "acme/"], "index.docker.io/acme/app:1", "IfNotPresent", False),
    ("hub-index-listed", ["index.docker.io/acme/"], "index.docker.io/acme/app:1", "IfNotPresent", True),
    # Malformed (no kubelet pulls them): the API server defaults them to IfNotPresent.
    ("malformed-two-tags", SAMPLE_PREFIXES, "registry.example.com/app:1:2", None, True),
    ("malformed-empty-tag", SAMPLE_PREFIXES, "registry.example.com/app:", None, True),
]

#: Where the container goes: the lists of a Pod, and the pod templates of two controllers.
PLACEMENTS = [
    ("Pod", "containers"),
    ("Pod", "initContainers"),
    ("Pod", "ephemeralContainers"),
    ("Deployment", "containers"),
    ("CronJob", "initContainers"),
]


def placed(kind: str, field: str, container: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "nginx:1.27", "imagePullPolicy": "IfNotPresent"}]}
    spec[field] = [*spec.get(field, []), container]
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    template = {"metadata": {"labels": {"app": "p"}}, "spec": spec}
    if kind == "CronJob":
        return {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "p"},
            "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": template}}},
        }
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "p"},
        "spec": {"selector": {"matchLabels": {"app": "p"}}, "template": template},
    }


@pytest.mark.parametrize("case", PULL_CASES, ids=[c[0] for c in PULL_CASES])
def test_pull_policy_edge_cases(pull_engine: Any, case: tuple[str, list[str], str, str | None, bool]) -> None:
    """Each case, in each place a container can be, gets the expected verdict from both engines."""
    _, prefixes, image, pull_policy, deny = case
    doc = policy_doc(PULL)
    container = {"name": "c", "image": image} | ({} if pull_policy is None else {"imagePullPolicy": pull_policy})
    for kind, field in PLACEMENTS:
        obj = placed(kind, field, container)
        rego = rego_pull_violations(pull_engine, obj, prefixes)
        kyverno = kyverno_pull_violations(doc, obj, [p + "*" for p in prefixes])
        assert rego == kyverno == (["c"] if deny else []), (kind, field)


# Valid references, built from parts, and malformed ones: both engines decide every one alike, and
# for the valid ones as the API server defaults a missing imagePullPolicy.
_NAME_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
#: The reference grammar of github.com/distribution/reference (name, tag, digest), which the API
#: server's defaulting parses with.
REFERENCE = re.compile(
    rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?/)?{_NAME_COMPONENT}(?:/{_NAME_COMPONENT})*"
    r"(?::(?P<tag>\w[\w.-]{0,127}))?(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?",
    re.ASCII,
)
MALFORMED = [
    "registry.example.com/app:1:2",
    "registry.example.com/a:latest/b",
    "registry.example.com/app:1.0:latest",
    "registry.example.com/app@",
    "registry.example.com/app:",
    "registry.example.com/:latest",
    "registry.example.com/app:latest@",
    "registry.example.com//app",
    "registry.example.com/App:1",
    "registry.example.com",
    "registry.example.com:latest",
    "acme/app@sha256:1@2",
    "acme/:",
    "acme/@",
]


def api_server_default(image: str) -> str | None:
    """The API server's imagePullPolicy default for a valid reference (None for an invalid one)."""
    match = REFERENCE.fullmatch(image)
    if match is None:
        return None
    tag = match["tag"] or ("latest" if match["digest"] is None else "")
    return "Always" if tag == "latest" else "IfNotPresent"


def test_pull_policy_engines_agree_on_every_reference(pull_engine: Any) -> None:
    prefixes = ["registry.example.com", "localhost", "docker.io/acme/", "acme/", "index.docker.io/acme/"]
    images = [
        host + path + tag + digest
        for host in (
            "",
            "registry.example.com/",
            "registry.example.com:5000/",
            "localhost:5000/",
            "localhost/",
            "docker.io/",
            "index.docker.io/",
        )
        for path in ("app", "acme/app", "acme/team/app", "localhost")
        for tag in ("", ":1.0", ":latest", ":v1-rc.2", ":LATEST", ":5000")
        for digest in ("", DIGEST)
    ] + MALFORMED
    containers = [
        {"name": f"c{i}", "image": image} | ({} if policy is None else {"imagePullPolicy": policy})
        for i, (image, policy) in enumerate(
            (image, policy) for image in images for policy in (None, "", "Always", "IfNotPresent", "Never")
        )
    ]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": containers}}
    rego = set(rego_pull_violations(pull_engine, pod, prefixes))
    kyverno = set(kyverno_pull_violations(policy_doc(PULL), pod, [p + "*" for p in prefixes]))
    assert rego == kyverno
    checked = 0
    for container in containers:
        image, policy = container["image"], container.get("imagePullPolicy") or api_server_default(container["image"])
        if policy is None:  # malformed, no default to compare with
            continue
        private = any(image.startswith(p) for p in prefixes)
        assert (container["name"] in rego) == (private and policy != "Always"), (
            image,
            container.get("imagePullPolicy"),
        )
        checked += 1
    assert checked > 1000
