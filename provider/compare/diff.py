"""Compare a signed document with an admitted object, leaf by leaf.

The result is what upstream k8s-manifest-sigstore reports -- one item per
differing *leaf* path, ``{"key": "data.key1", "values": {"before": signed,
"after": admitted}}`` -- computed by walking both objects, the ignore trie and
the kind's shape (:mod:`provider.compare.kindschema`) together.

What equals what (``docs/policy.md``, "What equals what"); every rule is what
the API server itself does, recorded in ``tests/data/dryrun/edge/empties-*.json``:

* ``null`` equals an absent field (the server drops it);
* an empty list ``[]`` equals an absent field (the server drops it) in the
  kinds the schema knows and in every object's ``metadata``; in the rest of a
  custom resource it is a value (the server stores custom resources as JSON and
  keeps ``[]``; a controller may read ``[]`` and an absent list differently).
  The length of a list always counts, so ``[{}]`` is never empty;
* ``{}`` equals an absent field **only where the kind's schema says the field
  is a map** (``labels``, ``data``, a Service's ``selector``): the server drops
  empty maps but keeps empty structs (``namespaceSelector: {}`` admits every
  namespace). Where the schema is not known -- a custom resource's ``spec`` --
  ``{}`` is a value: fail closed;
* nothing else: ``0``, ``""`` and ``false`` are values; lists compare by
  position; values compare as JSON values (``1`` equals ``1.0``, but ``true``
  never equals ``1`` and ``"1"`` never equals ``1``);
* numbers compare as the API server holds them
  (:func:`provider.parsing.api_server_number`): an integer within int64
  exactly, any other number as its float64, told by the digits the server
  writes for it. An integer outside int64 is stored as the nearest float64,
  so ``18446744073709551615`` (signed) equals ``18446744073709552000`` (what
  the API server hands to admission); an int64 equals only itself (and the
  float64 the server writes with its digits: ``1`` and ``1.0``);
* an ignored path hides its whole subtree.

Field patterns (``ignoreFields``, exemption ``fields``, ``sensitiveFields``)
are **anchored on path segments**, unlike upstream's unanchored regular
expressions:

* ``data.mode`` covers ``data.mode`` and everything below it, but not
  ``data.modes`` and not ``spec.data.mode``;
* ``*`` is exactly one segment (a key or a list index); ``*Port`` is one
  segment ending in ``Port``;
* list elements: ``containers[]``, ``containers[*]`` or ``containers.*`` (any
  index), ``containers[0]`` or ``containers.0`` (index 0);
* a key with dots may be written as is (``metadata.annotations.app.kubernetes.io/name``)
  or quoted (``metadata.annotations["app.kubernetes.io/name"]``).

Compiled patterns form a trie walked *together with* the objects being
compared, so an ignored subtree (``status``, ``metadata.managedFields``) is
skipped without being visited.

Subtrees under no ignore pattern are first compared in C (``==``, then a
canonical JSON check that tells ``true`` from ``1``) and only walked when they
differ, so the common case costs little more than one ``==``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..errors import PolicyError
from ..objects import Glob
from ..parsing import api_server_number
from ..regexes import PolicyRegex
from .kindschema import Shape

# --- field patterns ---------------------------------------------------------------


class _Node:
    __slots__ = ("any_index", "globs", "indices", "keys", "star", "terminal")

    def __init__(self) -> None:
        self.terminal = False
        self.keys: dict[str, _Node] = {}
        self.indices: dict[int, _Node] = {}
        self.any_index: _Node | None = None
        self.star: _Node | None = None
        self.globs: list[tuple[Glob, _Node]] = []


# A parsed segment: ("key", str) | ("num", int) | ("index", int) | ("any-index", None)
# | ("star", None) | ("glob", str)
Segment = tuple[str, Any]

#: A segment that names a list index as well as a map key: decimal without a leading zero, as
#: an index is written ("containers.0", "containers.12"), within int64 (18 digits always fit).
_MAX_INDEX_DIGITS = 18
_LIST_INDEX = re.compile(rf"0|[1-9][0-9]{{0,{_MAX_INDEX_DIGITS - 1}}}", re.ASCII)

_BRACKET = re.compile(
    r"""\[(?:(\d+)|\*?|"((?:[^"\\]|\\.)*)"|'([^']*)')\]""", re.ASCII
)  # an index is ASCII digits: Python's \d takes "٣" too


def parse_field_pattern(text: Any, where: str = "field pattern") -> tuple[Segment, ...]:
    """Split ``spec.containers[0].image`` into segments; raise PolicyError on bad syntax."""
    if not isinstance(text, str) or not text.strip():
        raise PolicyError(f"{where}: expected a non-empty field pattern string")
    text = text.strip()
    segments: list[Segment] = []
    i, n = 0, len(text)
    expect_segment = True
    while i < n:
        char = text[i]
        if char == "[":
            m = _BRACKET.match(text, i)
            if not m:
                raise PolicyError(f"{where}: malformed bracket at character {i + 1} of {text!r}")
            if m.group(1) is not None:
                digits = m.group(1)
                if len(digits) > _MAX_INDEX_DIGITS:  # before int(): Python refuses long digit text itself
                    raise PolicyError(
                        f"{where}: index [{digits[:20]}…] has {len(digits)} digits; no list is that long"
                        f" (at most {_MAX_INDEX_DIGITS} digits)"
                    )
                segments.append(("index", int(digits)))
            elif m.group(2) is not None:
                segments.append(("key", re.sub(r"\\(.)", r"\1", m.group(2))))
            elif m.group(3) is not None:
                segments.append(("key", m.group(3)))
            else:
                segments.append(("any-index", None))
            i = m.end()
            expect_segment = False
            continue
        if char == ".":
            if expect_segment:
                raise PolicyError(f"{where}: empty segment in {text!r}")
            expect_segment = True
            i += 1
            continue
        if not expect_segment:
            raise PolicyError(f"{where}: expected '.' or '[' at character {i + 1} of {text!r}")
        j = i
        while j < n and text[j] not in ".[]":
            j += 1
        token = text[i:j]
        if not token:
            raise PolicyError(f"{where}: unexpected {text[i]!r} at character {i + 1} of {text!r}")
        if token == "*":  # noqa: S105 - a wildcard, not a password
            segments.append(("star", None))
        elif "*" in token:
            segments.append(("glob", token))
        elif _LIST_INDEX.fullmatch(token):
            segments.append(("num", int(token)))
        elif token.isascii() and token.isdigit():
            # "007" or 40 digits: no index is written so (upstream's flattened paths write indices
            # as Go's strconv.Itoa does), so only a map key of that text; int() is never asked
            # (Python refuses more than 4300 digits with its own ValueError).
            segments.append(("key", token))
        else:
            segments.append(("key", token))
        expect_segment = False
        i = j
    if expect_segment:
        raise PolicyError(f"{where}: pattern {text!r} ends with '.'")
    return tuple(segments)


class FieldTrie:
    """A set of anchored field patterns, walked segment by segment."""

    def __init__(self, patterns: tuple[tuple[Segment, ...], ...] = ()) -> None:
        self.root = _Node()
        for segments in patterns:
            self.add(segments)

    def add(self, segments: tuple[Segment, ...]) -> None:
        node = self.root
        for kind, value in segments:
            if kind == "key":
                node = node.keys.setdefault(value, _Node())
            elif kind == "index":
                node = node.indices.setdefault(value, _Node())
            elif kind == "num":
                # ``containers.0`` names index 0, or a map key "0".
                child = node.indices.get(value) or node.keys.get(str(value)) or _Node()
                node.indices[value] = child
                node.keys[str(value)] = child
                node = child
            elif kind == "any-index":
                node.any_index = node.any_index or _Node()
                node = node.any_index
            elif kind == "star":
                node.star = node.star or _Node()
                node = node.star
            else:
                for glob, child in node.globs:
                    if glob.pattern == value:
                        node = child
                        break
                else:
                    child = _Node()
                    node.globs.append((Glob(value), child))
                    node = child
        node.terminal = True

    def start(self) -> tuple[_Node, ...]:
        return (
            (self.root,)
            if (self.root.keys or self.root.indices or self.root.any_index or self.root.star or self.root.globs)
            else ()
        )


def advance(states: tuple[_Node, ...], key: str | int) -> tuple[tuple[_Node, ...], bool]:
    """Step every active pattern over one path segment.

    Returns the new states and whether some pattern ends here (the subtree is ignored).
    """
    found: list[_Node] = []
    for node in states:
        if type(key) is int:
            child = node.indices.get(key)
            if child is not None:
                found.append(child)
            if node.any_index is not None:
                found.append(node.any_index)
        else:
            child = node.keys.get(key)  # type: ignore[arg-type]
            if child is not None:
                found.append(child)
            for glob, glob_child in node.globs:
                if glob.match(key):  # type: ignore[arg-type]
                    found.append(glob_child)
            if "." in key:  # type: ignore[operator]
                found.extend(_dotted(node, key.split(".")))  # type: ignore[union-attr]
        if node.star is not None:
            found.append(node.star)
    if not found:
        return (), False
    if any(node.terminal for node in found):
        return (), True
    return tuple(found), False


def _dotted(node: _Node, parts: list[str]) -> list[_Node]:
    """Patterns written without quotes split a dotted key; walk its parts."""
    frontier = [node]
    for part in parts:
        nxt: list[_Node] = []
        for current in frontier:
            child = current.keys.get(part)
            if child is not None:
                nxt.append(child)
            nxt.extend(glob_child for glob, glob_child in current.globs if glob.match(part))
        if not nxt:
            return []
        frontier = nxt
    return frontier


def render_path(path: tuple[str | int, ...]) -> str:
    """Dotted path as upstream prints it: ``spec.template.spec.containers.0.image``."""
    return ".".join(str(p) for p in path)


def unanchored_matcher(pattern: str, where: str = "ignore pattern") -> PolicyRegex:
    """Upstream's matching, kept for users who depend on it (``unsafeUnanchoredIgnoreFields``).

    k8s-manifest-sigstore appends ``*`` to every ignore pattern, turns each ``*``
    into ``.*`` and searches the dotted path with an unanchored regular
    expression, so ``status`` also ignores ``metadata.labels.status``. The
    pattern is the policy author's, so it runs on RE2 (:mod:`provider.regexes`:
    linear time), as Go's ``regexp`` runs it upstream.
    """
    return PolicyRegex.compile((pattern + "*").replace("*", ".*"), where)


Path = tuple[str | int, ...]


#: What a diff shows instead of a sensitive value (Secret data, a policy's ``sensitiveFields``).
REDACTED = "<redacted>"


@dataclass(frozen=True)
class DiffItem:
    path: Path
    before: Any  # the signed value; None when absent
    after: Any  # the admitted value; None when absent
    #: The values are sensitive and were replaced by :data:`REDACTED` (absent stays None).
    redacted: bool = False

    @property
    def key(self) -> str:
        return render_path(self.path)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "values": {"before": self.before, "after": self.after}}


def redact(items: list[DiffItem], sensitive: FieldTrie) -> list[DiffItem]:
    """``items`` with the values at or around a sensitive path replaced by :data:`REDACTED`.

    A value is sensitive when its path lies under a sensitive pattern, and also
    when a sensitive pattern lies under its path (a whole ``data`` map reported
    as one value holds every key of it): the message says which path changed,
    never to what.
    """
    start = sensitive.start()
    if not start:
        return items
    out = []
    for item in items:
        states, hit = start, False
        for segment in item.path:
            states, hit = advance(states, segment)
            if hit or not states:
                break
        if hit or states:  # under a pattern, or a pattern still continues below this value
            out.append(
                DiffItem(
                    item.path,
                    None if item.before is None else REDACTED,
                    None if item.after is None else REDACTED,
                    redacted=True,
                )
            )
        else:
            out.append(item)
    return out


@dataclass(frozen=True)
class IgnoreSet:
    """Anchored patterns (a trie) plus, when opted in, upstream-style regexes."""

    trie: FieldTrie
    unanchored: tuple[PolicyRegex, ...] = ()

    def ignores(self, path: Path) -> bool:
        """True when ``path`` (or one of its ancestors) is ignored."""
        states = self.trie.start()
        for segment in path:
            states, done = advance(states, segment)
            if done:
                return True
            if not states:
                break
        rendered = render_path(path)
        return any(rx.search(rendered) for rx in self.unanchored)


def _canonical(value: Any) -> str | None:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return None


def _same(a: Any, b: Any) -> bool:
    """Strict JSON equality, fast: ``==`` in C, then rule out ``true == 1``."""
    if a is b:
        return True
    if type(a) is not type(b) or a != b:
        return False
    if isinstance(a, str):
        return True
    ca = _canonical(a)
    return ca is not None and ca == _canonical(b)


def _leaf_equal(a: Any, b: Any) -> bool:
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if a == b and type(a) is int and type(b) is int and -(2**63) <= a < 2**63:
            return True  # the common case, without the float arithmetic
        x, y = api_server_number(a), api_server_number(b)
        return type(x) is type(y) and x == y
    return type(a) is type(b) and a == b


def diff(signed: Any, admitted: Any, ignore: IgnoreSet, shape: Shape | None = None) -> list[DiffItem]:
    """Every differing leaf outside the ignored paths, sorted by path.

    ``shape`` says which positions are maps (:func:`provider.compare.kindschema.object_shape`
    of the signed document); without it no position is, and ``{}`` is always a value.
    """
    out: list[DiffItem] = []
    _walk(signed, admitted, (), ignore.trie.start(), shape, out)
    if ignore.unanchored:
        out = [d for d in out if not any(rx.search(d.key) for rx in ignore.unanchored)]
    out.sort(key=lambda d: d.key)
    return out


_CONTAINERS = (dict, list)


def _vanishes(value: Any, shape: Shape | None) -> bool:
    """Whether ``value`` equals an absent field here (the rules in the module docstring).

    ``null`` does; ``[]`` does except at an opaque position (a custom resource's
    own fields); a map does when every value in it does; a struct never does --
    emptied, it is still ``{}``, a value.
    """
    if value is None:
        return True
    kind = type(value)
    if kind is list:
        return not value and not (shape is not None and shape.is_opaque)
    if kind is not dict or shape is None or not shape.is_map:
        return False
    element = shape.element
    return all(_vanishes(item, element) for item in value.values())


def _walk(  # noqa: PLR0917 - the hot recursion
    a: Any, b: Any, path: Path, states: tuple[_Node, ...], shape: Shape | None, out: list[DiffItem]
) -> None:
    """Report where ``a`` and ``b`` differ once ignored paths are taken out (see the module docstring)."""
    if not states and _same(a, b):
        return
    if _vanishes(a, shape):
        a = None
    if _vanishes(b, shape):
        b = None
    if a is None and b is None:
        return
    ta, tb = type(a), type(b)
    if ta is not tb and a is not None and b is not None and (ta in _CONTAINERS or tb in _CONTAINERS):
        # A change of type: each side's leaves against nothing, as upstream reports it.
        _walk(a, None, path, states, shape, out)
        _walk(None, b, path, states, shape, out)
        return
    if ta is dict or tb is dict:
        if a is not None and b is not None:
            _walk_dict(a, b, path, states, shape, out)
            return
        # A mapping on one side only: its fields are reported against nothing. When
        # none is (it is empty, or holds only vanishing or ignored fields), the
        # mapping itself is the difference -- a struct present is a value, even
        # ``{}`` -- unless it is a map, which is then empty, i.e. absent.
        before = len(out)
        _walk_dict(a or {}, b or {}, path, states, shape, out)
        if len(out) == before and not (shape is not None and shape.is_map):
            out.append(DiffItem(path, a, b))
        return
    if ta is list or tb is list:
        if (a is None or b is None) and not a and not b:
            # ``[]`` against nothing, where ``[]`` is a value (a custom resource's own field).
            out.append(DiffItem(path, a, b))
            return
        _walk_list(a or [], b or [], path, states, shape, out)
        return
    if a is None or b is None or not _leaf_equal(a, b):
        out.append(DiffItem(path, a, b))


def _walk_dict(  # noqa: PLR0917 - part of the hot recursion
    a: dict[str, Any],
    b: dict[str, Any],
    path: Path,
    states: tuple[_Node, ...],
    shape: Shape | None,
    out: list[DiffItem],
) -> None:
    for key in a.keys() | b.keys():
        sub, ignored = advance(states, key) if states else ((), False)
        if not ignored:
            _walk(a.get(key), b.get(key), (*path, key), sub, shape.child(key) if shape is not None else None, out)


def _walk_list(  # noqa: PLR0917 - part of the hot recursion
    a: list[Any], b: list[Any], path: Path, states: tuple[_Node, ...], shape: Shape | None, out: list[DiffItem]
) -> None:
    """Lists compare by position and the length counts: an element on one side only differs, even ``null``."""
    element = shape.child(0) if shape is not None else None
    common = min(len(a), len(b))
    for index in range(max(len(a), len(b))):
        sub, ignored = advance(states, index) if states else ((), False)
        if ignored:
            continue
        left = a[index] if index < len(a) else None
        right = b[index] if index < len(b) else None
        if index >= common and _vanishes(left if index < len(a) else right, element):
            out.append(DiffItem((*path, index), left, right))  # ``[null]``, ``[[]]``: the position exists
        else:
            _walk(left, right, (*path, index), sub, element, out)
