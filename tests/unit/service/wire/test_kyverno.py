"""Kyverno's wire format: an apiCall body in, a verdict object out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from provider.errors import RequestError
from provider.result import Result
from provider.service.wire import kyverno

REQUEST = {"uid": "u-1", "operation": "CREATE", "namespace": "ns", "userInfo": {"username": "alice"},
           "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}}  # fmt: skip


def body(**fields: Any) -> bytes:
    return json.dumps({"request": REQUEST, "policy": {"keys": ["pem"]}, **fields}).encode()


def test_a_body_is_a_question_and_a_cache_key() -> None:
    question, key = kyverno.read_body(body())
    assert question.check == "manifest" and question.policy == {"keys": ["pem"]}
    assert question.review.operation == "CREATE" and question.review.username == "alice"
    assert isinstance(key, bytes) and len(key) == 32


def test_the_cache_key_ignores_the_uid_but_nothing_that_decides() -> None:
    _, base = kyverno.read_body(body())
    _, other_uid = kyverno.read_body(
        json.dumps({"request": {**REQUEST, "uid": "u-2"}, "policy": {"keys": ["pem"]}}).encode()
    )
    assert other_uid == base
    variants = [
        {"request": {**REQUEST, "operation": "UPDATE"}, "policy": {"keys": ["pem"]}},
        {"request": {**REQUEST, "userInfo": {"username": "bob"}}, "policy": {"keys": ["pem"]}},
        {"request": REQUEST, "policy": {"keys": ["other"]}},
        {"request": REQUEST, "policy": {"keys": ["pem"]}, "check": "cluster-info"},
        {"request": {**REQUEST, "dryRun": True}, "policy": {"keys": ["pem"]}},
    ]
    keys = {kyverno.read_body(json.dumps(v).encode())[1] for v in variants}
    assert len(keys) == len(variants) and base not in keys


def test_field_order_does_not_change_the_cache_key() -> None:
    reordered = json.dumps({"policy": {"keys": ["pem"]}, "request": dict(reversed(list(REQUEST.items())))}).encode()
    assert kyverno.read_body(reordered)[1] == kyverno.read_body(body())[1]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not valid JSON"),
        (b"[]", "is a JSON list"),
        (b'{"policy": {}}', 'has no "request"'),
        (body(extra=1), "unknown field 'extra'"),
        (body(check=["manifest"]), "check is a list"),
        (b'{"request": "{{ request }}", "policy": {}}', "request: expected an object"),
        (b'{"request": {"operation": "create"}, "policy": {}}', "request.operation"),
    ],
    ids=[
        "empty",
        "not-an-object",
        "no-request",
        "unknown-field",
        "check-not-string",
        "unsubstituted-variable",
        "lower-case-operation",
    ],
)
def test_an_unusable_body_is_a_request_error(data: bytes, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        kyverno.read_body(data)


def test_answers_always_carry_allowed_and_message_and_no_status_code() -> None:
    result = Result(True, True, "verified", "ConfigMap ns/cm matches", signers=("sha256:ab",))
    answer = kyverno.answer(result)
    denial = kyverno.denial("deadline-exceeded", "too slow")
    for shaped in (answer, denial):
        assert set(shaped) == {"allowed", "verified", "reason", "message", "signers", "diff"}
    assert answer["allowed"] is True and answer["signers"] == ["sha256:ab"]
    assert denial == {
        "allowed": False,
        "verified": False,
        "reason": "deadline-exceeded",
        "message": "too slow",
        "signers": [],
        "diff": [],
    }
