"""Subresources: how each one changes an object, what the service decides, and how each engine matches it.

The content of a stored object can change through a subresource as well as
through the object's own endpoint (``kubectl scale`` is an UPDATE of
``deployments/scale``; ``kubectl debug`` an UPDATE of
``pods/ephemeralcontainers``). Admission sees such a request with
``subResource`` set and, for some, an object of another kind (an
``autoscaling/v1`` ``Scale``, a ``Binding``). A policy that matches only the
parent kind never sees them.

:data:`SUBRESOURCES` is the decision per subresource, the contract between
the policies and the service (docs/policy.md, "Subresources", shows the same
table): ``verified`` like any write (the request carries the whole parent
object), ``denied-unless-exempt`` with reason ``unverifiable-subresource``
(the request carries another kind's object, so there is nothing to check a
signature against), ``unverifiable-operation`` (allowed: nothing new is
stored), or ``harmless`` (the parent object does not change; not sent).

The rest reproduces how a request is matched, so the tests can check that
every subresource the service must see reaches it, in both engines:

* the API server's webhook rules (``k8s.io/apiserver`` ``rules.Matcher``;
  ``*`` is every resource, ``*/*`` every resource and subresource,
  ``x/*`` and ``*/y`` the obvious halves);
* Gatekeeper's constraint match on kinds and namespaces (gatekeeper
  ``pkg/mutation/match/match.go``: the review object's group and kind, ``*``
  a wildcard; namespaces exact or with a trailing ``*``);
* Kyverno's kind selectors (``pkg/utils/kube/kind.go`` ``ParseKindSelector``
  and ``pkg/utils/match/kind.go`` ``CheckKind`` in kyverno/kyverno:
  ``Kind``, ``Kind/sub``, ``group/version/Kind/sub``; a selector without a
  subresource matches no subresource request, except that a validate rule on
  ``Pod`` also matches ``pods/ephemeralcontainers``).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Literal

Decision = Literal["verified", "denied-unless-exempt", "unverifiable-operation", "harmless"]


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    kind: str
    resource: str

    def gvk(self) -> dict[str, str]:
        return {"group": self.group, "version": self.version, "kind": self.kind}

    def gvr(self) -> dict[str, str]:
        return {"group": self.group, "version": self.version, "resource": self.resource}


KINDS = {
    k.kind: k
    for k in [
        Kind("", "v1", "ConfigMap", "configmaps"),
        Kind("", "v1", "Pod", "pods"),
        Kind("", "v1", "Namespace", "namespaces"),
        Kind("", "v1", "Service", "services"),
        Kind("", "v1", "ServiceAccount", "serviceaccounts"),
        Kind("", "v1", "ReplicationController", "replicationcontrollers"),
        Kind("apps", "v1", "Deployment", "deployments"),
        Kind("apps", "v1", "ReplicaSet", "replicasets"),
        Kind("apps", "v1", "StatefulSet", "statefulsets"),
        Kind("apps", "v1", "DaemonSet", "daemonsets"),
        Kind("certificates.k8s.io", "v1", "CertificateSigningRequest", "certificatesigningrequests"),
    ]
}
#: A custom resource (its CRD serves status), for ``--match-kind group/Kind``.
WIDGET = Kind("example.com", "v1", "Widget", "widgets")
#: Every kind a request here can be for: the built-in ones and the custom resource.
ALL_KINDS = {**KINDS, WIDGET.kind: WIDGET}
SCALE = Kind("autoscaling", "v1", "Scale", "")
BINDING = Kind("", "v1", "Binding", "")
EVICTION = Kind("policy", "v1", "Eviction", "")
TOKEN_REQUEST = Kind("authentication.k8s.io", "v1", "TokenRequest", "")
CONNECT_OPTIONS = {
    "exec": "PodExecOptions",
    "attach": "PodAttachOptions",
    "portforward": "PodPortForwardOptions",
    "proxy": "PodProxyOptions",
}


@dataclass(frozen=True)
class Subresource:
    name: str
    #: Kinds that have it (among those the policies here can protect).
    parents: tuple[str, ...]
    operations: tuple[str, ...]
    #: The request's object kind; None: the parent kind itself.
    object_kind: Kind | None
    decision: Decision
    why: str


SUBRESOURCES: tuple[Subresource, ...] = (
    Subresource(
        "status",
        (
            "Deployment",
            "ReplicaSet",
            "StatefulSet",
            "DaemonSet",
            "ReplicationController",
            "Pod",
            "Namespace",
            "Service",
            "CertificateSigningRequest",
        ),
        ("UPDATE",),
        None,
        "verified",
        "the request carries the whole object; status strategies keep spec, but metadata such as a "
        "Deployment's annotations is written through them",
    ),
    Subresource(
        "scale",
        ("Deployment", "ReplicaSet", "StatefulSet", "ReplicationController"),
        ("UPDATE",),
        SCALE,
        "denied-unless-exempt",
        "the object is an autoscaling/v1 Scale: replicas only, no signature to check "
        "it against; the horizontal-pod-autoscaler is exempt for spec.replicas",
    ),
    Subresource(
        "ephemeralcontainers",
        ("Pod",),
        ("UPDATE",),
        None,
        "verified",
        "adds containers (image, command) to a running Pod",
    ),
    Subresource(
        "resize", ("Pod",), ("UPDATE",), None, "verified", "changes the containers' resources (Kubernetes 1.33+)"
    ),
    Subresource(
        "binding",
        ("Pod",),
        ("CREATE",),
        BINDING,
        "denied-unless-exempt",
        "the object is a Binding that sets the Pod's spec.nodeName; kube-scheduler is exempt",
    ),
    Subresource("finalize", ("Namespace",), ("UPDATE",), None, "verified", "rewrites spec.finalizers"),
    Subresource(
        "approval",
        ("CertificateSigningRequest",),
        ("UPDATE",),
        None,
        "verified",
        "the approval condition; the request is checked again, so a request that fails its checks is never approved",
    ),
    Subresource(
        "eviction",
        ("Pod",),
        ("CREATE",),
        EVICTION,
        "unverifiable-operation",
        "deletes the Pod (subject to disruption budgets): nothing new is stored",
    ),
    *(
        Subresource(
            name,
            ("Pod",),
            ("CONNECT",),
            Kind("", "v1", options, ""),
            "unverifiable-operation",
            "opens a stream to the Pod; nothing is stored",
        )
        for name, options in CONNECT_OPTIONS.items()
    ),
    Subresource(
        "token",
        ("ServiceAccount",),
        ("CREATE",),
        TOKEN_REQUEST,
        "harmless",
        "mints a token for the ServiceAccount, which does not change (who may do so is RBAC's question)",
    ),
)

#: Decisions that need the request at the service: a policy protecting the parent kind must send these.
MUST_REACH_SERVICE: frozenset[Decision] = frozenset({"verified", "denied-unless-exempt"})


def subresources_of(kind: str) -> list[Subresource]:
    return [s for s in SUBRESOURCES if kind in s.parents]


def admission_request(
    kind: str,
    subresource: Subresource | None,
    namespace: str | None = "demo",
    name: str = "web",
    operation: str | None = None,
) -> dict[str, Any]:
    """The AdmissionRequest the API server sends for a write to ``kind`` (through ``subresource``)."""
    parent = ALL_KINDS[kind]
    object_kind = parent if subresource is None or subresource.object_kind is None else subresource.object_kind
    meta: dict[str, Any] = {"name": name}
    if namespace is not None and kind != "Namespace":
        meta["namespace"] = namespace
    obj = {
        "apiVersion": f"{object_kind.group}/{object_kind.version}".lstrip("/"),
        "kind": object_kind.kind,
        "metadata": meta,
    }
    operation = operation or (subresource.operations[0] if subresource else "UPDATE")
    return {
        "uid": "5e0b7a52-0000-4000-8000-000000000000",
        "kind": object_kind.gvk(),
        "resource": parent.gvr(),
        "subResource": subresource.name if subresource else "",
        "requestKind": object_kind.gvk(),
        "requestResource": parent.gvr(),
        "requestSubResource": subresource.name if subresource else "",
        "name": name,
        "namespace": meta.get("namespace", ""),
        "operation": operation,
        "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": obj if operation == "UPDATE" else None,
        "dryRun": False,
    }


# --- the API server's webhook rules --------------------------------------------------------------


def rule_matches(rule: dict[str, Any], request: dict[str, Any]) -> bool:
    """One ``RuleWithOperations`` against a request (``matchPolicy: Exact``: the request's own resource)."""

    def listed(values: list[str], value: str) -> bool:
        return "*" in values or value in values

    resource = request["resource"]
    sub = request.get("subResource") or ""
    if not (
        listed(rule.get("operations", []), request["operation"])
        and listed(rule.get("apiGroups", []), resource["group"])
        and listed(rule.get("apiVersions", []), resource["version"])
    ):
        return False
    for entry in rule.get("resources", []):
        res, _, entry_sub = entry.partition("/")
        if entry == "*/*":
            return True
        if not entry_sub:
            if sub == "" and res in ("*", resource["resource"]):
                return True
            continue
        if res in ("*", resource["resource"]) and entry_sub in ("*", sub):
            return True
    return False


def rules_send(rules: list[dict[str, Any]], request: dict[str, Any]) -> bool:
    return any(rule_matches(rule, request) for rule in rules)


# --- Gatekeeper's constraint match ------------------------------------------------------------------


def gatekeeper_matches(match: dict[str, Any], request: dict[str, Any]) -> bool:
    """``spec.match`` kinds and namespaces against the review (the other criteria are unused here)."""
    obj_kind = request["kind"]
    kinds = match.get("kinds")
    if kinds:
        hit = any(
            ("*" in k.get("apiGroups", []) or obj_kind["group"] in k.get("apiGroups", []))
            and ("*" in k.get("kinds", []) or obj_kind["kind"] in k.get("kinds", []))
            for k in kinds
        )
        if not hit:
            return False
    namespaces = match.get("namespaces")
    if namespaces:
        ns = request.get("namespace") or ""
        if not any(fnmatch.fnmatchcase(ns, n) if n.endswith("*") else ns == n for n in namespaces):
            return False
    return True


# --- Kyverno's kind selectors -----------------------------------------------------------------------


def kyverno_kind_selector(selector: str) -> tuple[str, str, str, str]:
    """Kyverno's ``ParseKindSelector``: (group, version, kind, subresource); ``.`` also separates the subresource."""
    parts = selector.split("/")
    parts = parts[:-1] + parts[-1].split(".")
    version_like = ("*",)

    def is_version(part: str) -> bool:
        return part in version_like or (part.startswith("v") and part[1:2].isdigit())

    if len(parts) == 1:
        return "*", "*", parts[0], ""
    if len(parts) == 2:
        if parts == ["*", "*"]:
            return "*", "*", "*", "*"
        if parts[0] == "*" and parts[1].lower() == parts[1]:
            return "*", "*", parts[0], parts[1]
        if is_version(parts[0]):
            return "*", parts[0], parts[1], ""
        return "*", "*", parts[0], parts[1]
    if len(parts) == 3:
        if is_version(parts[0]):
            return "*", parts[0], parts[1], parts[2]
        return parts[0], parts[1], parts[2], ""
    if len(parts) == 4:
        return parts[0], parts[1], parts[2], parts[3]
    return "", "", "", ""


def kyverno_kind_matches(selectors: list[str], request: dict[str, Any], *, validate_rule: bool = True) -> bool:
    """Kyverno's ``CheckKind`` on the parent resource's kind and the request's subresource."""
    parent = next(
        k
        for k in ALL_KINDS.values()
        if k.resource == request["resource"]["resource"] and k.group == request["resource"]["group"]
    )
    sub = request.get("subResource") or ""
    for selector in selectors:
        group, version, kind, selector_sub = kyverno_kind_selector(selector)
        if not (
            fnmatch.fnmatchcase(parent.group, group)
            and fnmatch.fnmatchcase(parent.version, version)
            and fnmatch.fnmatchcase(parent.kind, kind)
        ):
            continue
        if fnmatch.fnmatchcase(sub, selector_sub):
            return True
        if validate_rule and parent.kind == "Pod" and parent.group == "" and sub == "ephemeralcontainers":
            return True
    return False
