"""Audit events as the API server writes them, and the real audit log of ``tests/data/audit``."""

from __future__ import annotations

import io
import json
from typing import Any

from tests.support.data import AUDIT

#: A real control plane's audit log while a user installed, changed and removed a few applications
#: (``tests/data/audit/README.md``): 1,137 events.
REAL_LOG = AUDIT / "install-apps.audit.jsonl"


def event(
    verb: str = "create",
    user: str = "alice",
    resource: str = "configmaps",
    body: Any = None,
    *,
    namespace: str = "ns",
    name: str = "cm",
    group: str = "",
    version: str = "v1",
    subresource: str = "",
    groups: tuple[str, ...] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """An audit.k8s.io/v1 Event as the API server writes it (stage ResponseComplete, level Request).

    Without ``groups``, a service account gets the groups the API server gives every real one.
    """
    if groups is None:
        groups = ("system:authenticated",)
        if user.startswith("system:serviceaccount:"):
            groups = ("system:serviceaccounts", f"system:serviceaccounts:{user.split(':')[2]}", *groups)
    ref: dict[str, Any] = {"resource": resource, "apiVersion": version}
    for key, value in (("namespace", namespace), ("name", name), ("apiGroup", group), ("subresource", subresource)):
        if value:
            ref[key] = value
    data: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Request",
        "auditID": f"id-{verb}-{resource}-{name}",
        "stage": "ResponseComplete",
        "requestURI": f"/api/{version}/{resource}",
        "verb": verb,
        "user": {"username": user, "groups": list(groups)},
        "objectRef": ref,
        "requestReceivedTimestamp": "2026-11-21T11:57:30.588932Z",
    }
    if body is not None:
        data["requestObject"] = body
    data.update(extra)
    return data


def jsonl(*events: dict[str, Any]) -> io.BytesIO:
    return io.BytesIO(b"".join(json.dumps(e).encode() + b"\n" for e in events))
