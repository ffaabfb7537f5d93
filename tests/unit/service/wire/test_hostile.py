"""Hostile input to the wire formats and the app: only RequestError, and always a well-formed answer."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from provider.errors import RequestError
from provider.service.app import create_app
from provider.service.wire import gatekeeper, kyverno

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["review", "policy", "check", "request", "object", "keys", "operation", "userInfo", "x"])
            | st.text(max_size=8),
            inner,
            max_size=4,
        )
    ),
    max_leaves=25,
)
BODIES = st.binary(max_size=300) | JSON.map(lambda v: json.dumps(v).encode())

APP = create_app({"TESTING": True, "LOG_LEVEL": "error"})
CLIENT = APP.test_client()


@settings(max_examples=300, deadline=None)
@given(BODIES)
def test_gatekeeper_request_reading_raises_only_request_error(body: bytes) -> None:
    try:
        keys = gatekeeper.read_request(body)
    except RequestError:
        return
    assert all(isinstance(k, str) for k in keys)


@settings(max_examples=300, deadline=None)
@given(JSON.map(json.dumps) | st.text(max_size=200))
def test_gatekeeper_key_reading_raises_only_request_error(key: str) -> None:
    with contextlib.suppress(RequestError):
        gatekeeper.read_key(key)


@settings(max_examples=300, deadline=None)
@given(BODIES)
def test_kyverno_body_reading_raises_only_request_error(body: bytes) -> None:
    with contextlib.suppress(RequestError):
        kyverno.read_body(body)


def _provider_request(keys: list[Any]) -> bytes:
    return json.dumps(
        {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest", "request": {"keys": keys}}
    ).encode()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BODIES | st.lists(JSON.map(json.dumps) | st.text(max_size=50), max_size=5).map(_provider_request))
def test_the_gatekeeper_route_always_answers_200_with_one_item_per_key_or_a_system_error(body: bytes) -> None:
    response = CLIENT.post("/v1/gatekeeper/verify", data=body)
    assert response.status_code == 200
    answer = response.get_json()["response"]
    assert answer["idempotent"] is True
    if answer["systemError"]:
        assert answer["items"] == []
    else:
        keys = json.loads(body)["request"].get("keys") or []
        assert [item["key"] for item in answer["items"]] == keys
        assert all(("value" in item) != ("error" in item) for item in answer["items"])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BODIES | st.fixed_dictionaries({"request": JSON, "policy": JSON}).map(lambda v: json.dumps(v).encode()))
def test_the_kyverno_route_always_answers_200_with_allowed_and_message(body: bytes) -> None:
    response = CLIENT.post("/v1/kyverno/verify", data=body)
    assert response.status_code == 200
    answer = response.get_json()
    assert set(answer) == {"allowed", "verified", "reason", "message", "signers", "diff"}
    assert answer["allowed"] is False and answer["message"]


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _admission_review(request: Any) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(b'{"request": {"uid": "0", "": Infinity}}')  # not JSON: no uid can be read from it
@given(BODIES | JSON.map(_admission_review) | st.fixed_dictionaries({"uid": st.text(max_size=10), "userInfo": JSON,
                                                                      "operation": JSON, "object": JSON}).map(_admission_review))  # fmt: skip
def test_the_admission_route_always_answers_200_with_an_admission_review_that_denies(body: bytes) -> None:
    """This app holds no policies: whatever the body, a well-formed denial echoing the uid it could read."""
    from tests.support.apiserver_webhook import read_answer

    response = CLIENT.post("/v1/admission/validate", data=body)
    assert response.status_code == 200
    answer = response.get_json()
    try:  # read as the service reads JSON: NaN and Infinity are no JSON, so a body holding one has no uid
        request = json.loads(body, parse_constant=_not_json).get("request")
    except (ValueError, AttributeError):
        request = None
    uid = request.get("uid") if isinstance(request, dict) and isinstance(request.get("uid"), str) else ""
    outcome = read_answer(answer, uid)
    assert not outcome.allowed and outcome.status is not None and outcome.status["message"]
