"""Metadata a deployment tool stamps on every object it applies, taken only with the value the tool writes.

Argo CD, Flux and Helm add labels and annotations to each object after it was
rendered -- after any signature was made -- so a signed object they deliver
differs from its signed manifest by exactly those keys. An ignore pattern
would hide them whatever they hold, and a label or annotation is an input to
other controllers (selectors, ownership checks, pruning). So each such key is
a :class:`Stamp`: the exact keys one tool writes together and a check of the
values it writes, taken from the tool's source.

:func:`take_stamps` removes a stamp's keys from (a copy of) the admitted
object before the comparison -- the same place :mod:`provider.compare.allocations`
adopts the server's choices -- and only when all of these hold
(``docs/policy.md``, "Tool-stamped metadata"):

* a built-in profile the policy enables lists the stamp (``argocd``, ``flux``,
  ``helm``; nothing is taken by default);
* the signed manifest left the key open: a key the signer wrote is compared as
  it is, which is how a signer pins what a check cannot (the Argo CD
  application, the Flux Kustomization, the Helm release name);
* the stamp's check passes on the admitted values: the value has the tool's
  format, names this object where the format names one, and the keys the tool
  writes together are all there and agree.

Anything else stays in the comparison and is a difference: a value that fails
its check, a key under the tool's prefix that no stamp lists, a stamp of a
profile the policy does not enable. Stamps are matched by exact key, never by
pattern.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..objects import DNS_LABEL, ObjectIdentity
from ..readers import child_mapping

#: apimachinery pkg/util/validation: IsDNS1123Label (63) and IsDNS1123Subdomain (253).
_DNS_SUBDOMAIN_PART = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_SUBDOMAIN_PART}(\.{_DNS_SUBDOMAIN_PART})*\Z")
#: helm/helm pkg/chartutil/validate_name.go: a release name is at most 53 characters of a DNS subdomain.
HELM_RELEASE_NAME_MAX = 53


def is_dns_label(value: Any) -> bool:
    return isinstance(value, str) and bool(DNS_LABEL.match(value))


def is_dns_subdomain(value: Any, limit: int = 253) -> bool:
    return isinstance(value, str) and 0 < len(value) <= limit and bool(_DNS_SUBDOMAIN.match(value))


@dataclass(frozen=True)
class Stamped:
    """What a check sees: the admitted object's labels and annotations, its identity, and the signed namespace."""

    labels: Mapping[str, Any]
    annotations: Mapping[str, Any]
    ident: ObjectIdentity
    #: Whether the signed manifest names a namespace (else a tool chose it: the release's, the application's).
    signed_namespace: bool


#: A check returns "" when the values are what the tool writes, else why not (for the verdict's message).
Check = Callable[[Stamped], str]


@dataclass(frozen=True)
class Stamp:
    name: str
    tool: str
    labels: tuple[str, ...]
    annotations: tuple[str, ...]
    check: Check
    #: Where the keys and the format come from.
    source: str

    def keys(self) -> tuple[str, ...]:
        return tuple(f"label {k}" for k in self.labels) + tuple(f"annotation {k}" for k in self.annotations)


def _quote(value: Any) -> str:
    return repr(value[:80] + "…" if isinstance(value, str) and len(value) > 80 else value)


# --- Argo CD ----------------------------------------------------------------------

ARGOCD_TRACKING_ID = "argocd.argoproj.io/tracking-id"
#: An application's instance name: ``<name>``, or ``<namespace>_<name>`` for an application outside
#: Argo CD's own namespace ("Applications in any namespace").
_ARGOCD_APP = re.compile(rf"([a-z0-9]([-a-z0-9]{{0,61}}[a-z0-9])?_)?{_DNS_SUBDOMAIN_PART}(\.{_DNS_SUBDOMAIN_PART})*\Z")


def check_argocd_tracking_id(seen: Stamped) -> str:
    """``<application>:<group>/<kind>:<namespace>/<name>`` naming this very object.

    argoproj/argo-cd util/argo/resource_tracking.go (BuildAppInstanceValue,
    UnstructuredToAppInstanceValue): the group, kind and name are the object's;
    the namespace is the object's, or for a cluster-scoped object the
    application's destination namespace (which may be empty).
    """
    value = seen.annotations.get(ARGOCD_TRACKING_ID)
    if not isinstance(value, str):
        return f"{ARGOCD_TRACKING_ID} is not a string"
    app, _, rest = value.partition(":")
    if len(app) > 63 + 1 + 253 or not _ARGOCD_APP.match(app):
        return f"{ARGOCD_TRACKING_ID} {_quote(value)} does not start with an application name"
    ident = seen.ident
    this = f"{ident.group}/{ident.kind}:{ident.namespace}/{ident.name}"
    prefix = f"{ident.group}/{ident.kind}:"
    if ident.name and rest.startswith(prefix):
        namespace, slash, name = rest[len(prefix) :].partition("/")
        if slash and name == ident.name:
            if ident.namespace and namespace == ident.namespace:
                return ""
            if not ident.namespace and (namespace == "" or is_dns_label(namespace)):
                return ""  # cluster-scoped: the application's destination namespace, if it has one
    return f"{ARGOCD_TRACKING_ID} {_quote(value)} does not name this object ({app}:{this})"


# --- Flux -------------------------------------------------------------------------


def _owner_labels(group: str, what: str, also: Check | None = None) -> Check:
    """``<group>/name`` and ``<group>/namespace``, both, always (fluxcd/pkg ssa SetOwnerLabels, and helm-controller's
    origin labels); ``also``, when given, is what else must hold of an object that controller applied."""
    name_key, namespace_key = f"{group}/name", f"{group}/namespace"

    def check(seen: Stamped) -> str:
        name, namespace = seen.labels.get(name_key), seen.labels.get(namespace_key)
        if name is None or namespace is None:
            return f"{name_key} and {namespace_key} come together; one is missing"
        if not is_dns_subdomain(name):
            return f"{name_key} {_quote(name)} is not the name of a {what}"
        if not is_dns_label(namespace):
            return f"{namespace_key} {_quote(namespace)} is not a namespace name"
        if also is not None and (problem := also(seen)):
            return f"{name_key} on an object that is not a {what}'s: {problem}"
        return ""

    return check


FLUX_KUSTOMIZATION_GROUP = "kustomize.toolkit.fluxcd.io"
FLUX_HELMRELEASE_GROUP = "helm.toolkit.fluxcd.io"

# --- Helm -------------------------------------------------------------------------

HELM_MANAGED_BY = "app.kubernetes.io/managed-by"
HELM_RELEASE_NAME = "meta.helm.sh/release-name"
HELM_RELEASE_NAMESPACE = "meta.helm.sh/release-namespace"


def check_helm_release(seen: Stamped) -> str:
    """The label ``app.kubernetes.io/managed-by: Helm`` and both release annotations, agreeing.

    helm/helm pkg/action/validate.go (setMetadataVisitor): Helm sets all three
    on every object of a release. The release name follows Helm's rule; the
    release namespace is a namespace name and, for a namespaced object whose
    signed manifest named no namespace, the object's own (Helm installs such
    an object into the release namespace).
    """
    managed, name, namespace = (
        seen.labels.get(HELM_MANAGED_BY),
        seen.annotations.get(HELM_RELEASE_NAME),
        seen.annotations.get(HELM_RELEASE_NAMESPACE),
    )
    if managed != "Helm":
        return f"Helm's release annotations come with the label {HELM_MANAGED_BY}: Helm, not {_quote(managed)}"
    if name is None or namespace is None:
        return f"{HELM_RELEASE_NAME} and {HELM_RELEASE_NAMESPACE} come together; one is missing"
    if not is_dns_subdomain(name, HELM_RELEASE_NAME_MAX):
        return f"{HELM_RELEASE_NAME} {_quote(name)} is not a Helm release name"
    if not is_dns_label(namespace):
        return f"{HELM_RELEASE_NAMESPACE} {_quote(namespace)} is not a namespace name"
    if seen.ident.namespace and not seen.signed_namespace and namespace != seen.ident.namespace:
        return (
            f"{HELM_RELEASE_NAMESPACE} {_quote(namespace)} is not the namespace Helm installed this object into "
            f"({seen.ident.namespace})"
        )
    return ""


# --- the table --------------------------------------------------------------------

STAMPS: dict[str, Stamp] = {
    stamp.name: stamp
    for stamp in (
        Stamp(
            "argocd-tracking-id",
            "Argo CD",
            (),
            (ARGOCD_TRACKING_ID,),
            check_argocd_tracking_id,
            "argoproj/argo-cd util/argo/resource_tracking.go",
        ),
        Stamp(
            "flux-kustomization",
            "Flux kustomize-controller",
            (f"{FLUX_KUSTOMIZATION_GROUP}/name", f"{FLUX_KUSTOMIZATION_GROUP}/namespace"),
            (),
            _owner_labels(FLUX_KUSTOMIZATION_GROUP, "Kustomization"),
            "fluxcd/kustomize-controller internal/controller/kustomization_controller.go (SetOwnerLabels)",
        ),
        Stamp(
            "flux-helmrelease",
            "Flux helm-controller",
            (f"{FLUX_HELMRELEASE_GROUP}/name", f"{FLUX_HELMRELEASE_GROUP}/namespace"),
            (),
            # helm-controller installs through Helm's install and upgrade actions, so an object it applied
            # carries Helm's release metadata too (helm/helm pkg/action/validate.go): its origin labels on an
            # object without that metadata are not helm-controller's.
            _owner_labels(FLUX_HELMRELEASE_GROUP, "HelmRelease", also=check_helm_release),
            "fluxcd/helm-controller internal/postrender/origin_labels.go",
        ),
        Stamp(
            "helm-release",
            "Helm",
            (HELM_MANAGED_BY,),
            (HELM_RELEASE_NAME, HELM_RELEASE_NAMESPACE),
            check_helm_release,
            "helm/helm pkg/action/validate.go (setMetadataVisitor)",
        ),
    )
}


def take_stamps(
    admitted: dict[str, Any], signed: dict[str, Any], stamps: tuple[Stamp, ...], ident: ObjectIdentity
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The admitted object without the stamped keys the checks accept (a copy when any), and why others were not.

    Returns ``admitted`` itself when nothing is taken. The second value names,
    for each stamp present but refused, the reason: it goes into the verdict
    beside the difference the key then is.
    """
    if not stamps:
        return admitted, ()
    meta = child_mapping(admitted, "metadata")
    labels, annotations = child_mapping(meta, "labels"), child_mapping(meta, "annotations")
    signed_meta = child_mapping(signed, "metadata")
    signed_labels, signed_annotations = child_mapping(signed_meta, "labels"), child_mapping(signed_meta, "annotations")
    seen = Stamped(labels, annotations, ident, bool(signed_meta.get("namespace")))
    taken_labels: set[str] = set()
    taken_annotations: set[str] = set()
    refused: list[str] = []
    for stamp in stamps:
        open_labels = {k for k in stamp.labels if k in labels and k not in signed_labels}
        open_annotations = {k for k in stamp.annotations if k in annotations and k not in signed_annotations}
        if not open_labels and not open_annotations:
            continue
        problem = stamp.check(seen)
        if problem:
            refused.append(f"{stamp.tool} metadata not taken: {problem}")
            continue
        taken_labels |= open_labels
        taken_annotations |= open_annotations
    if not taken_labels and not taken_annotations:
        return admitted, tuple(refused)
    new_meta = dict(meta)
    for field, mapping, taken in (("labels", labels, taken_labels), ("annotations", annotations, taken_annotations)):
        if taken:
            kept = {k: v for k, v in mapping.items() if k not in taken}
            if kept or field in signed_meta:
                new_meta[field] = kept
            else:  # the signer wrote none: an empty map the tool's keys leave is no difference
                del new_meta[field]
    return {**admitted, "metadata": new_meta}, tuple(refused)
