"""The shipped kind schemas agree with the Kubernetes API models they were generated from.

``provider/data/kind_schemas.json`` says which fields of built-in kinds are maps
(``tools/make_kind_schemas.py``). Every claim in it is checked against the installed
``kubernetes`` client's models (generated from the Kubernetes OpenAPI document): a field
listed as a map is a ``Dict`` there, a struct field names the same model, a list field is a
``List`` of it. A client version that lacks a model or field is skipped for that entry; the
test asserts that most claims were checked, so it cannot pass on nothing.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

import pytest
from kubernetes import client

from provider.compare.kindschema import shape_of

DATA = json.loads(resources.files("provider").joinpath("data", "kind_schemas.json").read_text())


def _client_field(model: str, json_name: str) -> str | None:
    cls = getattr(client, model, None)
    if cls is None:
        return None
    for attribute, name in cls.attribute_map.items():
        if name == json_name:
            return str(cls.openapi_types[attribute])
    return None


def _agrees(kind: Any, text: str) -> bool:
    if kind == "map":
        return text.startswith("Dict[str, ")
    if isinstance(kind, str):
        return text == kind
    ((container, inner),) = kind.items()
    match = re.fullmatch(r"Dict\[str, (.+)\]" if container == "map" else r"List\[(.+)\]", text)
    return match is not None and _agrees(inner, match.group(1))


def test_every_claim_agrees_with_the_client_models() -> None:
    checked = 0
    for model, fields in DATA["types"].items():
        for name, kind in fields.items():
            text = _client_field(model, name)
            if text is None:
                continue  # this client version lacks it
            assert _agrees(kind, text), f"{model}.{name}: data says {kind}, the client model says {text}"
            checked += 1
    assert checked >= 200, f"only {checked} claims could be checked"


@pytest.mark.parametrize(
    ("api_version", "kind", "path"),
    [
        ("v1", "ConfigMap", ("data",)),
        ("v1", "Secret", ("stringData",)),
        ("v1", "Service", ("spec", "selector")),
        ("apps/v1", "Deployment", ("spec", "template", "spec", "nodeSelector")),
        ("apps/v1", "Deployment", ("spec", "template", "spec", "containers", 0, "resources", "limits")),
        ("apps/v1", "Deployment", ("spec", "selector", "matchLabels")),
        (
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            ("spec", "versions", 0, "schema", "openAPIV3Schema", "properties"),
        ),
        ("example.com/v1", "Widget", ("metadata", "labels")),
    ],
)
def test_known_maps(api_version: str, kind: str, path: tuple[str | int, ...]) -> None:
    shape = shape_of(api_version, kind)
    for step in path:
        assert shape is not None, path
        shape = shape.child(step)  # type: ignore[assignment]
    assert shape is not None and shape.is_map


@pytest.mark.parametrize(
    ("api_version", "kind", "path"),
    [
        ("networking.k8s.io/v1", "NetworkPolicy", ("spec", "ingress", 0, "from", 0, "namespaceSelector")),
        ("policy/v1", "PodDisruptionBudget", ("spec", "selector")),
        ("rbac.authorization.k8s.io/v1", "ClusterRole", ("aggregationRule", "clusterRoleSelectors", 0)),
        ("apps/v1", "Deployment", ("spec", "template", "spec", "containers", 0, "resources")),
        ("example.com/v1", "Widget", ("spec",)),
    ],
)
def test_structs_and_unknowns_are_not_maps(api_version: str, kind: str, path: tuple[str | int, ...]) -> None:
    shape = shape_of(api_version, kind)
    for step in path:
        if shape is None:
            break
        shape = shape.child(step)  # type: ignore[assignment]
    assert shape is None or not shape.is_map


def test_every_served_kind_has_a_schema() -> None:
    assert len(DATA["kinds"]) >= 60
    for key in (
        "v1/Pod",
        "apps/v1/Deployment",
        "networking.k8s.io/v1/NetworkPolicy",
        "autoscaling/v1/Scale",
        "v1/Secret",
    ):
        assert key in DATA["kinds"], key
