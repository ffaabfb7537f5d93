"""Objects the control plane writes into every namespace and nobody signs, recognised by their exact content.

Every namespace holds objects no person wrote: the root CA publisher's
``kube-root-ca.crt`` ConfigMap, the ServiceAccount controller's ``default``
ServiceAccount and, on OpenShift, the service CA publisher's
``openshift-service-ca.crt`` ConfigMap (all three in the real audit log of
``tests/data/audit``, once per namespace). At admission the built-in common
profile lets their writers through by identity
(``provider/policy/profiles/common.yaml``). A review that carries no request --
Gatekeeper's audit, a Kyverno background scan, ``verify-resource``, the
observer -- names nobody, and the objects can never be signed: they would be
listed as ``unsigned`` in every namespace, violations that neither signing nor
enforcing changes.

A :class:`Written` holds, from the writer's source, everything the writer puts
in its object; :func:`deviations` compares a stored object with it. What
counts (``docs/policy.md``, "Objects the control plane writes"):

* nothing but the writer's fields: no other top-level field (``binaryData``,
  ``immutable``, ``secrets``, ``imagePullSecrets``, ...), and in ``metadata``
  no labels, owner references, finalizers, ``generateName`` or deletion marks;
* exactly the writer's annotations, each with the writer's value;
* exactly the writer's data keys, each holding what the writer writes there: for
  a CA bundle, PEM ``CERTIFICATE`` blocks with nothing but whitespace around
  them, each an X.509 certificate, at most ``Limits.max_ca_bundle_chars``;
* what the API server itself sets on every stored object (``uid``,
  ``resourceVersion``, ``creationTimestamp``, ``managedFields``,
  ``namespace``) is bookkeeping, not content.

What the check cannot tell is *which* certificates a bundle should hold: a
forged CA in ``kube-root-ca.crt`` has the right form. The publisher writes the
cluster's CA back at its next sync (it re-queues the namespace on every update
of the ConfigMap), and a write at admission is verified like anyone's; the
outcome is for reviews without a request only (``docs/security.md``, "Objects
the control plane writes").
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..limits import DEFAULT_LIMITS, Limits
from ..objects import ObjectIdentity
from .diff import DiffItem, Path, render_path

#: Metadata the API server sets on every stored object: bookkeeping, not content. (No ``generation``:
#: the ConfigMap and ServiceAccount strategies set none, as the recorded responses in tests/data/dryrun show.)
SERVER_METADATA = frozenset({"namespace", "uid", "resourceVersion", "creationTimestamp", "managedFields"})

#: A value's check: "" when the value is what the writer writes there, else what is wrong with it.
ValueCheck = Callable[[Any, Limits], str]


@dataclass(frozen=True)
class Written:
    """One object a control-plane controller writes into every namespace, and exactly what it writes."""

    #: The name a built-in profile lists it by (``controlPlaneObjects[].check``): the writer's controller name.
    check: str
    #: Who writes it, for messages.
    writer: str
    group: str
    kind: str
    name: str
    #: The annotation maps the writers leave on it, each exactly (none: no annotations).
    annotations: tuple[Mapping[str, str], ...]
    #: A ConfigMap's ``data``: every key the writer sets and the check of its value; None: no data at all.
    data: Mapping[str, ValueCheck] | None
    #: Where this comes from.
    source: str

    def owns(self, ident: ObjectIdentity) -> bool:
        """Whether ``ident`` is this object by group, kind and name (any namespace; never through a subresource)."""
        return not ident.subresource and (ident.group, ident.kind, ident.name) == (self.group, self.kind, self.name)


@dataclass(frozen=True)
class Deviation:
    """Where a stored object is not what its writer writes.

    ``item.before`` is the writer's value (None where it writes nothing there,
    or where its value cannot be known: which certificates a bundle holds),
    ``item.after`` the stored one (None where absent). ``why`` says what is
    wrong with a value whose form the writer fixes but whose content it does not.
    """

    item: DiffItem
    why: str = ""


# --- CA bundles -------------------------------------------------------------------

#: One PEM ``CERTIFICATE`` block. The body's class has no ``-``, so the lazy match cannot run past an
#: END line: linear in the value's length.
_PEM_CERTIFICATE = re.compile(
    r"-----BEGIN CERTIFICATE-----[ \t]*\r?\n([A-Za-z0-9+/= \t\r\n]*?)-----END CERTIFICATE-----"
)
_WHITESPACE = re.compile(r"[ \t\r\n]+")


def ca_bundle(value: Any, limits: Limits) -> str:
    """One or more PEM certificates and whitespace: what a CA publisher writes (module docstring)."""
    if not isinstance(value, str):
        return f"is a {type(value).__name__}, not PEM certificates"
    if not value.strip():
        return "is empty: the control plane writes its CA certificates here"
    if len(value) > limits.max_ca_bundle_chars:
        return (
            f"holds {len(value)} characters, more than a CA bundle the control plane writes "
            f"({limits.max_ca_bundle_chars} at most)"
        )
    from cryptography import x509  # loaded only when a bundle is read

    position = 0
    for count, match in enumerate(_PEM_CERTIFICATE.finditer(value), 1):
        if value[position : match.start()].strip():
            return f"holds text outside its CERTIFICATE blocks, at character {position}: PEM certificates only"
        try:
            der = base64.b64decode(_WHITESPACE.sub("", match.group(1)), validate=True)
            x509.load_der_x509_certificate(der)
        except (binascii.Error, ValueError):
            return f"holds a CERTIFICATE block (the {_ordinal(count)}) that is not an X.509 certificate"
        position = match.end()
    if value[position:].strip():
        return f"holds text outside its CERTIFICATE blocks, at character {position}: PEM certificates only"
    return ""


def ca_bundle_or_empty(value: Any, limits: Limits) -> str:
    """A CA bundle, or "" before it was injected (OpenShift's service CA publisher creates the key empty)."""
    return "" if value == "" else ca_bundle(value, limits)


def _ordinal(n: int) -> str:
    return {1: "first", 2: "second", 3: "third"}.get(n, f"{n}th")


# --- the objects ------------------------------------------------------------------

#: kubernetes/kubernetes pkg/controller/certificates/rootcacertpublisher/publisher.go, ``Description``.
ROOT_CA_DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the "
    "internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes "
    "clusters."
)

ROOT_CA = Written(
    check="root-ca-cert-publisher",
    writer="the root CA publisher (kube-controller-manager)",
    group="",
    kind="ConfigMap",
    name="kube-root-ca.crt",
    annotations=({"kubernetes.io/description": ROOT_CA_DESCRIPTION},),
    data={"ca.crt": ca_bundle},
    source=(
        "kubernetes/kubernetes pkg/controller/certificates/rootcacertpublisher/publisher.go, syncNamespace: creates "
        "kube-root-ca.crt in every namespace with the kubernetes.io/description annotation and data {ca.crt: the root "
        "CA}; on any update whose data is not exactly that, or whose annotation is empty, it sets both again and "
        "leaves everything else (labels, other annotations, binaryData, owner references) as it found it. The root "
        "CA is kube-controller-manager's --root-ca-file, which must parse as PEM certificates "
        "(cmd/kube-controller-manager/app/certificates.go, readCA), else its client's CA data. The create is "
        "recorded in tests/data/audit (v1.36.2)"
    ),
)

#: openshift/service-ca-operator pkg/controller/cabundleinjector/configmap.go: what the injector adds.
SERVICE_CA_INJECTOR_ANNOTATIONS = {
    "openshift.io/owning-component": "service-ca",
    "openshift.io/description": (
        "Configmap is added/updated with a data item containing the CA signing bundle that can be used to verify "
        "service-serving certificates"
    ),
}
_SERVICE_CA_REQUESTS = (
    {"service.beta.openshift.io/inject-cabundle": "true"},
    {"service.alpha.openshift.io/inject-vulnerable-legacy-cabundle": "true"},
)

SERVICE_CA = Written(
    check="service-ca-cert-publisher",
    writer="OpenShift's service CA publisher (kube-controller-manager) and service CA operator",
    group="",
    kind="ConfigMap",
    name="openshift-service-ca.crt",
    annotations=tuple(
        mapping
        for request in _SERVICE_CA_REQUESTS
        for mapping in (request, {**request, **SERVICE_CA_INJECTOR_ANNOTATIONS})
    ),
    data={"service-ca.crt": ca_bundle_or_empty},
    source=(
        "openshift/kubernetes openshift-kube-controller-manager/servicecacertpublisher/publisher.go, syncNamespace: "
        "creates openshift-service-ca.crt in every namespace with the annotation "
        "service.beta.openshift.io/inject-cabundle: 'true' "
        "(service.alpha.openshift.io/inject-vulnerable-legacy-cabundle with "
        "OPENSHIFT_USE_VULNERABLE_LEGACY_SERVICE_CA_CRT) and data {service-ca.crt: ''}, and sets the annotations "
        "back to exactly that map on any update; openshift/service-ca-operator "
        "pkg/controller/cabundleinjector/configmap.go then sets data to exactly {service-ca.crt: the service CA "
        "bundle} and, where no owning component is set, adds openshift.io/owning-component and "
        "openshift.io/description. The create is recorded in tests/data/audit"
    ),
)

DEFAULT_SERVICE_ACCOUNT = Written(
    check="service-account-controller",
    writer="the ServiceAccount controller (kube-controller-manager)",
    group="",
    kind="ServiceAccount",
    name="default",
    annotations=(),
    data=None,
    source=(
        "kubernetes/kubernetes pkg/controller/serviceaccount/serviceaccounts_controller.go: "
        "DefaultServiceAccountsControllerOptions ensures {metadata: {name: default}} in every active namespace, "
        "creates it when missing and again when deleted, and never updates it. The create is recorded in "
        "tests/data/audit (v1.36.2)"
    ),
)

#: Every object a built-in profile may list, by its check's name.
CONTROL_PLANE_OBJECTS: dict[str, Written] = {w.check: w for w in (ROOT_CA, SERVICE_CA, DEFAULT_SERVICE_ACCOUNT)}


# --- the comparison ---------------------------------------------------------------


def _empty(value: Any) -> bool:
    """Absent in Kubernetes' terms: the API server stores no empty map, list or null (Go's ``omitempty``)."""
    return value is None or value in ({}, [])


def _extra(path: Path, fields: Mapping[str, Any], allowed: frozenset[str] | set[str]) -> list[Deviation]:
    return [
        Deviation(DiffItem((*path, key), None, fields[key]))
        for key in sorted(fields, key=str)
        if key not in allowed and not _empty(fields[key])
    ]


def _mapping(path: Path, want: Mapping[str, str], have: Mapping[str, Any]) -> list[Deviation]:
    out = []
    for key in sorted({*want, *have}, key=str):
        if key not in have:
            out.append(Deviation(DiffItem((*path, key), want[key], None)))
        elif key not in want or have[key] != want[key]:
            out.append(Deviation(DiffItem((*path, key), want.get(key), have[key])))
    return out


def _annotations(written: Written, stored: Any) -> list[Deviation]:
    path: Path = ("metadata", "annotations")
    if _empty(stored):
        stored = {}
    if not isinstance(stored, dict):
        return [Deviation(DiffItem(path, None, stored), "is not a mapping")]
    # The closest of the maps the writers leave: its differences are the ones to name.
    return min((_mapping(path, want, stored) for want in written.annotations or ({},)), key=len)


def _data(written: Written, checks: Mapping[str, ValueCheck], stored: Any, limits: Limits) -> list[Deviation]:
    if _empty(stored):
        stored = {}
    if not isinstance(stored, dict):
        return [Deviation(DiffItem(("data",), None, stored), "is not a mapping")]
    out = _extra(("data",), stored, set(checks))
    for key in sorted(checks):
        path = ("data", key)
        if key not in stored:
            out.append(Deviation(DiffItem(path, None, None), f"is missing: {written.writer} always writes it"))
            continue
        why = checks[key](stored[key], limits)
        if why:
            out.append(Deviation(DiffItem(path, None, stored[key]), why))
    return out


def deviations(written: Written, obj: Mapping[str, Any], limits: Limits = DEFAULT_LIMITS) -> list[Deviation]:
    """Where ``obj`` (one :meth:`Written.owns`) is not what ``written``'s writer writes; empty when exactly that."""
    top = {"apiVersion", "kind", "metadata"} | ({"data"} if written.data is not None else set())
    out = []
    if obj.get("apiVersion") != "v1":  # the core group's one version
        out.append(Deviation(DiffItem(("apiVersion",), "v1", obj.get("apiVersion"))))
    out += _extra((), obj, top)
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    out += _extra(("metadata",), meta, SERVER_METADATA | {"name", "annotations"})
    out += _annotations(written, meta.get("annotations"))
    if written.data is not None:
        out += _data(written, written.data, obj.get("data"), limits)
    return out


def _quote(value: Any, limits: Limits) -> str:
    text = f"'{value}'" if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limits.max_quoted_value else text[: limits.max_quoted_value - 1] + "…"


def describe(found: list[Deviation], limits: Limits = DEFAULT_LIMITS) -> str:
    """The first deviation in a sentence, and how many more (as :func:`provider.verifier.describe_diff` does)."""
    first = found[0]
    item = first.item
    if item.redacted:
        text = f"{item.key} is not what the control plane writes (a sensitive value: neither value is shown)"
    elif first.why:
        text = f"{item.key} {first.why}"
    elif item.before is None:
        text = f"{item.key} was added: stored {_quote(item.after, limits)}, which the control plane does not write"
    elif item.after is None:
        text = f"{item.key} was removed: the control plane writes {_quote(item.before, limits)}"
    else:
        text = (
            f"{item.key} differs: the control plane writes {_quote(item.before, limits)}, "
            f"stored {_quote(item.after, limits)}"
        )
    if len(found) > 1:
        keys = ", ".join(render_path(d.item.path) for d in found[1:4])
        more = f" and {len(found) - 4} more" if len(found) > 4 else ""
        text += f"; {len(found) - 1} more difference{'s' if len(found) > 2 else ''}: {keys}{more}"
    return text
