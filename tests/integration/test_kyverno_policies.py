"""The Kyverno policies against the real service.

Kyverno cannot run here; what it would do is reproduced in
``tests/policies/test_kyverno.py`` and driven here over TLS:

* ClusterPolicy: the exact body Kyverno builds from the rule's ``data``
  (``{{ request }}`` substituted), sent with no Content-Type as older Kyverno
  releases do (and with the one the policy sets), the answer passed through
  the policy's own ``jmesPath`` and deny conditions; a failed call takes the
  ``default``;
* ValidatingPolicy: its CEL variables evaluated with ``http.Post`` bound to a
  real HTTPS POST (trusting the test CA, as Kyverno trusts the service CA
  added to its trust store), then its validation.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import urllib.parse
from typing import Any

import pytest

from tests.support.data import load_yaml
from tests.support.kyverno import (
    APICALL,
    CEL,
    SERVICE_PATH,
    admission_request,
    api_call,
    cel_validate,
    cel_variables,
    denied,
    deny_message,
    expected_results,
    policy_doc,
    request_body,
    stored_verdict,
)
from tests.support.server import Server
from tests.support.subresources import SUBRESOURCES
from tests.support.subresources import admission_request as subresource_request

pytestmark = pytest.mark.integration


def resources(directory: Any) -> list[dict[str, Any]]:
    return load_yaml(directory / ".kyverno-test" / "resource.yaml")


def mocked_values() -> dict[str, dict[str, Any]]:
    (values,) = load_yaml(APICALL / ".kyverno-test" / "values.yaml")
    (entry,) = values["policies"]
    return {r["name"]: {k.removeprefix("verdict."): v for k, v in r["values"].items()} for r in entry["resources"]}


def service_call(server: Server, url: str, body: bytes, headers: dict[str, str], *, client_cert: bool = True) -> Any:
    """What Kyverno's service call does with the answer: JSON on 2xx, an error otherwise."""
    parts = urllib.parse.urlsplit(url)
    assert parts.path == SERVICE_PATH
    status, response_headers, data = server.request("POST", parts.path, body, headers, client_cert=client_cert)
    if not 200 <= status < 300:
        raise ConnectionError(f"HTTP {status}")
    assert response_headers["content-type"].startswith("application/json")
    return json.loads(data)


def kyverno_verdict(server: Server, obj: dict[str, Any], headers: dict[str, str], *, client_cert: bool = True) -> Any:
    """The context entry ``verdict`` as Kyverno would store it: the answer through jmesPath, or the default."""
    doc = policy_doc(APICALL)
    call = api_call(doc)
    try:
        answer = service_call(
            server, call["service"]["url"], request_body(doc, admission_request(obj)), headers, client_cert=client_cert
        )
    except (ConnectionError, OSError):
        return call["default"]
    assert "statusCode" not in answer
    assert {"allowed", "message"} <= set(answer)
    return stored_verdict(doc, answer)


# --- the ClusterPolicy ------------------------------------------------------------------------

HEADERS: list[tuple[str, dict[str, str] | None]] = [("no-content-type", {}), ("policy-headers", None)]


@pytest.mark.parametrize(("case", "headers"), HEADERS, ids=[h[0] for h in HEADERS])
def test_cluster_policy_results_against_the_service(
    provider_server: Server, case: str, headers: dict[str, str] | None
) -> None:
    doc = policy_doc(APICALL)
    if headers is None:
        headers = {h["key"]: h["value"] for h in api_call(doc)["service"]["headers"]}
    expected = expected_results(APICALL)
    mocks = mocked_values()
    for obj in resources(APICALL):
        name = obj["metadata"]["name"]
        verdict = kyverno_verdict(provider_server, obj, headers)
        assert ("fail" if denied(doc, verdict) else "pass") == expected[name], name
        # The values the offline kyverno test uses are what the service answers.
        assert verdict == mocks[name], name


def test_denial_message_names_the_difference(provider_server: Server) -> None:
    doc = policy_doc(APICALL)
    tampered = next(o for o in resources(APICALL) if o["metadata"]["name"] == "app-settings")
    message = deny_message(doc, kyverno_verdict(provider_server, tampered, {}))
    assert "data.log-level differs" in message
    assert message.endswith("(reason: content-mismatch)")


def test_body_is_request_and_policy(provider_server: Server) -> None:
    doc = policy_doc(APICALL)
    obj = resources(APICALL)[0]
    body = json.loads(request_body(doc, admission_request(obj)))
    assert set(body) == {"request", "policy"}
    assert body["request"]["object"] == obj
    assert body["policy"] == api_call(doc)["data"][1]["value"]


def test_invalid_policy_data_denies(provider_server: Server) -> None:
    doc = policy_doc(APICALL)
    data = json.loads(request_body(doc, admission_request(resources(APICALL)[0])))
    data["policy"]["keyOperaton"] = "MustAll"
    answer = service_call(provider_server, api_call(doc)["service"]["url"], json.dumps(data).encode(), {})
    verdict = stored_verdict(doc, answer)
    assert denied(doc, verdict)
    assert "keyOperaton" in verdict["message"]


def test_refused_call_takes_the_default_and_denies(provider_server: Server) -> None:
    """A non-2xx answer (here 401: no credentials) is a failed call for Kyverno: the default applies."""
    doc = policy_doc(APICALL)
    signed = resources(APICALL)[0]
    verdict = kyverno_verdict(provider_server, signed, {}, client_cert=False)
    assert verdict == api_call(doc)["default"]
    assert denied(doc, verdict)


def test_unreachable_service_takes_the_default_and_denies() -> None:
    doc = policy_doc(APICALL)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ssl.create_default_context(), timeout=5)
    try:
        conn.request("POST", SERVICE_PATH, body=request_body(doc, admission_request(resources(APICALL)[0])))
        conn.getresponse()
        pytest.fail("a closed port answered")
    except OSError:
        verdict = api_call(doc)["default"]
    finally:
        conn.close()
    assert denied(doc, verdict)


def scale_request() -> dict[str, Any]:
    """``kubectl scale deployment/web --replicas 5`` in namespace demo, as the API server sends it."""
    request = subresource_request("Deployment", next(s for s in SUBRESOURCES if s.name == "scale"))
    request["object"]["spec"] = {"replicas": 5}
    request["oldObject"] = {**request["object"], "spec": {"replicas": 2}}
    return request


def test_a_scale_request_reaches_the_service_whole_and_is_denied(provider_server: Server) -> None:
    """The body carries ``{{ request }}`` whole -- subResource and resource with it -- and the Scale is not admitted."""
    doc = policy_doc(APICALL)
    body = request_body(doc, scale_request())
    assert json.loads(body)["request"] == scale_request()
    answer = service_call(provider_server, api_call(doc)["service"]["url"], body, {})
    assert denied(doc, stored_verdict(doc, answer))
    assert answer["reason"] == "unverifiable-subresource", answer


def test_the_cel_policy_sends_the_subresource_and_denies_a_scale(provider_server: Server) -> None:
    calls: list[dict[str, Any]] = []
    doc = policy_doc(CEL)
    variables = cel_variables(doc, scale_request(), cel_post(provider_server, calls))
    passed, message = cel_validate(doc, variables)
    assert not passed, message
    (call,) = calls
    sent = call["body"]["request"]
    assert (sent["subResource"], sent["resource"], sent["requestSubResource"]) == (
        "scale",
        {"group": "apps", "version": "v1", "resource": "deployments"},
        "scale",
    )
    assert sent["kind"] == {"group": "autoscaling", "version": "v1", "kind": "Scale"}


# --- the ValidatingPolicy ---------------------------------------------------------------------


def cel_post(server: Server, calls: list[dict[str, Any]]) -> Any:
    def post(url: str, body: Any, headers: dict[str, str]) -> Any:
        calls.append({"url": url, "headers": headers, "body": body})
        return service_call(server, url, json.dumps(body).encode(), headers)

    return post


def test_cel_policy_results_against_the_service(provider_server: Server) -> None:
    doc = policy_doc(CEL)
    expected = expected_results(CEL)
    calls: list[dict[str, Any]] = []
    for obj in resources(CEL):
        name = obj["metadata"]["name"]
        variables = cel_variables(doc, admission_request(obj), cel_post(provider_server, calls))
        passed, message = cel_validate(doc, variables)
        assert ("pass" if passed else "fail") == expected[name], (name, message)
        assert "\n" not in message
        if not passed:
            assert "(reason: " in message
    assert len(calls) == len(resources(CEL))
    assert all(c["headers"] == {"Content-Type": "application/json"} for c in calls)


def test_cel_policy_sees_the_same_verdicts_as_the_cluster_policy(provider_server: Server) -> None:
    mocks = mocked_values()
    doc = policy_doc(CEL)
    for obj in resources(CEL):
        answers: list[Any] = []

        def post(url: str, body: Any, headers: dict[str, str], answers: list[Any] = answers) -> Any:
            answers.append(service_call(provider_server, url, json.dumps(body).encode(), headers))
            return answers[-1]

        cel_variables(doc, admission_request(obj), post)
        (answer,) = answers
        mock = mocks[obj["metadata"]["name"]]
        assert {k: answer[k] for k in mock} == mock
