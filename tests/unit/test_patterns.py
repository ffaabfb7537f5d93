"""Name patterns, object references and anchored field patterns."""

from __future__ import annotations

import pytest

from provider.compare.diff import FieldTrie, IgnoreSet, parse_field_pattern, unanchored_matcher
from provider.errors import PolicyError
from provider.objects import NamePattern, ObjectIdentity, ObjectRef


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("*", "anything", True),
        ("-", "", True),
        ("-", "x", False),
        ("kube-*", "kube-system", True),
        ("kube-*", "default", False),
        ("a,b", "b", True),
        ("a, b", "b", True),
        ("a,b", "c", False),
        ("system:serviceaccount:*:default", "system:serviceaccount:ns1:default", True),
        ("system:serviceaccount:*:default", "system:serviceaccount:ns1:other", False),
        ("exact", "exact", True),
        ("exact", "exactly", False),
        ("a.b", "axb", False),  # no regex: a dot is a dot
    ],
)
def test_name_patterns(pattern: str, value: str, expected: bool) -> None:
    assert NamePattern.compile(pattern, "p").matches(value) is expected


def test_object_ref_matches_each_field() -> None:
    ident = ObjectIdentity.of(
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"}}
    )
    assert (ident.group, ident.version, ident.kind, ident.name, ident.namespace) == (
        "apps",
        "v1",
        "Deployment",
        "web",
        "shop",
    )
    assert ObjectRef.from_dict({"kind": "Deployment", "namespace": "shop"}, "r").matches(ident)
    assert ObjectRef.from_dict({}, "r").matches(ident)
    assert not ObjectRef.from_dict({"group": "-"}, "r").matches(ident)
    assert not ObjectRef.from_dict({"kind": "Deployment", "name": "api"}, "r").matches(ident)
    with pytest.raises(PolicyError, match="did you mean 'namespace'"):
        ObjectRef.from_dict({"namesapce": "x"}, "r")


def ignores(patterns: list[str], path: tuple[str | int, ...]) -> bool:
    trie = FieldTrie(tuple(parse_field_pattern(p) for p in patterns))
    return IgnoreSet(trie).ignores(path)


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("data.mode", ("data", "mode"), True),
        ("data.mode", ("data", "mode", "sub"), True),  # subtree
        ("data.mode", ("data", "modes"), False),  # anchored on segments
        ("data.mode", ("spec", "data", "mode"), False),  # anchored at the root
        ("status", ("metadata", "labels", "status"), False),  # upstream's default-list pitfall
        ("status", ("status", "replicas"), True),
        ("spec.containers.*.image", ("spec", "containers", 0, "image"), True),
        ("spec.containers[].image", ("spec", "containers", 3, "image"), True),
        ("spec.containers[*].image", ("spec", "containers", 3, "image"), True),
        ("spec.containers[1].image", ("spec", "containers", 0, "image"), False),
        ("spec.containers[1].image", ("spec", "containers", 1, "image"), True),
        ("spec.containers.1.image", ("spec", "containers", 1, "image"), True),
        ("spec.containers[].image", ("spec", "containers", "x", "image"), False),  # [] is list elements only
        ("spec.*Port", ("spec", "healthCheckNodePort"), True),
        ("spec.*Port", ("spec", "ports"), False),
        ("metadata.annotations.app.kubernetes.io/name", ("metadata", "annotations", "app.kubernetes.io/name"), True),
        ('metadata.annotations["app.kubernetes.io/name"]', ("metadata", "annotations", "app.kubernetes.io/name"), True),
        ("metadata.annotations['app.kubernetes.io/name']", ("metadata", "annotations", "app.kubernetes.io/name"), True),
        (
            'metadata.annotations["app.kubernetes.io/name"]',
            ("metadata", "annotations", "app.kubernetes.io/names"),
            False,
        ),
        ("metadata.annotations.app", ("metadata", "annotations", "app.kubernetes.io/name"), False),
        ("metadata.annotations.*", ("metadata", "annotations", "app.kubernetes.io/name"), True),
        ("metadata.finalizers*", ("metadata", "finalizers", 0), True),
        ("data.0", ("data", "0"), True),  # a map key that looks like a number
    ],
)
def test_anchored_field_patterns(pattern: str, path: tuple[str | int, ...], expected: bool) -> None:
    assert ignores([pattern], path) is expected


@pytest.mark.parametrize(
    "bad",
    ["", "a..b", "a.", ".a", "a[", "a[x]", "a]b", 3, "a[0]b"],
    ids=[
        "empty",
        "double-dot",
        "trailing-dot",
        "leading-dot",
        "open-bracket",
        "bad-index",
        "stray-bracket",
        "not-a-string",
        "junk-after-bracket",
    ],
)
def test_malformed_field_patterns(bad: object) -> None:
    with pytest.raises(PolicyError):
        parse_field_pattern(bad, "fields[0]")


def test_unanchored_mode_reproduces_upstream() -> None:
    rx = unanchored_matcher("status")
    assert rx.search("metadata.labels.status")
    assert rx.search("status.replicas")
    assert unanchored_matcher("spec.containers.*.imagePullPolicy").search(
        "spec.template.spec.containers.0.imagePullPolicy"
    )
