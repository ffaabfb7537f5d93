"""Leaf-by-leaf comparison, in upstream's diff shape."""

from __future__ import annotations

from typing import Any

import pytest

from provider.compare.diff import FieldTrie, IgnoreSet, diff, parse_field_pattern


def ignore(*patterns: str) -> IgnoreSet:
    return IgnoreSet(FieldTrie(tuple(parse_field_pattern(p) for p in patterns)))


def keys(a: Any, b: Any, *patterns: str) -> list[str]:
    return [d.key for d in diff(a, b, ignore(*patterns))]


def test_identical_objects_have_no_diff() -> None:
    obj = {"a": [1, {"b": True}], "c": "x"}
    assert diff(obj, {"c": "x", "a": [1, {"b": True}]}, ignore()) == []


@pytest.mark.parametrize(
    ("signed", "admitted"),
    [({}, {"a": None}), ({"a": []}, {"a": None}), ({"a": []}, {}), ({"a": {"b": None}}, {"a": {"b": []}})],
    ids=["null", "empty-list-vs-null", "empty-list-vs-absent", "nested"],
)
def test_null_and_empty_list_equal_absent(signed: Any, admitted: Any) -> None:
    assert diff(signed, admitted, ignore()) == []


@pytest.mark.parametrize(
    ("signed", "admitted", "expected"),
    [
        ({}, {"a": {}}, ["a"]),
        ({"a": {}}, {}, ["a"]),
        ({}, {"a": [{}]}, ["a.0"]),
        ({"a": {"b": {}}}, {"a": []}, ["a.b"]),
        ({"a": [{"x": 1}]}, {"a": [{"x": 1}, {}]}, ["a.1"]),
    ],
    ids=[
        "empty-struct-added",
        "empty-struct-removed",
        "list-of-empty",
        "nested-empty-struct",
        "empty-element-appended",
    ],
)
def test_empty_mappings_are_values_without_a_schema(signed: Any, admitted: Any, expected: list[str]) -> None:
    """Without a schema no position is a map, so ``{}`` is a value (fail closed); ``[{}]`` has a length."""
    assert keys(signed, admitted) == expected


def test_diff_items_in_upstream_shape() -> None:
    items = diff({"data": {"key1": "val1"}}, {"data": {"key1": "val1-TAMPERED", "key3": "val3"}}, ignore())
    assert [i.to_dict() for i in items] == [
        {"key": "data.key1", "values": {"before": "val1", "after": "val1-TAMPERED"}},
        {"key": "data.key3", "values": {"before": None, "after": "val3"}},
    ]


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ({"v": True}, {"v": 1}, ["v"]),  # JSON true is not 1
        ({"v": False}, {"v": 0}, ["v"]),
        ({"v": 1}, {"v": 1.0}, []),  # JSON numbers
        ({"v": "1"}, {"v": 1}, ["v"]),
        ({"v": [1, 2]}, {"v": [2, 1]}, ["v.0", "v.1"]),  # lists by position
        ({"v": [1]}, {"v": [1, 2]}, ["v.1"]),
        ({"v": {"x": 1}}, {"v": [1]}, ["v.0", "v.x"]),  # type changes report both sides' leaves
        ({"v": "s"}, {"v": {"x": 1}}, ["v", "v.x"]),
        ({"v": {"deep": {"er": [True]}}}, {"v": {"deep": {"er": [1]}}}, ["v.deep.er.0"]),
    ],
    ids=[
        "true-vs-1",
        "false-vs-0",
        "int-vs-float",
        "string-vs-int",
        "reordered-list",
        "appended-item",
        "map-vs-list",
        "scalar-vs-map",
        "deep-bool",
    ],
)
def test_value_semantics(a: Any, b: Any, expected: list[str]) -> None:
    assert keys(a, b) == expected


def test_ignored_subtrees_are_skipped() -> None:
    a = {"metadata": {"labels": {"status": "x"}}, "spec": {"x": 1}}
    b = {"metadata": {"labels": {"status": "y"}}, "spec": {"x": 1}, "status": {"replicas": 3, "conditions": [{"a": 1}]}}
    assert keys(a, b, "status") == ["metadata.labels.status"]
    assert keys(a, b, "status", "metadata.labels") == []


def test_ignore_by_list_wildcards() -> None:
    a = {"spec": {"containers": [{"image": "a", "name": "x"}, {"image": "b", "name": "y"}]}}
    b = {"spec": {"containers": [{"image": "A", "name": "x"}, {"image": "B", "name": "Y"}]}}
    assert keys(a, b, "spec.containers[].image") == ["spec.containers.1.name"]
    assert keys(a, b, "spec.containers[0].image") == ["spec.containers.1.image", "spec.containers.1.name"]


def test_a_numeric_segment_is_an_index_only_as_an_index_is_written() -> None:
    """``data.0`` names index 0 or key "0"; ``data.007`` only key "007" (no path writes an index so),
    never key "7" or index 7; a segment of 40 digits is a key too."""
    a = {"data": {"007": "a", "7": "a", "0": "a"}, "items": ["a", "a"]}
    b = {"data": {"007": "b", "7": "b", "0": "b"}, "items": ["b", "b"]}
    assert keys(a, b, "data.007") == ["data.0", "data.7", "items.0", "items.1"]
    assert keys(a, b, "data.0", "items.1") == ["data.007", "data.7", "items.0"]
    long = "9" * 40
    assert keys({"data": {long: "a"}}, {"data": {long: "b"}}, f"data.{long}") == []


def test_unanchored_ignore_set_filters_by_regex() -> None:
    import re

    items = diff({}, {"metadata": {"labels": {"status": "x"}}}, IgnoreSet(FieldTrie(), (re.compile("status.*"),)))
    assert items == []
