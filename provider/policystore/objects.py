"""The two policy kinds the service holds, read from their objects: :class:`HeldPolicy`.

``manifest-provider.io/v1alpha1``:

* ``ClusterManifestPolicy`` (cluster-scoped) -- the operator's: it may match
  any kind in any namespace, by name or label;
* ``ManifestPolicy`` (namespaced) -- a tenant's: it applies to the objects of
  its own namespace only, and never to a cluster-scoped object (a Namespace
  included: the namespace belongs to whoever made it).

Both hold the same ``spec``::

    spec:
      action: Enforce | Audit     # required: deny what fails, or admit it with a warning
      match: {...}                # provider/policystore/match.py
      policy: {...}               # the project's policy schema, unchanged (docs/policy.md)

How they combine is :mod:`provider.policystore.combine`. Reading never raises
for what a policy says: a policy that does not compile is still held, with its
error (:attr:`HeldPolicy.error`), because what it matches must then be denied
(an Enforce policy) or warned about (Audit) rather than silently let through;
its ``status.conditions`` say why (:func:`status_for`). Only an object that
cannot even be named (no ``metadata.name``) is skipped.

What a tenant's policy may make the service read or reach is bounded by the
operator exactly as for any policy (:class:`provider.bounds.Bounds`: no
trust-root file the operator did not list, no registry outside the operator's,
signature ConfigMaps and dry-runs only in the object's own namespace and the
operator's lists). A ``ManifestPolicy`` only ever sees objects of its own
namespace, so a ``signatureResourceRef`` or ``dryRun.namespace`` naming
another namespace than its own or the operator's is refused when it is read,
not at the first object.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from ..bounds import Bounds
from ..errors import PolicyError, ProviderError
from ..policy.schema import Policy
from ..readers import check_fields, read_str
from .match import Match, Scope

API_GROUP = "manifest-provider.io"
API_VERSION_NAME = "v1alpha1"
API_VERSION = f"{API_GROUP}/{API_VERSION_NAME}"
CLUSTER_KIND = "ClusterManifestPolicy"
NAMESPACED_KIND = "ManifestPolicy"
#: kind -> (plural, scope)
KINDS: dict[str, tuple[str, Scope]] = {
    CLUSTER_KIND: ("clustermanifestpolicies", "cluster"),
    NAMESPACED_KIND: ("manifestpolicies", "namespace"),
}
PLURALS = {plural: kind for kind, (plural, _) in KINDS.items()}

Action = Literal["Enforce", "Audit"]
ACTIONS: tuple[Action, ...] = ("Enforce", "Audit")
#: The condition the service writes into ``status.conditions``.
READY = "Ready"

#: Compiles a policy body under the bounds given (the service's compiled-policy cache, or Policy.from_dict).
Compile = Callable[[Any, Bounds], Policy]


@dataclass(frozen=True)
class HeldPolicy:
    """One policy object as the service holds it (module docstring)."""

    kind: str
    name: str
    #: "" for a ClusterManifestPolicy.
    namespace: str
    action: Action
    #: None when ``spec.match`` could not be read: the policy then matches every object it could
    #: (every object for a cluster policy, every object of its namespace for a tenant's).
    match: Match | None
    #: The compiled policy; None when it did not compile (:attr:`error` says why).
    policy: Policy | None
    #: Why the policy cannot be used ("" when it compiled).
    error: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int | None = None
    #: A digest of the object's spec: what a status write says it judged.
    digest: str = field(default="", compare=False)

    @property
    def scope(self) -> Scope:
        return "namespace" if self.namespace else "cluster"

    @property
    def ref(self) -> str:
        """How messages name it: ``ClusterManifestPolicy signed-apps``, ``ManifestPolicy shop/team-keys``."""
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.namespace, self.name)

    @property
    def ready(self) -> bool:
        return self.policy is not None and self.match is not None and not self.error


def _identity(obj: Any) -> tuple[str, str, str]:
    """(kind, namespace, name); :class:`~provider.errors.PolicyError` when the object cannot be named."""
    if not isinstance(obj, dict):
        raise PolicyError(f"a policy object is a {type(obj).__name__}, not an object")
    kind = obj.get("kind")
    if kind not in KINDS:
        raise PolicyError(f"kind {str(kind)[:60]!r} is not {CLUSTER_KIND} or {NAMESPACED_KIND}")
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise PolicyError(f"a {kind} without metadata.name")
    namespace = meta.get("namespace") or ""
    if not isinstance(namespace, str):
        raise PolicyError(f"{kind} {name[:60]}: metadata.namespace is not a string")
    if kind == NAMESPACED_KIND and not namespace:
        raise PolicyError(f"{NAMESPACED_KIND} {name[:60]} has no namespace")
    if kind == CLUSTER_KIND:
        namespace = ""  # cluster-scoped: the API server clears it, and so does this
    return kind, namespace, name


def _digest(spec: Any) -> str:
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _check_tenant_namespaces(policy: Policy, namespace: str, bounds: Bounds, where: str) -> None:
    """A ManifestPolicy sees objects of its own namespace only: what else it names must be the operator's to allow."""
    ref = policy.signature_resource_ref
    if ref is not None and not bounds.allows_signature_namespace(ref.namespace, (namespace,)):
        raise PolicyError(
            f"{where}.signatureResourceRef: a {NAMESPACED_KIND} in namespace {namespace} may read signature ConfigMaps "
            f"in its own namespace and those the operator lists (MANIFEST_PROVIDER_SIGNATURE_NAMESPACES), not in "
            f"{ref.namespace!r}"
        )
    target = policy.dry_run.namespace
    if target and not bounds.allows_dry_run_namespace(target, (namespace,)):
        raise PolicyError(
            f"{where}.dryRun.namespace: a {NAMESPACED_KIND} in namespace {namespace} may dry-run in its own namespace "
            f"and those the operator lists (MANIFEST_PROVIDER_DRY_RUN_NAMESPACES), not in {target[:63]!r}"
        )


def read_policy_object(obj: Any, compile: Compile, bounds: Bounds) -> HeldPolicy:
    """The policy ``obj`` holds; raises :class:`~provider.errors.PolicyError` only when it cannot be named.

    ``bounds`` are the operator's (:mod:`provider.bounds`); ``compile`` compiles
    the policy body under them.
    """
    kind, namespace, name = _identity(obj)
    meta = obj.get("metadata") or {}
    scope: Scope = "namespace" if kind == NAMESPACED_KIND else "cluster"
    where = "spec"
    spec = obj.get("spec")
    uid = meta.get("uid") if isinstance(meta.get("uid"), str) else ""
    version = meta.get("resourceVersion") if isinstance(meta.get("resourceVersion"), str) else ""
    generation = meta.get("generation") if type(meta.get("generation")) is int else None
    base = {"kind": kind, "name": name, "namespace": namespace, "uid": uid, "resource_version": version,
            "generation": generation, "digest": _digest(spec)}  # fmt: skip
    action: Action = "Enforce"  # a policy whose action cannot be read is enforced: fail closed
    match: Match | None = None
    try:
        data = check_fields(spec, where, ("action", "match", "policy"))
        action_text = read_str(data.get("action"), f"{where}.action")
        if action_text not in ACTIONS:
            raise PolicyError(f"{where}.action: {action_text[:20]!r} is not Enforce or Audit")
        action = action_text
        match = Match.from_dict(data.get("match"), f"{where}.match", scope)
        if "policy" not in data:
            raise PolicyError(f"{where}.policy: required (the policy: keys or signers, and what may differ)")
        policy = compile(data["policy"], bounds)
        if scope == "namespace":
            _check_tenant_namespaces(policy, namespace, bounds, f"{where}.policy")
    except ProviderError as exc:  # a TransientError too (a trust-root file not read in time): not usable
        # The policy body's errors name it "policy..." (Policy.from_dict): here it is spec.policy.
        error = f"spec.{exc.message}" if exc.message.startswith("policy") else exc.message
        return HeldPolicy(action=action, match=match, policy=None, error=error, **base)  # type: ignore[arg-type]
    return HeldPolicy(action=action, match=match, policy=policy, **base)  # type: ignore[arg-type]


# --- status ------------------------------------------------------------------------------------


def _timestamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_condition(held: HeldPolicy) -> dict[str, Any]:
    """The ``Ready`` condition for ``held``, without its ``lastTransitionTime``."""
    condition: dict[str, Any] = {
        "type": READY,
        "status": "True" if held.ready else "False",
        "reason": "Compiled" if held.ready else "PolicyInvalid",
        "message": (
            f"compiled; {held.action}s what it matches"
            if held.ready
            else f"{held.error[:1000]}; {'denies' if held.action == 'Enforce' else 'warns about'} what it matches "
            "until fixed"
        ),
    }
    if held.generation is not None:
        condition["observedGeneration"] = held.generation
    return condition


def status_for(held: HeldPolicy, current: Any, now: datetime) -> dict[str, Any] | None:
    """The ``status`` to write for ``held`` given the object's ``current`` status; None when it is already so.

    ``lastTransitionTime`` moves only when the condition's status does
    (metav1.Condition's contract), so several replicas writing the same verdict
    agree, and the second finds nothing to write.
    """
    wanted = ready_condition(held)
    conditions = current.get("conditions") if isinstance(current, dict) else None
    conditions = [c for c in conditions if isinstance(c, dict)] if isinstance(conditions, list) else []
    old = next((c for c in conditions if c.get("type") == READY), None)
    if old is not None and {k: v for k, v in old.items() if k != "lastTransitionTime"} == wanted:
        return None
    same_status = (
        old is not None and old.get("status") == wanted["status"] and isinstance(old.get("lastTransitionTime"), str)
    )
    wanted["lastTransitionTime"] = old["lastTransitionTime"] if same_status and old else _timestamp(now)
    others = [c for c in conditions if c.get("type") != READY]
    status = dict(current) if isinstance(current, dict) else {}
    status["conditions"] = [*others, wanted]
    return status
