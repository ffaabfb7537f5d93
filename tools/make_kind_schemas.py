"""Generate ``provider/data/kind_schemas.json``: which fields of built-in kinds are maps.

The comparison (``provider/compare/diff.py``) treats an empty mapping ``{}`` as absent
only where the field is a *map* (Go ``map[string]...``, OpenAPI
``additionalProperties``): the API server's encoder drops empty maps, but keeps
empty structs (``securityContext: {}``, a selector ``{}`` that selects
everything). Which is which must come from the kind's schema, never from the
value.

The schema used here is the official ``kubernetes`` Python client's models,
generated from the Kubernetes OpenAPI document: each model's ``openapi_types``
names a field's type (``Dict[str, str]`` is a map, ``V1PodSpec`` a struct,
``List[V1Container]`` a list of structs) and ``attribute_map`` its JSON name.
The kinds come from the API server's discovery documents recorded in
``tests/data/dryrun/discovery`` (every group/version a v1.36 API server serves),
plus the kinds of subresources (``autoscaling/v1 Scale``, ``Binding``,
``policy/v1 Eviction``).

Only what leads to a map is written (a struct field whose subtree holds no map
is left out); a field that is not listed is therefore "not a map" -- the
fail-closed reading. Run ``make kind-schemas`` after upgrading the client.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes import client

REPO = Path(__file__).resolve().parents[1]
DISCOVERY = REPO / "tests" / "data" / "dryrun" / "discovery"
OUTPUT = REPO / "provider" / "data" / "kind_schemas.json"

_DICT = re.compile(r"Dict\[str, (.+)\]\Z")
_LIST = re.compile(r"List\[(.+)\]\Z")
_SCALARS = frozenset({"str", "int", "float", "bool", "datetime", "date", "bytes", "object"})


def served_kinds() -> list[tuple[str, str, str]]:
    """(group, version, kind) of every top-level resource and every subresource kind the recordings list."""
    found: set[tuple[str, str, str]] = set()
    files = sorted(DISCOVERY.glob("api_v1.json")) + sorted(DISCOVERY.glob("apis_*.json"))
    if not files:
        sys.exit(f"no discovery documents under {DISCOVERY}")
    for path in files:
        body = json.loads(path.read_text())["response"]["body"]
        group, _, version = body["groupVersion"].rpartition("/")
        for resource in body["resources"]:
            if "/" in resource["name"]:  # a subresource: its own kind, maybe in another group
                found.add(
                    (resource.get("group", group) or "", resource.get("version", version) or version, resource["kind"])
                )
            else:
                found.add((group, version, resource["kind"]))
    return sorted(found)


def model_for(group: str, version: str, kind: str) -> str | None:
    """The client's model class name: ``V1Deployment``, or a group-prefixed one where names clash (``CoreV1Event``)."""
    ver = version[:1].upper() + version[1:]
    prefix = (group.split(".", maxsplit=1)[0] if group else "core").capitalize()
    for name in (f"{prefix}{ver}{kind}", f"{ver}{kind}"):
        if hasattr(client, name):
            return name
    return None


def field_type(text: str) -> Any:
    """A client type string as JSON: ``"map"``/``{"map": T}``, ``{"list": T}``, a model name, or None (a scalar)."""
    if (m := _DICT.match(text)) is not None:
        inner = field_type(m.group(1))
        return "map" if inner is None else {"map": inner}
    if (m := _LIST.match(text)) is not None:
        inner = field_type(m.group(1))
        return None if inner is None else {"list": inner}
    if text in _SCALARS:
        return None
    if not hasattr(client, text):
        raise SystemExit(f"unknown client type {text!r}")
    return text


def collect(roots: list[str]) -> dict[str, dict[str, Any]]:
    """Every model reachable from ``roots``, as {json field name: field type} (scalars dropped)."""
    types: dict[str, dict[str, Any]] = {}
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in types:
            continue
        model = getattr(client, name)
        fields: dict[str, Any] = {}
        for attribute, text in model.openapi_types.items():
            kind = field_type(text)
            if kind is not None:
                fields[model.attribute_map[attribute]] = kind
                pending.extend(_models_in(kind))
        types[name] = fields
    return types


def _models_in(kind: Any) -> list[str]:
    if isinstance(kind, str):
        return [] if kind == "map" else [kind]
    return _models_in(next(iter(kind.values())))


def prune(types: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Keep only fields that lead to a map (fixpoint over the possibly recursive type graph)."""
    has_map: set[str] = set()

    def leads(kind: Any) -> bool:
        if kind == "map" or (isinstance(kind, dict) and "map" in kind):
            return True
        if isinstance(kind, dict):
            return leads(kind["list"])
        return kind in has_map

    changed = True
    while changed:
        changed = False
        for name, fields in types.items():
            if name not in has_map and any(leads(k) for k in fields.values()):
                has_map.add(name)
                changed = True
    return {
        name: {f: k for f, k in sorted(fields.items()) if leads(k)}
        for name, fields in sorted(types.items())
        if name in has_map
    }


def main(output: Path = OUTPUT) -> None:
    """Write the document to ``output`` (``python tools/make_kind_schemas.py [--output PATH]``; default: the package's)."""
    kinds: dict[str, str] = {}
    missing: list[str] = []
    for group, version, kind in served_kinds():
        model = model_for(group, version, kind)
        key = f"{group}/{version}/{kind}" if group else f"{version}/{kind}"
        if model is None:
            missing.append(key)
        else:
            kinds[key] = model
    types = prune(collect(sorted(set(kinds.values()) | {"V1ObjectMeta"})))
    document = {
        "description": "Which fields of built-in kinds are maps (an empty map equals an absent one); generated by tools/make_kind_schemas.py",
        "source": f"kubernetes Python client {kubernetes.__version__} models (openapi_types, attribute_map); kinds from a v1.36 API server's discovery",
        "kinds": {key: model for key, model in sorted(kinds.items()) if model in types},
        "types": types,
    }
    output.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")
    print(f"{output}: {len(document['kinds'])} kinds, {len(types)} types; no model for {', '.join(missing) or 'none'}")


if __name__ == "__main__":
    arguments = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    arguments.add_argument("--output", type=Path, default=OUTPUT, help="where to write (default: %(default)s)")
    main(arguments.parse_args().output)
