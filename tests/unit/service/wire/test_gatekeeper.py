"""Gatekeeper's external-data wire format: ProviderRequest keys in, ProviderResponse items out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from provider.compare.diff import DiffItem
from provider.errors import PolicyError, RequestError
from provider.limits import Limits
from provider.result import Result
from provider.review import Review
from provider.service.checks import Answer, Verdict
from provider.service.wire import gatekeeper


def request(keys: Any, **fields: Any) -> bytes:
    body = {
        "apiVersion": "externaldata.gatekeeper.sh/v1beta1",
        "kind": "ProviderRequest",
        "request": {"keys": keys},
        **fields,
    }
    return json.dumps(body).encode()


def test_keys_are_read_in_order() -> None:
    assert gatekeeper.read_request(request(["b", "a", "b"])) == ["b", "a", "b"]


@pytest.mark.parametrize(
    "body",
    [
        b'{"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest", "request": {}}',
        b'{"request": {"keys": null}}',
    ],
    ids=["omitted-as-go-omitempty-does", "null"],
)
def test_absent_keys_are_an_empty_request(body: bytes) -> None:
    assert gatekeeper.read_request(body) == []


def test_other_api_versions_of_the_group_are_read() -> None:
    assert gatekeeper.read_request(request(["k"], apiVersion="externaldata.gatekeeper.sh/v1alpha1")) == ["k"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "not valid JSON"),
        (b'"keys"', "is a JSON str, not an object"),
        (request(["k"], apiVersion="v1"), "apiVersion 'v1' is not in externaldata.gatekeeper.sh"),
        (request(["k"], apiVersion=7), "apiVersion '7'"),
        (request(["k"], kind="ProviderResponse"), "kind 'ProviderResponse' is not ProviderRequest"),
        (b'{"kind": "ProviderRequest"}', "has no request object"),
        (request("k"), "request.keys is a str"),
        (request(["k", {"review": {}}]), r"request.keys\[1\] is a dict, not a string"),
        (b'{"request": {"keys": ["a"], "keys": ["b"]}}', "duplicate key"),
        (b'{"request": {"keys": [NaN]}}', "not valid JSON"),
    ],
    ids=[
        "empty",
        "not-an-object",
        "foreign-group",
        "api-version-not-string",
        "wrong-kind",
        "no-request",
        "keys-not-a-list",
        "key-not-a-string",
        "duplicate-field",
        "nan",
    ],
)
def test_an_unusable_request_is_a_request_error(body: bytes, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        gatekeeper.read_request(body)


def test_more_keys_than_the_limit_is_a_request_error() -> None:
    limits = Limits(max_keys_per_request=3)
    assert len(gatekeeper.read_request(request(["a"] * 3), limits)) == 3
    with pytest.raises(RequestError, match="4 keys in one request; at most 3 are allowed"):
        gatekeeper.read_request(request(["a"] * 4), limits)


# --- one key ----------------------------------------------------------------------

REVIEW = {"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}, "operation": "UPDATE",
          "userInfo": {"username": "alice", "groups": ["g"]}, "namespace": "ns", "dryRun": False}  # fmt: skip


def test_a_key_is_a_question() -> None:
    question = gatekeeper.read_key(json.dumps({"review": REVIEW, "policy": {"keys": ["pem"]}}))
    assert question.check == "manifest"
    assert question.policy == {"keys": ["pem"]}
    assert (question.review.operation, question.review.username, question.review.groups) == ("UPDATE", "alice", ("g",))
    assert question.review.object == REVIEW["object"] and question.review.namespace == "ns"


def test_a_key_may_name_its_check_and_leave_the_policy_to_it() -> None:
    question = gatekeeper.read_key(json.dumps({"review": REVIEW, "check": "cluster-info"}))
    assert (question.check, question.policy) == ("cluster-info", None)


def test_an_audit_review_reads_as_audit() -> None:
    question = gatekeeper.read_key(json.dumps({"review": {"object": REVIEW["object"]}, "policy": {}}))
    assert question.review.is_audit


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("not json", "the key is not valid JSON"),
        ('["review"]', "the key is a JSON list"),
        ('{"policy": {}}', "the key has no review"),
        ('{"review": {}, "policy": {}, "polcy": {}}', "unknown field 'polcy'"),
        ('{"review": {}, "check": 1}', "check is a int"),
        ('{"review": []}', "review: expected an object"),
        ('{"review": {"operation": "PATCH"}}', "review.operation: 'PATCH' is not"),
        ('{"review": {"userInfo": {"groups": "admins"}}}', "review.userInfo.groups"),
        ('{"review": {}, "review": {}}', "duplicate key 'review'"),
    ],
    ids=[
        "not-json",
        "not-an-object",
        "no-review",
        "unknown-field",
        "check-not-string",
        "review-not-object",
        "bad-operation",
        "groups-not-a-list",
        "duplicate-field",
    ],
)
def test_an_unusable_key_is_a_request_error(key: str, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        gatekeeper.read_key(key)


def test_a_deeply_nested_key_is_refused_within_the_limits() -> None:
    key = '{"review": {"object": ' + "[" * 5000 + "]" * 5000 + "}}"
    with pytest.raises(RequestError, match="nested deeper than"):
        gatekeeper.read_key(key)


# --- the answer -------------------------------------------------------------------


def test_items_and_response_have_gatekeepers_field_names() -> None:
    result = Result(False, False, "unsigned", "ConfigMap ns/cm carries no signature")
    value = gatekeeper.value_item("k1", result)
    error = gatekeeper.error_item("k2", PolicyError("policy: no keys"))
    answer = gatekeeper.response([value, error])
    assert answer == {
        "apiVersion": "externaldata.gatekeeper.sh/v1beta1",
        "kind": "ProviderResponse",
        "response": {
            "idempotent": True,
            "items": [
                {"key": "k1", "value": {"allowed": False, "verified": False, "reason": "unsigned",
                                        "message": "ConfigMap ns/cm carries no signature", "signers": [], "diff": []}},
                {"key": "k2", "error": "policy-invalid: policy: no keys"},
            ],
            "systemError": "",
        },
    }  # fmt: skip


def test_a_system_error_answer_has_no_items() -> None:
    answer = gatekeeper.response([], "deadline-exceeded: too slow")
    assert answer["response"] == {"idempotent": True, "items": [], "systemError": "deadline-exceeded: too slow"}


def _review() -> Review:
    return Review.from_admission({
        "uid": "u1",
        "operation": "CREATE",
        "userInfo": {"username": "alice"},
        "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}},
    })  # fmt: skip


@pytest.mark.parametrize(
    "keys",
    [
        ["plain"],
        ['{"review": {"uid": "\\"quoted\\""}}', "ünïcödé ✓", "\ud800 lone surrogate", "tab\there\nnewline"],
        [],
    ],
    ids=["one-key", "keys-that-need-escaping", "no-keys"],
)
def test_the_response_built_as_text_is_byte_for_byte_the_encoded_response(keys: list[str]) -> None:
    """encode_response splices each verdict's pre-encoded value: the bytes must equal encoding the whole response."""
    results = [
        Result.proven("verified ✓", ("alice@example.com", {"issuer": "é", "subject": "\u2028"})),
        Result.deny(
            "content-mismatch",
            'ConfigMap ns/cm: "data" changed',
            diff=(DiffItem(("data", "k"), "before ✓", None), DiffItem(("metadata", "labels", "a/b"), 1.5, [1, None])),
        ),
        Result.allow("skipped-user", "a skipped user", profile="common"),
    ]
    items: list[gatekeeper.Item] = []
    answers: list[Answer] = []
    for index, key in enumerate(keys):
        if index % 4 == 3:
            error = PolicyError('policy: "keys" is empty ✓')
            answers.append(Answer(None, error))
            items.append(gatekeeper.error_item(key, error))
        else:
            result = results[index % 3]
            answers.append(Answer(Verdict.of("manifest", result, _review()), None))
            items.append(gatekeeper.value_item(key, result))
    expected = json.dumps(gatekeeper.response(items), separators=(",", ":"))
    assert gatekeeper.encode_response(keys, answers) == expected
    assert json.loads(expected)["response"]["items"] == json.loads(json.dumps(items))
