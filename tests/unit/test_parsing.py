"""Bounded YAML/JSON parsing: what Kubernetes reads, and nothing an attacker can blow up."""

from __future__ import annotations

import time

import pytest

from provider.errors import DataError, MalformedMessage
from provider.limits import Limits
from provider.parsing import check_shape, load_json, load_yaml_stream


def billion_laughs(levels: int = 10, width: int = 9) -> str:
    text = "a0: &a0 [" + ", ".join(['"lol"'] * width) + "]\n"
    for i in range(1, levels):
        text += f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]\n"
    return text


def test_documents_in_order_and_empty_ones_skipped() -> None:
    assert load_yaml_stream("a: 1\n---\n---\nb: [x, 2]\n") == [{"a": 1}, {"b": ["x", 2]}]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("v: yes", True),  # goyaml.v2's resolveMap, as kubectl reads it
        ("v: 'yes'", "yes"),
        ("v: 0x1f", 31),
        ("v: 1.5", 1.5),
        ("v: ~", None),
        ("v: 2021-01-01T00:00:00Z", "2021-01-01T00:00:00Z"),  # timestamps stay strings
        ("v: !!str 12", "12"),
        ("v: 012", 10),  # leading-zero octal (strconv.ParseInt base 0)
    ],
    ids=["bool-yes", "quoted-yes", "hex", "float", "null", "timestamp-string", "explicit-str", "octal"],
)
def test_scalars_resolve_as_kubectl_reads_them(text: str, expected: object) -> None:
    # The full table, one row per rule of sigs.k8s.io/yaml's conversion: test_parsing_kubectl.py.
    assert load_yaml_stream(text) == [{"v": expected}]
    assert type(load_yaml_stream(text)[0]["v"]) is type(expected)


def test_non_string_keys_become_their_text() -> None:
    assert load_yaml_stream("1: a\ntrue: b\n") == [{"1": "a", "true": "b"}]


def test_aliases_and_merge_keys_are_supported() -> None:
    # Not "y" as a key: kubectl reads a plain y as true, so the key would be "true".
    docs = load_yaml_stream("base: &b {a: 1, b: 2}\nuse: *b\nmerged:\n  <<: *b\n  b: 3\n")
    assert docs == [{"base": {"a": 1, "b": 2}, "use": {"a": 1, "b": 2}, "merged": {"a": 1, "b": 3}}]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: 1\na: 2\n", "duplicate key 'a'"),
        ("a: .nan\n", "not finite"),
        ("a: .inf\n", "not finite"),
        ("a: !!binary aGk=\n", "not supported"),
        ("a: !custom x\n", "not supported"),
        ("? [a]\n: b\n", "as a key"),
        ("- &a [*a]\n", "undefined or recursive alias"),
        ("a: [1\n", "not valid YAML"),
        ("a:\tb: c\n", "not valid YAML"),
        ("<<: 3\n", "merge key"),
    ],
    ids=[
        "duplicate-key",
        "nan",
        "infinity",
        "binary-tag",
        "custom-tag",
        "complex-key",
        "recursive-alias",
        "unclosed-flow",
        "tab-indent",
        "bad-merge",
    ],
)
def test_refused_yaml(text: str, fragment: str) -> None:
    with pytest.raises(MalformedMessage, match=fragment):
        load_yaml_stream(text, error=MalformedMessage)


def test_non_utf8_is_refused() -> None:
    with pytest.raises(DataError, match="not valid UTF-8"):
        load_yaml_stream(b"a: \xff\xfe")


def test_deep_nesting_is_refused_without_recursion() -> None:
    # PyYAML's C composer crashes the process on this input; the event builder refuses it.
    deep = "[" * 200_000 + "]" * 200_000
    with pytest.raises(DataError, match="nested deeper than 100"):
        load_yaml_stream(deep)
    with pytest.raises(DataError, match="nested deeper"):
        load_yaml_stream("a:\n" + "".join("  " * i + "b:\n" for i in range(1, 500)))


def test_billion_laughs_stops_at_the_node_limit_quickly() -> None:
    started = time.process_time()  # CPU time: the work, whatever else the machine runs
    with pytest.raises(DataError, match="aliases counted expanded"):
        load_yaml_stream(billion_laughs())
    assert time.process_time() - started < 1.0


def test_small_alias_expansion_within_limits_is_fine() -> None:
    assert len(load_yaml_stream(billion_laughs(levels=3, width=3))[0]) == 3


def test_document_count_limit() -> None:
    with pytest.raises(DataError, match="more than 3 documents"):
        load_yaml_stream("a: 1\n---\n" * 4, limits=Limits(max_documents=3))


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"a": 1, "a": 2}', "duplicate key"),
        ("[NaN]", "NaN"),
        ('{"a": Infinity}', "Infinity"),
        ('{"a": 1e999}', "not finite"),
        ("[" * 100_000 + "]" * 100_000, "nested deeper"),
        ('{"a": ', "not valid JSON"),
        (b'"\xff"', "UTF-8"),
    ],
    ids=["duplicate-key", "nan", "infinity", "overflow", "deep", "truncated", "non-utf8"],
)
def test_refused_json(text: str | bytes, fragment: str) -> None:
    with pytest.raises(DataError, match=fragment):
        load_json(text)


def test_check_shape_counts_nodes_and_depth() -> None:
    check_shape({"a": [1, 2, {"b": None}]})
    with pytest.raises(DataError, match="more than 10 nodes"):
        check_shape(list(range(20)), limits=Limits(max_nodes=10))
    nested: object = 1
    for _ in range(10):
        nested = [nested]
    with pytest.raises(DataError, match="deeper than 5"):
        check_shape(nested, limits=Limits(max_depth=5))


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("[" * 5 + "]" * 5, False),  # five containers on a path: the most max_depth=5 admits
        ("[" * 6 + "]" * 6, True),  # six: refused
        ('{"a": [[[[1]]]]}', False),
        ('{"a": [[[[[1]]]]]}', True),
        ('[["[[[[[[", "{{{{{{"]]', False),  # brackets inside strings only make the text look deep
        ('[[[[[{"k": "v"}]]]]]', True),
    ],
    ids=["at-the-limit", "past-the-limit", "object-at-the-limit", "object-past-it", "brackets-in-strings", "mixed"],
)
def test_json_depth_limit_holds_at_its_boundary(text: str, refused: bool) -> None:
    """load_json skips its walk when the text opens fewer containers than the depth limit: the edge is exact."""
    limits = Limits(max_depth=5)
    if refused:
        with pytest.raises(DataError, match="deeper than 5"):
            load_json(text, limits=limits)
    else:
        load_json(text, limits=limits)
