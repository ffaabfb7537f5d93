"""What the operator lets any policy make the verifier read or reach: :class:`Bounds`.

A policy is an input, and its author is not always the operator. A
namespaced Kyverno ``Policy`` is written by a namespace admin and sent by
Kyverno with Kyverno's own token, so the service cannot tell it from a
cluster admin's ``ClusterPolicy`` (``docs/security.md``, "Threat model").
Policy fields make the verifier touch something outside the request,
and the operator -- not the policy -- bounds each:

* ``trustedRoot`` given as a *path* reads a file on the verifier's disk:
  only the files in :attr:`Bounds.trusted_root_files` may be named. A path
  outside the list is refused by comparing strings, before the disk is
  touched, with one message whatever the path is (a file, a directory, a
  FIFO, nothing): no oracle about the server's files. Inline TrustedRoots
  and the shipped public-good root need no allowance.
* ``signatureResourceRef`` reads a ConfigMap from the cluster: only in the
  admitted object's own namespace (:attr:`Bounds.own_namespace_signatures`)
  and in :attr:`Bounds.signature_namespaces`; anything else is refused before
  the API server is asked, with one message that does not depend on what
  that namespace holds.
* ``dryRun.namespace`` makes the verifier create (``dryRun=All``) the signed
  document in that namespace, through its admission webhooks, and shows the
  policy what the API server made of it there (another tenant's LimitRange
  defaults, its injected sidecars): only the admitted object's own namespace
  and :attr:`Bounds.dry_run_namespaces` may be named.
* ``resourceBundleRef.repositories`` makes each admission a registry fetch
  the *object* points at, within the policy's list: every entry of that list
  must lie under one of :attr:`Bounds.bundle_repositories`, so a policy can
  narrow the operator's list and never widen it.

* a key given as ``k8s://NAMESPACE/NAME`` or ``secretRef`` (:mod:`provider.keys.refs`)
  makes the verifier read a Secret: only in :attr:`Bounds.key_secret_namespaces`,
  none by default and never "the object's own": a key must live where the
  people whose objects it verifies cannot write it, and a Secret in the
  object's namespace is writable by whoever may write Secrets there;
* ``resourceBundleRef.pullSecrets`` makes the verifier read registry
  credentials from Secrets: only in :attr:`Bounds.pull_secret_namespaces`,
  none by default, for the same reason and because they are credentials.

Where a registry may send the fetch next (redirects, token realms) is the
registry client's bound (:class:`provider.oci.registry.RegistryClient`
``hosts``), set from the same configuration.

Who holds which bounds:

* :data:`SERVICE` -- the defaults of ``manifest-provider serve`` and of
  :meth:`provider.policy.schema.Policy.from_dict`: no trust-root files, the object's
  own namespace only (for signature ConfigMaps and dry-runs), no registries.
  The service widens them only as its configuration says
  (``MANIFEST_PROVIDER_TRUSTED_ROOT_FILES``, ``..._SIGNATURE_NAMESPACES``,
  ``..._SIGNATURE_OWN_NAMESPACE``, ``..._DRY_RUN_NAMESPACES``,
  ``..._BUNDLE_REPOSITORIES``, ``..._KEY_SECRET_NAMESPACES``,
  ``..._PULL_SECRET_NAMESPACES``; :mod:`provider.service.config`);
* :data:`LOCAL` -- the CLI (``verify``, ``classify``, ``verify-resource``,
  ``observe``): the person who runs it wrote the policy file and is the
  operator, so their policy may name any file they can read, any namespace
  their kubeconfig can read and any registry. Paths are still opened with the
  care of :func:`provider.keyless.trust.read_root_file` (regular files only,
  never a FIFO or a device, size-limited).

``None`` in a field means "not bounded"; an empty tuple means "nothing".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bounds:
    """The operator's limits on what a policy may name (module docstring)."""

    #: Paths a policy's ``trustedRoot`` may name, compared as strings (``None``: any path).
    trusted_root_files: tuple[str, ...] | None = ()
    #: Namespaces any policy's ``signatureResourceRef`` may read, besides the object's own (``None``: any).
    signature_namespaces: tuple[str, ...] | None = ()
    #: Whether ``signatureResourceRef`` may name a ConfigMap in the admitted object's own namespace.
    own_namespace_signatures: bool = True
    #: Repository prefixes (``registry[/path]``) every ``resourceBundleRef.repositories`` entry must lie under
    #: (``None``: the policy's list alone decides).
    bundle_repositories: tuple[str, ...] | None = ()
    #: Namespaces a policy's ``dryRun.namespace`` may name besides the object's own (``None``: any).
    dry_run_namespaces: tuple[str, ...] | None = ()
    #: Namespaces whose Secrets a policy may name as keys (``k8s://NS/NAME``, ``secretRef``; ``None``: any).
    key_secret_namespaces: tuple[str, ...] | None = ()
    #: Namespaces whose Secrets a policy may name as registry pull secrets (``None``: any).
    pull_secret_namespaces: tuple[str, ...] | None = ()

    def allows_trusted_root_file(self, path: str) -> bool:
        return self.trusted_root_files is None or path in self.trusted_root_files

    def allows_signature_namespace(self, namespace: str, own: tuple[str, ...]) -> bool:
        """Whether a ConfigMap in ``namespace`` may be read for an object whose namespaces are ``own``.

        ``own`` holds every namespace the request names for the object (the
        review's and the object's ``metadata.namespace``); the object's own
        namespace counts only when all of them agree on it.
        """
        if self.signature_namespaces is None or namespace in self.signature_namespaces:
            return True
        return self.own_namespace_signatures and bool(own) and all(ns == namespace for ns in own)

    def allows_key_secret(self, namespace: str) -> bool:
        return self.key_secret_namespaces is None or namespace in self.key_secret_namespaces

    def allows_pull_secret(self, namespace: str) -> bool:
        return self.pull_secret_namespaces is None or namespace in self.pull_secret_namespaces

    def allows_dry_run_namespace(self, namespace: str, own: tuple[str, ...]) -> bool:
        """Whether a dry-run may be sent to ``namespace`` for an object whose namespaces are ``own``."""
        if self.dry_run_namespaces is None or namespace in self.dry_run_namespaces:
            return True
        return bool(own) and all(ns == namespace for ns in own)


#: The service's defaults, and the library's (:meth:`provider.policy.schema.Policy.from_dict`).
SERVICE = Bounds()
#: The CLI's: the person running it wrote the policy (module docstring).
LOCAL = Bounds(
    trusted_root_files=None,
    signature_namespaces=None,
    bundle_repositories=None,
    dry_run_namespaces=None,
    key_secret_namespaces=None,
    pull_secret_namespaces=None,
)

__all__ = ["LOCAL", "SERVICE", "Bounds"]
