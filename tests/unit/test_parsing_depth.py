"""load_json: the depth walk skipped "when the text cannot nest that deep".

From an attack pass without any signing key (docs/security.md).
"""

from __future__ import annotations

import json

import pytest

from provider.errors import DataError
from provider.limits import DEFAULT_LIMITS
from provider.parsing import load_json

# --- load_json: the depth walk skipped "when the text cannot nest that deep" -------------------------------------


DEPTH = DEFAULT_LIMITS.max_depth


def _nested(levels: int, inner: str = "0") -> str:
    return "[" * levels + inner + "]" * levels


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(_nested(DEPTH + 1), id="one-level-too-deep"),
        pytest.param(_nested(DEPTH + 2), id="two-levels-too-deep"),
        pytest.param('{"a":' * (DEPTH + 1) + "0" + "}" * (DEPTH + 1), id="objects-one-level-too-deep"),
        pytest.param(_nested(DEPTH + 1, '"' + "x" * 300_000 + '"'), id="too-deep-and-longer-than-the-node-limit"),
        pytest.param("\ufeff" + _nested(DEPTH + 1), id="too-deep-behind-a-byte-order-mark"),
    ],
)
def test_json_nested_deeper_than_the_limit_is_refused_whatever_surrounds_it(text: str) -> None:
    with pytest.raises(DataError, match="nested deeper"):
        load_json(text.encode("utf-8"))  # a request body: bytes, a byte order mark allowed
    with pytest.raises(DataError):
        load_json(text)  # text: a byte order mark is itself not JSON


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(_nested(DEPTH), id="at-the-limit"),
        pytest.param(_nested(DEPTH - 1), id="one-level-short-where-the-walk-is-skipped"),
        pytest.param(json.dumps(["\\u005b" * DEPTH]), id="escaped-brackets-are-string-content"),
        pytest.param(json.dumps(["[" * 5 * DEPTH]), id="brackets-inside-a-string"),
    ],
)
def test_json_at_the_limit_or_with_brackets_in_strings_is_read(text: str) -> None:
    assert load_json(text) is not None
