"""``manifest-provider policy webhook``: a ready ``ClusterManifestPolicy`` (``--namespace``: ``ManifestPolicy``).

The objects the service holds when it is its own admission webhook
(:mod:`provider.policystore`): the policy as ``spec.policy``, unchanged; the
kinds and namespaces of ``--match-kind``/``--match-namespace`` as
``spec.match``; ``--enforce`` as ``spec.action: Enforce`` (default ``Audit``,
as every shipped policy starts). Kinds are matched with their subresources by
the service itself (a ``kubectl scale`` of a Deployment is judged as the
Deployment's), so ``match.kinds`` names the kinds only; the
ValidatingWebhookConfiguration must send the subresources
(``docs/quickstart-webhook.md``).

The object is checked against the service's own reading of it
(:func:`provider.policystore.objects.read_policy_object`) before it is printed.
"""

from __future__ import annotations

from typing import Any

from ..bounds import LOCAL
from ..errors import ConfigError
from ..policy.schema import Policy
from ..policystore.objects import API_VERSION, CLUSTER_KIND, NAMESPACED_KIND, read_policy_object
from ._generate import KindRef, Scope

#: The shipped policies' scope, as the other generators default to it: ConfigMaps and Deployments in demo.
DEFAULT_KINDS = (KindRef("", "ConfigMap", "configmaps"), KindRef("apps", "Deployment", "deployments"))
DEFAULT_NAMESPACES = ("demo",)
DEFAULT_NAME = "verify-manifest-signature"
#: Where the webhook overlay and the chart run the service: the webhook configuration leaves it out.
SERVICE_NAMESPACE = "manifest-provider"
SYSTEM_NAMESPACE = "kube-system"


def build(
    policy: dict[str, Any],
    *,
    enforce: bool,
    kinds: tuple[KindRef, ...] | None,
    namespaces: tuple[str, ...] | None,
    name: str = DEFAULT_NAME,
    tenant: str | None = None,
) -> dict[str, Any]:
    """The policy object (module docstring); :class:`ConfigError` when the service would not hold it as written."""
    by_group: dict[str, list[str]] = {}
    for ref in kinds if kinds is not None else DEFAULT_KINDS:
        listed = by_group.setdefault(ref.group, [])
        if ref.kind not in listed:
            listed.append(ref.kind)
    match: dict[str, Any] = {"kinds": [{"apiGroups": [group], "kinds": found} for group, found in by_group.items()]}
    meta: dict[str, Any] = {"name": name}
    if tenant is not None:
        if namespaces is not None:
            raise ConfigError(
                "--match-namespace goes with a ClusterManifestPolicy; a ManifestPolicy (--namespace) applies in its "
                "own namespace only"
            )
        meta["namespace"] = tenant
    else:
        chosen = DEFAULT_NAMESPACES if namespaces is None else namespaces
        if chosen:
            match["namespaces"] = list(chosen)
    obj = {
        "apiVersion": API_VERSION,
        "kind": NAMESPACED_KIND if tenant is not None else CLUSTER_KIND,
        "metadata": meta,
        "spec": {"action": "Enforce" if enforce else "Audit", "match": match, "policy": policy},
    }
    held = read_policy_object(obj, lambda raw, bounds: Policy.from_dict(raw, bounds=bounds, where="policy"), LOCAL)
    if not held.ready:
        raise ConfigError(f"{held.ref}: {held.error}")
    return obj


def written_scope(obj: dict[str, Any]) -> Scope:
    """The kinds and namespaces the object matches, read back from it."""
    match = obj["spec"].get("match") or {}
    kinds: dict[tuple[str, str], tuple[str, ...]] = {}
    for entry in match.get("kinds") or [{"apiGroups": ["*"], "kinds": ["*"]}]:
        for group in entry.get("apiGroups") or ["*"]:
            for kind in entry.get("kinds") or ["*"]:
                kinds.setdefault((group, kind), ())
    namespace = obj["metadata"].get("namespace")
    if namespace:
        return Scope(kinds, (namespace,))
    named = match.get("namespaces")
    return Scope(kinds, tuple(named) if named else None)


def scope_warnings(scope: Scope, service_namespace: str = SERVICE_NAMESPACE) -> list[str]:
    """The namespaces the webhook configuration leaves out, which a policy naming them claims in vain."""
    warnings = []
    for namespace, whose in ((SYSTEM_NAMESPACE, "the cluster's own"), (service_namespace, "the service's own")):
        if scope.includes(namespace):
            warnings.append(
                f"the scope includes {namespace}, {whose} namespace, which the shipped ValidatingWebhookConfiguration "
                "leaves out (its namespaceSelector), so nothing there is sent to the service; name the namespaces to "
                "protect with --match-namespace"
            )
    return warnings
