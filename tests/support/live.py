"""Live objects for the verify-resource, report and observer tests: signed, then changed as a cluster changes them.

``scaled`` is what the horizontal pod autoscaler does through ``scale``
(``spec.replicas`` only), ``reimaged`` what nobody exempt may do.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign

KEY = make_key("ecdsa-p256", 150)
PUBLIC_KEY = public_key_pem(KEY)
POLICY = {"keys": [PUBLIC_KEY]}


def deployment(name: str = "web", namespace: str = "shop", replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": name, "image": "nginx:1.27"}]},
            },
        },
    }


def signed(obj: dict[str, Any]) -> dict[str, Any]:
    (out,) = sign(obj, KEY)
    return out


def signed_configmap(name: str, namespace: str = "shop", **data: str) -> dict[str, Any]:
    return signed(configmap(name, namespace, **(data or {"key": name})))


def scaled(obj: dict[str, Any], replicas: int = 5) -> dict[str, Any]:
    """The autoscaler's change through ``scale``."""
    out = copy.deepcopy(obj)
    out["spec"]["replicas"] = replicas
    return out


def reimaged(obj: dict[str, Any], image: str = "evil.example/miner:latest") -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["spec"]["template"]["spec"]["containers"][0]["image"] = image
    return out


def stored(obj: dict[str, Any], resource_version: str = "1", uid: str | None = None) -> dict[str, Any]:
    """``obj`` with the metadata the API server adds when it stores it."""
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    meta.update({"uid": uid or str(uuid.uuid4()), "resourceVersion": resource_version})
    meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
    return out
