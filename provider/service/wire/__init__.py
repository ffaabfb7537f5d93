"""The service's wire formats: what Gatekeeper and Kyverno send, and what they get back.

Each module types its answers with ``TypedDict`` + ``Literal`` and does the
translations of every entry point -- body to :class:`~provider.service.checks.Question`
(a :class:`~provider.review.Review`, a policy and a check name), the question's
verdict-cache key, :class:`~provider.result.Result` to answer -- and nothing else.

Both formats ask the same question in one JSON object, ``{<review>, "policy", "check"}``,
read here once by :func:`read_question`: only those three fields (a typo is an error
naming the field, :func:`provider.readers.check_fields`), the review present, the check
a string.
"""

from __future__ import annotations

from typing import Any, TypedDict

from ...errors import RequestError
from ...readers import check_fields
from ...review import Review
from ..checks import DEFAULT_CHECK, Question


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


def read_question(data: Any, what: str, review_field: str, no_review: str) -> Question:
    """The question ``data`` asks; :class:`RequestError` when it is unusable.

    ``what`` names ``data`` in messages ("the key"), ``review_field`` is the
    field holding the AdmissionReview's request, ``no_review`` the message when it
    is absent or ``null``. The check is read from ``data`` as given: a ``null``
    check is an error, never the default check.
    """
    if not isinstance(data, dict):
        raise RequestError(f"{what} is a JSON {type(data).__name__}; expected an object with {review_field} and policy")
    check_fields(data, what, (review_field, POLICY_FIELD, CHECK_FIELD), error=RequestError)
    review = data.get(review_field)
    if review is None:
        raise RequestError(no_review)
    check = data.get(CHECK_FIELD, DEFAULT_CHECK)
    if not isinstance(check, str):
        raise RequestError(f"{what}: check is a {type(check).__name__}, not a string")
    return Question(check, Review.from_admission(review, where=review_field), data.get(POLICY_FIELD))
