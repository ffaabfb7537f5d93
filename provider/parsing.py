"""Bounded YAML and JSON parsing: hostile input in, plain JSON-shaped data out.

Contract: every function here returns only ``dict`` (string keys), ``list``,
``str``, ``int``, ``float`` (finite), ``bool`` and ``None`` -- the JSON data
model Kubernetes objects live in -- or raises the caller's error class with a
message a person can act on. Time and memory are bounded by
:class:`provider.limits.Limits`.

YAML is read from libyaml's *event* stream (PyYAML's C parser) and the objects
are built here, iteratively:

* PyYAML's C composer recurses once per nesting level and crashes the process
  (a segmentation fault, not an exception) on deeply nested input; the event
  parser does not recurse, and depth is checked before anything is built.
* Aliases are allowed (valid YAML that ``kubectl`` accepts) but each one counts
  as the full size of what it refers to, so a "billion laughs" document stops
  at ``max_nodes`` without being expanded.
* Duplicate keys are refused, as the Kubernetes API server's strict decoder
  does: a verifier and the cluster must never read different values from one
  document.
* Timestamps stay strings (as in Kubernetes' YAML-to-JSON conversion);
  ``.nan``/``.inf`` and non-standard tags are refused: JSON cannot carry them.
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml
from yaml import events as ev

from .errors import DataError
from .limits import DEFAULT_LIMITS, Limits

_CLoader: Any = getattr(yaml, "CSafeLoader", None)
if _CLoader is None:  # pragma: no cover - the C loader is a hard requirement
    raise ImportError("PyYAML was built without libyaml; reinstall pyyaml with the C extension")

_RESOLVER = yaml.resolver.Resolver()
_CONSTRUCTOR = yaml.constructor.SafeConstructor()

_YAML = "tag:yaml.org,2002:"
_STR, _NULL, _BOOL, _INT, _FLOAT = (_YAML + t for t in ("str", "null", "bool", "int", "float"))
_TIMESTAMP, _MERGE, _VALUE = _YAML + "timestamp", _YAML + "merge", _YAML + "value"
_MAP_TAGS = frozenset({None, "!", _YAML + "map"})
_SEQ_TAGS = frozenset({None, "!", _YAML + "seq"})


def _scalar_value(event: ev.ScalarEvent, error: type[DataError]) -> Any:
    """Resolve one scalar to its JSON value, as YAML 1.1 (and kubectl) read it."""
    tag, value = event.tag, event.value
    if tag is None or tag == "!":
        if tag == "!" or not event.implicit[0]:
            return value  # quoted or non-specific: always a string
        tag = _RESOLVER.resolve(yaml.ScalarNode, value, (True, False))  # type: ignore[no-untyped-call]
    if tag in (_STR, _TIMESTAMP, _VALUE):
        return value
    if tag == _NULL:
        return None
    if tag == _BOOL:
        flag = _CONSTRUCTOR.bool_values.get(value.lower())
        if flag is None:
            raise error(f"YAML value {value[:40]!r} is tagged !!bool but is not a boolean")
        return flag
    try:
        if tag == _INT:
            return _CONSTRUCTOR.construct_yaml_int(yaml.ScalarNode(tag, value))
        if tag == _FLOAT:
            number = _CONSTRUCTOR.construct_yaml_float(yaml.ScalarNode(tag, value))
            if not math.isfinite(number):
                raise error(f"YAML number {value[:40]!r} is not finite; JSON (and Kubernetes) cannot carry it")
            return number
    except (ValueError, yaml.YAMLError) as exc:
        raise error(f"YAML value {value[:40]!r} is not a valid {tag.rsplit(':', 1)[-1]}") from exc
    if tag == _MERGE:
        return _MergeKey
    raise error(f"YAML tag {tag[:60]!r} is not supported; Kubernetes manifests use plain JSON types")


class _MergeKey:
    """Marker for the YAML 1.1 merge key ``<<``."""


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return key
    # Kubernetes' YAML-to-JSON conversion turns scalar keys into their text.
    return json.dumps(key)


class _Frame:
    __slots__ = ("anchor", "container", "is_map", "key", "merges", "start")

    def __init__(self, container: Any, start: int, anchor: str | None, is_map: bool) -> None:
        self.container = container
        self.start = start
        self.anchor = anchor
        self.is_map = is_map
        self.key: Any = _NoKey
        self.merges: list[Any] = []


class _NoKey:
    pass


def load_yaml_stream(
    text: str | bytes,
    *,
    limits: Limits = DEFAULT_LIMITS,
    error: type[DataError] = DataError,
    what: str = "YAML",
) -> list[Any]:
    """Parse a YAML stream into its non-empty documents, within ``limits``."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise error(f"{what} is not valid UTF-8 (byte {exc.start})") from exc
    loader = _CLoader(text)
    try:
        return _build(loader, limits, error, what)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{what} is not valid YAML: {problem}{where}") from exc
    finally:
        loader.dispose()


def _build(loader: Any, limits: Limits, error: type[DataError], what: str) -> list[Any]:
    documents: list[Any] = []
    anchors: dict[str, tuple[Any, int]] = {}
    stack: list[_Frame] = []
    nodes = 0
    root: Any = None

    def attach(value: Any, *, is_scalar_key_ok: bool = True) -> None:
        nonlocal root
        if not stack:
            root = value
            return
        frame = stack[-1]
        if not frame.is_map:
            frame.container.append(value)
        elif frame.key is _NoKey:
            if value is _MergeKey:
                frame.key = _MergeKey
            elif isinstance(value, (dict, list)):
                raise error(f"{what} uses a mapping or sequence as a key; Kubernetes objects have string keys")
            else:
                frame.key = _key_text(value)
        else:
            key, frame.key = frame.key, _NoKey
            if key is _MergeKey:
                if isinstance(value, dict):
                    frame.merges.append(value)
                elif isinstance(value, list) and all(isinstance(v, dict) for v in value):
                    frame.merges.extend(value)
                else:
                    raise error(f"{what} has a merge key '<<' whose value is not a mapping")
            elif key in frame.container:
                raise error(f"{what} has a duplicate key {key[:60]!r}; the API server's strict decoder refuses it")
            else:
                frame.container[key] = value

    while True:
        event = loader.get_event()
        kind = type(event)
        if kind is ev.ScalarEvent:
            nodes += 1
            value = _scalar_value(event, error)
            if event.anchor is not None:
                anchors[event.anchor] = (value, 1)
            attach(value)
        elif kind is ev.MappingStartEvent or kind is ev.SequenceStartEvent:
            is_map = kind is ev.MappingStartEvent
            if event.tag not in (_MAP_TAGS if is_map else _SEQ_TAGS):
                raise error(f"YAML tag {str(event.tag)[:60]!r} is not supported; Kubernetes manifests use plain JSON types")
            if stack and stack[-1].is_map and stack[-1].key is _NoKey:
                raise error(f"{what} uses a mapping or sequence as a key; Kubernetes objects have string keys")
            nodes += 1
            if len(stack) >= limits.max_depth:
                raise error(f"{what} is nested deeper than {limits.max_depth} levels")
            stack.append(_Frame({} if is_map else [], nodes, event.anchor, is_map))
        elif kind is ev.MappingEndEvent or kind is ev.SequenceEndEvent:
            frame = stack.pop()
            if frame.is_map and frame.merges:
                for merged in frame.merges:
                    for key, value in merged.items():
                        frame.container.setdefault(key, value)
            if frame.anchor is not None:
                anchors[frame.anchor] = (frame.container, nodes - frame.start + 1)
            attach(frame.container)
        elif kind is ev.AliasEvent:
            target = anchors.get(event.anchor)
            if target is None:
                raise error(f"{what} refers to an undefined or recursive alias *{str(event.anchor)[:40]}")
            nodes += target[1]
            attach(target[0])
        elif kind is ev.DocumentStartEvent:
            root = None
        elif kind is ev.DocumentEndEvent:
            if root is not None:
                documents.append(root)
                if len(documents) > limits.max_documents:
                    raise error(f"{what} holds more than {limits.max_documents} documents")
        elif kind is ev.StreamEndEvent:
            return documents
        if nodes > limits.max_nodes:
            raise error(f"{what} has more than {limits.max_nodes} nodes (aliases counted expanded)")


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):  # 1e999 overflows to infinity
        raise ValueError(f"number {text[:40]} is not finite")
    return number


def _unique_pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(items)
    if len(result) != len(items):
        seen: set[str] = set()
        duplicate = next(k for k, _ in items if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate key {duplicate[:60]!r}")
    return result


def load_json(
    text: str | bytes,
    *,
    limits: Limits = DEFAULT_LIMITS,
    error: type[DataError] = DataError,
    what: str = "JSON",
) -> Any:
    """Parse strict JSON: no NaN/Infinity, no duplicate keys, bounded depth and size."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8-sig")
        value = json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_no_constants, parse_float=_finite_float)
    except UnicodeDecodeError as exc:
        raise error(f"{what} is not valid UTF-8 (byte {exc.start})") from exc
    except RecursionError as exc:
        raise error(f"{what} is nested deeper than {limits.max_depth} levels") from exc
    except ValueError as exc:
        raise error(f"{what} is not valid JSON: {str(exc)[:120]}") from exc
    # Every JSON node takes at least one character, so short text cannot
    # exceed the node limit; only the depth needs checking then.
    _check_containers(value, limits, error, what, count_nodes=len(text) > limits.max_nodes, check_floats=False)
    return value


def check_shape(value: Any, *, limits: Limits = DEFAULT_LIMITS, error: type[DataError] = DataError, what: str = "object") -> None:
    """Check depth, node count and finite numbers of already-parsed JSON-shaped data, iteratively."""
    _check_containers(value, limits, error, what, count_nodes=True, check_floats=True)


def _check_containers(value: Any, limits: Limits, error: type[DataError], what: str, *, count_nodes: bool, check_floats: bool) -> None:
    """Walk the containers only (scalars are counted in bulk), without recursion."""
    if isinstance(value, float) and check_floats and not math.isfinite(value):
        raise error(f"{what} holds a number that is not finite")
    if not isinstance(value, (dict, list)):
        return
    nodes = 1
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if type(item) is dict else item
        if count_nodes:
            nodes += len(children)
            if nodes > limits.max_nodes:
                raise error(f"{what} has more than {limits.max_nodes} nodes")
        for child in children:
            kind = type(child)
            if kind is dict or kind is list:
                if depth + 1 >= limits.max_depth:
                    raise error(f"{what} is nested deeper than {limits.max_depth} levels")
                pending.append((child, depth + 1))
            elif check_floats and kind is float and not math.isfinite(child):
                raise error(f"{what} holds a number that is not finite")
