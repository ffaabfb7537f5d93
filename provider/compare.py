"""Compare a signed document with an admitted object, leaf by leaf.

The result is what upstream k8s-manifest-sigstore reports -- one item per
differing *leaf* path, ``{"key": "data.key1", "values": {"before": signed,
"after": admitted}}`` -- computed by walking both objects and the ignore trie
together instead of flattening both objects first:

* ``null``, ``{}`` and ``[]`` equal an absent field (only leaves count);
* lists are compared by position;
* values compare as JSON values: ``1`` equals ``1.0``, but ``true`` never
  equals ``1`` and ``"1"`` never equals ``1``;
* an ignored path hides its whole subtree;
* subtrees under no ignore pattern are first compared in C (``==``, then a
  canonical JSON check that tells ``true`` from ``1``) and only walked when they
  differ, so the common case costs little more than one ``==``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .patterns import FieldTrie, _Node, advance, render_path

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class DiffItem:
    path: Path
    before: Any  # the signed value; None when absent
    after: Any  # the admitted value; None when absent

    @property
    def key(self) -> str:
        return render_path(self.path)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "values": {"before": self.before, "after": self.after}}


@dataclass(frozen=True)
class IgnoreSet:
    """Anchored patterns (a trie) plus, when opted in, upstream-style regexes."""

    trie: FieldTrie
    unanchored: tuple[re.Pattern[str], ...] = ()

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
        return a == b
    return type(a) is type(b) and a == b


def diff(signed: Any, admitted: Any, ignore: IgnoreSet) -> list[DiffItem]:
    """Every differing leaf outside the ignored paths, sorted by path."""
    out: list[DiffItem] = []
    _walk(signed, admitted, (), ignore.trie.start(), out)
    if ignore.unanchored:
        out = [d for d in out if not any(rx.search(d.key) for rx in ignore.unanchored)]
    out.sort(key=lambda d: d.key)
    return out


def _walk(a: Any, b: Any, path: Path, states: tuple[_Node, ...], out: list[DiffItem]) -> None:
    if not states and _same(a, b):
        return
    ta, tb = type(a), type(b)
    if ta is dict or tb is dict:
        if ta is not dict:
            if a is not None and ta is not list:
                out.append(DiffItem(path, a, None))
            elif ta is list:
                _walk(a, None, path, states, out)
            a = {}
        if tb is not dict:
            if b is not None and tb is not list:
                out.append(DiffItem(path, None, b))
            elif tb is list:
                _walk(None, b, path, states, out)
            b = {}
        for key in a.keys() | b.keys():
            sub, ignored = advance(states, key) if states else ((), False)
            if not ignored:
                _walk(a.get(key), b.get(key), (*path, key), sub, out)
        return
    if ta is list or tb is list:
        if ta is not list:
            if a is not None:
                out.append(DiffItem(path, a, None))
            a = []
        if tb is not list:
            if b is not None:
                out.append(DiffItem(path, None, b))
            b = []
        for index in range(max(len(a), len(b))):
            sub, ignored = advance(states, index) if states else ((), False)
            if not ignored:
                _walk(
                    a[index] if index < len(a) else None,
                    b[index] if index < len(b) else None,
                    (*path, index),
                    sub,
                    out,
                )
        return
    if a is None and b is None:
        return
    if a is None or b is None or not _leaf_equal(a, b):
        out.append(DiffItem(path, a, b))
