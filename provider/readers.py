"""Strict readers for mappings that arrive from outside: policies, profiles, requests.

Contract: each reader returns the value with the type it names, or raises the
caller's error class (``PolicyError`` by default; ``RequestError`` for wire
formats) with a message that names the path (``policy.skipUsers[0].users``)
and what was expected. Unknown fields are errors, with a close match
suggested: a typo must never be read as "not given" and weaken a policy.
``null`` values are read as "not given", as Gatekeeper and Kyverno serialise
unset optionals that way.

The lenient accessors (:func:`child_mapping`, :func:`child_list`) are for data
already accepted elsewhere -- an admitted object, a dry-run answer -- where a
missing or mistyped child simply reads as empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .errors import DataError, PolicyError


def unknown_field_message(where: str, name: str, known: Iterable[str]) -> str:
    known = list(known)
    import difflib  # here: only a misspelt name needs it

    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else f"; known fields: {', '.join(known)}"
    return f"{where}: unknown field '{str(name)[:60]}'{hint}"


def check_fields(data: Any, where: str, known: tuple[str, ...], error: type[DataError] = PolicyError) -> dict[str, Any]:
    """``data`` as a mapping with only ``known`` fields (a close match is suggested); ``null`` values dropped."""
    if not isinstance(data, dict):
        raise error(f"{where}: expected a mapping, got {type(data).__name__}")
    for name in data:
        if name not in known:
            raise error(unknown_field_message(where, name, known))
    return {k: v for k, v in data.items() if v is not None}


def read_list(value: Any, where: str, error: type[DataError] = PolicyError) -> list[Any]:
    """A list; ``None`` reads as empty."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise error(f"{where}: expected a list, got {type(value).__name__}")
    return value


def read_str(value: Any, where: str, error: type[DataError] = PolicyError) -> str:
    if not isinstance(value, str):
        raise error(f"{where}: expected a string, got {type(value).__name__}")
    return value


def read_optional_str(data: dict[str, Any], name: str, where: str, error: type[DataError] = PolicyError) -> str | None:
    """``data[name]`` as a string; absent, ``null`` and ``""`` read as not given (None)."""
    value = data.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise error(f"{where}.{name}: expected a string, got {type(value).__name__}")
    return value


def read_bool(value: Any, where: str, error: type[DataError] = PolicyError) -> bool:
    if not isinstance(value, bool):
        raise error(f"{where}: expected true or false, got {type(value).__name__}")
    return value


def read_mapping(value: Any, where: str, error: type[DataError] = PolicyError) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise error(f"{where} is not a JSON object")
    return value


def read_int(value: Any, where: str, *, low: int, high: int, error: type[DataError] = PolicyError) -> int:
    """A whole number (never a boolean) from ``low`` to ``high``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise error(f"{where}: expected a whole number from {low} to {high}")
    return value


def read_str_list(value: Any, where: str, error: type[DataError] = PolicyError) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise error(f"{where}: expected a list of strings")
    return value


def child_mapping(parent: Any, key: str) -> dict[str, Any]:
    """``parent[key]`` when both are mappings, else an empty mapping (lenient: for already-accepted data)."""
    value = parent.get(key) if isinstance(parent, dict) else None
    return value if isinstance(value, dict) else {}


def child_list(parent: Any, key: str) -> list[Any]:
    """``parent[key]`` when it is a list, else an empty list (lenient: for already-accepted data)."""
    value = parent.get(key) if isinstance(parent, dict) else None
    return value if isinstance(value, list) else []
