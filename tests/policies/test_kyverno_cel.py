"""The CEL ValidatingPolicy compiles and calls on every supported Kyverno release.

Compiles: every expression of the shipped and of generated policies is
type-checked with a real CEL type checker against the declarations of Kyverno
1.17, 1.18 and 1.19 (``tests/support/kyverno_cel.py``, each declaration cited
there). Calls: the variables are evaluated as Kyverno evaluates them, with its
http library's run-time rules (``tests/support/kyverno.py``, ``cel_variables``):
``http.Post`` on ``http`` works, anything called on ``http.Client(ca)`` does not.

The first two tests are the real Kyverno 1.18.1's two refusals of the policy
this project shipped before, reproduced: the compile error, then -- with the
literals wrapped in ``dyn()`` -- the run-time ``no such overload``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from provider.cli._generate import Request, build, parse_kinds
from provider.policy.schema import Policy
from provider.review import Review
from provider.verifier import decide
from tests.support.keys import make_key, public_key_pem
from tests.support.kyverno import (
    CEL,
    VERSIONS,
    CallFailed,
    HttpStatus,
    admission_request,
    cel_admit,
    policy_doc,
    resource_request,
)
from tests.support.kyverno_cel import TypeCheckError, environment, type_check
from tests.support.live import PUBLIC_KEY, signed_configmap

ALL = list(VERSIONS)

#: The ``review`` variable Kyverno 1.18.1 refused ("spec.variables[3]...: expected type 'string' but found
#: 'list(string)' at "groups""): a map literal mixing a string and a list.
REFUSED_REVIEW = """{
  "object": dyn(object),
  "operation": dyn(request.operation),
  "userInfo": dyn({
    "username": request.userInfo.username,
    "groups": has(request.userInfo.groups) ? request.userInfo.groups : []
  })
}"""
#: The call Kyverno 1.18.1 accepted once wrapped in dyn(), then failed on every request with
#: ``no such overload: Post(http.contextImpl, string, map, map)``.
CLIENT_CALL = """http.Client('-----BEGIN CERTIFICATE-----\\nMII\\n-----END CERTIFICATE-----\\n').Post(
  variables.serviceURL,
  {"request": dyn(variables.review), "policy": dyn(variables.policy)},
  {"Content-Type": "application/json"}
)"""


def with_variable(doc: dict[str, Any], name: str, expression: str) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    (variable,) = [v for v in out["spec"]["variables"] if v["name"] == name]
    variable["expression"] = expression
    return out


def verifier(url: str, body: Any, headers: dict[str, str]) -> Any:
    return decide(Review.from_admission(body["request"]), Policy.from_dict(body["policy"])).to_dict()


def enforcing(doc: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["spec"]["validationActions"] = ["Deny"]
    return out


# --- what Kyverno 1.18.1 did with the policy shipped before ------------------------------------------


@pytest.mark.parametrize("version", ALL)
def test_the_refused_review_is_refused_with_kyvernos_message(version: str) -> None:
    doc = with_variable(policy_doc(CEL), "review", REFUSED_REVIEW)
    with pytest.raises(TypeCheckError, match=r"spec\.variables\[2\]\.expression: expected type 'string' but found "
                       r"'list\(string\)'"):  # fmt: skip
        type_check(doc, version)


@pytest.mark.parametrize("version", ALL)
def test_a_call_on_http_client_compiles_but_fails_on_every_request(version: str) -> None:
    doc = enforcing(with_variable(policy_doc(CEL), "verdict", CLIENT_CALL))
    type_check(doc, version)  # Kyverno accepts it ...
    obj = signed_configmap("app-config", namespace="demo")
    admitted, why = cel_admit(doc, resource_request(obj), verifier, version)
    assert not admitted  # ... and refuses everything: failurePolicy Fail
    assert "no such overload: Post(" in why and ", string, map, map)" in why


# --- the shipped and generated policies compile on every release -------------------------------------


@pytest.mark.parametrize("version", ALL)
def test_the_shipped_policy_type_checks(version: str) -> None:
    checked = {c.where: c.output for c in type_check(policy_doc(CEL), version)}
    assert checked["spec.validations[0].expression"] == "BOOL"
    assert checked["spec.validations[0].messageExpression"] == "STRING"
    assert len(checked) == len(policy_doc(CEL)["spec"]["variables"]) + 2


POLICIES = {
    "keys": {"keys": [PUBLIC_KEY]},
    "threshold-and-ignore": {
        "keys": [PUBLIC_KEY, public_key_pem(make_key("ecdsa-p256", 151))],
        "threshold": 1,
        "ignoreFields": [{"objects": [{"kind": "ConfigMap"}], "fields": ["data.note"]}],
        "skipUsers": [{"users": ["system:serviceaccount:kube-system:*"]}],
    },
    "signers": {"signers": [{"subject": "jane@example.com", "issuer": "https://accounts.google.com"}]},
}


@pytest.mark.parametrize("version", ALL)
@pytest.mark.parametrize("policy", list(POLICIES))
def test_generated_policies_type_check(version: str, policy: str) -> None:
    Policy.from_dict(POLICIES[policy])
    for request in (
        Request(engine="kyverno-cel", policy=POLICIES[policy]),
        Request(
            engine="kyverno-cel",
            policy=POLICIES[policy],
            enforce=True,
            kinds=parse_kinds(["Deployment,ConfigMap,Pod,core/Namespace"]),
            namespaces=(),
        ),
    ):
        (doc,) = build(request)
        assert len(type_check(doc, version)) >= 6


# --- the checker, declared as Kyverno declares --------------------------------------------------------

REFUSED = [
    ("unknown-request-field", "request.userInfo.name", "undefined field 'name'"),
    ("unknown-variable", "variables.nope", "undeclared reference"),
    ("string-plus-int", "request.name + 1", "no matching overload"),
    ("http-headers-not-strings", "http.Post('https://x', {}, {'a': 1})", "no matching overload"),
    ("mixed-list", "['a', request.userInfo.groups]", "expected type 'string' but found 'list(string)'"),
    ("mixed-nested-map", "dyn({'a': {'b': 1, 'c': 'd'}})", "expected type 'int' but found 'string'"),
]


@pytest.mark.parametrize("version", ALL)
@pytest.mark.parametrize(("expression", "error"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_the_checker_refuses_what_kyverno_refuses(version: str, expression: str, error: str) -> None:
    doc = with_variable(policy_doc(CEL), "serviceURL", expression)
    with pytest.raises(TypeCheckError, match=error.replace("(", r"\(").replace(")", r"\)")):
        type_check(doc, version)


@pytest.mark.parametrize("version", ALL)
def test_a_variable_sees_only_the_ones_before_it(version: str) -> None:
    """pkg/cel/compiler/compiler.go ``CompileVariable`` registers a variable after compiling it."""
    doc = copy.deepcopy(policy_doc(CEL))
    doc["spec"]["variables"].reverse()
    with pytest.raises(TypeCheckError, match=r"spec\.variables\[0\]\.expression: .*variables\.(serviceURL|review)"):
        type_check(doc, version)


@pytest.mark.parametrize("version", ALL)
def test_validations_must_be_bool_and_messages_strings(version: str) -> None:
    doc = copy.deepcopy(policy_doc(CEL))
    doc["spec"]["validations"][0]["expression"] = "variables.verdict"
    with pytest.raises(TypeCheckError, match=r"expected to be of type bool"):
        type_check(doc, version)
    doc = copy.deepcopy(policy_doc(CEL))
    doc["spec"]["validations"][0]["messageExpression"] = "1"
    with pytest.raises(TypeCheckError, match="expected to be of type string"):
        type_check(doc, version)


def test_what_differs_between_releases() -> None:
    """1.18 added ``request.object`` (pkg/cel/compiler/request.go) and the camel-case http names (sdk lib.go)."""
    for expression in ("request.object", "http.post('https://x', {})"):
        with pytest.raises(RuntimeError):
            environment("1.17", {}).compile(expression)
        for version in ("1.18", "1.19"):
            environment(version, {}).compile(expression)
    with pytest.raises(TypeCheckError):
        environment("1.20", {})


# --- the shipped policy calls, on every release --------------------------------------------------------


@pytest.mark.parametrize("version", ALL)
def test_the_shipped_policy_calls_and_decides(version: str) -> None:
    doc = enforcing(with_variable(policy_doc(CEL), "policy", json.dumps({"keys": [PUBLIC_KEY]})))
    good = signed_configmap("app-config", namespace="demo", mode="production")
    bad = copy.deepcopy(good)
    bad["data"]["mode"] = "debug"
    assert cel_admit(doc, resource_request(good), verifier, version) == (True, "")
    admitted, message = cel_admit(doc, resource_request(bad, "UPDATE", old=good), verifier, version)
    assert not admitted and message.endswith("(reason: content-mismatch)")


@pytest.mark.parametrize("version", ALL)
def test_the_shipped_policy_fails_closed(version: str) -> None:
    doc = enforcing(policy_doc(CEL))
    obj = signed_configmap("app-config", namespace="demo")

    def down(url: str, body: Any, headers: dict[str, str]) -> Any:
        raise CallFailed("x509: certificate signed by unknown authority")

    def refused(url: str, body: Any, headers: dict[str, str]) -> Any:
        raise HttpStatus(403, {"error": "forbidden"})

    assert cel_admit(doc, resource_request(obj), down, version)[0] is False
    admitted, why = cel_admit(doc, resource_request(obj), refused, version)
    assert admitted is False  # 1.17: an error; 1.18+: {"error": ..., "statusCode": 403} has no allowed: true
    assert ("HTTP 403" in why) if version == "1.17" else why.endswith("(reason: no-reason)")


@pytest.mark.parametrize("version", ALL)
def test_a_cluster_scoped_request_without_namespace_is_sent(version: str) -> None:
    """The API server omits namespace (and name, for generateName) when empty: read behind has()."""
    sent: list[Any] = []
    request = admission_request({"apiVersion": "v1", "kind": "Namespace", "metadata": {"generateName": "t-"}})
    for field in ("namespace", "name"):
        request.pop(field)

    def post(url: str, body: Any, headers: dict[str, str]) -> Any:
        sent.append(body)
        return {"allowed": True}

    assert cel_admit(enforcing(policy_doc(CEL)), request, post, version) == (True, "")
    assert (sent[0]["request"]["namespace"], sent[0]["request"]["name"]) == ("", "")
