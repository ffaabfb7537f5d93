"""What the verifier is asked about: an object, and who asks to write it.

:class:`Review` is read from the shape Kubernetes admission uses everywhere --
an ``admission.k8s.io/v1`` ``AdmissionRequest``, which is also what Gatekeeper
exposes as ``input.review`` and Kyverno as ``{{ request }}``. Fields we do not
use are ignored (the request carries many); fields we use must have the right
type, or the request is refused.

A review without an operation and without a user is an *audit* review
(Gatekeeper's audit sends the stored object alone): it is verified without
``skipUsers``, since nobody is asking. Kyverno's background scan is one too,
though it says ``operation: CREATE``: it builds ``{{ request }}`` for a stored
object as ``{object, namespace, operation: "CREATE"}`` and nothing else -- no
``uid``, no ``userInfo`` (kyverno/kyverno ``pkg/controllers/report/utils/scanner.go``
``validateResource`` calls ``engine.NewPolicyContext(jp, resource, kyvernov1.Create,
nil, ...)``; ``pkg/engine/policycontext/policy_context.go`` adds ``request.object``,
``request.namespace`` and ``request.operation``, and user info only when given).
An AdmissionRequest from the API server always has both a ``uid`` and a
``userInfo`` (admission.k8s.io/v1: they are required), so this shape is never
an admission request, and no one writing an object can produce it.

A request on a subresource names it in ``subResource`` and the parent in
``resource`` (``{group, version, resource}``); its object may be of another
kind than the parent (``scale``: an ``autoscaling/v1 Scale``), which is why
both are read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .errors import RequestError
from .readers import read_optional_str

#: What a message calls the object under review: one a request would admit, or one the cluster stores.
Held = Literal["admitted", "stored"]


@dataclass(frozen=True)
class GroupVersionResource:
    group: str
    version: str
    resource: str


def _resource(data: dict[str, Any], where: str) -> GroupVersionResource | None:
    value = data.get("resource")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise RequestError(
            f"{where}.resource: expected an object {{group, version, resource}}, got {type(value).__name__}"
        )
    parts = [
        read_optional_str(value, name, f"{where}.resource", RequestError) or ""
        for name in ("group", "version", "resource")
    ]
    return GroupVersionResource(*parts) if parts[2] else None


def is_background_scan(data: dict[str, Any]) -> bool:
    """Kyverno's background-scan ``{{ request }}`` (module docstring): a CREATE with no uid, user or old object."""
    return (
        data.get("operation") == "CREATE"
        and not data.get("uid")
        and "userInfo" not in data
        and data.get("oldObject") is None
        and not data.get("dryRun")
    )


@dataclass(frozen=True)
class Review:
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None = None
    operation: str | None = None
    username: str | None = None
    groups: tuple[str, ...] = ()
    namespace: str | None = None
    name: str | None = None
    dry_run: bool = False
    sub_resource: str | None = None
    #: The resource the request is for (the parent, for a subresource request).
    resource: GroupVersionResource | None = None
    #: Rebuilt from an audit log, which records no old object: a field-scoped
    #: exemption cannot be checked against one and is taken on trust
    #: (``classify`` counts how often). Never set for a request that arrives
    #: over the wire.
    replayed: bool = False
    #: The object is as the cluster stores it (Gatekeeper audit, ``verify-resource``,
    #: the observer), not a file or a request: a difference an exempt controller made
    #: since admission is then tolerated and named (``docs/policy.md``).
    live: bool = False

    @property
    def is_audit(self) -> bool:
        return self.operation is None and self.username is None

    @property
    def held(self) -> Held:
        """``stored`` for an object as the cluster stores it (:attr:`live`), else ``admitted`` -- in messages.

        A file given to the CLI is ``admitted``: ``verify`` answers what admission
        would make of it.
        """
        return "stored" if self.live else "admitted"

    @classmethod
    def for_object(cls, obj: dict[str, Any], *, live: bool = False) -> Review:
        """A review of an object with nobody asking: a file (the CLI), or with ``live`` one read from the cluster."""
        return cls(object=obj, live=live)

    @classmethod
    def from_admission(cls, data: Any, where: str = "review") -> Review:
        """Read an AdmissionRequest (or Gatekeeper's ``input.review``)."""
        if not isinstance(data, dict):
            raise RequestError(f"{where}: expected an object, got {type(data).__name__}")
        obj = data.get("object")
        old = data.get("oldObject")
        for label, value in (("object", obj), ("oldObject", old)):
            if value is not None and not isinstance(value, dict):
                raise RequestError(f"{where}.{label}: expected an object, got {type(value).__name__}")
        user = data.get("userInfo")
        if user is None:
            user = {}
        if not isinstance(user, dict):
            raise RequestError(f"{where}.userInfo: expected an object, got {type(user).__name__}")
        groups = user.get("groups")
        if groups is None:
            groups = []
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            raise RequestError(f"{where}.userInfo.groups: expected a list of strings")
        dry_run = data.get("dryRun", False)
        if dry_run is None:
            dry_run = False
        if not isinstance(dry_run, bool):
            raise RequestError(f"{where}.dryRun: expected true or false, got {type(dry_run).__name__}")
        operation = read_optional_str(data, "operation", where, RequestError)
        if operation is not None and operation not in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
            raise RequestError(f"{where}.operation: {operation[:20]!r} is not CREATE, UPDATE, DELETE or CONNECT")
        # No operation and no user: Gatekeeper audit, which sends the object as stored.
        live = operation is None and user.get("username") in (None, "")
        if is_background_scan(data):
            operation, live = None, True
        return cls(
            object=obj,
            old_object=old,
            operation=operation,
            username=read_optional_str(user, "username", f"{where}.userInfo", RequestError),
            groups=tuple(groups),
            namespace=read_optional_str(data, "namespace", where, RequestError),
            name=read_optional_str(data, "name", where, RequestError),
            dry_run=dry_run,
            sub_resource=read_optional_str(data, "subResource", where, RequestError),
            resource=_resource(data, where),
            live=live,
        )
