"""Manifests for tests: a ConfigMap, and signed copies of any manifest with real keys."""

from __future__ import annotations

import copy
from typing import Any

from provider.keys.pem import PrivateKeyTypes
from provider.signatures.signing import sign_documents
from tests.support.keys import make_key


def sign(
    docs: list[dict[str, Any]] | dict[str, Any], key: PrivateKeyTypes | None = None, **kwargs: Any
) -> list[dict[str, Any]]:
    """Signed copies of ``docs`` (one message over all of them)."""
    if isinstance(docs, dict):
        docs = [docs]
    return sign_documents(copy.deepcopy(docs), key or make_key(), **kwargs)


def configmap(name: str = "cm", namespace: str | None = "ns", **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {"key": "value"}}
