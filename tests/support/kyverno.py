"""Kyverno, reproduced from its source where it cannot run: variable substitution, the service call, CEL.

Variable substitution (a value that is exactly ``{{ path }}`` becomes the JSON
at that path), the service call's body (the ``data`` list as one object),
``jmesPath`` (standard JMESPath only, checked on the syntax tree) and the
``default`` stored when the call fails, the deny conditions; for the
``ValidatingPolicy`` its CEL, with ``cel-python``.

:func:`admit` and :func:`scan` follow a ``ClusterPolicy`` through Kyverno's own
flow for each supported release (:data:`VERSIONS`), from its source at the tags
named there: match, the rule's context loaded once, the deny conditions, the
failure action, the re-evaluation of an UPDATE's old object with that same
context (``allowExistingViolations``), and whether the request is blocked. What
the model does not know -- a rule kind, a context entry, a match clause it does
not reproduce -- raises :class:`NotModelled` instead of being guessed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import celpy
import jmespath
from celpy import celtypes
from celpy.adapter import CELJSONEncoder, json_to_cel
from celpy.evaluation import CELEvalError

from tests.support.data import CRDS, REPO, load_yaml

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
#
# Kyverno's CEL http library, as the policy meets it at run time (each rule with its source):
#
# * ``http`` is an ``http.Context``: ``http.Post(url, body, headers)`` POSTs the body as JSON with those
#   headers and nothing else -- no credential (1.17: kyverno pkg/cel/libs/http/http.go; 1.18, 1.19:
#   kyverno/sdk cel/libs/http/http.go; the scoped-token client of pkg/engine/apicall/httpclient.go is
#   not wired into it), trusting the system roots of Kyverno's container.
# * 1.17 turns a non-2xx answer into an error; from 1.18 the answer is returned with ``statusCode``
#   added (a JSON object gets the key, anything else becomes ``{"body": ..., "statusCode": ...}``).
# * ``http.Client(caBundle)`` returns a value that is not an ``http.Context`` at run time, so any call
#   on it is "no such overload" (tests/support/kyverno_cel.py, CLIENT_RUNTIME_TYPE, says why).
# * A failed call is an evaluation error; the policy's ``failurePolicy`` decides what that means.

#: The service: (url, body, headers) -> the JSON of a 2xx answer; raises CallFailed or HttpStatus.
Post = Callable[[str, Any, dict[str, str]], Any]


class HttpStatus(Exception):
    """A non-2xx answer, with its JSON body."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}")
        self.status, self.body = status, body


def to_python(value: Any) -> Any:
    return json.loads(json.dumps(value, cls=CELJSONEncoder))


_HTTP_TYPE = celtypes.StringType("__kyverno_http_type__")


def _with_status(answer: Any, status: int, version: str) -> Any:
    if version == "1.17":
        if not 200 <= status < 300:
            return CELEvalError(f"request failed: HTTP {status}")
        return answer
    if isinstance(answer, dict):
        return {**answer, "statusCode": status}
    return {"body": answer, "statusCode": status}


def cel_variables(doc: dict[str, Any], request: dict[str, Any], post: Post, version: str = "1.19") -> dict[str, Any]:
    """Evaluate ``spec.variables`` in order as Kyverno ``version`` would, ``http.Post`` calling ``post``.

    A variable whose evaluation fails raises ``CELEvalError`` (Kyverno: an evaluation error).
    """
    from tests.support.kyverno_cel import CLIENT_RUNTIME_TYPE, CONTEXT_TYPE

    if version not in VERSIONS:
        raise NotModelled(f"Kyverno {version}")
    env = celpy.Environment()

    def handle_type(handle: Any) -> str:
        return str(handle.get(_HTTP_TYPE, "")) if isinstance(handle, celtypes.MapType) else type(handle).__name__

    def client(handle: Any, ca: Any) -> Any:
        if handle_type(handle) != CONTEXT_TYPE:
            return CELEvalError(f"no such overload: Client({handle_type(handle)}, string)")
        return celtypes.MapType({_HTTP_TYPE: celtypes.StringType(CLIENT_RUNTIME_TYPE[version])})

    def do_post(handle: Any, url: Any, body: Any, headers: Any = None) -> Any:
        if handle_type(handle) != CONTEXT_TYPE:
            return CELEvalError(f"no such overload: Post({handle_type(handle)}, string, map, map)")
        try:
            answer, status = post(str(url), to_python(body), to_python(headers or {})), 200
        except CallFailed as exc:
            return CELEvalError(f"request failed: {exc}")
        except HttpStatus as exc:
            answer, status = exc.body, exc.status
        result = _with_status(answer, status, version)
        return result if isinstance(result, CELEvalError) else json_to_cel(result)

    functions: dict[str, Any] = {"Client": client, "Post": do_post}
    if version != "1.17":
        functions |= {"client": client, "post": do_post}
    activation: dict[str, Any] = {
        "object": json_to_cel(request.get("object")),
        "oldObject": json_to_cel(request.get("oldObject")),
        "request": json_to_cel(request),
        "http": celtypes.MapType({_HTTP_TYPE: celtypes.StringType(CONTEXT_TYPE)}),
    }
    variables: dict[Any, Any] = {}
    for variable in doc["spec"]["variables"]:
        activation["variables"] = celtypes.MapType(variables)
        program = env.program(env.compile(variable["expression"]), functions=functions)
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


def cel_admit(doc: dict[str, Any], request: dict[str, Any], post: Post, version: str = "1.19") -> tuple[bool, str]:
    """(admitted, why) for a ValidatingPolicy: a failed validation blocks with ``Deny`` in ``validationActions``;
    an evaluation error blocks under ``failurePolicy: Fail`` (pkg/cel/policies/vpol/engine, the admission
    handler). A ValidatingPolicy has no ``allowExistingViolations``: an UPDATE is judged on ``object``."""
    spec = doc["spec"]
    try:
        passed, message = cel_validate(doc, cel_variables(doc, request, post, version))
    except CELEvalError as exc:
        return spec.get("failurePolicy", "Fail") != "Fail", f"evaluation error: {exc.args[0] if exc.args else exc}"
    if passed:
        return True, ""
    return "Deny" not in spec["validationActions"], message


def cel_verdict(doc: dict[str, Any], answer: dict[str, Any]) -> tuple[bool, str]:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "demo"}}
    variables = cel_variables(doc, admission_request(obj), lambda url, body, headers: answer)
    return cel_validate(doc, variables)


def expected_results(directory: Path) -> dict[str, str]:
    (test,) = load_yaml(directory / ".kyverno-test" / "kyverno-test.yaml")
    return {name: result["result"] for result in test["results"] for name in result["resources"]}


# --- a ClusterPolicy through Kyverno's admission flow, release by release ---------------------------
#
# Each rule below is read from kyverno/kyverno at the tag VERSIONS names (the same code at every patch
# tag of a minor release unless a note says otherwise):
#
# * engine.go ``invokeRuleHandler``: match, then the rule's ``context`` loaded ONCE, then the
#   preconditions, then the validate handler.
# * handlers/validation/validate_resource.go ``validate``: the deny conditions give pass or fail; the
#   failure action is ``validate.failureAction``, else ``spec.validationFailureAction``; when it is
#   Enforce, the request is an UPDATE and ``validate.allowExistingViolations`` is true (the default,
#   api/kyverno/v1/rule_types.go ``HasValidateAllowExistingViolations``), ``validateOldObject`` puts the
#   old object in the JSON context as ``request.object``, the operation to CREATE, matches the old
#   object again (handlers/validation/utils.go ``matchResource``: its own kind, no subresource) and runs
#   ``validate`` again -- with the context the rule already loaded, since the root validator has no
#   context entries of its own. When the new and the old object both fail, the rule is SKIPPED:
#   "skipping the rule evaluation as pre-existing violations are allowed".
# * apicall/apiCall.go ``Fetch``/``transformAndStore``: a failed call stores ``default`` as it is
#   (without ``jmesPath``); a call that fails without a default is a rule error.
# * policycache/store.go ``set``: a policy with no Enforce anywhere is only ever run by the audit
#   handler, which never blocks; utils/engine/response.go ``BlockRequest``: a failure blocks when the
#   action is Enforce (1.17, 1.18: ``GetValidationFailureAction``, the first validate rule's; 1.19:
#   ``HasEnforcedFailure``, the failed rule's own), an error blocks when ``failurePolicy`` is Fail.
# * api/kyverno/v1/spec_types.go: ``admission`` (default true) and ``background`` (default true) say
#   whether the policy is applied at admission and in background scans; a background scan evaluates
#   the stored object as a CREATE (controllers/report/utils/scanner.go), so no old object is ever
#   re-evaluated there.

#: The supported Kyverno releases and the tag each one's rules are read from.
VERSIONS = {"1.17": "v1.17.2", "1.18": "v1.18.2", "1.19": "v1.19.0"}


def crds(version: str) -> dict[str, dict[str, Any]]:
    """Kyverno ``version``'s CRDs by kind (tests/data/crds/kyverno/v<version>): ClusterPolicy, ValidatingPolicy."""
    if version not in VERSIONS:
        raise NotModelled(f"Kyverno {version}")
    found = {}
    for path in sorted((CRDS / "kyverno" / f"v{version}").glob("*.yaml")):
        (crd,) = load_yaml(path)
        found[crd["spec"]["names"]["kind"]] = crd
    if set(found) != {"ClusterPolicy", "ValidatingPolicy"}:
        raise NotModelled(f"tests/data/crds/kyverno/v{version} holds {sorted(found)}")
    return found


_SPEC_KEYS = frozenset({"admission", "background", "failurePolicy", "rules", "validationFailureAction"})
_RULE_KEYS = frozenset({"name", "match", "context", "validate"})
_RESOURCE_KEYS = frozenset({"kinds", "namespaces", "operations"})
_VALIDATE_KEYS = frozenset({"failureAction", "message", "deny", "allowExistingViolations"})
_APICALL_KEYS = frozenset({"method", "service", "data", "jmesPath", "default"})


class NotModelled(Exception):
    """The policy uses something the model does not reproduce: teach it from Kyverno's source first."""


class CallFailed(Exception):
    """The service call failed: no connection, a TLS error, a non-2xx answer."""


#: The service: (url, body, headers) -> the JSON answer of a 2xx response; raises CallFailed otherwise.
Service = Callable[[str, bytes, dict[str, str]], Any]


@dataclass(frozen=True)
class RuleResponse:
    name: str
    #: pass, fail, skip or error (engine/api ``RuleStatus``).
    status: str
    message: str = ""


@dataclass(frozen=True)
class Decision:
    """What Kyverno answers the API server for one policy, and what it did to get there."""

    allowed: bool
    rules: tuple[RuleResponse, ...]
    #: Service calls made (the old object's re-evaluation makes none).
    calls: int
    #: The handler that ran the policy: enforce (may block) or audit (reports only); None when not applied.
    handler: str | None


def _known(what: str, found: Any, known: frozenset[str]) -> None:
    unknown = set(found) - known
    if unknown:
        raise NotModelled(f"{what}: {sorted(unknown)} is not modelled")


def _wildcard(pattern: str, value: str) -> bool:
    """Kyverno's ``wildcard.Match`` (``*`` any run, ``?`` one character)."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL) is not None


def _gvk_matches(selectors: list[str], group: str, version: str, kind: str, subresource: str) -> bool:
    from tests.support.subresources import kyverno_kind_selector

    for selector in selectors:
        s_group, s_version, s_kind, s_sub = kyverno_kind_selector(selector)
        same_kind = _wildcard(s_group, group) and _wildcard(s_version, version) and _wildcard(s_kind, kind)
        if same_kind and (_wildcard(s_sub, subresource) if s_sub else subresource == ""):
            return True
    return False


def _matches(rule: dict[str, Any], request: dict[str, Any], *, old_object: bool = False) -> bool:
    """engine/utils/match.go ``MatchesResourceDescription`` for the ``match.any[].resources`` the policies use.

    For the new object the kind is the request's parent kind and subresource (``CheckKind``); for the
    old object's re-evaluation it is the old object's own kind, with no subresource, and the operation
    CREATE (handlers/validation/utils.go ``matchResource``).
    """
    from tests.support.subresources import kyverno_kind_matches

    match = rule["match"]
    _known("match", match, frozenset({"any"}))
    if "exclude" in rule or "preconditions" in rule:
        raise NotModelled("exclude and preconditions are not modelled")
    for block in match["any"]:
        _known("match.any[]", block, frozenset({"resources"}))
        resources = block["resources"]
        _known("match.any[].resources", resources, _RESOURCE_KEYS)
        obj = request["object"] or {}
        operation = "CREATE" if old_object else request["operation"]
        if "operations" in resources and operation not in resources["operations"]:
            continue
        if old_object:
            group, _, version = obj.get("apiVersion", "").rpartition("/")
            if not _gvk_matches(resources.get("kinds", []), group, version, obj.get("kind", ""), ""):
                continue
        elif not kyverno_kind_matches(resources.get("kinds", []), request):
            continue
        namespace = obj.get("metadata", {}).get("namespace", "")
        if "namespaces" in resources and not any(_wildcard(p, namespace) for p in resources["namespaces"]):
            continue
        return True
    return False


def _load_context(rule: dict[str, Any], request: dict[str, Any], service: Service) -> tuple[dict[str, Any], int]:
    """The rule's context entries, loaded once (engine.go ``invokeRuleHandler``), and the calls made."""
    context: dict[str, Any] = {"request": request}
    calls = 0
    for entry in rule.get("context", []):
        _known("context[]", entry, frozenset({"name", "apiCall"}))
        call = entry["apiCall"]
        _known("apiCall", call, _APICALL_KEYS)
        if call["method"] != "POST" or set(call["service"]) - {"url", "caBundle", "headers"}:
            raise NotModelled(f"apiCall {call['method']} {sorted(call['service'])}")
        body = json.dumps({d["key"]: substitute(d["value"], context) for d in call.get("data", [])}).encode()
        headers = {h["key"]: h["value"] for h in call["service"].get("headers", [])}
        calls += 1
        try:
            answer = service(call["service"]["url"], body, headers)
        except CallFailed:
            if "default" not in call:
                raise
            context[entry["name"]] = call["default"]  # stored as it is: no jmesPath
            continue
        context[entry["name"]] = jmespath.search(call["jmesPath"], answer) if "jmesPath" in call else answer
    return context, calls


def _condition(condition: dict[str, Any], context: dict[str, Any]) -> bool:
    _known("condition", condition, frozenset({"key", "operator", "value"}))
    if condition["operator"] not in ("Equals", "NotEquals"):
        raise NotModelled(f"deny operator {condition['operator']!r}")
    key, value = substitute(condition["key"], context), substitute(condition["value"], context)
    if not isinstance(key, bool) or not isinstance(value, bool):
        raise NotModelled(f"comparing {key!r} with {value!r}: only booleans are modelled")
    return (key == value) is (condition["operator"] == "Equals")


def _validate(rule: dict[str, Any], context: dict[str, Any]) -> RuleResponse:
    """validate_resource.go ``validateDeny``: fail when the deny conditions hold."""
    validate = rule["validate"]
    _known("validate", validate, _VALIDATE_KEYS)
    conditions = validate["deny"]["conditions"]
    _known("deny.conditions", conditions, frozenset({"any", "all"}))
    any_hold = any(_condition(c, context) for c in conditions["any"]) if "any" in conditions else True
    deny = any_hold and all(_condition(c, context) for c in conditions.get("all", []))
    if deny:
        return RuleResponse(rule["name"], "fail", str(substitute(validate.get("message", ""), context)))
    return RuleResponse(rule["name"], "pass")


def failure_action(doc: dict[str, Any], rule: dict[str, Any]) -> str:
    """The rule's action: ``validate.failureAction``, else the policy's (CRD default Audit)."""
    action = rule["validate"].get("failureAction") or doc["spec"].get("validationFailureAction", "Audit")
    return str(action)


def _rule(doc: dict[str, Any], rule: dict[str, Any], request: dict[str, Any], service: Service) -> tuple[Any, int]:
    _known("rule", rule, _RULE_KEYS)
    if not _matches(rule, request):
        return None, 0
    try:
        context, calls = _load_context(rule, request, service)
    except CallFailed as exc:
        return RuleResponse(rule["name"], "error", f"failed to load context: {exc}"), 1
    response = _validate(rule, context)
    allow_existing = rule["validate"].get("allowExistingViolations", True)
    if failure_action(doc, rule) == "Enforce" and request["operation"] == "UPDATE" and allow_existing:
        # validateOldObject: the old object as request.object, operation CREATE, the SAME context.
        old_request = {**request, "object": request["oldObject"], "oldObject": None, "operation": "CREATE"}
        if _matches(rule, old_request, old_object=True):
            prior = _validate(rule, {**context, "request": old_request})
            if prior.status == "fail" and response.status == "fail":
                return RuleResponse(rule["name"], "skip", "pre-existing violations are allowed"), calls
    return response, calls


def admit(doc: dict[str, Any], request: dict[str, Any], service: Service, version: str) -> Decision:
    """Kyverno ``version``'s answer to an AdmissionRequest for the ClusterPolicy ``doc``."""
    if version not in VERSIONS:
        raise NotModelled(f"Kyverno {version}")
    if doc["kind"] != "ClusterPolicy":
        raise NotModelled(doc["kind"])
    spec = doc["spec"]
    _known("spec", spec, _SPEC_KEYS)
    if not spec.get("admission", True):
        return Decision(True, (), 0, None)
    enforce = spec.get("validationFailureAction") == "Enforce" or any(
        r["validate"].get("failureAction") == "Enforce" for r in spec["rules"]
    )
    responses: list[RuleResponse] = []
    calls = 0
    for rule in spec["rules"]:
        response, made = _rule(doc, rule, request, service)
        calls += made
        if response is not None:
            responses.append(response)
    if not enforce:  # the audit handler: reports, never blocks
        return Decision(True, tuple(responses), calls, "audit")
    by_name = {r["name"]: r for r in spec["rules"]}
    failed = [r for r in responses if r.status == "fail"]
    if version in ("1.17", "1.18"):  # GetValidationFailureAction: the first validate rule's action
        blocked = bool(failed) and failure_action(doc, spec["rules"][0]) == "Enforce"
    else:  # HasEnforcedFailure: each failed rule's own action
        blocked = any(failure_action(doc, by_name[r.name]) == "Enforce" for r in failed)
    if any(r.status == "error" for r in responses) and spec.get("failurePolicy", "Fail") == "Fail":
        blocked = True
    return Decision(not blocked, tuple(responses), calls, "enforce")


def scan(doc: dict[str, Any], obj: dict[str, Any], service: Service, version: str) -> tuple[RuleResponse, ...]:
    """A background scan of the stored ``obj``: the report's results (it blocks nothing)."""
    if version not in VERSIONS:
        raise NotModelled(f"Kyverno {version}")
    spec = doc["spec"]
    _known("spec", spec, _SPEC_KEYS)
    if not spec.get("background", True):
        return ()
    request = background_scan_request(obj)
    out = []
    for rule in spec["rules"]:
        _known("rule", rule, _RULE_KEYS)
        try:
            context, _ = _load_context(rule, request, service)
        except CallFailed as exc:
            out.append(RuleResponse(rule["name"], "error", str(exc)))
            continue
        out.append(_validate(rule, context))
    return tuple(out)


def resource_request(
    obj: dict[str, Any],
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    username: str = "alice@example.com",
) -> dict[str, Any]:
    """The AdmissionRequest the API server sends for a write of ``obj`` (no subresource)."""
    from tests.support.subresources import KINDS

    kind = KINDS[obj["kind"]]
    request = admission_request(obj, operation, username)
    request.update(
        kind=kind.gvk(),
        resource=kind.gvr(),
        requestKind=kind.gvk(),
        requestResource=kind.gvr(),
        oldObject=old,
        options={"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
    )
    return request
