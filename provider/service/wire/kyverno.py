r"""Kyverno: an ``apiCall``/``http.Post`` body in, a verdict object out.

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

**Kyverno evaluates ``{{ }}`` in the text it builds from the answer.** The
shipped ``ClusterPolicy``'s message is ``"{{ verdict.message }} ..."``;
``getDenyMessage`` (kyverno/kyverno v1.19.0, and alike in v1.17 and v1.18,
``pkg/engine/handlers/validation/validate_resource.go``) hands it to
``variables.SubstituteAll``, whose ``substituteVariablesIfAny``
(``pkg/engine/variables/vars.go``) substitutes each variable and then *scans the
result again* ("check for nested variables in strings"), so a ``{{ expression }}``
inside the substituted text runs as JMESPath over the request. The message
quotes admitted values (a diff, a name), which the object's writer chooses.
:func:`escape_variables` puts Kyverno's own escape, a backslash, before every
``{{`` in every string of the answer; Kyverno's scanner
(``RegexVariables``, ``pkg/engine/variables/regex/vars.go``:
``(^|[^\\])(\{\{(?:\{[^{}]*\}|[^{}])*\}\})``) skips an escaped ``{{``, and the
same function ends by turning ``\{{`` back into ``{{``, so the text reads as
written. A CEL ``ValidatingPolicy`` evaluates nothing in the answer: there a
message quoting ``{{`` shows the backslash.
"""

from __future__ import annotations

import json
import re
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


#: A ``{`` that starts ``{{``, or ends the text (the policy's template may go on with ``{``).
_OPENING = re.compile(r"\{(?=\{|\Z)")
#: In compact JSON (``separators=(",", ":")``), where a string holds ``{{`` or ends with ``{``:
#: an object's own ``{`` is followed by ``"`` and a key, or by ``}``, never by ``{``; a string
#: ends with ``"`` and then ``,``, ``:``, ``}`` or ``]``. A key starting with one of these four
#: matches too, which only costs the slow path.
_MAY_NEED_ESCAPING = re.compile(r'\{\{|\{"[,:}\]]')


def escape_variables(text: str) -> str:
    r"""``text`` with a backslash before every ``{`` that is followed by ``{`` or ends it.

    After it no ``{{`` in the text is preceded by anything but a backslash, so
    Kyverno's ``RegexVariables`` finds no variable in it, whatever the policy's
    template puts before or after it; Kyverno's final ``\{{`` -> ``{{`` restores
    the text. Two cosmetic marks remain: a run of ``n > 2`` braces shows ``n - 2``
    backslashes, and a ``{`` ending the text shows its backslash.
    """
    return _OPENING.sub(r"\\{", text) if "{" in text else text


def _escaped(value: Any) -> Any:
    """Every string of ``value`` (object keys too: a diff's key is an admitted field's name) escaped."""
    if isinstance(value, str):
        return escape_variables(value)
    if isinstance(value, list):
        return [_escaped(item) for item in value]
    if isinstance(value, dict):
        return {escape_variables(key): _escaped(item) for key, item in value.items()}
    return value


def answer(result: Result) -> ResultValue:
    return cast(ResultValue, _escaped(result.to_dict()))


def encode_answer(verdict: Verdict) -> str:
    """The answer's JSON: the verdict's value (encoded once when the verdict was made), escaped for Kyverno.

    The value is shared with the Gatekeeper route, whose engine evaluates nothing
    in it; only when a string in it may hold what Kyverno would evaluate is it
    decoded, escaped and encoded again.
    """
    value = verdict.value
    if _MAY_NEED_ESCAPING.search(value) is None:
        return value
    return json.dumps(_escaped(json.loads(value)), separators=(",", ":"))


def denial(reason: str, message: str) -> ResultValue:
    """``allowed: false`` for a problem that is not a verdict about the object (its message may quote the body)."""
    return {"allowed": False, "verified": False, "reason": reason, "message": escape_variables(message),
            "signers": [], "diff": []}  # fmt: skip
