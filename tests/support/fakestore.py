"""The objects a fake API server holds, answered as a kube-apiserver answers lists, GETs and writes.

:class:`tests.support.fakeapi.FakeApiServer` replays recorded answers; this
adds the state a live cluster has, in the shapes the recordings show:

* a list (``GET <collection>``, in one namespace or all) is a
  ``<Kind>List`` with ``metadata.resourceVersion`` and, when ``limit``
  left objects out, ``metadata.continue`` and ``remainingItemCount`` --
  the same shape as the recorded GET answers in ``tests/data/dryrun/edge``;
  items of a built-in list carry no ``apiVersion``/``kind`` (the API server
  writes them once, on the list), a custom resource's do;
* items come in etcd key order (namespace, then name); a ``continue`` token
  is opaque base64 JSON holding the list's resourceVersion and the last key;
  ``remainingItemCount`` only for a list without a selector, as the API server does;
* ``labelSelector`` supports what apimachinery's ``labels.Parse`` does:
  ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``,
  ``!k``, comma-separated (ANDed); a malformed one is a 400 BadRequest;
* an expired ``continue`` (``expire_continue`` of them) answers 410 Expired
  with an inconsistent token in the Status's ``metadata.continue`` and the
  API server's message (k8s.io/apiserver ``storage/etcd3``);
* writes (POST without dryRun, PUT, DELETE) only for resources made writable
  (the CRDs a test installs): create (409 AlreadyExists if present), update
  (409 Conflict on a stale ``resourceVersion``, 404 if absent), each
  validated against the CRD's schema (422 Invalid, strict fields). A CRD
  version that declares ``subresources.status`` is served as the API server
  serves it (k8s.io/apiextensions-apiserver ``pkg/registry/customresource``
  ``strategy.go`` ``PrepareForCreate``/``PrepareForUpdate`` and
  ``statusStrategy.PrepareForUpdate``): a create or update of the object
  keeps the stored ``status`` (none on create), and ``GET``/``PUT
  .../<name>/status`` reads and writes only ``status`` (the rest of the body
  is ignored; ``resourceVersion`` still checked, 404 for an object that is
  not there, and for a version without the subresource); delete
  (404 if absent, 409 Conflict when ``preconditions`` name another uid or
  resourceVersion -- k8s.io/apimachinery ``storage.Preconditions.Check`` -- and
  otherwise a ``Status`` Success, what the generic registry answers when it
  does not return the deleted object);
* a watch (``GET <collection>?watch=1``) as the API server's watch cache
  serves it (:meth:`Store.watch`; k8s.io/apiserver ``pkg/storage/cacher``):
  every write is an event (``ADDED``, ``MODIFIED``, ``DELETED``, the object at
  the write's resourceVersion; a label selector turns a change into or out of
  it into ``ADDED``/``DELETED``), kept in a window of the last
  :attr:`Store.history` events (``compact()`` empties it). A watch from a
  resourceVersion older than the window gets one ``ERROR`` event holding a
  410 ``Expired`` Status, "too old resource version: X (Y)", on an HTTP 200
  stream, then the stream ends (``cacher.go``: once the resource version has
  parsed, "other errors must fail with a watch event of type ERROR, rather
  than a directly returned error"; ``watch_cache.go``
  ``getAllEventsSinceLocked``). No resourceVersion, or "0": the current
  objects as synthetic ``ADDED`` events first. ``allowWatchBookmarks=true``:
  a ``BOOKMARK`` (an object of the kind with only ``metadata.resourceVersion``)
  every :attr:`Store.bookmark_seconds` (the cacher's ``defaultBookmarkFrequency``
  is a minute) and right before ``timeoutSeconds`` ends the watch.
"""

from __future__ import annotations

import base64
import bisect
import copy
import datetime
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.support.kube_schema import validate_object

#: The API server's message for an expired continue token (k8s.io/apiserver pkg/storage/etcd3).
EXPIRED_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)

Answer = tuple[int, Any, dict[str, str]]
#: What the API server answers for a subresource it does not serve.
_NOT_FOUND_STATUS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                     "message": "the server could not find the requested resource", "reason": "NotFound",
                     "details": {}, "code": 404}  # fmt: skip


@dataclass(frozen=True)
class Kind:
    """A served resource: where its objects live and what they are called."""

    root: str  # /api/v1 or /apis/<group>/<version>
    plural: str
    kind: str
    namespaced: bool
    custom: bool = False  # a custom resource: items keep apiVersion/kind

    @property
    def api_version(self) -> str:
        return self.root.removeprefix("/api/").removeprefix("/apis/")

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]


def status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason, "code": code}  # fmt: skip
    if details:
        body["details"] = details
    return body


# --- label selectors (apimachinery labels.Parse) ---------------------------------------------------

_REQUIREMENT = re.compile(
    r"\s*(?:(?P<not>!)\s*(?P<nkey>[\w./-]+)"
    r"|(?P<key>[\w./-]+)\s*(?:(?P<op>==|=|!=)\s*(?P<value>[\w.-]*)|\s+(?P<set>in|notin)\s*\((?P<values>[^)]*)\))?)\s*\Z"
)


def parse_selector(text: str) -> list[tuple[str, str, tuple[str, ...]]] | None:
    """(key, operator, values) requirements; None when ``text`` is not a selector."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    requirements = []
    for part in parts:
        if not part.strip():
            if text.strip():
                return None
            continue
        m = _REQUIREMENT.match(part)
        if m is None:
            return None
        if m["not"]:
            requirements.append((m["nkey"], "!", ()))
        elif m["op"]:
            requirements.append((m["key"], "!=" if m["op"] == "!=" else "=", (m["value"],)))
        elif m["set"]:
            values = tuple(v.strip() for v in m["values"].split(",") if v.strip())
            requirements.append((m["key"], m["set"], values))
        else:
            requirements.append((m["key"], "exists", ()))
    return requirements


def selected(labels: Any, requirements: list[tuple[str, str, tuple[str, ...]]]) -> bool:
    labels = labels if isinstance(labels, dict) else {}
    for key, op, values in requirements:
        present, value = key in labels, labels.get(key)
        if op in ("=", "in"):
            ok = present and value in values
        elif op in ("!=", "notin"):
            ok = value not in values
        else:
            ok = present if op == "exists" else not present
        if not ok:
            return False
    return True


# --- the store ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One write, as the watch window keeps it: the object after it, and before it (for selectors)."""

    rv: int
    key: tuple[str, str]
    type: str
    object: dict[str, Any]
    old: dict[str, Any] | None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _token(rv: int, key: tuple[str, str]) -> str:
    return base64.b64encode(json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": "/".join(key)}).encode()).decode()


def _read_token(token: str) -> tuple[int, tuple[str, str]] | None:
    try:
        data = json.loads(base64.b64decode(token, validate=True))
        namespace, _, name = str(data["start"]).partition("/")
        return int(data["rv"]), (namespace, name)
    except (ValueError, KeyError, TypeError):
        return None


class Store:
    """Live objects by resource (module docstring); thread-safe."""

    def __init__(self) -> None:
        self._objects: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = {}
        self._sorted: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self._writable: dict[tuple[str, str], dict[str, Any]] = {}  # -> the CRD that validates writes
        self._rv = 1000
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.expire_continue = 0
        #: Events the watch window keeps (the watch cache keeps at least 100, by time since 1.19).
        self.history = 1000
        #: Seconds between two bookmarks of a watch that asked for them.
        self.bookmark_seconds = 60.0
        #: Every write, oldest first, at most ``history``.
        self._events: list[Event] = []
        #: The oldest resourceVersion a watch may start from (``compact`` raises it).
        self._floor = self._rv
        #: How a watch from before the window is refused: "event" (an ERROR event on a 200 stream, as the
        #: watch cache does) or "status" (an HTTP 410 answer).
        self.expired_as = "event"
        #: The next N watch requests are answered 500 (a watch cache that is not ready).
        self.watch_failures = 0

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def writable(self, kind: Kind, crd: dict[str, Any]) -> None:
        self._writable[(kind.root, kind.plural)] = crd

    def put(self, kind: Kind, obj: dict[str, Any], *, fresh: bool) -> dict[str, Any]:
        """Store ``obj`` (a copy) with server-set metadata; ``fresh``: a new object (uid, creationTimestamp)."""
        obj = copy.deepcopy(obj)
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        meta = obj.setdefault("metadata", {})
        if not kind.namespaced:
            meta.pop("namespace", None)
        with self._lock:
            objects = self._objects.setdefault((kind.root, kind.plural), {})
            key = (meta.get("namespace", ""), meta["name"])
            old = objects.get(key)
            if fresh or old is None:
                meta["uid"] = str(uuid.uuid4())
                meta["creationTimestamp"] = _now()
                if isinstance(obj.get("spec"), dict):
                    meta["generation"] = 1
            else:
                for field in ("uid", "creationTimestamp"):
                    meta[field] = old["metadata"][field]
                if "generation" in old["metadata"]:
                    changed = obj.get("spec") != old.get("spec")
                    meta["generation"] = old["metadata"]["generation"] + (1 if changed else 0)
            meta["resourceVersion"] = self._next_rv()
            objects[key] = obj
            self._sorted.pop((kind.root, kind.plural), None)
            self._record((kind.root, kind.plural), "ADDED" if fresh or old is None else "MODIFIED", obj, old)
            return copy.deepcopy(obj)

    def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._objects.get((kind.root, kind.plural), {}).get((namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def delete(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        """Delete an object; the DELETED event carries it at the deletion's resourceVersion. Returns it, or None."""
        with self._lock:
            gone = self._objects.get((kind.root, kind.plural), {}).pop((namespace, name), None)
            self._sorted.pop((kind.root, kind.plural), None)
            if gone is None:
                return None
            gone = copy.deepcopy(gone)
            gone["metadata"]["resourceVersion"] = self._next_rv()
            self._record((kind.root, kind.plural), "DELETED", gone, None)
            return copy.deepcopy(gone)

    # -- the watch window --

    def _record(self, key: tuple[str, str], kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """Keep an event (called with the lock held) and wake the watches."""
        self._events.append(Event(int(obj["metadata"]["resourceVersion"]), key, kind, copy.deepcopy(obj), old))
        if len(self._events) > self.history:
            dropped = self._events[: len(self._events) - self.history]
            del self._events[: len(dropped)]
            self._floor = dropped[-1].rv
        self._changed.notify_all()

    def compact(self) -> int:
        """Forget every event so far (etcd compaction, a watch cache that moved on); returns the resourceVersion."""
        with self._lock:
            self._events.clear()
            self._floor = self._rv
            return self._rv

    def objects(self, kind: Kind) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(o) for o in self._objects.get((kind.root, kind.plural), {}).values()]

    # -- answers --

    def list(self, kind: Kind, namespace: str | None, query: dict[str, list[str]]) -> Answer:
        selector = (query.get("labelSelector") or [""])[0]
        requirements = parse_selector(selector)
        if requirements is None:
            return (
                400,
                status(400, "BadRequest", f"unable to parse requirement: invalid label selector {selector!r}"),
                {},
            )
        try:
            limit = int((query.get("limit") or ["0"])[0])
        except ValueError:
            return 400, status(400, "BadRequest", "limit must be an integer"), {}
        start: tuple[str, str] | None = None
        token = (query.get("continue") or [""])[0]
        with self._lock:
            if token:
                read = _read_token(token)
                if read is None:
                    return 400, status(400, "BadRequest", "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"), {}  # fmt: skip
                list_rv, start = read
                if self.expire_continue > 0:
                    self.expire_continue -= 1
                    body = status(410, "Expired", EXPIRED_MESSAGE)
                    body["metadata"] = {"continue": _token(self._rv, start)}
                    return 410, body, {}
            else:
                list_rv = self._rv
            objects = self._objects.get((kind.root, kind.plural), {})
            keys = self._sorted.get((kind.root, kind.plural))
            if keys is None:
                keys = self._sorted[(kind.root, kind.plural)] = sorted(objects)
            # Keys are (namespace, name): one namespace is one run of them.
            low = (namespace, "") if namespace is not None else ("", "")
            if start is not None and start > low:
                low = start
            first = (
                bisect.bisect_right(keys, low) if start is not None and low == start else bisect.bisect_left(keys, low)
            )
            end = bisect.bisect_left(keys, (namespace + "\0", "")) if namespace is not None else len(keys)
            items, last, more = [], None, False
            for index in range(first, end):
                obj = objects[keys[index]]
                if requirements and not selected(obj["metadata"].get("labels"), requirements):
                    continue
                if limit and len(items) >= limit:
                    more = True
                    break
                items.append(obj)
                last = keys[index]
            meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
            if more and last is not None:
                meta["continue"] = _token(list_rv, last)
                if not requirements:
                    # The API server counts what is left only for a list without selectors.
                    meta["remainingItemCount"] = end - bisect.bisect_right(keys, last)
            body = {"kind": f"{kind.kind}List", "apiVersion": kind.api_version, "metadata": meta,
                    "items": [o if kind.custom else {k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in items]}  # fmt: skip
            return 200, body, {}  # stored objects are replaced on write, never changed in place

    def watch(
        self, kind: Kind, namespace: str | None, query: dict[str, list[str]], closing: threading.Event
    ) -> Answer | Iterator[dict[str, Any]]:
        """A watch of ``kind`` (module docstring): an error answer, or the events to stream (ends at ``timeoutSeconds``)."""
        requirements = parse_selector((query.get("labelSelector") or [""])[0])
        if requirements is None:
            return 400, status(400, "BadRequest", "unable to parse requirement: invalid label selector"), {}
        rv_text = (query.get("resourceVersion") or [""])[0]
        if rv_text not in ("", "0") and not rv_text.isdigit():
            return (
                400,
                status(400, "BadRequest", f'resourceVersion: Invalid value: "{rv_text}": invalid resource version'),
                {},
            )
        try:
            # The API server's default is minRequestTimeout (30 min) times a random factor in [1, 2).
            timeout = float((query.get("timeoutSeconds") or ["1800"])[0])
        except ValueError:
            return 400, status(400, "BadRequest", "timeoutSeconds must be an integer"), {}
        bookmarks = (query.get("allowWatchBookmarks") or [""])[0] in ("true", "1")
        key = (kind.root, kind.plural)
        with self._lock:
            if self.watch_failures > 0:
                self.watch_failures -= 1
                return 500, status(500, "InternalError", "Internal error occurred: the watch cache is not ready"), {}
            too_old = rv_text not in ("", "0") and int(rv_text) < self._floor
            if too_old and self.expired_as == "status":
                return 410, status(410, "Expired", f"too old resource version: {rv_text} ({self._floor})"), {}

        def matches(obj: dict[str, Any] | None) -> bool:
            if obj is None:
                return False
            meta = obj["metadata"]
            if namespace is not None and meta.get("namespace", "") != namespace:
                return False
            return not requirements or selected(meta.get("labels"), requirements)

        def bookmark(rv: int) -> dict[str, Any]:
            return {"type": "BOOKMARK", "object": {"kind": kind.kind, "apiVersion": kind.api_version,
                                                   "metadata": {"resourceVersion": str(rv)}}}  # fmt: skip

        def events() -> Iterator[dict[str, Any]]:
            deadline = time.monotonic() + timeout
            with self._lock:
                if rv_text in ("", "0"):
                    start = self._rv
                    initial = [o for o in self._objects.get(key, {}).values() if matches(o)]
                elif int(rv_text) < self._floor:
                    message = f"too old resource version: {rv_text} ({self._floor})"
                    yield {"type": "ERROR", "object": status(410, "Expired", message)}
                    return
                else:
                    start, initial = int(rv_text), []
            for obj in initial:
                yield {"type": "ADDED", "object": copy.deepcopy(obj)}
            last_bookmark = time.monotonic()
            while not closing.is_set():
                with self._lock:
                    pending = [e for e in self._events if e.rv > start]
                    if not pending:
                        waits = [deadline - time.monotonic(), 0.1]
                        if bookmarks:
                            waits.append(last_bookmark + self.bookmark_seconds - time.monotonic())
                        self._changed.wait(max(0.0, min(waits)))
                        pending = [e for e in self._events if e.rv > start]
                    if pending:
                        start = pending[-1].rv  # every event up to here is this watch's, sent or filtered out
                for event in pending:
                    if event.key != key:
                        continue
                    now, before = matches(event.object), matches(event.old)
                    if event.type == "MODIFIED" and before and not now:
                        # Out of the selector: a DELETED of what it was, at the change's resourceVersion
                        # (k8s.io/apiserver pkg/storage/cacher/cache_watcher.go convertToWatchEvent).
                        gone = copy.deepcopy(event.old)
                        gone["metadata"]["resourceVersion"] = str(event.rv)
                        yield {"type": "DELETED", "object": gone}
                    elif now:
                        kind_of = "ADDED" if event.type == "MODIFIED" and not before else event.type
                        yield {"type": kind_of, "object": copy.deepcopy(event.object)}
                moment = time.monotonic()
                if moment >= deadline:
                    if bookmarks:
                        yield bookmark(start)  # "a bookmark right before watch deadline"
                    return
                if bookmarks and moment - last_bookmark >= self.bookmark_seconds:
                    last_bookmark = moment
                    yield bookmark(start)

        return events()

    def remove(self, kind: Kind, namespace: str, name: str, body: Any) -> Answer | None:
        """A real DELETE; None when ``kind`` is not writable here."""
        if (kind.root, kind.plural) not in self._writable:
            return None
        current = self.get(kind, namespace, name)
        if current is None:
            return 404, status(404, "NotFound", f'{kind.plural}.{kind.group} "{name}" not found', name=name,
                               group=kind.group, kind=kind.plural), {}  # fmt: skip
        preconditions = (body.get("preconditions") if isinstance(body, dict) else None) or {}
        for field in ("uid", "resourceVersion"):
            wanted, found = preconditions.get(field), current["metadata"][field]
            if wanted and wanted != found:
                label = "UID" if field == "uid" else "ResourceVersion"
                message = f"Precondition failed: {label} in precondition: {wanted}, {label} in object meta: {found}"
                return 409, status(409, "Conflict", f'Operation cannot be fulfilled on {kind.plural}.{kind.group} "{name}": {message}',
                                   name=name, group=kind.group, kind=kind.plural), {}  # fmt: skip
        self.delete(kind, namespace, name)
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": kind.group, "kind": kind.plural, "uid": current["metadata"]["uid"]}}  # fmt: skip
        return 200, body, {}

    def read(self, kind: Kind, namespace: str, name: str) -> Answer:
        found = self.get(kind, namespace, name)
        if found is None:
            return 404, status(404, "NotFound", f'{kind.plural} "{name}" not found', name=name, kind=kind.plural), {}
        return 200, found, {}

    def _invalid(self, kind: Kind, body: dict[str, Any]) -> Answer | None:
        crd = self._writable[(kind.root, kind.plural)]
        check = crd.get("builtin")  # a built-in kind: its own check instead of a CRD's schema
        errors = check(body) if callable(check) else validate_object(body, crd)
        if not errors:
            return None
        name = (body.get("metadata") or {}).get("name", "")
        message = f'{kind.kind}.{kind.group} "{name}" is invalid: {"; ".join(errors)}'
        causes = [{"reason": "FieldValueInvalid", "message": e} for e in errors]
        return 422, status(422, "Invalid", message, name=name, group=kind.group, kind=kind.kind, causes=causes), {}

    def _has_status(self, kind: Kind) -> bool:
        crd = self._writable.get((kind.root, kind.plural))
        if crd is None or "builtin" in crd:  # a built-in kind made writable (ConfigMaps): no status subresource here
            return False
        version = kind.api_version.rpartition("/")[2]
        entry = next((v for v in crd["spec"]["versions"] if v["name"] == version), {})
        return "status" in (entry.get("subresources") or {})

    def status(self, kind: Kind, namespace: str, name: str, method: str, body: Any) -> Answer:
        """``GET`` or ``PUT`` of a custom resource's ``status`` subresource (module docstring)."""
        missing = 404, status(404, "NotFound", f'{kind.plural}.{kind.group} "{name}" not found', name=name,
                              group=kind.group, kind=kind.plural), {}  # fmt: skip
        if not self._has_status(kind):
            return 404, _NOT_FOUND_STATUS, {}
        current = self.get(kind, namespace, name)
        if current is None:
            return missing
        if method == "GET":
            return 200, current, {}
        if method != "PUT":
            return (
                405,
                status(405, "MethodNotAllowed", f"the server does not allow this method on {kind.plural}/status"),
                {},
            )
        if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
            return 400, status(400, "BadRequest", "the body must be an object with metadata"), {}
        sent = body["metadata"].get("resourceVersion")
        if sent and sent != current["metadata"]["resourceVersion"]:
            return 409, status(409, "Conflict", f'Operation cannot be fulfilled on {kind.plural}.{kind.group} "{name}": the object has been modified; please apply your changes to the latest version and try again',
                               name=name, group=kind.group, kind=kind.plural), {}  # fmt: skip
        updated = copy.deepcopy(current)
        if "status" in body:
            updated["status"] = copy.deepcopy(body["status"])
        else:
            updated.pop("status", None)
        invalid = self._invalid(kind, updated)
        if invalid is not None:
            return invalid
        return 200, self.put(kind, updated, fresh=False), {}

    def create(self, kind: Kind, namespace: str, body: Any) -> Answer | None:
        """A real create; None when ``kind`` is not writable here."""
        if (kind.root, kind.plural) not in self._writable:
            return None
        if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict) or not body["metadata"].get("name"):
            return 400, status(400, "BadRequest", "the body must be an object with metadata.name"), {}
        meta = body["metadata"]
        if kind.namespaced and meta.get("namespace", namespace) != namespace:
            return 400, status(400, "BadRequest", "the namespace of the provided object does not match the namespace sent on the request"), {}  # fmt: skip
        invalid = self._invalid(kind, body)
        if invalid is not None:
            return invalid
        if self.get(kind, namespace if kind.namespaced else "", meta["name"]) is not None:
            return 409, status(409, "AlreadyExists", f'{kind.plural}.{kind.group} "{meta["name"]}" already exists',
                               name=meta["name"], group=kind.group, kind=kind.plural), {}  # fmt: skip
        fresh = copy.deepcopy(body)
        if self._has_status(kind):
            fresh.pop("status", None)  # set only through the status subresource
        if kind.namespaced:
            fresh["metadata"]["namespace"] = namespace
        else:  # cleared, not refused (k8s.io/apiserver pkg/registry/rest create.go BeforeCreate)
            fresh["metadata"].pop("namespace", None)
        return 201, self.put(kind, fresh, fresh=True), {}

    def update(self, kind: Kind, namespace: str, name: str, body: Any) -> Answer | None:
        """A real PUT; None when ``kind`` is not writable here."""
        if (kind.root, kind.plural) not in self._writable:
            return None
        if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
            return 400, status(400, "BadRequest", "the body must be an object with metadata"), {}
        current = self.get(kind, namespace, name)
        if current is None:
            return 404, status(404, "NotFound", f'{kind.plural}.{kind.group} "{name}" not found', name=name,
                               group=kind.group, kind=kind.plural), {}  # fmt: skip
        invalid = self._invalid(kind, body)
        if invalid is not None:
            return invalid
        sent = body["metadata"].get("resourceVersion")
        if sent and sent != current["metadata"]["resourceVersion"]:
            return 409, status(409, "Conflict", f'Operation cannot be fulfilled on {kind.plural}.{kind.group} "{name}": the object has been modified; please apply your changes to the latest version and try again',
                               name=name, group=kind.group, kind=kind.plural), {}  # fmt: skip
        updated = copy.deepcopy(body)
        if self._has_status(kind):  # the status subresource's: an update of the object keeps it
            updated.pop("status", None)
            if "status" in current:
                updated["status"] = copy.deepcopy(current["status"])
        updated["metadata"]["name"] = name
        if kind.namespaced:
            updated["metadata"]["namespace"] = namespace
        else:  # cleared, not refused (k8s.io/apiserver pkg/registry/rest update.go BeforeUpdate)
            updated["metadata"].pop("namespace", None)
        return 200, self.put(kind, updated, fresh=False), {}
