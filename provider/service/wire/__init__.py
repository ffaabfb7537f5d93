"""The service's wire formats: what Gatekeeper and Kyverno send, and what they get back.

Each module types its JSON with ``TypedDict`` + ``Literal`` and does the two
translations of every entry point -- body to :class:`~provider.review.Review`
and policy, :class:`~provider.result.Result` to answer -- and nothing else.
"""

from __future__ import annotations

from typing import Any, TypedDict


class DiffValue(TypedDict):
    key: str
    values: dict[str, Any]


class ResultValue(TypedDict):
    """:meth:`provider.result.Result.to_dict`: the verdict both routes return."""

    allowed: bool
    verified: bool
    reason: str
    message: str
    signers: list[Any]
    diff: list[DiffValue]


#: Fields of a question besides the review, shared by both routes.
CHECK_FIELD = "check"
POLICY_FIELD = "policy"
