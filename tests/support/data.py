"""Shared test helpers: where the conformance data lives, and real keys and signatures.

The conformance data in ``../shared`` (interop fixtures, API-server recordings,
the audit log) is read in place, never copied.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

from provider.keys import PrivateKeyTypes, generate_key, public_pem
from provider.signing import sign_documents

REPO = Path(__file__).resolve().parents[2]
SHARED = (REPO / ".." / "shared").resolve()
INTEROP = SHARED / "interop"
UPSTREAM = INTEROP / "k8s-manifest-sigstore"
KYVERNO = INTEROP / "kyverno"
DRYRUN = SHARED / "dryrun"
AUDIT = SHARED / "audit"


def load_yaml(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


@functools.cache
def make_key(key_type: str = "ecdsa-p256", n: int = 0) -> PrivateKeyTypes:
    """A real private key, generated once per (type, n) per test run."""
    return generate_key(key_type)


def public_key_pem(key: PrivateKeyTypes) -> str:
    return public_pem(key).decode()


def sign(docs: list[dict[str, Any]] | dict[str, Any], key: PrivateKeyTypes | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    """Signed copies of ``docs`` (one message over all of them)."""
    if isinstance(docs, dict):
        docs = [docs]
    return sign_documents(copy.deepcopy(docs), key or make_key(), **kwargs)


def configmap(name: str = "cm", namespace: str | None = "ns", **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {"key": "value"}}
