"""Kyverno: an ``apiCall``/``http.Post`` body in, a verdict object out.

Kyverno builds the body from the policy's ``data`` entries
(``context.apiCall.data`` or CEL ``http.Post``)::

    {"request": {{ request }}, "policy": {...}, "check": "manifest"}

``request`` is the ``admission.k8s.io/v1`` AdmissionRequest; ``check`` is
optional. Kyverno sends the body without a ``Content-Type`` header (Kyverno
issue #16745), so the body is read as JSON whatever the header says.

The answer is always HTTP 200 with the verdict (:class:`~provider.service.wire.ResultValue`):
``allowed`` and ``message`` are what a policy's ``deny`` condition and message
use; ``verified``, ``reason``, ``signers`` and ``diff`` explain. Every problem
-- an unusable body, an invalid policy, a cluster that did not answer, the
deadline -- is ``allowed: false`` with a ``reason``, because Kyverno turns a
non-2xx answer into a rule error whose text the user never sees. There is no
top-level ``statusCode``: CEL ``http.Post`` adds its own.
"""

from __future__ import annotations

import json
from typing import Any, NotRequired, TypedDict, cast

from ...cache import digest
from ...errors import RequestError
from ...limits import DEFAULT_LIMITS, Limits
from ...parsing import load_json
from ...result import Result
from ...review import Review
from ..checks import DEFAULT_CHECK, Question
from . import CHECK_FIELD, POLICY_FIELD, ResultValue

REQUEST_FIELD = "request"
BODY_FIELDS = (REQUEST_FIELD, POLICY_FIELD, CHECK_FIELD)

#: AdmissionRequest fields that differ between requests but never change a verdict.
_NOT_DECISIVE = frozenset({"uid"})


class Body(TypedDict):
    request: dict[str, Any]
    policy: NotRequired[Any]
    check: NotRequired[str]


Answer = ResultValue


def read_body(body: bytes, limits: Limits = DEFAULT_LIMITS) -> tuple[Question, bytes]:
    """The question the body asks, and its cache key; :class:`RequestError` when the body is unusable."""
    data = load_json(body, limits=limits, error=RequestError, what="the request body")
    if not isinstance(data, dict):
        raise RequestError(f"the request body is a JSON {type(data).__name__}; expected an object with request and policy")
    unknown = sorted(set(data) - set(BODY_FIELDS))
    if unknown:
        raise RequestError(f"the request body has an unknown field {unknown[0][:60]!r}; known fields: {', '.join(BODY_FIELDS)}")
    request = data.get(REQUEST_FIELD)
    if request is None:
        raise RequestError('the request body has no "request" (pass {{ request }} from the policy)')
    check = data.get(CHECK_FIELD, DEFAULT_CHECK)
    if not isinstance(check, str):
        raise RequestError(f"check is a {type(check).__name__}, not a string")
    review = Review.from_admission(request, where="request")
    decisive = {k: v for k, v in request.items() if k not in _NOT_DECISIVE}
    canonical = json.dumps([decisive, data.get(POLICY_FIELD)], sort_keys=True, separators=(",", ":"))
    return Question(check, review, data.get(POLICY_FIELD)), digest("kyverno", check, canonical)


def answer(result: Result) -> Answer:
    return cast(Answer, result.to_dict())


def denial(reason: str, message: str) -> Answer:
    """``allowed: false`` for a problem that is not a verdict about the object."""
    return {"allowed": False, "verified": False, "reason": reason, "message": message, "signers": [], "diff": []}
