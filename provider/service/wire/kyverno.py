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
from collections.abc import Mapping
from typing import Any, cast

from ...cache import digest
from ...errors import RequestError
from ...limits import DEFAULT_LIMITS, Limits
from ...parsing import load_json
from ...result import Result
from ..checks import Question, Verdict
from . import POLICY_FIELD, ResultValue, read_question

REQUEST_FIELD = "request"

#: AdmissionRequest fields that differ between requests but never change a verdict.
_NOT_DECISIVE = frozenset({"uid"})


def cache_key(request: Mapping[str, Any], policy: Any, check: str) -> bytes:
    """The verdict cache's key for one body: a digest of its check, policy and request without ``uid``.

    Kyverno sends a fresh ``uid`` with every AdmissionRequest; every other field
    may decide the verdict (operation, user, object, ``dryRun``) and is kept.
    Whether there *is* a uid is kept too: a request without one may be a
    background scan (:func:`~provider.review.is_background_scan`), judged as the
    stored object, and must never share a verdict with an admission request.
    Field order does not matter (the JSON is canonical).
    """
    decisive = {k: v for k, v in request.items() if k not in _NOT_DECISIVE}
    decisive["uid"] = bool(request.get("uid"))
    canonical = json.dumps([decisive, policy], sort_keys=True, separators=(",", ":"))
    return digest("kyverno", check, canonical)


def read_body(body: bytes, limits: Limits = DEFAULT_LIMITS) -> tuple[Question, bytes]:
    """The question the body asks, and its :func:`cache_key`; :class:`RequestError` when the body is unusable."""
    data = load_json(body, limits=limits, error=RequestError, what="the request body")
    question = read_question(
        data,
        "the request body",
        REQUEST_FIELD,
        'the request body has no "request" (pass {{ request }} from the policy)',
    )
    return question, cache_key(data[REQUEST_FIELD], data.get(POLICY_FIELD), question.check)


def answer(result: Result) -> ResultValue:
    return cast(ResultValue, result.to_dict())


def encode_answer(verdict: Verdict) -> str:
    """The answer's JSON: the verdict's value, encoded once when the verdict was made."""
    return verdict.value


def denial(reason: str, message: str) -> ResultValue:
    """``allowed: false`` for a problem that is not a verdict about the object."""
    return {"allowed": False, "verified": False, "reason": reason, "message": message, "signers": [], "diff": []}
