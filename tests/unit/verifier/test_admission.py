"""What a library caller hands decide(): a hostile object is a request error, not a crash; a message with two
documents for the object is ambiguous.

From an attack pass without any signing key (docs/security.md): each test is named by the attack; a table
row's id names the input.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from provider import Review, decide
from tests.support.manifests import configmap, sign
from tests.support.one_key import KEY, POLICY, verdict

# --- the earlier classes, probed again with other inputs (each held) ------------------------------------------


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("where", "value"),
    [("object", _nested(5000)), ("old-object", _nested(5000)), ("object", float("nan"))],
    ids=["object-5000-deep", "old-object-5000-deep", "object-holds-nan"],
)
def test_a_library_caller_s_hostile_object_is_a_request_error_not_a_crash(where: str, value: Any) -> None:
    # The service's JSON parser bounds depth; a Python caller of decide() handing over its own dicts got a
    # RecursionError from the comparison -- and an integrator's handler that turns exceptions into "allow"
    # (failurePolicy: Ignore) would have admitted it. decide() promises RequestError or TransientError only.
    from provider.errors import RequestError

    (signed,) = sign(configmap("app", "shop"), KEY)
    changed = copy.deepcopy(signed)
    changed["data"]["deep"] = value
    review = (
        Review.for_object(changed)
        if where == "object"
        else Review(object=signed, old_object=changed, operation="UPDATE", username="jane")
    )
    with pytest.raises(RequestError):
        decide(review, POLICY)


@pytest.mark.parametrize(
    ("documents", "reason"),
    [
        ([configmap("app", "shop", a="1"), configmap("app", "shop", a="2")], "malformed-message"),
        ([configmap("app", None, a="1"), configmap("app", "shop", a="2")], "malformed-message"),
    ],
    ids=["same-object-twice", "namespaced-and-namespace-less-copies"],
)
def test_a_message_with_two_documents_for_the_object_is_ambiguous(documents: list[dict[str, Any]], reason: str) -> None:
    signed = sign(documents, KEY)
    for obj in signed:
        obj["metadata"]["namespace"] = "shop"
        result = verdict(obj)
        assert (result.allowed, result.reason) == (False, reason), result.message
