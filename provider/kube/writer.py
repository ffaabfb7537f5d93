"""Writing objects this project owns (PolicyReports) to the cluster: create, or update at the read version.

The objects are built elsewhere (PolicyReports by
:mod:`provider.audit.reports`); this writes one through a
:class:`~provider.kube.client.KubeClient` and its discovery cache
(the URL comes from discovery, as for a dry-run):

1. ``GET`` it by name. Absent: ``POST`` it (``fieldManager=manifest-provider``).
2. Present and the same (the ``same`` function the caller gives; for
   reports: timestamps aside): nothing is written.
3. Present and different: ``PUT`` it with the ``resourceVersion`` just read,
   so a concurrent writer's change is never overwritten unseen. A 409
   Conflict (written in between) or AlreadyExists (created between our GET
   and POST) reads it again and retries, at most :data:`ATTEMPTS` times.

Only objects this project owns are replaced: one that exists without the
owner ``labels`` the caller names is left alone (a
:class:`~provider.errors.RequestError`). :meth:`KubeWriter.delete` deletes one
the same way: ``GET`` it, check the labels, ``DELETE`` it with the uid and
``resourceVersion`` just read as preconditions (k8s.io/apimachinery
``DeleteOptions.preconditions``: a 409 when it was replaced or changed
meanwhile, then read again); absent is "absent", not an error. Failures are
:class:`~provider.errors.TransientError`: 403 names the missing permission; a
kind the server does not serve names the CRD to install.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal
from urllib.parse import quote

from ..errors import RequestError, TransientError, VerificationFailure
from .client import FIELD_MANAGER, KubeClient, Resource

#: Writes of one object before giving up on one that others keep changing.
ATTEMPTS = 3
#: Seconds one request of a write may take.
DEFAULT_TIMEOUT = 30.0

WriteOutcome = Literal["created", "updated", "unchanged"]


class KubeWriter:
    """Creates or updates owned objects (module docstring)."""

    def __init__(
        self,
        runner: KubeClient,
        *,
        labels: Mapping[str, str],
        same: Callable[[dict[str, Any], dict[str, Any]], bool],
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        if not labels:
            raise ValueError("the owner labels must not be empty: they are what keeps others' objects safe")
        self.runner = runner
        self.labels = dict(labels)
        self.same = same
        self.timeout = timeout

    def _resource(self, obj: dict[str, Any]) -> Resource:
        try:
            return self.runner.resource_for(obj.get("apiVersion"), obj.get("kind"))
        except VerificationFailure as exc:
            raise TransientError(
                f"cannot write a {obj.get('kind')} ({obj.get('apiVersion')}): {exc.message}; install its "
                "CustomResourceDefinition (PolicyReports: with Kyverno or policy-reporter)"
            ) from exc

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        query = None if method == "GET" else [("fieldManager", FIELD_MANAGER)]
        return self.runner.request(method, path, timeout=self.timeout, what=f"{method} {path}", query=query, body=body)

    def _located(self, obj: dict[str, Any], verb: str) -> tuple[Resource, dict[str, Any], str | None, str, str]:
        """``obj``'s resource, metadata, namespace, collection path and object path; a RequestError without a name."""
        resource = self._resource(obj)
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        name, namespace = meta.get("name"), meta.get("namespace")
        if not isinstance(name, str) or not name or (resource.namespaced and not isinstance(namespace, str)):
            raise RequestError(
                f"a {resource.kind} to {verb} needs a name{' and a namespace' if resource.namespaced else ''}"
            )
        collection = resource.collection(namespace if resource.namespaced else None)
        return resource, meta, namespace, collection, f"{collection}/{quote(name, safe='')}"

    def write(self, obj: dict[str, Any]) -> WriteOutcome:
        resource, meta, namespace, collection, path = self._located(obj, "write")
        for _ in range(ATTEMPTS):
            status, current = self._call("GET", path)
            if status == 404 and _is_status(current):
                status, answer = self._call("POST", collection, obj)
                if status in (200, 201):
                    return "created"
                if status == 409:
                    continue  # created meanwhile: read it, then update it
                raise self._failure(status, answer, "create", resource, namespace)
            if status != 200 or not isinstance(current, dict):
                raise self._failure(status, current, "get", resource, namespace)
            found = current.get("metadata")
            found = found if isinstance(found, dict) else {}
            labels = found.get("labels")
            if not isinstance(labels, dict) or any(labels.get(k) != v for k, v in self.labels.items()):
                raise RequestError(f"{path} exists and is not managed by manifest-provider: it is left alone")
            if self.same(current, obj):
                return "unchanged"
            body = {**obj, "metadata": {**meta, "resourceVersion": found.get("resourceVersion")}}
            status, answer = self._call("PUT", path, body)
            if status == 200:
                return "updated"
            if status == 409:
                continue  # changed since our GET: read it again
            raise self._failure(status, answer, "update", resource, namespace)
        raise TransientError(f"{path} kept changing: {ATTEMPTS} attempts to write it met a newer version each time")

    def delete(self, obj: dict[str, Any]) -> Literal["deleted", "absent"]:
        """Delete the owned object ``obj`` names (its apiVersion, kind, name, namespace)."""
        resource, _, namespace, _, path = self._located(obj, "delete")
        for _ in range(ATTEMPTS):
            status, current = self._call("GET", path)
            if status == 404 and _is_status(current):
                return "absent"
            if status != 200 or not isinstance(current, dict):
                raise self._failure(status, current, "get", resource, namespace)
            found = current.get("metadata")
            found = found if isinstance(found, dict) else {}
            labels = found.get("labels")
            if not isinstance(labels, dict) or any(labels.get(k) != v for k, v in self.labels.items()):
                raise RequestError(f"{path} exists and is not managed by manifest-provider: it is left alone")
            options = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "preconditions": {"uid": found.get("uid"), "resourceVersion": found.get("resourceVersion")},
            }
            status, answer = self.runner.request(
                "DELETE", path, timeout=self.timeout, what=f"DELETE {path}", query=[], body=options
            )
            if status in (200, 202):
                return "deleted"
            if status == 404:
                return "absent"  # deleted meanwhile (the garbage collector)
            if status == 409:
                continue  # replaced or changed since our GET: read it again
            raise self._failure(status, answer, "delete", resource, namespace)
        raise TransientError(f"{path} kept changing: {ATTEMPTS} attempts to delete it met a newer version each time")

    def _failure(self, status: int, body: Any, verb: str, resource: Resource, namespace: Any) -> Exception:
        message = str(body.get("message") if isinstance(body, dict) else body)[:400]
        what = f"{verb} {resource.describe()}{f' in namespace {namespace!r}' if resource.namespaced else ''}"
        if status == 403:
            return TransientError(
                f"{what} forbidden: grant verbs get, create and update{' (and delete)' if verb == 'delete' else ''} on "
                f"resource {resource.name!r} in API group "
                f"{resource.group!r} (manifests/overlays/observer/rbac.yaml). API server: {message}"
            )
        if status in (400, 422):
            return RequestError(f"the API server refused to {what} ({status}): {message}")
        return TransientError(f"{self.runner.source} failed to {what} (HTTP {status}): {message}")


def _is_status(body: Any) -> bool:
    return isinstance(body, dict) and body.get("kind") == "Status"
