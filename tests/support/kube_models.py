"""Validate a built-in object against the official ``kubernetes`` client's models, as the API server would.

The models (generated from the Kubernetes OpenAPI document, the same source as
``provider/data/kind_schemas.json``, see ``tools/make_kind_schemas.py``) are
strict pydantic models: ``from_dict`` refuses a wrong type (``"80"`` for a port)
and a missing required field (a container without ``name``). It ignores fields
it does not know, which ``kubectl apply`` refuses (strict field validation), so
:func:`unknown_fields` walks the object against each model's ``openapi_types``
and ``attribute_map`` as well. :func:`problems` adds the metadata rules of
``tests/support/kube_schema.py``.
"""

from __future__ import annotations

import re
from typing import Any

import pydantic
from kubernetes import client

from tests.support.kube_schema import metadata_problems

_LIST = re.compile(r"List\[(.+)\]\Z")
_DICT = re.compile(r"Dict\[str, (.+)\]\Z")
#: Scalar type names in ``openapi_types`` (``object`` is IntOrString, Quantity and free-form JSON).
_SCALARS = frozenset({"str", "int", "float", "bool", "object", "datetime", "date", "bytearray", "bytes"})


def model_for(api_version: str, kind: str) -> type[Any] | None:
    """The client's model class: ``V1Deployment``, ``V2HorizontalPodAutoscaler``, or a group-prefixed one."""
    group, _, version = api_version.rpartition("/")
    ver = version[:1].upper() + version[1:]
    prefix = (group.split(".", maxsplit=1)[0] if group else "core").capitalize()
    for name in (f"{prefix}{ver}{kind}", f"{ver}{kind}"):
        found = getattr(client, name, None)
        if found is not None:
            return found  # type: ignore[no-any-return]
    return None


def unknown_fields(value: Any, type_name: str, path: str = "") -> list[str]:
    """Fields of ``value`` that the model named ``type_name`` does not have, at any depth."""
    if (m := _LIST.match(type_name)) is not None:
        if not isinstance(value, list):
            return []  # from_dict reports the type
        return [e for i, item in enumerate(value) for e in unknown_fields(item, m.group(1), f"{path}[{i}]")]
    if (m := _DICT.match(type_name)) is not None:
        if not isinstance(value, dict):
            return []
        return [e for key, item in value.items() for e in unknown_fields(item, m.group(1), f"{path}.{key}")]
    if type_name in _SCALARS or not isinstance(value, dict):
        return []
    model = getattr(client, type_name)
    by_json = {json_name: model.openapi_types[attr] for attr, json_name in model.attribute_map.items()}
    errors = []
    for key, item in value.items():
        where = f"{path}.{key}" if path else key
        if key not in by_json:
            errors.append(f"{where}: unknown field")
        else:
            errors.extend(unknown_fields(item, by_json[key], where))
    return errors


def problems(obj: dict[str, Any], *, namespaced: bool) -> list[str]:
    """What the API server would refuse in ``obj``, a built-in kind; a kind the client does not know is a problem."""
    model = model_for(str(obj.get("apiVersion")), str(obj.get("kind")))
    if model is None:
        return [f"{obj.get('apiVersion')} {obj.get('kind')}: not a kind the kubernetes client knows"]
    errors = metadata_problems(obj.get("metadata"), namespaced=namespaced)
    errors.extend(unknown_fields(obj, model.__name__))
    try:
        model.from_dict(obj)
    except (pydantic.ValidationError, ValueError, TypeError) as exc:
        errors.append(str(exc))
    return errors
