"""Kyverno, reproduced from its source where it cannot run: variable substitution, the service call, CEL.

Variable substitution (a value that is exactly ``{{ path }}`` becomes the JSON
at that path), the service call's body (the ``data`` list as one object),
``jmesPath`` (standard JMESPath only, checked on the syntax tree) and the
``default`` stored when the call fails, the deny conditions; for the
``ValidatingPolicy`` its CEL, with ``cel-python``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import celpy
import jmespath
from celpy import celtypes
from celpy.adapter import CELJSONEncoder, json_to_cel

from tests.support.data import REPO, load_yaml

#: The shipped Kyverno policies, one folder each.
POLICIES = REPO / "policies" / "kyverno"
APICALL = POLICIES / "verify-manifest-signature"
CEL = POLICIES / "verify-manifest-signature-cel"
BACKGROUND = POLICIES / "verify-manifest-signature-background"
SERVICE_PATH = "/v1/kyverno/verify"

#: The functions of the JMESPath specification (jmespath.org/specification.html#built-in-functions).
#: Kyverno adds its own (split, regex_match, ...); our policies use none of them.
STANDARD_FUNCTIONS = frozenset({
    "abs", "avg", "ceil", "contains", "ends_with", "floor", "join", "keys", "length", "map", "max", "max_by",
    "merge", "min", "min_by", "not_null", "reverse", "sort", "sort_by", "starts_with", "sum", "to_array",
    "to_number", "to_string", "type", "values",
})  # fmt: skip

_WHOLE_VARIABLE = re.compile(r"\A\{\{\s*(.+?)\s*\}\}\Z")
#: A ``{{ expression }}`` inside text.
VARIABLE = re.compile(r"\{\{\s*(.+?)\s*\}\}")


# --- Kyverno, reproduced ---------------------------------------------------------------


def policy_doc(directory: Path) -> dict[str, Any]:
    (doc,) = load_yaml(directory / f"{directory.name}.yaml")
    return dict(doc)


def substitute(value: Any, context: dict[str, Any]) -> Any:
    """Kyverno's variable substitution: ``"{{ x }}"`` alone is x's JSON value; inside text, its text."""
    if isinstance(value, dict):
        return {k: substitute(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, context) for v in value]
    if isinstance(value, str):
        whole = _WHOLE_VARIABLE.match(value)
        if whole:
            return jmespath.search(whole.group(1), context)

        def text(match: re.Match[str]) -> str:
            found = jmespath.search(match.group(1), context)
            return found if isinstance(found, str) else json.dumps(found)

        return VARIABLE.sub(text, value)
    return value


def api_call(doc: dict[str, Any]) -> dict[str, Any]:
    (rule,) = doc["spec"]["rules"]
    (entry,) = rule["context"]
    return dict(entry["apiCall"])


def request_body(doc: dict[str, Any], admission_request: dict[str, Any]) -> bytes:
    """The body Kyverno POSTs: the ``data`` list as one JSON object, variables substituted."""
    context = {"request": admission_request}
    data = {item["key"]: substitute(item["value"], context) for item in api_call(doc)["data"]}
    return json.dumps(data).encode()


def stored_verdict(doc: dict[str, Any], answer: Any) -> Any:
    """What the context entry holds after a successful call: the answer through ``jmesPath``."""
    return jmespath.search(api_call(doc)["jmesPath"], answer)


def denied(doc: dict[str, Any], verdict: Any) -> bool:
    (rule,) = doc["spec"]["rules"]
    conditions = rule["validate"]["deny"]["conditions"]["any"]
    context = {"verdict": verdict}
    for condition in conditions:
        key = substitute(condition["key"], context)
        operator = condition["operator"]
        if operator not in ("Equals", "NotEquals"):
            raise NotImplementedError(f"deny operator {operator!r}: teach denied() before relying on it")
        if (key == condition["value"]) is (operator == "Equals"):
            return True
    return False


def deny_message(doc: dict[str, Any], verdict: Any) -> str:
    (rule,) = doc["spec"]["rules"]
    return str(substitute(rule["validate"]["message"], {"verdict": verdict}))


def function_names(expression: str) -> set[str]:
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "function_expression":
                names.add(node["value"])
            for child in node.get("children", []):
                walk(child)

    walk(jmespath.compile(expression).parsed)
    return names


def admission_request(
    obj: dict[str, Any], operation: str = "CREATE", username: str = "alice@example.com"
) -> dict[str, Any]:
    meta = obj.get("metadata", {})
    return {
        "uid": "2a5f4c3e-0000-4000-8000-000000000000",
        "kind": {"group": "", "version": "v1", "kind": obj["kind"]},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        # The API server sets these on every request; subResource only for a subresource (omitempty).
        "requestKind": {"group": "", "version": "v1", "kind": obj["kind"]},
        "requestResource": {"group": "", "version": "v1", "resource": "configmaps"},
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }


def background_scan_request(obj: dict[str, Any]) -> dict[str, Any]:
    """``{{ request }}`` in a background scan: what Kyverno's scanner puts in the policy context for a stored object.

    kyverno/kyverno ``pkg/controllers/report/utils/scanner.go`` (``validateResource``) calls
    ``engine.NewPolicyContext(jp, resource, kyvernov1.Create, nil, ...)``, which
    (``pkg/engine/policycontext/policy_context.go``) adds ``request.object``,
    ``request.namespace`` and ``request.operation``; user info only when given (here: nil).
    """
    return {"object": obj, "namespace": obj.get("metadata", {}).get("namespace", ""), "operation": "CREATE"}


# --- the CEL policy, evaluated -------------------------------------------------------------

Post = Callable[[str, str, Any, dict[str, str]], Any]


def to_python(value: Any) -> Any:
    return json.loads(json.dumps(value, cls=CELJSONEncoder))


def cel_variables(doc: dict[str, Any], request: dict[str, Any], post: Post) -> dict[str, Any]:
    """Evaluate ``spec.variables`` in order, ``http.Client(ca).Post(url, body, headers)`` calling ``post(ca, ...)``."""
    env = celpy.Environment()

    def client(_http: Any, ca: Any) -> Any:
        return celtypes.MapType({celtypes.StringType("caBundle"): ca})

    def do_post(handle: Any, url: Any, body: Any, headers: Any) -> Any:
        answer = post(str(handle[celtypes.StringType("caBundle")]), str(url), to_python(body), to_python(headers))
        return json_to_cel(answer)

    activation: dict[str, Any] = {
        "object": json_to_cel(request["object"]),
        "oldObject": json_to_cel(request["oldObject"]),
        "request": json_to_cel(request),
        "http": celtypes.MapType({}),
    }
    variables: dict[Any, Any] = {}
    for variable in doc["spec"]["variables"]:
        activation["variables"] = celtypes.MapType(variables)
        program = env.program(env.compile(variable["expression"]), functions={"Client": client, "Post": do_post})
        variables[celtypes.StringType(variable["name"])] = program.evaluate(activation)
    return {str(k): v for k, v in variables.items()}


def cel_validate(doc: dict[str, Any], variables: dict[str, Any]) -> tuple[bool, str]:
    """(passes, message) for the one validation."""
    env = celpy.Environment()
    activation = {"variables": celtypes.MapType({celtypes.StringType(k): v for k, v in variables.items()})}
    (validation,) = doc["spec"]["validations"]
    passed = env.program(env.compile(validation["expression"])).evaluate(activation)
    message = env.program(env.compile(validation["messageExpression"])).evaluate(activation)
    return bool(passed), str(message)


def cel_verdict(doc: dict[str, Any], answer: dict[str, Any]) -> tuple[bool, str]:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "demo"}}
    variables = cel_variables(doc, admission_request(obj), lambda ca, url, body, headers: answer)
    return cel_validate(doc, variables)


def expected_results(directory: Path) -> dict[str, str]:
    (test,) = load_yaml(directory / ".kyverno-test" / "kyverno-test.yaml")
    return {name: result["result"] for result in test["results"] for name in result["resources"]}
