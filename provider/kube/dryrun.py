"""The dry-run runner: server-side dry-run of a signed manifest through the :class:`~provider.kube.client.KubeClient`.

:class:`KubeDryRunner` implements :class:`provider.verifier.DryRunner`. One
:meth:`~KubeDryRunner.dry_run` is, within one deadline
(:attr:`Limits.dry_run_timeout <provider.limits.Limits.dry_run_timeout>`, 1.5 s):

1. discovery (:meth:`KubeClient.resource_for <provider.kube.client.KubeClient.resource_for>`)
   maps the manifest's kind to its resource name and scope, from the client's cache;
2. ``POST <collection>?dryRun=All`` -- namespaced kinds in the given namespace
   (or the kubeconfig context's / the pod's own), cluster-scoped kinds
   cluster-wide; on 409 AlreadyExists the manifest is renamed
   (:func:`provider.compare.dryrun.renamed_for_retry`) and sent once more.

Both exchanges share the deadline, and the client bounds each whole
(:meth:`KubeClient.exchange <provider.kube.client.KubeClient.exchange>`: connect,
TLS, request, headers, the entire body); a late answer is never used. The runner
is a client (it subclasses :class:`~provider.kube.client.KubeClient`): the
service and the CLI build one per cluster and hand it to the lister, the writer
and the ConfigMap and Secret readers as their client, so all share one
connection pool, one identity and one discovery cache.

Failures, and why each error class (``docs/dryrun.md``):

Failures, and why each error class (``docs/dryrun.md``):

=====================================  ===========================================
the API server could not be asked      :class:`TransientError` ``dry-run-failed``:
(refused, TLS, an answer not complete  retrying may succeed; never cached (a
by the deadline, 5xx, 429, 401)        ``systemError`` for Gatekeeper)
403 Forbidden                          :class:`TransientError`: the message names
                                       the missing permission (verb, resource,
                                       group, namespace); RBAC, quota or another
                                       webhook -- the cluster's state, not the object
404 for the namespace                  :class:`TransientError`: the dry-run
                                       namespace does not exist (yet)
400 Bad Request, 422 Invalid           :class:`VerificationFailure` ``dry-run-failed``:
                                       the signed manifest itself is refused; the
                                       same manifest is refused every time, so the
                                       deny is deterministic (and cacheable). The
                                       one 400 that is the cluster's doing -- a
                                       webhook without dry-run support -- is transient
kind not served (discovery, after      :class:`VerificationFailure`: the object under
one refetch)                           review *is* served, so the signed apiVersion
                                       is what the cluster does not know
=====================================  ===========================================
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from ..compare.dryrun import DryRunPlan, answer_mismatch, renamed_for_retry
from ..deadlines import Deadline
from ..errors import TransientError, VerificationFailure
from ..limits import DEFAULT_LIMITS, Limits
from .client import FIELD_MANAGER, KubeClient, Resource, Response, transport_message

#: The query of every dry-run create: nothing is persisted (``dryRun=All``), and the
#: ``fieldManager`` shows in the managedFields of the object the server answers with.
DRY_RUN_QUERY = (("dryRun", "All"), ("fieldManager", FIELD_MANAGER))
#: apimachinery's name-generator alphabet (no vowels, no look-alikes).
_TOKEN_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # noqa: S105 - not a secret
#: How the RBAC authorizer words a denial (k8s.io/apiserver forbidden messages).
_RBAC_DENIAL = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\S+) resource "(?P<resource>[^"]*)" in API group "(?P<group>[^"]*)"'
    r'(?: in the namespace "(?P<namespace>[^"]*)"| at the cluster scope)'
)


def _failed(message: str) -> TransientError:
    return TransientError(message, reason="dry-run-failed")


class KubeDryRunner(KubeClient):
    """Creates manifests with ``dryRun=All`` on one cluster; thread-safe, one per process."""

    def dry_run(self, manifest: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        """Create ``manifest`` with ``dryRun=All``; the object the API server made of it."""
        deadline = Deadline.after(self.timeout)
        resource = self.resource_for(manifest.get("apiVersion"), manifest.get("kind"), deadline)
        if "create" not in resource.verbs:
            raise VerificationFailure(
                f"{resource.describe()} cannot be created (the API server lists no create verb), so it cannot be "
                "dry-run",
                reason="dry-run-failed",
            )
        where = (namespace or self.default_namespace) if resource.namespaced else None
        body = dict(manifest)
        if not isinstance(body.get("metadata"), dict):
            raise VerificationFailure("the manifest to dry-run has no metadata mapping", reason="dry-run-failed")
        meta = dict(body["metadata"])
        if where:
            meta["namespace"] = where
        else:
            meta.pop("namespace", None)
        body["metadata"] = meta
        path = resource.collection(where)
        response = self.exchange("POST", path, deadline, query=DRY_RUN_QUERY, body=body, what=f"dry-run POST {path}")
        if response.status == 409 and response.status_field("reason") == "AlreadyExists":
            body = renamed_for_retry(body, "".join(secrets.choice(_TOKEN_ALPHABET) for _ in range(5)))
            response = self.exchange(
                "POST",
                path,
                deadline,
                query=DRY_RUN_QUERY,
                body=body,
                what=f"dry-run POST {path} (renamed after a name clash)",
            )
        if 200 <= response.status < 300 and isinstance(response.body, dict):
            # The answer must be the object this request created -- exactly the name sent
            # (the retry's, after a clash), or one with its generateName prefix -- in the
            # namespace it was sent to. An answer for another object is never used.
            problem = answer_mismatch(response.body, DryRunPlan(body, where))
            answered = response.body.get("metadata")
            answered_namespace = answered.get("namespace") if isinstance(answered, dict) else None
            if not problem and (answered_namespace or None) != where:
                problem = f"is in namespace {str(answered_namespace)[:63]!r}, not {where!r}"
            if problem:
                raise _failed(f"{self.source}: the answer to dry-run POST {path} {problem}")
            return response.body
        raise self._failure(response, resource, where, body)

    def _failure(
        self, response: Response, resource: Resource, namespace: str | None, body: dict[str, Any]
    ) -> Exception:
        status, message = response.status, response.message
        name = (body.get("metadata") or {}).get("name", "")
        target = f"{resource.kind} {namespace + '/' if namespace else ''}{name}".strip()
        if status in (400, 422) and "does not support dry run" not in message:
            return VerificationFailure(
                f"the API server rejects the signed manifest (dry-run create of {target}): {message}",
                reason="dry-run-failed",
            )
        if status == 403:
            return _failed(_forbidden_message(message, resource, namespace, self.source))
        if status == 404:
            details = response.body.get("details") if isinstance(response.body, dict) else None
            if isinstance(details, dict) and details.get("kind") == "namespaces":
                return _failed(f"the dry-run namespace {namespace!r} does not exist: {message}")
            self.forget(f"{resource.group}/{resource.version}" if resource.group else resource.version)
            return _failed(
                f"the API server no longer serves {resource.describe()} (its discovery document was out of date): "
                f"{message}"
            )
        if status == 409:
            return _failed(f"the dry-run create of {target} clashed twice with existing objects: {message}")
        return _failed(transport_message(response, f"the dry-run create of {target}", self.source))


def dry_runner_for(
    kubeconfig: str | None,
    limits: Limits = DEFAULT_LIMITS,
    *,
    in_cluster: bool = False,
    service_account_dir: str | None = None,
) -> KubeDryRunner:
    """The one way the service and the CLI build a :class:`KubeDryRunner`.

    ``kubeconfig`` names the cluster when given. Without one, the two faces
    keep the defaults they document: the service (``in_cluster=True``; it only
    builds a runner inside a pod or with ``MANIFEST_PROVIDER_KUBECONFIG``) uses
    the pod's service account (its files in ``service_account_dir``, default
    :data:`provider.kube.credentials.SERVICE_ACCOUNT_DIR`), the rule of
    :func:`provider.kube.credentials.cluster_identity`; the CLI, run from an
    engineer's shell, uses ``$KUBECONFIG``, else ``~/.kube/config``, as
    ``--kubeconfig`` documents (and kubectl does). An unusable configuration is a
    :class:`~provider.errors.PolicyError` naming the file.
    """
    if kubeconfig or not in_cluster:
        return KubeDryRunner.from_kubeconfig(kubeconfig, limits=limits)
    return KubeDryRunner.in_cluster(service_account_dir, limits=limits)


def _forbidden_message(message: str, resource: Resource, namespace: str | None, source: str) -> str:
    match = _RBAC_DENIAL.search(message)
    if match is None:
        # Not the authorizer: admission (a quota, a missing ServiceAccount,
        # another webhook) refused the dry-run in this namespace.
        where = f"namespace {namespace!r}" if namespace else "the cluster scope"
        return f"admission refused the dry-run create of {resource.kind} in {where}: {message}"
    verb, res, group = match["verb"], match["resource"], match["group"]
    where = f'in namespace "{match["namespace"]}"' if match["namespace"] is not None else "cluster-wide"
    binding = "a Role in that namespace" if match["namespace"] is not None else "a ClusterRole"
    return (
        f'dry-run forbidden: {match["user"]} may not {verb} {res} (API group "{group}") {where}; '
        f'grant verb "{verb}" on resource "{res}" in API group "{group}" with {binding} '
        f"(see manifests/base/dryrun-rbac.yaml). API server: {message}"
    )
