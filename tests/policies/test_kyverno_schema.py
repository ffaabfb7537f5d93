"""Every shipped Kyverno policy against Kyverno's own CRD schemas, and every expression in it parsed and run.

The CRDs are those of every supported Kyverno release, 1.17, 1.18 and 1.19
(``tests/data/crds/kyverno/v1.*``): ``ClusterPolicy`` and ``ValidatingPolicy``,
applied by the API server with strict field validation (``kubectl apply``'s
default), so an unknown field is an error, not a silently dropped one. ``tests/support/kube_schema.py`` is the validator (it says
why it is not a JSON Schema library); the table of broken policies shows it
refusing what the API server refuses.

Then the expressions, as the engine reads them:

* JMESPath -- every ``{{ ... }}`` in a ClusterPolicy, every ``jmesPath`` and
  ``foreach.list`` -- compiles; calls only functions of the JMESPath
  specification or Kyverno's own (``pkg/engine/jmespath/functions.go`` and
  ``time.go`` in kyverno/kyverno; none is used today, and one that is must
  get its semantics here before it may be); starts from a variable the rule
  defines; and evaluates without error on every test resource.
* CEL -- every expression of a ValidatingPolicy -- compiles with
  cel-python, calls only CEL's standard functions and macros or Kyverno's
  ``http`` library, reads only the variables Kyverno binds, and evaluates on
  every test resource (``tests/policies/test_kyverno.py`` binds
  ``http.Client(...).Post``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import jmespath
import pytest
import yaml
from lark import Tree

from tests.support.data import CRDS as CRD_DATA
from tests.support.data import REPO, load_yaml
from tests.support.kube_schema import keywords_in, validate_object
from tests.support.kyverno import (
    STANDARD_FUNCTIONS,
    VERSIONS,
    admission_request,
    cel_validate,
    cel_variables,
    function_names,
    substitute,
)

KYVERNO = REPO / "policies" / "kyverno"


def crds(version: str) -> dict[str, dict[str, Any]]:
    """Kyverno ``version``'s CRDs by kind (tests/data/crds/kyverno/v<version>)."""
    found = {}
    for path in sorted((CRD_DATA / "kyverno" / f"v{version}").glob("*.yaml")):
        (crd,) = load_yaml(path)
        found[crd["spec"]["names"]["kind"]] = crd
    return found


CRDS_BY_VERSION = {version: crds(version) for version in VERSIONS}
#: The newest release's, for the tests that are about the validator rather than a release.
CRDS = CRDS_BY_VERSION[max(VERSIONS, key=lambda v: tuple(int(p) for p in v.split(".")))]
POLICY_FILES = sorted(p for p in KYVERNO.glob("*/*.yaml"))


def policy(path: Path) -> dict[str, Any]:
    (doc,) = load_yaml(path)
    return dict(doc)


@pytest.mark.parametrize("version", list(VERSIONS))
def test_the_crds_are_kyvernos(version: str) -> None:
    found = CRDS_BY_VERSION[version]
    assert set(found) == {"ClusterPolicy", "ValidatingPolicy"}, (
        f"expected Kyverno's CRDs in tests/data/crds/kyverno/v{version}"
    )
    assert found["ClusterPolicy"]["spec"]["group"] == "kyverno.io"
    assert found["ValidatingPolicy"]["spec"]["group"] == "policies.kyverno.io"


def test_every_file_under_policies_kyverno_is_accounted_for() -> None:
    """Policies are validated below; the rest are the Kyverno CLI's test files and the resources they test."""
    policies = 0
    for path in sorted(KYVERNO.rglob("*.yaml")):
        for doc in load_yaml(path):
            if doc["kind"] in CRDS:
                assert path in POLICY_FILES, path
                policies += 1
            elif doc.get("apiVersion") == "cli.kyverno.io/v1alpha1":
                assert doc["kind"] in ("Test", "Values"), path
            else:
                assert path.name == "resource.yaml", path
    assert policies == len(POLICY_FILES) == 6


@pytest.mark.parametrize("version", list(VERSIONS))
@pytest.mark.parametrize("path", POLICY_FILES, ids=lambda p: p.parent.name)
def test_the_policy_is_valid_against_kyvernos_crd(path: Path, version: str) -> None:
    doc = policy(path)
    assert validate_object(doc, CRDS_BY_VERSION[version][doc["kind"]]) == []


@pytest.mark.parametrize("version", list(VERSIONS))
@pytest.mark.parametrize("path", POLICY_FILES, ids=lambda p: p.parent.name)
def test_the_policy_uses_a_served_current_version(path: Path, version: str) -> None:
    doc = policy(path)
    api_version = doc["apiVersion"].split("/")[1]
    (entry,) = [v for v in CRDS_BY_VERSION[version][doc["kind"]]["spec"]["versions"] if v["name"] == api_version]
    assert entry["served"] and not entry.get("deprecated"), doc["apiVersion"]


@pytest.mark.parametrize("version", list(VERSIONS))
def test_allow_existing_violations_is_a_validate_field_of_every_release(version: str) -> None:
    """The field the signature policies set exists where they set it (an unknown field would be refused)."""
    doc = policy(APICALL)
    doc["spec"]["rules"][0]["validate"]["allowExistingViolations"] = "no"
    assert any("expected boolean" in e for e in validate_object(doc, CRDS_BY_VERSION[version]["ClusterPolicy"]))


def test_the_validator_knows_every_keyword_the_crds_use() -> None:
    """``validate_object`` refuses to run on a keyword it does not implement; here: it never has to."""
    used = set()
    for crd in CRDS.values():
        for version in crd["spec"]["versions"]:
            used |= keywords_in(version["schema"]["openAPIV3Schema"])
    assert {"x-kubernetes-preserve-unknown-fields", "oneOf", "not", "additionalProperties"} <= used


def set_at(doc: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node: Any = doc
    for part in parents:
        node = node[part]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value


_DELETE = object()
APICALL = KYVERNO / "verify-manifest-signature" / "verify-manifest-signature.yaml"
CEL = KYVERNO / "verify-manifest-signature-cel" / "verify-manifest-signature-cel.yaml"

BROKEN: list[tuple[str, Path, str, Any, str]] = [
    ("misspelt-field", APICALL, "spec.rules.0.validate.failureActon", "Audit", "failureActon: unknown field"),
    (
        "unknown-service-field",
        APICALL,
        "spec.rules.0.context.0.apiCall.service.timeout",
        "2s",
        "timeout: unknown field",
    ),
    (
        "failure-action-not-in-enum",
        APICALL,
        "spec.rules.0.validate.failureAction",
        "Deny",
        "is not one of ['Audit', 'Enforce']",
    ),
    ("method-not-in-enum", APICALL, "spec.rules.0.context.0.apiCall.method", "PUT", "is not one of ['GET', 'POST']"),
    ("boolean-as-a-string", APICALL, "spec.background", "false", "expected boolean"),
    ("rule-without-a-name", APICALL, "spec.rules.0.name", _DELETE, "'name' is required"),
    ("name-not-a-dns-name", APICALL, "metadata.name", "Verify_Manifest", "not a DNS-1123 subdomain"),
    (
        "validation-action-not-in-enum",
        CEL,
        "spec.validationActions",
        ["Reject"],
        "is not one of ['Deny', 'Audit', 'Warn']",
    ),
    ("misspelt-cel-field", CEL, "spec.evaluation.background.enable", False, "enable: unknown field"),
    ("integer-as-a-string", CEL, "spec.webhookConfiguration.timeoutSeconds", "10", "expected integer"),
    ("unserved-version", CEL, "apiVersion", "policies.kyverno.io/v2", "no such version"),
    ("variable-without-expression", CEL, "spec.variables.0.expression", _DELETE, "'expression' is required"),
]


@pytest.mark.parametrize(("case", "path", "field", "value", "error"), BROKEN, ids=[b[0] for b in BROKEN])
def test_the_api_server_would_refuse(case: str, path: Path, field: str, value: Any, error: str) -> None:
    doc = copy.deepcopy(policy(path))
    set_at(doc, field, value)
    errors = validate_object(doc, CRDS[policy(path)["kind"]])
    assert any(error in e for e in errors), errors


def test_a_namespace_on_a_cluster_policy_is_not_refused_the_api_server_clears_it() -> None:
    """k8s.io/apiserver pkg/registry/rest create.go ``BeforeCreate``: a cluster-scoped object's namespace is cleared."""
    doc = copy.deepcopy(policy(APICALL))
    set_at(doc, "metadata.namespace", "demo")
    assert validate_object(doc, CRDS[doc["kind"]]) == []


# --- JMESPath -------------------------------------------------------------------------------------

#: Kyverno's own functions (kyverno/kyverno pkg/engine/jmespath/functions.go ``GetFunctions`` and time.go).
KYVERNO_FUNCTIONS = frozenset(
    {
        "compare",
        "equal_fold",
        "replace",
        "replace_all",
        "to_upper",
        "to_lower",
        "trim",
        "trim_prefix",
        "split",
        "regex_replace_all",
        "regex_replace_all_literal",
        "regex_match",
        "pattern_match",
        "label_match",
        "to_boolean",
        "add",
        "sum",
        "subtract",
        "multiply",
        "divide",
        "modulo",
        "round",
        "base64_decode",
        "base64_encode",
        "path_canonicalize",
        "truncate",
        "semver_compare",
        "parse_json",
        "parse_yaml",
        "lookup",
        "items",
        "object_from_lists",
        "random",
        "x509_decode",
        "image_normalize",
        "time_since",
        "time_now",
        "time_now_utc",
        "time_to_cron",
        "time_add",
        "time_parse",
        "time_utc",
        "time_diff",
        "time_before",
        "time_after",
        "time_between",
        "time_truncate",
    }
)
#: Kyverno functions whose semantics the tests reproduce; a policy may call only these of Kyverno's.
#: ``sum`` is in both lists: Kyverno replaces the standard one with one that also adds quantities
#: and durations, which for plain numbers gives the same.
IMPLEMENTED_KYVERNO_FUNCTIONS: frozenset[str] = frozenset()
#: Variables Kyverno binds for every rule (besides the rule's own context entries).
KYVERNO_ROOTS = frozenset(
    {"request", "element", "elementIndex", "images", "serviceAccountName", "serviceAccountNamespace", "@"}
)

_TEMPLATE = re.compile(r"\{\{-?\s*(.+?)\s*-?\}\}", re.DOTALL)


def strings(node: Any, where: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from strings(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from strings(value, f"{where}[{i}]")
    elif isinstance(node, str):
        yield where, node


def jmespath_expressions(rule: dict[str, Any]) -> list[tuple[str, str]]:
    """Every JMESPath Kyverno evaluates for ``rule``: the ``{{ }}`` templates, ``jmesPath`` fields, ``foreach.list``."""
    found = []
    for where, text in strings(rule):
        found.extend((where, expr) for expr in _TEMPLATE.findall(text))
        if where.endswith(".jmesPath") or (where.endswith(".list") and ".foreach[" in where):
            found.append((where, text))
    return found


def root_of(expression: str) -> str | None:
    """The variable an expression starts from (``verdict.allowed`` -> ``verdict``), None for literals and the like."""
    node = jmespath.compile(expression).parsed
    while node["type"] in (
        "subexpression",
        "index_expression",
        "projection",
        "flatten",
        "filter_projection",
        "pipe",
        "value_projection",
    ) and node.get("children"):
        node = node["children"][0]
    if node["type"] == "field":
        return str(node["value"])
    if node["type"] == "current":
        return "@"
    return None


def roots(expression: str) -> set[str]:
    """Every variable an expression reads from the top (operands of ``||``, ``&&``, ``!``, comparisons, calls)."""
    found: set[str] = set()

    def walk(node: Any, top: bool) -> None:
        if not isinstance(node, dict):
            return
        kind = node["type"]
        if kind == "field" and top:
            found.add(str(node["value"]))
            return
        if kind in (
            "subexpression",
            "index_expression",
            "projection",
            "flatten",
            "filter_projection",
            "pipe",
            "value_projection",
        ):
            children = node.get("children", [])
            if children:
                walk(children[0], top)
            return
        for child in node.get("children", []):
            walk(
                child,
                top=kind
                in (
                    "or_expression",
                    "and_expression",
                    "not_expression",
                    "comparator",
                    "function_expression",
                    "multi_select_hash",
                    "multi_select_list",
                    "key_val_pair",
                ),
            )

    walk(jmespath.compile(expression).parsed, top=True)
    return found


def cluster_policies() -> list[Path]:
    return [p for p in POLICY_FILES if policy(p)["kind"] == "ClusterPolicy"]


def rule_cases() -> list[tuple[Path, int]]:
    return [(p, i) for p in cluster_policies() for i, _ in enumerate(policy(p)["spec"]["rules"])]


RULES = rule_cases()


def test_every_cluster_policy_has_expressions() -> None:
    assert len(RULES) == 5
    assert sum(len(jmespath_expressions(policy(p)["spec"]["rules"][i])) for p, i in RULES) >= 20


@pytest.mark.parametrize(("path", "index"), RULES, ids=[f"{p.parent.name}:{i}" for p, i in RULES])
def test_every_jmespath_compiles_and_calls_known_functions(path: Path, index: int) -> None:
    rule = policy(path)["spec"]["rules"][index]
    expressions = jmespath_expressions(rule)
    assert expressions
    for where, expression in expressions:
        calls = function_names(expression)  # raises on a syntax error, as Kyverno's compile does
        unknown = calls - STANDARD_FUNCTIONS - KYVERNO_FUNCTIONS
        assert not unknown, (where, expression, unknown)
        unreproduced = (calls & KYVERNO_FUNCTIONS) - STANDARD_FUNCTIONS - IMPLEMENTED_KYVERNO_FUNCTIONS
        assert not unreproduced, f"{where}: reproduce Kyverno's {sorted(unreproduced)} in the tests before using it"


@pytest.mark.parametrize(("path", "index"), RULES, ids=[f"{p.parent.name}:{i}" for p, i in RULES])
def test_every_template_reads_a_variable_the_rule_has(path: Path, index: int) -> None:
    """A misspelt variable is a substitution error at admission: every ``{{ }}`` starts from a bound name."""
    rule = policy(path)["spec"]["rules"][index]
    bound = KYVERNO_ROOTS | {entry["name"] for entry in rule.get("context", [])}
    for where, text in strings(rule):
        for expression in _TEMPLATE.findall(text):
            assert roots(expression) <= bound, (where, expression, roots(expression) - bound)


def test_the_root_scan_sees_through_operators() -> None:
    assert roots("verdict.allowed") == {"verdict"}
    assert roots("!(element.imagePullPolicy || '') && !ends_with(element.image, ':latest')") == {"element"}
    assert roots("{allowed: allowed == `true`, reason: reason || 'no-reason'}") == {"allowed", "reason"}
    assert roots("requst.object") == {"requst"}


def test_jmespath_functions_are_checked() -> None:
    assert function_names("ends_with(a, 'b')") <= STANDARD_FUNCTIONS
    assert "regex_match" in function_names("regex_match('^a', b)") & KYVERNO_FUNCTIONS
    assert function_names("endswith(a, 'b')") - STANDARD_FUNCTIONS - KYVERNO_FUNCTIONS == {"endswith"}
    with pytest.raises(jmespath.exceptions.ParseError):
        function_names("a ||")


def kyverno_test_resources(path: Path) -> list[dict[str, Any]]:
    return [doc for f in sorted((path.parent / ".kyverno-test").rglob("resource.yaml")) for doc in load_yaml(f)]


def evaluate_rule(rule: dict[str, Any], obj: dict[str, Any]) -> int:
    """Evaluate every JMESPath of ``rule`` for ``obj`` as Kyverno would, the service call replaced by its default.

    Returns the number of expressions evaluated; raises on a JMESPath error (a type error on null, say).
    """
    context: dict[str, Any] = {"request": admission_request(obj)}
    count = 0
    for entry in rule.get("context", []):
        if "apiCall" in entry:
            call = entry["apiCall"]
            substitute(call.get("data", []), context)
            count += len(_TEMPLATE.findall(yaml.safe_dump(call.get("data", []))))
            context[entry["name"]] = (
                jmespath.search(call["jmesPath"], call["default"]) if "jmesPath" in call else call["default"]
            )
            count += 1
        elif "variable" in entry:
            context[entry["name"]] = substitute(entry["variable"].get("value"), context)
            count += 1
    validate = rule["validate"]
    elements: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for each in validate.get("foreach", []):
        listed = jmespath.search(each["list"], context) or []
        count += 1
        elements.extend(
            ({**context, "element": element, "elementIndex": i}, each["deny"]) for i, element in enumerate(listed)
        )
    if "deny" in validate:
        elements.append((context, validate["deny"]))
    for scope, deny in elements:
        for block in ("any", "all"):
            for condition in deny.get("conditions", {}).get(block, []):
                substitute(condition["key"], scope)
                substitute(condition["value"], scope)
                count += 2
    substitute(validate.get("message", ""), context)
    return count + 1


@pytest.mark.parametrize(("path", "index"), RULES, ids=[f"{p.parent.name}:{i}" for p, i in RULES])
def test_every_jmespath_evaluates_on_every_test_resource(path: Path, index: int) -> None:
    rule = policy(path)["spec"]["rules"][index]
    resources = kyverno_test_resources(path)
    assert resources
    for obj in resources:
        assert evaluate_rule(rule, obj) > 1


# --- CEL ------------------------------------------------------------------------------------------

#: CEL's standard functions and macros (cel-spec ``doc/langdef.md``), and the Kubernetes CEL libraries'
#: string and list helpers that Kyverno binds too (k8s.io/apiserver ``pkg/cel/library``).
CEL_FUNCTIONS = frozenset(
    {
        "has",
        "size",
        "dyn",
        "type",
        "int",
        "uint",
        "double",
        "string",
        "bytes",
        "bool",
        "duration",
        "timestamp",
        "matches",
        "startsWith",
        "endsWith",
        "contains",
        "exists",
        "exists_one",
        "all",
        "map",
        "filter",
        "lowerAscii",
        "upperAscii",
        "replace",
        "split",
        "join",
        "trim",
        "substring",
        "indexOf",
        "lastIndexOf",
        "format",
        "orValue",
        "hasValue",
        "value",
        "isSorted",
        "sum",
        "min",
        "max",
    }
)
#: Kyverno's CEL http library (kyverno/kyverno ``pkg/cel/libs/http``): ``http.Get``/``http.Post`` and
#: ``http.Client(caBundle)`` returning a client with the same two methods.
KYVERNO_CEL_FUNCTIONS = frozenset({"Client", "Get", "Post"})
#: What Kyverno binds in a ValidatingPolicy's expressions (its ``compiler`` for ``policies.kyverno.io``).
CEL_ROOTS = frozenset(
    {
        "object",
        "oldObject",
        "request",
        "variables",
        "namespaceObject",
        "params",
        "authorizer",
        "http",
        "bool",
        "int",
        "string",
        "double",
        "list",
        "map",
        "null_type",
        "type",
        "bytes",
        "uint",
    }
)


def cel_expressions(doc: dict[str, Any]) -> list[tuple[str, str]]:
    spec = doc["spec"]
    found = [(f"variables.{v['name']}", v["expression"]) for v in spec.get("variables", [])]
    for i, validation in enumerate(spec.get("validations", [])):
        found.append((f"validations[{i}].expression", validation["expression"]))
        if "messageExpression" in validation:
            found.append((f"validations[{i}].messageExpression", validation["messageExpression"]))
    found.extend((f"matchConditions.{c['name']}", c["expression"]) for c in spec.get("matchConditions", []))
    found.extend((f"auditAnnotations.{a['key']}", a["valueExpression"]) for a in spec.get("auditAnnotations", []))
    return found


def cel_calls_and_roots(expression: str) -> tuple[set[str], set[str]]:
    tree = celpy.Environment().compile(expression)
    calls: set[str] = set()
    idents: set[str] = set()
    bound: set[str] = set()

    def walk(node: Any) -> None:
        if not isinstance(node, Tree):
            return
        if node.data in ("ident_arg", "member_dot_arg"):
            # ident_arg: IDENT [exprlist]; member_dot_arg: member IDENT [exprlist].
            name = str(next(c for c in node.children if not isinstance(c, Tree)))
            calls.add(name)
            args = [c for c in node.children if isinstance(c, Tree) and c.data == "exprlist"]
            if name in ("exists", "all", "exists_one", "map", "filter") and args and args[0].children:
                # A macro binds its first argument within the rest.
                bound.update(
                    str(t) for t in args[0].children[0].scan_values(lambda v: getattr(v, "type", "") == "IDENT")
                )
        if node.data == "ident":
            idents.add(str(node.children[0]))
        for child in node.children:
            walk(child)

    walk(tree)
    return calls, idents - bound


CEL_POLICIES = [p for p in POLICY_FILES if policy(p)["kind"] == "ValidatingPolicy"]


@pytest.mark.parametrize("path", CEL_POLICIES, ids=lambda p: p.parent.name)
def test_every_cel_expression_compiles_and_calls_known_functions(path: Path) -> None:
    expressions = cel_expressions(policy(path))
    assert len(expressions) >= 6
    for where, expression in expressions:
        calls, idents = cel_calls_and_roots(expression)  # raises on a syntax error
        assert calls <= CEL_FUNCTIONS | KYVERNO_CEL_FUNCTIONS, (where, calls - CEL_FUNCTIONS - KYVERNO_CEL_FUNCTIONS)
        assert idents <= CEL_ROOTS, (where, idents - CEL_ROOTS)


def test_the_cel_scan_catches_an_unknown_function_and_variable() -> None:
    calls, idents = cel_calls_and_roots("requests.object.size() > 0 && object.x.startswith('a') && [1].all(x, x > 0)")
    assert "startswith" in calls - CEL_FUNCTIONS
    assert idents - CEL_ROOTS == {"requests"}


@pytest.mark.parametrize("path", CEL_POLICIES, ids=lambda p: p.parent.name)
def test_every_cel_expression_evaluates_on_every_test_resource(path: Path) -> None:
    doc = policy(path)
    answers = [
        {"allowed": True, "reason": "verified", "message": "ok"},
        {"allowed": False, "reason": "unsigned", "message": "no"},
    ]
    resources = kyverno_test_resources(path)
    assert resources
    for obj in resources:
        for answer in answers:
            variables = cel_variables(doc, admission_request(obj), lambda url, body, headers, answer=answer: answer)
            passed, message = cel_validate(doc, variables)
            assert passed is answer["allowed"] and message
