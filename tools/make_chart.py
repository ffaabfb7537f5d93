"""Generate the parts of the Helm chart (``manifests/charts/manifest-provider``) that come from the code.

* ``files/kinds.yaml``: every spelling ``policies.kinds`` accepts (``Kind``,
  ``group/Kind``, ``core/Kind``) and what the policies match for it -- read
  from the tables ``manifest-provider policy`` uses (``provider/cli/_generate.py``
  ``parse_kinds``, ``KindRef.subresources``, ``OBJECT_KINDS``, the Kyverno
  selectors), so the chart's scope is the generator's, not a copy of it;
  whether a kind is namespaced comes from the recorded v1.36 discovery
  (``tests/data/dryrun/discovery``);
* the enumerations in ``values.schema.json`` that name code: the kinds, the
  built-in profiles (``provider.policy.schema.PROFILES``), the policy's fields and the
  service settings ``settings`` may set (``provider.service.config.Config``);
* ``README.md``: the values table, from the schema's descriptions and
  ``values.yaml``'s defaults.

``python tools/make_chart.py`` writes them (``make chart``);
``tests/manifests/test_chart.py`` fails when a committed file differs from what this
writes. The shipped policies, alerts and dashboard are not copied: the chart's
``files/`` links to them.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "manifests" / "charts" / "manifest-provider"
DISCOVERY = REPO / "tests" / "data" / "dryrun" / "discovery"

#: Settings the chart writes itself from other values (the ports, the certificate files, who calls and how
#: they authenticate, the deadline Gatekeeper's Provider timeout sets): ``settings`` may not set them.
CHART_SETTINGS = frozenset(
    {
        "port",
        "metrics_port",
        "cert",
        "key",
        "client_ca",
        "token_audience",
        "workers",
        "threads",
        "log_level",
        "bind",
        "metrics_bind",
        "unsafe_http",
        "kubeconfig",
    }
)
#: JSON Schema for each Config field's annotation.
_SETTING_TYPES: dict[str, dict[str, Any]] = {
    "int": {"type": "integer", "minimum": 0},
    "int | None": {"type": "integer", "minimum": 0},
    "float": {"type": "number", "minimum": 0},
    "float | None": {"type": "number", "minimum": 0},
    "bool": {"type": "boolean"},
    "str": {"type": "string", "minLength": 1},
    "str | None": {"type": "string", "minLength": 1},
    "tuple[str, ...]": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
    "tuple[str, ...] | None": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
}


def namespaced_resources() -> dict[tuple[str, str], bool]:
    """(group, resource) -> namespaced, from the recorded discovery documents."""
    found: dict[tuple[str, str], bool] = {}
    for path in sorted(DISCOVERY.glob("api_v1.json")) + sorted(DISCOVERY.glob("apis_*.json")):
        body = json.loads(path.read_text())["response"]["body"]
        group = body["groupVersion"].rpartition("/")[0]
        for resource in body["resources"]:
            if "/" not in resource["name"]:
                found[(group, resource["name"])] = bool(resource["namespaced"])
    if not found:
        sys.exit(f"no discovery documents under {DISCOVERY}")
    return found


def kinds_table() -> dict[str, dict[str, Any]]:
    """Every accepted spelling -> what the chart's templates need, computed by the generator's own functions."""
    from provider.cli._generate import OBJECT_KINDS, _kyverno_selectors, parse_kinds
    from provider.errors import ConfigError
    from provider.resources import BUILTIN_KINDS

    namespaced = namespaced_resources()
    spellings: list[str] = []
    for group, _resource in sorted(BUILTIN_KINDS):
        kind = BUILTIN_KINDS[(group, _resource)]
        spellings.append(f"{group or 'core'}/{kind}")
        spellings.append(kind)
    table: dict[str, dict[str, Any]] = {}
    for text in spellings:
        try:
            (ref,) = parse_kinds([text])
        except ConfigError:
            continue  # a bare kind of several groups (Event): only group/Kind names it
        if (ref.group, ref.resource) not in namespaced:
            continue  # not served by default (beta: ClusterTrustBundle); its scope is unknown here
        subresources = list(ref.subresources)
        gatekeeper = [[ref.group, ref.kind]] + [list(OBJECT_KINDS[s]) for s in subresources if s in OBJECT_KINDS]
        table[text] = {
            "group": ref.group,
            "kind": ref.kind,
            "resource": ref.resource,
            "namespaced": namespaced[(ref.group, ref.resource)],
            "subresources": subresources,
            # The constraint's match.kinds entries (a subresource's object kind too: Scale, Binding).
            "gatekeeperKinds": gatekeeper,
            "kyvernoSelectors": _kyverno_selectors(ref),
            "celResources": [ref.resource] + [f"{ref.resource}/{s}" for s in subresources],
            # How `manifest-provider observe` and kubectl name the resource.
            "observerResource": ref.resource if not ref.group else f"{ref.resource}.{ref.group}",
        }
    return table


def kinds_file() -> str:
    header = (
        "# Generated by tools/make_chart.py from provider/cli/_generate.py and provider/resources.py: do not edit.\n"
        "# policies.kinds spelling -> what each engine's policy matches for it.\n"
    )
    return header + yaml.safe_dump(kinds_table(), sort_keys=True, default_flow_style=None, width=120)


#: Settings the chart sets from other values unless ``settings`` names them.
_CHART_DEFAULTS = {
    "callers": "the chart sets the engine's caller (Gatekeeper's webhook certificate, Kyverno's admission "
    "controller); this replaces it",
    "deadline_seconds": "with engine gatekeeper the chart sets `gatekeeper.provider.timeout` less 0.5 s; this "
    "replaces it",
}


def _shown(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def settings_schema() -> dict[str, Any]:
    from provider.service.config import _OBJECTS, Config

    properties = {}
    for item in dataclasses.fields(Config):
        if item.name in _OBJECTS or item.name in CHART_SETTINGS:
            continue
        if str(item.type) not in _SETTING_TYPES:
            sys.exit(f"Config.{item.name}: no JSON Schema for its type {item.type}; add it to _SETTING_TYPES")
        schema = dict(_SETTING_TYPES[str(item.type)])
        if item.name in _CHART_DEFAULTS:
            default = f"; {_CHART_DEFAULTS[item.name]}"
        else:
            default = "" if item.default is dataclasses.MISSING else f" (default {_shown(item.default)})"
        schema["description"] = f"MANIFEST_PROVIDER_{item.name.upper()}{default}"
        properties[item.name] = schema
    return properties


def update_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with its code-derived parts replaced."""
    from provider.policy.schema import _POLICY_FIELDS, PROFILES

    defs = schema["definitions"]
    defs["kind"]["enum"] = sorted(kinds_table())
    defs["profile"]["enum"] = list(PROFILES)
    settings = schema["properties"]["settings"]
    settings["properties"] = settings_schema()
    policy = schema["properties"]["policy"]["properties"]
    for name in _POLICY_FIELDS:
        policy.setdefault(name, {"description": f"`{name}` (docs/policy.md)."})
    for name in list(policy):
        if name not in _POLICY_FIELDS:
            del policy[name]
    schema["properties"]["policy"]["properties"] = {name: policy[name] for name in _POLICY_FIELDS}
    return schema


def schema_file() -> str:
    schema = json.loads((CHART / "values.schema.json").read_text())
    return json.dumps(update_schema(schema), indent=2, ensure_ascii=False) + "\n"


# --- README ----------------------------------------------------------------------------------------


def _type_of(schema: dict[str, Any]) -> str:
    if "enum" in schema and len(schema["enum"]) <= 6:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    kind = schema.get("type", "any")
    if kind == "array":
        item = schema.get("items", {})
        return f"list of {_type_of(item)}"
    return str(kind if isinstance(kind, str) else " or ".join(kind))


def _rows(schema: dict[str, Any], values: Any, prefix: str) -> list[str]:
    rows = []
    for name, sub in (schema.get("properties") or {}).items():
        if not prefix and (name.startswith("_") or name == "global"):
            continue  # Helm's and the templates' own, not values to set
        path = f"{prefix}{name}"
        value = values.get(name) if isinstance(values, dict) else None
        described = sub.get("description", "")
        if sub.get("type") == "object" and sub.get("properties") and sub.get("x-readme") != "leaf":
            if described:
                rows.append(f"| `{path}` | object | | {described} |")
            rows.extend(_rows(sub, value or {}, path + "."))
            continue
        shown = "" if value is None else f"`{json.dumps(value)}`"
        rows.append(f"| `{path}` | {_type_of(sub)} | {shown} | {described.replace(chr(10), ' ')} |")
    return rows


def readme_file() -> str:
    schema = json.loads(schema_file())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    intro = (CHART / "README.intro.md").read_text()
    table = ["| value | type | default | what |", "|---|---|---|---|", *_rows(schema, values, "")]
    return (
        "<!-- Generated by tools/make_chart.py from README.intro.md, values.schema.json and values.yaml: "
        "edit those, then `make chart`. -->\n"
        + intro.rstrip("\n")
        + "\n\n## Values\n\nEvery value is checked by `values.schema.json` when Helm installs, upgrades or renders "
        "the chart: an unknown key, a wrong type or a value out of range is an error naming it.\n\n"
        + "\n".join(table)
        + "\n"
    )


OUTPUTS = {
    "files/kinds.yaml": kinds_file,
    "values.schema.json": schema_file,
    "README.md": readme_file,
}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name, make in OUTPUTS.items():
        path = CHART / name
        text = make()
        if path.exists() and path.read_text() == text:
            continue
        if check:
            stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO)}")
    if stale:
        print(f"out of date (run make chart): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main(sys.argv[1:]))
