"""Kubernetes audit logs as admission reviews: what the verifier would have been asked.

An audit log is one ``audit.k8s.io/v1`` ``Event`` per line. :func:`read_events`
streams it: each line is read with a hard bound (``Limits.max_audit_line_bytes``;
a longer line is skipped without being held), parsed as strict JSON, and
yielded as an :class:`AuditEvent` or, when it cannot be read, a
:class:`Malformed` record -- never an exception, so one bad line does not end a
replay. Nothing is kept between lines except the bounded :class:`KindIndex`.

:func:`to_review` turns a write into the :class:`~provider.review.Review` an
admission webhook would have received:

* ``create``/``update``: the ``requestObject`` is the object.
* ``patch``: the ``requestObject`` is the patch, not the object. Admission sees
  the *patched* object, whose signature annotations come from the stored
  object the log does not show. The object is rebuilt as the patch applied to
  the target's identity (group, kind, name, namespace from ``objectRef``). So a
  patch that brings no signature of its own is classified as unsigned -- under
  enforcement it is denied either way (``unsigned``, or ``content-mismatch``
  when the stored object was signed). A patch that does carry the envelope (a
  re-applied signed manifest) is applied to the document its own message signs
  for this object, which is what the stored object is once the apply lands; a
  patch that changes anything that document does not say fails as it would at
  admission. JSON patches (a list of operations) are not applied.
* ``delete``/``deletecollection``: a DELETE whose old object is the target's
  identity (a collection has no name); the ``DeleteOptions`` body is not the
  object. ``get``/``list``/``watch`` are not admission requests (``None``),
  except the ``exec``/``attach``/``portforward``/``proxy`` subresources, which
  are CONNECTs.

Audit events name a resource (``deployments``), admission objects a kind
(``Deployment``): :class:`KindIndex` maps one to the other from Kubernetes'
built-in APIs and from the kinds the log's own create/update bodies show.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal, Protocol
from urllib.parse import parse_qs, urlsplit

from ..errors import RequestError, VerificationFailure
from ..limits import DEFAULT_LIMITS, Limits
from ..parsing import load_json
from ..readers import read_optional_str
from ..resources import BUILTIN_KINDS, SUBRESOURCE_KINDS
from ..review import GroupVersionResource, Review
from ..signatures.envelope import message_key, read_envelope
from ..verifier import find_document

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]

#: audit verb -> admission operation (k8s.io/apiserver pkg/endpoints/handlers).
OPERATIONS: dict[str, Operation] = {
    "create": "CREATE",
    "update": "UPDATE",
    "patch": "UPDATE",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}
READ_VERBS = frozenset({"get", "list", "watch"})
#: Subresources served as CONNECT operations (k8s.io/kubernetes pkg/registry, rest.Connecter).
CONNECT_SUBRESOURCES = frozenset({"exec", "attach", "portforward", "proxy"})
#: Stages that repeat a request already logged at ResponseComplete (or never reach it).
REPEATED_STAGES = frozenset({"RequestReceived", "ResponseStarted"})


@dataclass(frozen=True)
class Malformed:
    """A line that is not a readable audit event; counted and reported, never fatal."""

    line: int
    message: str


@dataclass(frozen=True)
class AuditEvent:
    """The parts of an ``audit.k8s.io/v1`` Event an admission review is built from."""

    line: int
    audit_id: str
    verb: str
    stage: str
    username: str
    groups: tuple[str, ...]
    resource: str  # objectRef.resource; "" for non-resource requests (/healthz)
    subresource: str
    group: str
    version: str
    namespace: str
    name: str
    body: Any  # requestObject; None when the audit level did not record it
    dry_run: bool
    received: datetime | None

    @property
    def operation(self) -> Operation | None:
        """The admission operation, or None when the request is no admission request."""
        if not self.resource:
            return None
        if self.subresource in CONNECT_SUBRESOURCES and (self.verb in READ_VERBS or self.verb in OPERATIONS):
            return "CONNECT"
        return OPERATIONS.get(self.verb)

    @property
    def resource_path(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    @property
    def has_body(self) -> bool:
        return self.body is not None


def _timestamp(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


def parse_event(data: Any, line: int = 0) -> AuditEvent:
    """Validate one decoded line; raise :class:`RequestError` saying what is wrong."""
    if not isinstance(data, dict):
        raise RequestError(f"expected an audit Event object, got {type(data).__name__}")
    api_version = data.get("apiVersion")
    if data.get("kind") != "Event" or not isinstance(api_version, str) or not api_version.startswith("audit.k8s.io/"):
        raise RequestError("not an audit.k8s.io Event (kind and apiVersion)")
    verb = data.get("verb")
    if not isinstance(verb, str) or not verb:
        raise RequestError("verb: expected a non-empty string")
    # Admission sees the impersonated identity, not the one that impersonates.
    user = data.get("impersonatedUser") or data.get("user")
    where = "impersonatedUser" if data.get("impersonatedUser") else "user"
    if not isinstance(user, dict) or not isinstance(user.get("username"), str):
        raise RequestError(f"{where}.username: expected a string")
    groups = user.get("groups") or []
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise RequestError(f"{where}.groups: expected a list of strings")
    ref = data.get("objectRef") or {}
    if not isinstance(ref, dict):
        raise RequestError(f"objectRef: expected an object, got {type(ref).__name__}")
    uri = read_optional_str(data, "requestURI", "event", RequestError) or ""
    dry_run = False
    if "dryRun" in uri:
        dry_run = bool(parse_qs(urlsplit(uri).query).get("dryRun"))
    return AuditEvent(
        line=line,
        audit_id=(read_optional_str(data, "auditID", "event", RequestError) or ""),
        verb=verb,
        stage=(read_optional_str(data, "stage", "event", RequestError) or ""),
        username=user["username"],
        groups=tuple(groups),
        resource=(read_optional_str(ref, "resource", "objectRef", RequestError) or ""),
        subresource=(read_optional_str(ref, "subresource", "objectRef", RequestError) or ""),
        group=(read_optional_str(ref, "apiGroup", "objectRef", RequestError) or ""),
        version=(read_optional_str(ref, "apiVersion", "objectRef", RequestError) or ""),
        namespace=(read_optional_str(ref, "namespace", "objectRef", RequestError) or ""),
        name=(read_optional_str(ref, "name", "objectRef", RequestError) or ""),
        body=data.get("requestObject"),
        dry_run=dry_run,
        received=_timestamp(read_optional_str(data, "requestReceivedTimestamp", "event", RequestError) or ""),
    )


class LineSource(Protocol):
    """A binary stream read line by line (a file, standard input, a gzip file)."""

    def readline(self, size: int = -1, /) -> bytes: ...


def read_events(stream: LineSource, limits: Limits = DEFAULT_LIMITS) -> Iterator[AuditEvent | Malformed]:
    """Every line of an audit log, in order; memory is bounded by one line."""
    limit = limits.max_audit_line_bytes
    number = 0
    while True:
        raw = stream.readline(limit + 1)
        if not raw:
            return
        number += 1
        if len(raw) > limit and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):  # drain the rest of the line, a chunk at a time
                raw = stream.readline(64 * 1024)
            yield Malformed(number, f"longer than {limit} bytes")
            continue
        if not raw.strip():
            continue
        try:
            yield parse_event(load_json(raw, limits=limits, error=RequestError, what="the line"), number)
        except RequestError as exc:
            yield Malformed(number, exc.message)


class KindIndex:
    """Resource -> kind, from the built-in APIs and what the log shows (at most ``capacity`` learned)."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._learned: dict[tuple[str, str], str] = {}

    def learn(self, event: AuditEvent) -> None:
        """Remember the kind a create/update body names for its resource (custom resources)."""
        body = event.body
        if event.subresource or event.verb not in ("create", "update") or not isinstance(body, dict):
            return
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if not isinstance(kind, str) or not kind or not isinstance(api_version, str):
            return
        if api_version.rpartition("/")[0] != event.group:
            return
        key = (event.group, event.resource)
        if key not in BUILTIN_KINDS and key not in self._learned and len(self._learned) < self.capacity:
            self._learned[key] = kind

    def kind_of(self, group: str, resource: str) -> str:
        """The kind, or "" when neither Kubernetes nor the log says (it then matches only ``*`` patterns)."""
        key = (group, resource)
        return BUILTIN_KINDS.get(key) or self._learned.get(key, "")

    def target(self, event: AuditEvent) -> dict[str, Any]:
        """The identity of the object admission sees for this event: apiVersion, kind, name, namespace."""
        if event.subresource in SUBRESOURCE_KINDS:
            group, version, kind = SUBRESOURCE_KINDS[event.subresource]
        else:
            group, version, kind = event.group, event.version, self.kind_of(event.group, event.resource)
        meta: dict[str, Any] = {}
        if event.name:
            meta["name"] = event.name
        if event.namespace:
            meta["namespace"] = event.namespace
        return {"apiVersion": f"{group}/{version}" if group else version, "kind": kind, "metadata": meta}


# --- patches ----------------------------------------------------------------------

#: List-element keys strategic merge patch merges by (k8s.io/api patchMergeKey tags), tried in order.
MERGE_KEYS = ("name", "containerPort", "port", "mountPath", "devicePath", "ip", "topologyKey")


def _merge_key(base: list[Any], patch: list[Any]) -> str | None:
    items = base + patch
    if not items or not all(isinstance(item, dict) for item in items):
        return None
    return next((key for key in MERGE_KEYS if all(key in item for item in items)), None)


def apply_patch(base: Any, patch: Any) -> Any:
    """A JSON merge patch (RFC 7386), reading strategic-merge lists by their merge key.

    ``null`` removes a key; ``$``-directives (``$setElementOrder``, ``$retainKeys``,
    ``$patch``) are dropped; lists of objects sharing a merge key are merged
    element by element, other lists replaced. Neither argument is modified.
    """
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(base) if isinstance(base, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and isinstance(result.get(key), list):
            merge_key = _merge_key(result[key], value)
            result[key] = _merge_list(result[key], value, merge_key) if merge_key else copy.deepcopy(value)
        else:
            result[key] = apply_patch(result.get(key), value)
    return result


def _merge_list(base: list[Any], patch: list[Any], key: str) -> list[Any]:
    merged = list(base)
    for item in patch:
        at = next((i for i, old in enumerate(merged) if old.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if at is not None:
                del merged[at]
        elif at is None:
            merged.append(apply_patch({}, item))
        else:
            merged[at] = apply_patch(merged[at], item)
    return merged


def _signed_base(
    patch: dict[str, Any], target: dict[str, Any], namespace: str, domain: str, limits: Limits
) -> dict[str, Any]:
    """The document the patch's own message signs for this object, or the bare identity."""
    meta = patch.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict) or not isinstance(annotations.get(message_key(domain)), str):
        return target
    try:  # the document is picked by the same rule verify() uses
        documents = read_envelope(annotations, domain, limits).payload.documents(limits)
        return copy.deepcopy(find_document(documents, target, namespace or None))
    except VerificationFailure:
        return target  # verify() will say what is wrong with the envelope


def patched_object(event: AuditEvent, target: dict[str, Any], domain: str, limits: Limits) -> dict[str, Any]:
    patch = event.body
    if not isinstance(patch, dict):
        return target  # a JSON patch: its operations need the stored object
    merged: dict[str, Any] = apply_patch(_signed_base(patch, target, event.namespace, domain, limits), patch)
    # The URL decides what is patched, whatever the body says.
    merged["apiVersion"], merged["kind"] = target["apiVersion"], target["kind"]
    meta = merged.get("metadata")
    merged["metadata"] = {**(meta if isinstance(meta, dict) else {}), **target["metadata"]}
    return merged


# --- reviews ----------------------------------------------------------------------

#: How much of the admitted object the log shows: the whole body, a patch to it, or only its identity.
Evidence = Literal["object", "patch", "identity"]


def to_review(
    event: AuditEvent, kinds: KindIndex, *, domain: str, limits: Limits = DEFAULT_LIMITS
) -> tuple[Review, Evidence] | None:
    """The admission review for one event, or None when the event is no admission request."""
    operation = event.operation
    if operation is None:
        return None
    target = kinds.target(event)
    review = Review(
        object=None,
        operation=operation,
        username=event.username,
        groups=event.groups,
        namespace=event.namespace or None,
        name=event.name or None,
        dry_run=event.dry_run,
        sub_resource=event.subresource or None,
        resource=GroupVersionResource(event.group, event.version, event.resource),
        replayed=True,
    )
    if operation in ("DELETE", "CONNECT"):
        return replace(review, old_object=target), "identity"
    if event.verb == "patch" and event.has_body:
        return replace(review, object=patched_object(event, target, domain, limits)), "patch"
    body = event.body
    if body is None:  # level Metadata: only the identity is known
        return replace(review, object=target), "identity"
    if not isinstance(body, dict):  # the request is unusable; decide() refuses it
        return review, "object"
    if not body.get("kind") or not body.get("apiVersion"):
        body = {**body, "apiVersion": target["apiVersion"], "kind": target["kind"]}
    return replace(review, object=body), "object"
