"""Reading what runs in a cluster: which resource a name means, and its objects page by page.

Both go through a :class:`~provider.kube.client.KubeClient` (the dry-runner
:func:`~provider.kube.dryrun.dry_runner_for` builds is one): the same client, connection
pool, whole-exchange deadlines and **one discovery cache** serve the lists,
the dry-runs of their objects and the PolicyReport writes.

Names, as kubectl reads them (``kubectl get``: ``ParseResourceArg`` in
k8s.io/apimachinery ``pkg/runtime/schema/group_version.go``, the
``shortcutExpander`` of k8s.io/client-go ``restmapper/shortcut.go`` and the
``DefaultRESTMapper``, which matches case-insensitively):

* ``resource.version.group`` (three dots or more) -- exactly that group and
  version, when the server serves it;
* ``resource.group`` -- that group, at its preferred version;
* ``resource`` -- the core group first, then every group in the order
  ``GET /apis`` lists them (kubectl's priority: ``events`` is the core
  group's, not ``events.k8s.io``'s);

where ``resource`` may be the plural (``deployments``), the singular
(``deployment``), the kind (``Deployment``) or a short name (``deploy``).
Custom resources are found the same way: discovery lists them like any other.

Lists are read in pages (``limit`` / ``continue``): at most
:attr:`KubeLister.page_size` objects are held at a time. A page whose answer
exceeds :attr:`Limits.max_api_response_bytes <provider.limits.Limits.max_api_response_bytes>`
is asked again for half as many objects (down to one). A ``continue`` token
the server no longer honours (410 Expired) is replaced by the inconsistent
token the server offers with it, when it offers one; otherwise the list fails.
Items of built-in lists carry no ``apiVersion``/``kind`` (the API server
writes them once, on the list); they are filled in from the resource, so
each object is reviewed with its identity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

from ..errors import RequestError, TransientError
from ..limits import DEFAULT_LIMITS, Limits
from .client import KubeClient, Resource, ResponseTooLarge

#: Objects asked for per page. kubectl's ``--chunk-size`` default is 500; a
#: smaller page keeps a page of large objects (managedFields roughly double an
#: object) under the response limit without a retry.
DEFAULT_PAGE_SIZE = 250
#: Seconds one list page (or one GET of a named object) may take, whole. A
#: page of 250 objects is a few hundred KiB; the dry-run's 1.5 s is an
#: admission budget, not a list's.
DEFAULT_REQUEST_TIMEOUT = 30.0
#: Nodes one list page may hold. The byte limit bounds a page already (a node
#: takes at least two characters); the per-object node limit is for one
#: object, and a page holds hundreds.
PAGE_NODES = DEFAULT_LIMITS.max_api_response_bytes // 2
PAGE_LIMITS = dataclasses.replace(DEFAULT_LIMITS, max_nodes=PAGE_NODES)


def _candidates(arg: str) -> tuple[tuple[str, str, str] | None, tuple[str, str]]:
    """kubectl's readings of ``arg``: (resource, version, group) when it has two dots or more; (resource, group)."""
    full = None
    if arg.count(".") >= 2:
        resource, version, group = arg.split(".", 2)
        full = (resource.lower(), version, group)
    resource, _, group = arg.partition(".")
    return full, (resource.lower(), group)


def _matches(resource: Resource, name: str) -> bool:
    return name in (resource.name, resource.singular, resource.kind.lower()) or name in resource.short_names


def resolve(runner: KubeClient, arg: str, *, timeout: float = DEFAULT_REQUEST_TIMEOUT) -> Resource:
    """The resource ``arg`` names, as kubectl resolves it (module docstring); :class:`RequestError` when none."""
    if not arg or "/" in arg or any(c.isspace() for c in arg):
        raise RequestError(f"{arg[:80]!r} is not a resource type (kind, plural, short name or kind.group)")
    full, (name, group) = _candidates(arg)
    if full is not None:
        for resource in runner.served(full[2], full[1], timeout=timeout):
            if _matches(resource, full[0]):
                return _listable(resource, arg)
    for served_group, version in runner.group_versions(timeout=timeout):
        if group and served_group != group:
            continue
        for resource in runner.served(served_group, version, timeout=timeout):
            if _matches(resource, name):
                return _listable(resource, arg)
    raise RequestError(f'the server doesn\'t have a resource type "{arg[:80]}"')


def _listable(resource: Resource, arg: str) -> Resource:
    if "list" not in resource.verbs:
        raise RequestError(f"{arg[:80]} ({resource.describe()}) cannot be listed: the API server offers no list verb")
    return resource


def collection_path(resource: Resource, namespace: str | None) -> str:
    """The URL of ``resource``'s objects in ``namespace``, or in every namespace (None; cluster-scoped: always)."""
    root = f"/api/{resource.version}" if not resource.group else f"/apis/{resource.group}/{resource.version}"
    if resource.namespaced and namespace:
        return f"{root}/namespaces/{quote(namespace, safe='')}/{resource.name}"
    return f"{root}/{resource.name}"


def _with_identity(item: Any, resource: Resource, where: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise TransientError(f"{where}: an item of the list is a {type(item).__name__}, not an object")
    if "apiVersion" not in item or "kind" not in item:
        return {"apiVersion": resource.api_version, "kind": resource.kind, **item}
    return dict(item)


class KubeLister:
    """Lists and GETs live objects through one :class:`KubeClient`."""

    def __init__(
        self,
        runner: KubeClient,
        *,
        page_size: int = DEFAULT_PAGE_SIZE,
        timeout: float = DEFAULT_REQUEST_TIMEOUT,
        on_inconsistent: Callable[[str], None] | None = None,
        limits: Limits = PAGE_LIMITS,
    ) -> None:
        if page_size < 1:
            raise RequestError(f"the page size must be at least 1, got {page_size}")
        self.runner = runner
        self.page_size = page_size
        self.timeout = timeout
        self._on_inconsistent = on_inconsistent
        self.limits = limits

    def resolve(self, arg: str) -> Resource:
        return resolve(self.runner, arg, timeout=self.timeout)

    def pages(
        self,
        resource: Resource,
        namespace: str | None = None,
        selector: str | None = None,
        *,
        list_meta: dict[str, Any] | None = None,
    ) -> Iterator[list[dict[str, Any]]]:
        """Every object of ``resource`` in ``namespace`` (None: all) matching the label ``selector``, page by page.

        ``list_meta`` receives each page's list ``metadata`` as it is read: after
        the last page its ``resourceVersion`` is the state the list shows, where
        a watch continues from (:mod:`provider.kube.watcher`).
        """
        path = collection_path(resource, namespace)
        token: str | None = None
        size = self.page_size
        while True:
            query = [("limit", str(size))]
            if selector:
                query.append(("labelSelector", selector))
            if token:
                query.append(("continue", token))
            what = f"list GET {path}"
            try:
                status, body = self.runner.request(
                    "GET", path, timeout=self.timeout, what=what, query=query, limits=self.limits
                )
            except ResponseTooLarge:
                if size == 1:
                    raise
                size = max(1, size // 2)
                continue
            if status == 410 and token:
                token = _inconsistent_token(body)
                listed = f"the list of {resource.describe()}"
                if token is None:
                    raise TransientError(
                        f"{self.runner.source}: {listed} expired while it was read (410) and the server offered no "
                        f"way to continue: {_message(body)}"
                    )
                if self._on_inconsistent is not None:
                    self._on_inconsistent(
                        f"{listed} expired while it was read; it continues from a later state of the cluster "
                        "(objects may be missed or seen twice)"
                    )
                continue
            if status != 200 or not isinstance(body, dict):
                raise _list_failure(status, body, what, self.runner.source)
            items = body.get("items")
            if items is None:
                items = []
            if not isinstance(items, list):
                raise TransientError(f"{self.runner.source}: the answer to {what} has no list of items")
            meta = body.get("metadata")
            if list_meta is not None and isinstance(meta, dict):
                list_meta.update(meta)
            yield [_with_identity(item, resource, what) for item in items]
            token = meta.get("continue") if isinstance(meta, dict) else None
            if not isinstance(token, str) or not token:
                return

    def get(self, resource: Resource, name: str, namespace: str | None) -> dict[str, Any] | None:
        """One object by name (None: it does not exist)."""
        path = f"{collection_path(resource, namespace)}/{quote(name, safe='')}"
        what = f"GET {path}"
        status, body = self.runner.request("GET", path, timeout=self.timeout, what=what)
        if status == 404 and isinstance(body, dict) and body.get("kind") == "Status":
            return None
        if status != 200 or not isinstance(body, dict):
            raise _list_failure(status, body, what, self.runner.source)
        return _with_identity(body, resource, what)


def _inconsistent_token(body: Any) -> str | None:
    # apimachinery: an expired continue answers 410 with a Status whose
    # metadata.continue, when set, continues from the latest state.
    meta = body.get("metadata") if isinstance(body, dict) else None
    token = meta.get("continue") if isinstance(meta, dict) else None
    return token if isinstance(token, str) and token else None


def _message(body: Any) -> str:
    text = body.get("message") if isinstance(body, dict) else body
    return str(text)[:300]


def _list_failure(status: int, body: Any, what: str, source: str) -> Exception:
    message = _message(body)
    if status == 403:
        # The RBAC authorizer's sentence names the verb, resource and namespace.
        return TransientError(f"{what} forbidden: {message}")
    if status == 401:
        return TransientError(f"{source} refused the credentials for {what} (401 Unauthorized): {message}")
    if status == 404:
        return TransientError(f"{what}: not found (is the namespace or the resource gone?): {message}")
    if status == 400:
        return RequestError(f"{what} refused (400): {message}")
    return TransientError(f"{source} failed {what} (HTTP {status}): {message}")
