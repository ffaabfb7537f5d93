"""Which fields of an object are maps: the one schema fact the comparison needs.

Contract: :func:`shape_of` returns the :class:`Shape` of an object of a given
``apiVersion`` and ``kind`` -- for built-in kinds from the Kubernetes API
schema, for anything else only what every object shares (``metadata`` is an
``ObjectMeta``). A position the shape does not describe is *unknown*
(``None``), and unknown is never a map. Below the top level of a kind the
schema does not know (a custom resource's ``spec``), every position is
*opaque* (:data:`OPAQUE`): the API server stores such objects as JSON, keeping
``{}`` and ``[]`` as sent, so the comparison treats both as values there.

Why it matters (``docs/policy.md``, "What equals what"): the API server's
encoder drops an empty map (``labels: {}``, a Service's ``selector: {}``) but
keeps an empty struct (a peer's ``namespaceSelector: {}`` admits every
namespace, a PodDisruptionBudget's ``selector: {}`` every pod, an
``aggregationRule`` selector ``{}`` every ClusterRole) -- recorded on a real
kube-apiserver in ``tests/data/dryrun/edge/empties-*.json``. So ``{}`` may equal
an absent field only where the schema says the field is a map; deciding it from
the value would let anyone add an empty struct that changes what an object does.

The data (``provider/data/kind_schemas.json``) is generated from the Kubernetes
OpenAPI models by ``tools/make_kind_schemas.py`` and lists only the paths that
lead to a map.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

DATA_FILE = "kind_schemas.json"


@dataclass(eq=False)
class Shape:
    """One position in an object: a struct (named fields), a map (any key) or a list (any index)."""

    kind: str  # "struct" | "map" | "list" | "opaque"
    fields: dict[str, Shape | None] = field(default_factory=dict)
    #: The shape of a map's values or a list's items (None: unknown).
    element: Shape | None = None
    #: For a struct: the shape of the fields it does not name (None: unknown).
    rest: Shape | None = None

    @property
    def is_map(self) -> bool:
        return self.kind == "map"

    @property
    def is_opaque(self) -> bool:
        return self.kind == "opaque"

    def child(self, key: str | int) -> Shape | None:
        """The shape below this one at ``key`` (None: unknown)."""
        if self.kind == "opaque":
            return self
        if self.kind == "struct":
            return self.fields.get(key, self.rest) if isinstance(key, str) else None
        if self.kind == "map":
            return self.element if isinstance(key, str) else None
        return self.element if isinstance(key, int) else None


#: Any position of an object whose kind the schema does not know, outside ``metadata``:
#: stored as sent (a custom resource is JSON to the API server), so ``[]`` and ``{}`` are values.
OPAQUE = Shape("opaque")


@dataclass(frozen=True)
class _Schemas:
    kinds: dict[str, Shape]
    object_meta: Shape
    generic: Shape


def _compile(data: dict[str, Any]) -> _Schemas:
    types: dict[str, dict[str, Any]] = data["types"]
    shapes: dict[str, Shape] = {name: Shape("struct") for name in types}

    def resolve(kind: Any) -> Shape | None:
        if kind == "map":
            return Shape("map")
        if isinstance(kind, str):
            return shapes.get(kind)
        ((container, inner),) = kind.items()
        return Shape("map" if container == "map" else "list", element=resolve(inner))

    # Shapes refer to each other (JSONSchemaProps is recursive): fill in place.
    for name, fields in types.items():
        shapes[name].fields = {key: resolve(kind) for key, kind in fields.items()}
    object_meta = shapes["V1ObjectMeta"]
    kinds = {key: shapes[model] for key, model in data["kinds"].items()}
    # A kind the schema does not know is a custom resource (or an aggregated API's): the API server
    # decodes it as unstructured JSON and keeps what it is sent, ``[]`` and ``{}`` included -- a
    # CiliumNetworkPolicy's ``fromCIDR: []`` selects no source, while without it a rule admits every
    # source (cilium/cilium pull request 29608). Only its ``metadata`` is typed.
    return _Schemas(kinds, object_meta, Shape("struct", {"metadata": object_meta}, rest=OPAQUE))


@cache
def _schemas() -> _Schemas:
    # Read as a file beside the package, as provider/policy/schema.py reads the profiles (importlib.resources
    # would load zipfile and tempfile for nothing: the package is installed as files).
    text = (Path(__file__).parents[1] / "data" / DATA_FILE).read_text(encoding="utf-8")
    return _compile(json.loads(text))


def shape_of(api_version: Any, kind: Any) -> Shape:
    """The shape of an object; for kinds the schema does not know, only ``metadata`` is described."""
    schemas = _schemas()
    if isinstance(api_version, str) and isinstance(kind, str):
        known = schemas.kinds.get(f"{api_version}/{kind}")
        if known is not None:
            return known
    return schemas.generic


def object_shape(obj: Any) -> Shape:
    """:func:`shape_of` for an object's own ``apiVersion`` and ``kind``."""
    if not isinstance(obj, dict):
        return _schemas().generic
    return shape_of(obj.get("apiVersion"), obj.get("kind"))
