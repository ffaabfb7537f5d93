"""The service's held policies: where they come from, their status, and the admission decision.

One :class:`HeldPolicies` per app (on its :class:`~provider.service.state.Service`)
fills a :class:`~provider.policystore.store.PolicyStore` from one source:

* ``MANIFEST_PROVIDER_WATCH_POLICIES`` -- the cluster's ``ClusterManifestPolicy``
  and ``ManifestPolicy`` objects, each kind listed and then watched with
  bookmarks, listed again on ``410 Gone``, resumed after a cut
  (:class:`provider.kube.watcher.KubeWatcher`), as the service's own identity.
  Each policy's verdict on itself -- compiled, or not and why -- is written to
  its ``status.conditions`` (the ``status`` subresource, with the
  resourceVersion just seen: a write that lost a race is dropped, the watch
  brings the newer object and it is judged again);
* ``MANIFEST_PROVIDER_POLICY_FILE`` -- the static mode
  (:mod:`provider.policystore.files`), read again when the files change.

With a cluster, Namespaces are watched too, for the labels a
``namespaceSelector`` reads. Without one (the static mode on a laptop), a policy
with a ``namespaceSelector`` cannot be judged and is held as invalid.

The threads start in each gunicorn worker after the fork
(:meth:`~provider.service.state.Service.prepare`, from the ``post_worker_init``
hook; or at the first request that needs them, for an app used without
gunicorn). Until every source has been read once, ``/readyz`` is 503 and every
admission request is denied with the reason (fail closed). Every decision goes
through :func:`provider.service.checks.judge`, the one call of
:func:`provider.verifier.decide` every route makes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import queue
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from ..bounds import Bounds
from ..errors import PolicyError, ProviderError
from ..keys.refs import KeySecretReader
from ..policy.schema import Policy
from ..policystore.combine import Admission, admit, check_policy_object
from ..policystore.files import SOURCE as FILES_SOURCE
from ..policystore.files import PolicyFiles
from ..policystore.match import labels_of
from ..policystore.objects import (
    API_GROUP,
    API_VERSION_NAME,
    KINDS,
    HeldPolicy,
    read_policy_object,
    status_for,
)
from ..policystore.store import PolicyStore
from ..review import Review
from . import metrics
from .checks import CheckContext, PolicyCache, judge
from .config import Config

log = logging.getLogger("provider.policies")

NAMESPACES_SOURCE = "namespaces"
#: Seconds one status write may take.
STATUS_WRITE_SECONDS = 10.0
#: Status writes waiting at most (a burst of new policies); more are dropped and made at their next event.
STATUS_QUEUE = 1024


_WARNINGS = frozenset({"watch-error", "policy-files-unreadable", "status-write-failed"})


def _log(event: str, **fields: Any) -> None:
    log.log(logging.WARNING if event in _WARNINGS else logging.INFO, event, extra=fields)


class _PolicyWatch:
    """What a :class:`~provider.kube.watcher.KubeWatcher` of one policy kind sees, into the store."""

    def __init__(self, owner: HeldPolicies, kind: str) -> None:
        self.owner, self.kind = owner, kind
        self.source = KINDS[kind][0]
        self._pending: list[HeldPolicy] = []

    def page(self, objects: list[dict[str, Any]]) -> None:
        for obj in objects:
            held = self.owner.take(obj)
            if held is not None:
                self._pending.append(held)

    def listed(self, present: set[tuple[str, str]]) -> None:
        self.owner.store.replace(self.kind, self._pending)
        self._pending = []
        self.owner.store.synced(self.source)
        self.owner.published()

    def changed(self, obj: dict[str, Any]) -> None:
        held = self.owner.take(obj)
        if held is not None:
            self.owner.store.put(held)
            self.owner.published()

    def deleted(self, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        self.owner.store.remove(self.kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        self.owner.published()

    def note(self, event: str, **fields: Any) -> None:
        self._pending = []  # a list that did not complete: its pages are not the cluster's state
        if event == "watch-error":
            self.owner.store.failed(self.source, str(fields.get("error", "")))
        _log(event, **fields)


class _NamespaceWatch:
    """Namespaces' labels, into the store."""

    def __init__(self, store: PolicyStore) -> None:
        self.store = store
        self._pending: dict[str, dict[str, str]] = {}

    def page(self, objects: list[dict[str, Any]]) -> None:
        for obj in objects:
            name = (obj.get("metadata") or {}).get("name")
            if isinstance(name, str):
                self._pending[name] = labels_of(obj)

    def listed(self, present: set[tuple[str, str]]) -> None:
        for gone in self.store.namespace_names() - set(self._pending):
            self.store.remove_namespace(gone)
        for name, labels in self._pending.items():
            self.store.set_namespace(name, labels)
        self._pending = {}
        self.store.synced(NAMESPACES_SOURCE)

    def changed(self, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if isinstance(name, str):
            self.store.set_namespace(name, labels_of(obj))

    def deleted(self, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if isinstance(name, str):
            self.store.remove_namespace(name)

    def note(self, event: str, **fields: Any) -> None:
        self._pending = {}
        if event == "watch-error":
            self.store.failed(NAMESPACES_SOURCE, str(fields.get("error", "")))
        _log(event, **fields)


class SecretBudget:
    """Reads at most ``limit`` distinct Secret-held key values for one admission request.

    One policy names at most ``max_keys`` keys, but a request is judged by every held policy
    that matches it -- a namespace's tenants may hold dozens, each naming other Secrets -- and
    each value not in the reader's cache is a GET on the API server within the request's
    deadline. Past the budget a policy's key is ``policy-invalid`` (its denial, or its warning
    in Audit), never skipped: a request is never allowed for a key left unread. Values read
    once for this request are free to read again.
    """

    def __init__(self, reader: KeySecretReader, limit: int) -> None:
        self._reader, self._limit = reader, limit
        self._seen: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()

    def read_key(self, namespace: str, name: str, key: str, deadline: float) -> str:
        with self._lock:
            if (namespace, name, key) not in self._seen:
                if len(self._seen) >= self._limit:
                    raise PolicyError(
                        f"the policies matching this request name more than {self._limit} distinct keys kept in "
                        f"Secrets; at most {self._limit} are read for one request"
                    )
                self._seen.add((namespace, name, key))
        return self._reader.read_key(namespace, name, key, deadline)


class HeldPolicies:
    """The app's held policies (module docstring)."""

    def __init__(self, config: Config, policies: PolicyCache, clients: Any, limits: Any) -> None:
        self.config = config
        self._policies = policies
        self._limits = limits
        self._clients = clients
        self._bounds: Bounds = config.bounds
        self._cluster = clients.configmap_runner is not None
        sources: list[tuple[str, str]] = []
        if config.watch_policies:
            sources = [(plural, f"the {kind} objects") for kind, (plural, _) in KINDS.items()]
        elif config.policy_file:
            sources = [(FILES_SOURCE, f"the policy files ({config.policy_file})")]
        if sources and self._cluster:
            sources.append((NAMESPACES_SOURCE, "the namespaces"))
        self._sources = [key for key, _ in sources]
        self.store = PolicyStore(sources)
        self.store.watches_namespaces = bool(sources) and self._cluster
        self.enabled = bool(sources)
        self._lock = threading.Lock()
        self._started = False
        self._stoppers: list[Callable[[], None]] = []
        self._writes: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue(STATUS_QUEUE)

    # -- reading policies --

    def compile(self, raw: Any, bounds: Bounds) -> Policy:
        return self._policies.compile(raw, self._limits, bounds)

    def load(self, obj: dict[str, Any]) -> HeldPolicy:
        """A policy object as held (:func:`~provider.policystore.objects.read_policy_object`), the service's bounds."""
        held = read_policy_object(obj, self.compile, self._bounds)
        selects = held.match is not None and held.match.needs_namespace_labels
        if held.ready and selects and not self.store.watches_namespaces:
            held = dataclasses.replace(
                held,
                policy=None,
                error="spec.match.namespaceSelector: the service reads no namespaces (no cluster is configured), so it "
                "cannot tell which namespaces this selects",
            )
        return held

    def take(self, obj: dict[str, Any]) -> HeldPolicy | None:
        """A watched object as held, its status written when it says otherwise; None when it cannot be named."""
        try:
            held = self.load(obj)
        except ProviderError as exc:
            _log("policy-skipped", error=exc.message[:300])
            return None
        if not held.ready:
            _log("policy-invalid", policy=held.ref, error=held.error[:400])
        status = status_for(held, obj.get("status"), self.config.now or datetime.now(UTC))
        if status is not None:
            with contextlib.suppress(queue.Full):  # else written when it next changes, or at the next list
                self._writes.put_nowait((held.ref, {**obj, "status": status}))
        return held

    def published(self) -> None:
        """Count what is held now (``manifest_provider_held_policies``)."""
        counts = {(scope, state): 0 for scope in ("cluster", "namespace") for state in ("ready", "invalid")}
        for held in self.store.policies.all():
            counts[(held.scope, "ready" if held.ready else "invalid")] += 1
        for (scope, state), count in counts.items():
            metrics.HELD_POLICIES.labels(scope, state).set(count)

    # -- threads --

    def start(self) -> None:
        """Start reading (once per process: call it after gunicorn's fork, never before)."""
        if not self.enabled:
            return
        with self._lock:
            if self._started:
                return
            self._started = True
        if self.config.policy_file:
            files = PolicyFiles(
                self.config.policy_file, self.store, self.load, poll_seconds=self.config.policy_file_poll_seconds,
                log=_log,
            )  # fmt: skip

            def read_files() -> None:
                files.run()
                self.published()

            self._thread(read_files, "policy-files")
            self._stoppers.append(files.stop)
        if self._cluster:
            self._watch_cluster()

    def _thread(self, target: Callable[[], None], name: str) -> None:
        def guarded() -> None:
            try:
                target()
            except Exception as exc:  # a bug: logged, and the store stays as it is (not ready, or as last read)
                log.error("the %s thread stopped", name, exc_info=exc)

        threading.Thread(target=guarded, name=name, daemon=True).start()

    def _watch_cluster(self) -> None:
        from ..kube.client import Resource
        from ..kube.lister import KubeLister
        from ..kube.watcher import KubeWatcher

        try:
            runner = self._clients.configmap_runner()
        except ProviderError as exc:
            for source in self._sources:
                self.store.failed(source, exc.message)
            with self._lock:
                self._started = False  # tried again at the next request or probe
            return
        lister = KubeLister(runner)
        watched: list[tuple[Resource, Any]] = [
            (Resource("", "v1", "Namespace", "namespaces", False, ("list", "watch")), _NamespaceWatch(self.store))
        ]
        if self.config.watch_policies:
            for kind, (plural, scope) in KINDS.items():
                resource = Resource(API_GROUP, API_VERSION_NAME, kind, plural, scope == "namespace", ("list", "watch"))
                watched.append((resource, _PolicyWatch(self, kind)))
            self._thread(lambda: self._write_statuses(runner), "policy-status")
            self._stoppers.append(lambda: self._writes.put(None))
        for resource, handler in watched:
            watcher = KubeWatcher(lister, resource, None, None, handler)
            self._thread(watcher.run, f"watch-{resource.name}")
            self._stoppers.append(watcher.stop)

    def stop(self) -> None:
        for stop in self._stoppers:
            stop()
        self._stoppers = []

    def _write_statuses(self, runner: Any) -> None:
        from ..kube.client import FIELD_MANAGER

        while True:
            item = self._writes.get()
            if item is None:
                return
            ref, obj = item
            kind = str(obj.get("kind"))
            plural, scope = KINDS[kind]
            meta = obj.get("metadata") or {}
            namespace = f"/namespaces/{quote(str(meta.get('namespace')), safe='')}" if scope == "namespace" else ""
            name = quote(str(meta.get("name")), safe="")
            path = f"/apis/{API_GROUP}/{API_VERSION_NAME}{namespace}/{plural}/{name}/status"
            try:
                status, answer = runner.request(
                    "PUT", path, timeout=STATUS_WRITE_SECONDS, what=f"PUT {path}", body=obj,
                    query=[("fieldManager", FIELD_MANAGER)],
                )  # fmt: skip
            except ProviderError as exc:
                _log("status-write-failed", policy=ref, error=exc.message[:300])
                continue
            if status in (409, 404):
                continue  # changed or gone meanwhile: its next event (or none) decides
            if status >= 300:
                message = answer.get("message") if isinstance(answer, dict) else answer
                _log("status-write-failed", policy=ref, status=status, error=str(message)[:300])

    # -- deciding --

    def problem(self) -> tuple[str, str] | None:
        """(reason, message) when no request can be decided now; None when requests can be.

        No source configured, or policy files that no longer read: ``policy-invalid``
        (the operator's to fix). A source not read yet: ``transient-error`` (ask again).
        """
        self.start()
        message = self.store.problem()
        if message is None:
            return None
        return ("transient-error" if self.enabled and not self.store.ready else "policy-invalid", message)

    def admit(self, review: Review, ctx: CheckContext) -> Admission:
        """The answer to one admission request (:func:`provider.policystore.combine.admit`)."""
        problem = self.problem()
        policies = self.store.policies
        if problem is None:
            # A policy object written now is compiled under the request's deadline (a trust-root file it names).
            def compile_now(raw: Any, bounds: Bounds) -> Policy:
                return self._policies.compile(raw, self._limits, bounds, ctx.deadline)

            refused = check_policy_object(review, policies, compile_now, self._bounds)
            if refused is not None:
                return refused

        if ctx.sources is not None and ctx.sources.keys is not None:
            budget = SecretBudget(ctx.sources.keys, self._limits.max_keys)
            ctx = dataclasses.replace(ctx, sources=dataclasses.replace(ctx.sources, keys=budget))

        def evaluate(held: HeldPolicy, admitted: Review) -> Any:
            assert held.policy is not None
            return judge(admitted, held.policy, ctx)

        return admit(review, policies, evaluate=evaluate, labels=self.store.labels, problem=problem)
