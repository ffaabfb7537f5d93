"""Gatekeeper external data: ``ProviderRequest`` in, ``ProviderResponse`` out.

Field names and casing as in Gatekeeper's ``externaldata.gatekeeper.sh/v1beta1``
types (``pkg/externaldata``; documented in Gatekeeper's "External Data" page)::

    {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest",
     "request": {"keys": ["<key>", ...]}}

    {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderResponse",
     "response": {"idempotent": true, "systemError": "",
                  "items": [{"key": "<key>", "value": {...}} | {"key": "<key>", "error": "..."}]}}

Each key is a JSON *string* holding ``{"review": <input.review>, "policy":
{...}, "check": "manifest"}`` (``check`` optional). The answer has one item per
key, in order, with the key echoed exactly; ``value`` is the verdict
(:class:`~provider.service.wire.ResultValue`), ``error`` is ``"<reason>: <message>"``
for a key that is deterministically unusable (not JSON, wrong shape, invalid
policy, unknown check). Gatekeeper caches items -- errors included -- for
3 minutes by default, so anything that might succeed when asked again (a
deadline, a cluster that did not answer) is a ``systemError`` for the whole
request instead, which Gatekeeper does not cache.

``idempotent`` is always true: the same key always gets the same answer
(Gatekeeper requires it for mutation and uses it for caching).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal, NotRequired, TypedDict, cast

from ...cache import digest
from ...errors import DataError, RequestError
from ...limits import DEFAULT_LIMITS, Limits
from ...parsing import load_json
from ...result import Result
from ..checks import Answer, Question
from . import ResultValue, read_question

API_GROUP = "externaldata.gatekeeper.sh"
API_VERSION = f"{API_GROUP}/v1beta1"

REVIEW_FIELD = "review"


class Item(TypedDict):
    key: str
    value: NotRequired[ResultValue]
    error: NotRequired[str]


class Response(TypedDict):
    idempotent: Literal[True]
    items: list[Item]
    systemError: str


class ProviderResponse(TypedDict):
    apiVersion: str
    kind: Literal["ProviderResponse"]
    response: Response


def read_request(body: bytes, limits: Limits = DEFAULT_LIMITS) -> list[str]:
    """The keys of a ``ProviderRequest``; :class:`RequestError` when the request as a whole is unusable."""
    data = load_json(body, limits=limits, error=RequestError, what="the ProviderRequest")
    if not isinstance(data, dict):
        raise RequestError(f"the ProviderRequest is a JSON {type(data).__name__}, not an object")
    api_version = data.get("apiVersion", API_VERSION)
    if not isinstance(api_version, str) or not api_version.startswith(API_GROUP + "/"):
        raise RequestError(f"apiVersion {str(api_version)[:60]!r} is not in {API_GROUP}")
    kind = data.get("kind", "ProviderRequest")
    if kind != "ProviderRequest":
        raise RequestError(f"kind {str(kind)[:60]!r} is not ProviderRequest")
    request = data.get("request")
    if not isinstance(request, dict):
        raise RequestError("the ProviderRequest has no request object")
    keys = request.get("keys")
    if keys is None:
        return []
    if not isinstance(keys, list):
        raise RequestError(f"request.keys is a {type(keys).__name__}, not a list of strings")
    for index, key in enumerate(keys):
        if not isinstance(key, str):
            raise RequestError(f"request.keys[{index}] is a {type(key).__name__}, not a string")
    if len(keys) > limits.max_keys_per_request:
        raise RequestError(f"{len(keys)} keys in one request; at most {limits.max_keys_per_request} are allowed")
    return keys


def cache_key(key: str) -> bytes:
    """The verdict cache's key for one Gatekeeper key: a digest of the key's exact text.

    Nothing is left out: the key holds only the review, the policy and the
    check, all decisive, and Gatekeeper itself caches by the same text.
    """
    return digest("gatekeeper", key)


def read_key(key: str, limits: Limits = DEFAULT_LIMITS) -> Question:
    """The question one key asks; :class:`RequestError` when the key is unusable."""
    data = load_json(key, limits=limits, error=RequestError, what="the key")
    return read_question(data, "the key", REVIEW_FIELD, "the key has no review (pass input.review from the template)")


def value_item(key: str, result: Result) -> Item:
    return {"key": key, "value": cast(ResultValue, result.to_dict())}


def error_item(key: str, error: DataError) -> Item:
    return {"key": key, "error": f"{error.reason}: {error.message}"}


def response(items: list[Item], system_error: str = "", api_version: str = API_VERSION) -> ProviderResponse:
    return {
        "apiVersion": api_version,
        "kind": "ProviderResponse",
        "response": {"idempotent": True, "items": items, "systemError": system_error},
    }


#: :func:`encode_response`'s text around the items: ``response([...])`` as compact JSON, split at the items.
_BEFORE_ITEMS, _AFTER_ITEMS = json.dumps(response([]), separators=(",", ":")).split("[]")


def encode_response(keys: Sequence[str], answers: Sequence[Answer]) -> str:
    """The ``ProviderResponse`` for ``keys`` and their answers, as the compact JSON of :func:`response` would be.

    Built as text: each verdict's value is already JSON (:attr:`~provider.service.checks.Verdict.value`,
    encoded once when it was made), so only the keys and error messages are encoded here.
    The bytes equal ``json.dumps(response(items), separators=(",", ":"))`` (a test holds it).
    """
    dumps = json.dumps
    items = []
    for key, answer in zip(keys, answers, strict=True):
        if answer.verdict is not None:
            items.append(f'{{"key":{dumps(key)},"value":{answer.verdict.value}}}')
        else:
            assert answer.error is not None
            items.append(f'{{"key":{dumps(key)},"error":{dumps(f"{answer.error.reason}: {answer.error.message}")}}}')
    return _BEFORE_ITEMS + "[" + ",".join(items) + "]" + _AFTER_ITEMS
