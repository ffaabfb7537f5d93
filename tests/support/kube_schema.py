"""Validate an object against a CustomResourceDefinition's structural schema, as the API server does.

Why not a JSON Schema library: a CRD's ``openAPIV3Schema`` is JSON Schema
with Kubernetes rules on top, and the ones that matter most here are the
Kubernetes ones. JSON Schema allows any property a schema does not name;
the API server drops it, or -- with strict field validation, which
``kubectl apply`` asks for by default -- refuses it (``unknown field``), unless
``x-kubernetes-preserve-unknown-fields`` keeps it. ``x-kubernetes-int-or-string``,
``x-kubernetes-embedded-resource``, ``x-kubernetes-list-type`` and
``nullable`` have no JSON Schema spelling. Translating a 1.4 MB schema into
JSON Schema to then validate it would be a second validator to trust, so
this is the one, written from the rules of
``k8s.io/apiextensions-apiserver`` (``pkg/apiserver/schema`` structural
schemas and pruning, ``pkg/apiserver/validation``) and the Kubernetes
documentation on CRD validation. It covers every keyword the schemas it is
used on contain (:func:`keywords_in` lists them, and a test keeps the two in
step) and refuses to guess about any other.

Errors are strings ``path: message``; an empty list means the object is
accepted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

#: Keywords this validator implements. A schema using another one is refused (:func:`unsupported_keywords`).
SUPPORTED = frozenset(
    {
        "type",
        "properties",
        "additionalProperties",
        "items",
        "required",
        "enum",
        "description",
        "default",
        "nullable",
        "format",
        "pattern",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "oneOf",
        "anyOf",
        "allOf",
        "not",
        "title",
        "example",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-int-or-string",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
    }
)

#: ``metadata`` fields a client may set (``ObjectMeta``; the server owns the rest but accepts them back).
OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "labels",
        "annotations",
        "finalizers",
        "ownerReferences",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    }
)
#: ``IsDNS1123Subdomain`` (k8s.io/apimachinery/pkg/util/validation).
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
#: ``IsDNS1123Label`` (a namespace's name): at most 63 characters.
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: ``IsQualifiedName``: an optional DNS-subdomain prefix and a name of at most 63 characters.
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def _walk(schema: Any) -> Iterator[dict[str, Any]]:
    if isinstance(schema, dict):
        yield schema
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                for sub in value.values():
                    yield from _walk(sub)
            elif key in ("items", "additionalProperties", "not"):
                yield from _walk(value)
            elif key in ("oneOf", "anyOf", "allOf") and isinstance(value, list):
                for sub in value:
                    yield from _walk(sub)


def keywords_in(schema: dict[str, Any]) -> set[str]:
    return {key for node in _walk(schema) for key in node}


def unsupported_keywords(schema: dict[str, Any]) -> set[str]:
    return keywords_in(schema) - SUPPORTED


def _type_ok(value: Any, schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)
    if kind is None:
        return True
    return {
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "string": lambda v: isinstance(v, str),
        "boolean": lambda v: isinstance(v, bool),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    }[kind](value)


def _format_ok(value: Any, fmt: str) -> bool:
    if not isinstance(value, str | int):
        return True
    if fmt in ("int32", "int64"):
        limit = 2**31 if fmt == "int32" else 2**63
        return not isinstance(value, int) or -limit <= value < limit
    if fmt == "date-time":
        return (
            isinstance(value, str)
            and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", value) is not None
        )
    return True  # byte, duration, uri, ...: not used by the schemas this validates


def validate(value: Any, schema: dict[str, Any], path: str = "", *, strict: bool = True) -> list[str]:
    """Errors for ``value`` under ``schema``; ``strict`` makes unknown fields errors (``kubectl apply``'s default)."""
    errors: list[str] = []
    where = path or "<root>"
    if value is None:
        if schema.get("nullable"):
            return []
        if schema.get("x-kubernetes-preserve-unknown-fields") and "type" not in schema:
            return []
        return [f"{where}: must not be null (expected {schema.get('type', 'a value')})"]
    if not _type_ok(value, schema):
        return [f"{where}: expected {schema.get('type', 'integer or string')}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "format" in schema and not _format_ok(value, schema["format"]):
        errors.append(f"{where}: not a valid {schema['format']}")
    if isinstance(value, str):
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            errors.append(f"{where}: {value!r} does not match {schema['pattern']!r}")
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{where}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{where}: longer than {schema['maxLength']}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and (
            value < schema["minimum"] or (schema.get("exclusiveMinimum") and value == schema["minimum"])
        ):
            errors.append(f"{where}: below the minimum {schema['minimum']}")
        if "maximum" in schema and (
            value > schema["maximum"] or (schema.get("exclusiveMaximum") and value == schema["maximum"])
        ):
            errors.append(f"{where}: above the maximum {schema['maximum']}")
    if isinstance(value, list):
        errors.extend(_validate_list(value, schema, path, strict=strict))
    if isinstance(value, dict):
        errors.extend(_validate_object(value, schema, path, strict=strict))
    errors.extend(_value_validations(value, schema, where))
    return errors


def _validate_list(value: list[Any], schema: dict[str, Any], path: str, *, strict: bool) -> list[str]:
    errors = []
    where = path or "<root>"
    if len(value) < schema.get("minItems", 0):
        errors.append(f"{where}: fewer than {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(f"{where}: more than {schema['maxItems']} items")
    items = schema.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            errors.extend(validate(item, items, f"{path}[{i}]", strict=strict))
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set" or schema.get("uniqueItems"):
        seen = [repr(v) for v in value]
        if len(set(seen)) != len(seen):
            errors.append(f"{where}: duplicate items in a set")
    if list_type == "map":
        keys = [
            tuple(repr(item.get(k)) for k in schema.get("x-kubernetes-list-map-keys", []))
            for item in value
            if isinstance(item, dict)
        ]
        if len(set(keys)) != len(keys):
            errors.append(f"{where}: duplicate map keys {schema.get('x-kubernetes-list-map-keys')}")
    return errors


def _validate_object(value: dict[str, Any], schema: dict[str, Any], path: str, *, strict: bool) -> list[str]:
    errors = []
    where = path or "<root>"
    properties = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
    embedded = schema.get("x-kubernetes-embedded-resource") is True
    for name in schema.get("required", []):
        if name not in value:
            errors.append(f"{where}: {name!r} is required")
    for key, item in value.items():
        sub = f"{path}.{key}" if path else key
        if key in properties:
            errors.extend(validate(item, properties[key], sub, strict=strict))
        elif isinstance(additional, dict):
            errors.extend(validate(item, additional, sub, strict=strict))
        elif additional is True or preserve or (embedded and key in ("apiVersion", "kind", "metadata")):
            continue
        elif strict:
            errors.append(f"{sub}: unknown field")
    if len(value) < schema.get("minProperties", 0):
        errors.append(f"{where}: fewer than {schema['minProperties']} properties")
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        errors.append(f"{where}: more than {schema['maxProperties']} properties")
    return errors


def _value_validations(value: Any, schema: dict[str, Any], where: str) -> list[str]:
    """``oneOf``/``anyOf``/``allOf``/``not``: in a structural schema these only constrain values, never add fields."""

    def ok(sub: dict[str, Any]) -> bool:
        return validate(value, sub, where, strict=False) == []

    errors = []
    if "oneOf" in schema and sum(ok(s) for s in schema["oneOf"]) != 1:
        errors.append(f"{where}: must match exactly one of the oneOf schemas")
    if "anyOf" in schema and not any(ok(s) for s in schema["anyOf"]):
        errors.append(f"{where}: must match one of the anyOf schemas")
    if "allOf" in schema:
        errors.extend(e for s in schema["allOf"] for e in validate(value, s, where, strict=False))
    if "not" in schema and ok(schema["not"]):
        errors.append(f"{where}: must not match the 'not' schema")
    return errors


def metadata_problems(metadata: Any, *, namespaced: bool = False) -> list[str]:
    """What the API server's ``ValidateObjectMeta`` refuses in an object's metadata (cluster-scoped by default)."""
    if not isinstance(metadata, dict):
        return ["metadata: expected an object"]
    errors = [f"metadata.{key}: unknown field" for key in metadata if key not in OBJECT_META_FIELDS]
    name = metadata.get("name")
    if not isinstance(name, str) or len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
        errors.append(f"metadata.name: {name!r} is not a DNS-1123 subdomain")
    namespace = metadata.get("namespace")
    if namespaced and not (isinstance(namespace, str) and len(namespace) <= 63 and DNS1123_LABEL.fullmatch(namespace)):
        errors.append(f"metadata.namespace: {namespace!r} is not a namespace name")
    # A namespace on a cluster-scoped object is not refused: the API server clears it
    # (k8s.io/apiserver pkg/registry/rest create.go BeforeCreate, update.go BeforeUpdate).
    for field in ("labels", "annotations"):
        entries = metadata.get(field) or {}
        if not isinstance(entries, dict):
            errors.append(f"metadata.{field}: expected a map of strings")
            continue
        for key, val in entries.items():
            prefix, _, name_part = str(key).rpartition("/")
            if (
                (prefix and not DNS1123_SUBDOMAIN.fullmatch(prefix))
                or len(name_part) > 63
                or not QUALIFIED_NAME.fullmatch(name_part)
            ):
                errors.append(f"metadata.{field}: {key!r} is not a qualified name")
            if not isinstance(val, str):
                errors.append(f"metadata.{field}[{key!r}]: expected a string, got {type(val).__name__}")
    return errors


def crd_version(crd: dict[str, Any], api_version: str) -> dict[str, Any]:
    """The served version of ``crd`` that ``api_version`` (``group/version``) names."""
    group, _, version = api_version.partition("/")
    if group != crd["spec"]["group"]:
        raise LookupError(f"{api_version}: the CRD is for group {crd['spec']['group']}")
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            if not entry.get("served"):
                raise LookupError(f"{api_version} is not served")
            return dict(entry)
    raise LookupError(f"{api_version}: no such version in the CRD")


def validate_object(obj: dict[str, Any], crd: dict[str, Any]) -> list[str]:
    """Everything the API server checks before storing ``obj``, an instance of ``crd`` (its ``scope`` says where)."""
    if obj.get("kind") != crd["spec"]["names"]["kind"]:
        return [f"kind: {obj.get('kind')!r} is not {crd['spec']['names']['kind']!r}"]
    try:
        version = crd_version(crd, str(obj.get("apiVersion")))
    except LookupError as exc:
        return [f"apiVersion: {exc}"]
    schema = version["schema"]["openAPIV3Schema"]
    unsupported = unsupported_keywords(schema)
    if unsupported:
        raise NotImplementedError(f"schema keywords this validator does not implement: {sorted(unsupported)}")
    body = {k: v for k, v in obj.items() if k != "metadata"}
    namespaced = crd["spec"].get("scope") == "Namespaced"
    return metadata_problems(obj.get("metadata"), namespaced=namespaced) + validate(
        body, {**schema, "properties": {k: v for k, v in schema.get("properties", {}).items() if k != "metadata"}}
    )


# --- structural schemas (what a CustomResourceDefinition must hold to be accepted) ----------------------

#: Keywords a value validation (inside ``anyOf``/``allOf``/``oneOf``/``not``) may not carry to be structural.
_NOT_IN_VALUE_VALIDATION = ("type", "description", "default", "title", "nullable", "additionalProperties",
                            "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource",
                            "x-kubernetes-int-or-string", "x-kubernetes-list-map-keys", "x-kubernetes-list-type",
                            "x-kubernetes-map-type")  # fmt: skip


def structural_problems(schema: dict[str, Any]) -> list[str]:
    """Why ``schema`` (a CRD version's ``openAPIV3Schema``) is not structural, as the API server refuses one.

    The rules of k8s.io/apiextensions-apiserver, read at kubernetes/kubernetes
    01d1e251d7221ceb53410b4b83e70345aa43b9b9,
    ``staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/validation.go``
    (``validateStructuralInvariants``, ``validateStructuralMetadataInvariants``,
    ``validateNestedValueValidation``): every node has a ``type`` unless
    ``x-kubernetes-int-or-string`` or ``x-kubernetes-preserve-unknown-fields``
    says otherwise (root, array items, object fields); the root is an object
    without ``additionalProperties``; an array names its ``items``;
    ``metadata`` at the root restricts nothing but ``name`` and
    ``generateName``; ``x-kubernetes-embedded-resource`` is an object with
    properties or preserved fields; inside ``anyOf``/``allOf``/``oneOf``/``not``
    there are value validations only (no type, description, default, ...,
    no ``metadata``). And the CRD validation's
    (``pkg/apis/apiextensions/validation/validation.go``): ``properties`` and
    ``additionalProperties`` are mutually exclusive; a list of type ``map``
    names ``x-kubernetes-list-map-keys``, each required (or defaulted) in its
    items, and map keys appear with no other list type.
    """
    problems: list[str] = []

    def walk(node: Any, path: str, level: str) -> None:
        if not isinstance(node, dict):
            problems.append(f"{path}: not a schema")
            return
        kind = node.get("type")
        loose = node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
        if node.get("x-kubernetes-embedded-resource"):
            if kind != "object":
                problems.append(f"{path}.type: must be object if x-kubernetes-embedded-resource is true")
            if not node.get("properties") and not node.get("x-kubernetes-preserve-unknown-fields"):
                problems.append(
                    f"{path}.properties: must not be empty for an embedded resource without preserved fields"
                )
        elif not kind and not loose:
            where = {"root": "at the root", "item": "for specified array items", "field": "for specified object fields"}
            problems.append(f"{path}.type: must not be empty {where[level]}")
        if level == "root" and kind not in (None, "object"):
            problems.append(f"{path}.type: must be object at the root")
        if node.get("x-kubernetes-int-or-string") and node.get("x-kubernetes-preserve-unknown-fields"):
            problems.append(
                f"{path}: x-kubernetes-preserve-unknown-fields must be false with x-kubernetes-int-or-string"
            )
        if kind == "array" and "items" not in node:
            problems.append(f"{path}.items: must be specified")
        if "additionalProperties" in node:
            if level == "root":
                problems.append(f"{path}.additionalProperties: must not be used at the root")
            if "properties" in node:
                problems.append(f"{path}: properties and additionalProperties are mutually exclusive")
        list_type = node.get("x-kubernetes-list-type")
        if "x-kubernetes-list-map-keys" in node and list_type != "map":
            problems.append(f"{path}: x-kubernetes-list-map-keys needs x-kubernetes-list-type map")
        if list_type == "map":
            keys = node.get("x-kubernetes-list-map-keys") or []
            items = node.get("items") if isinstance(node.get("items"), dict) else {}
            if not keys:
                problems.append(f"{path}: x-kubernetes-list-type map needs x-kubernetes-list-map-keys")
            for key in keys:
                field = (items.get("properties") or {}).get(key)
                if field is None or (key not in (items.get("required") or []) and "default" not in field):
                    problems.append(f"{path}: map key {key!r} must be a required (or defaulted) field of the items")
        properties = node.get("properties") or {}
        if level == "root" and "metadata" in properties:
            meta = properties["metadata"]
            extra = {k for k in meta if k not in ("type", "properties")} if isinstance(meta, dict) else set()
            fields = set((meta.get("properties") or {}) if isinstance(meta, dict) else {})
            if (isinstance(meta, dict) and meta.get("type") != "object") or extra or fields - {"name", "generateName"}:
                problems.append(
                    f"{path}.properties.metadata: must not specify anything other than name and generateName"
                )
        for name, sub in properties.items():
            walk(sub, f"{path}.properties.{name}", "field")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}.items", "item")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.additionalProperties", "field")
        for junctor in ("anyOf", "allOf", "oneOf"):
            for i, sub in enumerate(node.get(junctor) or []):
                nested(sub, f"{path}.{junctor}[{i}]")
        if "not" in node:
            nested(node["not"], f"{path}.not")

    def nested(node: Any, path: str) -> None:
        if not isinstance(node, dict):
            problems.append(f"{path}: not a schema")
            return
        for keyword in _NOT_IN_VALUE_VALIDATION:
            if keyword in node:
                problems.append(f"{path}.{keyword}: must be undefined to be structural")
        if "metadata" in (node.get("properties") or {}):
            problems.append(f"{path}.properties.metadata: must not be specified in a nested context")
        for sub_path, sub in [(f"{path}.properties.{k}", v) for k, v in (node.get("properties") or {}).items()] + (
            [(f"{path}.items", node["items"])] if isinstance(node.get("items"), dict) else []
        ):
            nested(sub, sub_path)
        for junctor in ("anyOf", "allOf", "oneOf"):
            for i, sub in enumerate(node.get(junctor) or []):
                nested(sub, f"{path}.{junctor}[{i}]")

    walk(schema, "openAPIV3Schema", "root")
    return problems
