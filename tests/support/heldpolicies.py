"""Policy objects the service holds, and the AdmissionReviews the API server sends, for tests.

:func:`cluster_policy` and :func:`tenant_policy` build ``ClusterManifestPolicy``
and ``ManifestPolicy`` objects as a person would apply them; :func:`review` and
:func:`admission_review` build what the API server sends a validating webhook
for a write (``staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/request/admissionreview.go``
``CreateV1AdmissionReview``: uid, kind, resource, subResource, requestKind,
requestResource, name, namespace, operation, userInfo, object, oldObject, dryRun,
options).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from provider.policystore.objects import API_VERSION
from tests.support.data import REPO, load_yaml

CRD_DIR = REPO / "manifests" / "crds"
CRD_FILES = (
    CRD_DIR / "manifest-provider.io_clustermanifestpolicies.yaml",
    CRD_DIR / "manifest-provider.io_manifestpolicies.yaml",
)
USER = {"username": "alice@example.com", "groups": ["developers", "system:authenticated"]}


def crds() -> list[dict[str, Any]]:
    return [load_yaml(path)[0] for path in CRD_FILES]


def _spec(policy: dict[str, Any], action: str, match: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"action": action, "policy": policy}
    if match is not None:
        spec["match"] = match
    return spec


def cluster_policy(
    name: str, policy: dict[str, Any], *, action: str = "Enforce", match: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ClusterManifestPolicy", "metadata": {"name": name},
            "spec": _spec(policy, action, match)}  # fmt: skip


def tenant_policy(
    name: str, namespace: str, policy: dict[str, Any], *, action: str = "Enforce", match: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ManifestPolicy", "metadata": {"name": name, "namespace": namespace},
            "spec": _spec(policy, action, match)}  # fmt: skip


#: (group, version, resource) of the kinds the tests write.
RESOURCES = {
    "ConfigMap": ("", "v1", "configmaps"),
    "Secret": ("", "v1", "secrets"),
    "Namespace": ("", "v1", "namespaces"),
    "Deployment": ("apps", "v1", "deployments"),
    "ClusterRole": ("rbac.authorization.k8s.io", "v1", "clusterroles"),
    "ClusterManifestPolicy": ("manifest-provider.io", "v1alpha1", "clustermanifestpolicies"),
    "ManifestPolicy": ("manifest-provider.io", "v1alpha1", "manifestpolicies"),
}


def review(
    obj: dict[str, Any] | None,
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    namespace: str | None = None,
    dry_run: bool = False,
    uid: str | None = None,
) -> dict[str, Any]:
    """The ``request`` of an AdmissionReview for a write of ``obj``."""
    target = obj if obj is not None else old or {}
    group, version, resource = RESOURCES[target["kind"]]
    meta = target.get("metadata", {})
    if namespace is None:
        namespace = meta.get(
            "namespace", meta.get("name", "") if target["kind"] == "Namespace" and operation != "CREATE" else ""
        )
    kind = {"group": group, "version": version, "kind": target["kind"]}
    gvr = {"group": group, "version": version, "resource": resource}
    options_kind = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}[operation]
    return {
        "uid": uid or str(uuid.uuid4()),
        "kind": kind,
        "resource": gvr,
        "requestKind": kind,
        "requestResource": gvr,
        "name": meta.get("name", ""),
        "namespace": namespace,
        "operation": operation,
        "userInfo": user or USER,
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {"kind": options_kind, "apiVersion": "meta.k8s.io/v1"},
    }


def admission_review(obj: dict[str, Any] | None, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": review(obj, **fields)}


def write_policies(path: Path, *objects: dict[str, Any]) -> Path:
    import yaml

    path.write_text(yaml.safe_dump_all(list(objects), sort_keys=False))
    return path
