"""How Argo CD, Flux and Helm deliver an object: the metadata each adds after rendering, from their source.

Each function stamps, in place, what the tool writes onto the object it applies:

* Argo CD (annotation tracking, its default, and client-side ``kubectl apply``):
  ``argocd.argoproj.io/tracking-id`` (argoproj/argo-cd
  util/argo/resource_tracking.go) and kubectl's last-applied-configuration;
* Flux kustomize-controller: its owner labels (fluxcd/pkg ssa SetOwnerLabels);
* Flux helm-controller: its origin labels (fluxcd/helm-controller
  internal/postrender/origin_labels.go), on top of Helm's metadata;
* Helm: ``app.kubernetes.io/managed-by: Helm`` and the release annotations
  (helm/helm pkg/action/validate.go setMetadataVisitor), the release
  namespace given to an object that names none.
"""

from __future__ import annotations

import json
from typing import Any

TRACKING = "argocd.argoproj.io/tracking-id"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
MANAGED_BY = "app.kubernetes.io/managed-by"
RELEASE_NAME, RELEASE_NAMESPACE = "meta.helm.sh/release-name", "meta.helm.sh/release-namespace"
KS_NAME, KS_NAMESPACE = "kustomize.toolkit.fluxcd.io/name", "kustomize.toolkit.fluxcd.io/namespace"
HR_NAME, HR_NAMESPACE = "helm.toolkit.fluxcd.io/name", "helm.toolkit.fluxcd.io/namespace"
#: Kinds without a namespace among those the pipeline tests deliver (the rest get the tool's namespace).
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PriorityClass"}


def annotate(obj: dict[str, Any], **values: str) -> None:
    obj["metadata"].setdefault("annotations", {}).update(values)


def label(obj: dict[str, Any], **values: str) -> None:
    obj["metadata"].setdefault("labels", {}).update(values)


def place(obj: dict[str, Any], namespace: str) -> None:
    """A namespaced object that names no namespace goes into the tool's (Argo CD's destination, Helm's release)."""
    if obj["kind"] not in CLUSTER_SCOPED and not obj["metadata"].get("namespace"):
        obj["metadata"]["namespace"] = namespace


def argocd(obj: dict[str, Any], app: str = "guestbook", destination: str = "default") -> None:
    place(obj, destination)
    group = obj["apiVersion"].rpartition("/")[0]
    meta = obj["metadata"]
    namespace = meta.get("namespace") or destination  # a cluster-scoped object carries the destination namespace
    annotate(obj, **{TRACKING: f"{app}:{group}/{obj['kind']}:{namespace}/{meta['name']}"})
    applied = {k: v for k, v in obj.items() if k != "status"}
    annotate(obj, **{LAST_APPLIED: json.dumps(applied, sort_keys=True)})


def flux(obj: dict[str, Any], kustomization: str = "apps", namespace: str = "flux-system") -> None:
    label(obj, **{KS_NAME: kustomization, KS_NAMESPACE: namespace})


def helm(obj: dict[str, Any], release: str = "web", namespace: str = "default") -> None:
    place(obj, namespace)
    label(obj, **{MANAGED_BY: "Helm"})
    annotate(obj, **{RELEASE_NAME: release, RELEASE_NAMESPACE: namespace})


def flux_helm(obj: dict[str, Any], release: str = "web", namespace: str = "default") -> None:
    helm(obj, release, namespace)
    label(obj, **{HR_NAME: release, HR_NAMESPACE: "flux-system"})
