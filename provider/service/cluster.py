"""The service's cluster clients, each built on first use.

A cluster is configured when ``MANIFEST_PROVIDER_KUBECONFIG`` names one or the
service runs in a pod (``KUBERNETES_SERVICE_HOST``; its service account is
used) -- the rule of :func:`provider.kube.tokenreview.kube_configuration`. The
service then has three clients, all built in :mod:`provider.kube`, the only
home of the ``kubernetes`` client:

* the dry-runner (:func:`provider.kube.dryrun.dry_runner_for`);
* the client the ``cluster-info`` check reads bootstrap token Secrets with
  (:func:`provider.kube.tokens.api_client_for`);
* the TokenReviewer for bearer-token callers
  (:class:`provider.kube.tokenreview.KubeTokenReviewer`).

Each is built on first use, not at start-up: a service whose policies never
dry-run never connects, and a cluster that is down when the service starts is
asked again on the next request. A failure to build is a
:class:`~provider.errors.TransientError` (the whole request fails, Gatekeeper
caches nothing), never a verdict. Objects given in the configuration
(``DRY_RUNNER``, ``KUBE_CLIENT``, ``TOKEN_REVIEWER``) are used as they are.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..bundles import Sources
from ..dryrun import DryRunner
from ..errors import ConfigError, ProviderError, TransientError
from ..kube.dryrun import dry_runner_for
from ..kube.tokenreview import KubeTokenReviewer, TokenReviewer, kube_configuration
from ..kube.tokens import api_client_for
from ..limits import Limits
from .config import Config

log = logging.getLogger("provider.app")


def cluster_configured(config: Config) -> bool:
    return bool(config.kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST"))


def preload_kubernetes() -> None:
    """Import the ``kubernetes`` client now, at start-up, not inside the first request's deadline.

    The import takes about 0.4 s (more on a busy node): paid by the first dry-run or
    token lookup of every worker, it would use up most of that request's dry-run
    timeout. With the app preloaded this runs once, in gunicorn's master, before the
    workers fork; it imports modules only (no connections or threads, which must not
    cross a fork). The CLI never builds a service, so it stays fast.
    """
    importlib.import_module("kubernetes.client")
    importlib.import_module("kubernetes.config")


class _Lazy:
    """Builds its target on first use; a failure to build is transient (asked again next time)."""

    def __init__(self, build: Callable[[], Any], what: str, reason: str) -> None:
        self._build = build
        self._what = what
        self._reason = reason
        self._target: Any = None
        self._lock = threading.Lock()

    def target(self) -> Any:
        with self._lock:
            if self._target is None:
                try:
                    self._target = self._build()
                except Exception as exc:  # a broken kubeconfig too: the service's problem, not the key's
                    log.error("cannot build the %s", self._what, exc_info=exc)
                    detail = exc.message if isinstance(exc, ProviderError) else type(exc).__name__
                    raise TransientError(f"the {self._what} is not available: {detail}", reason=self._reason) from exc
            return self._target


class LazyDryRunner(_Lazy):
    """A :class:`~provider.dryrun.DryRunner` that connects on the first dry-run."""

    def dry_run(self, manifest: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        result: dict[str, Any] = self.target().dry_run(manifest, namespace)
        return result


class LazyClient(_Lazy):
    """Any client object, built on first attribute access."""

    def __getattr__(self, name: str) -> Any:
        # Only attributes this proxy lacks arrive here. Private ones are forwarded
        # too: the kubernetes API classes call their ApiClient's private methods.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.target(), name)


@dataclass(frozen=True)
class ClusterClients:
    """What :func:`cluster_clients` gives the service; ``None`` where no cluster is configured."""

    dry_runner: DryRunner | None
    kube_client: Any
    #: Builds the TokenReviewer on the first bearer token (:class:`~provider.service.auth.Authenticator`).
    reviewer: Callable[[], TokenReviewer | None] | None


def cluster_clients(config: Config, limits: Limits) -> ClusterClients:
    """The cluster clients for ``config``: given ones as they are, the rest lazy, none without a cluster.

    :class:`~provider.errors.ConfigError` when bearer tokens are configured but
    no cluster could review them.
    """
    cluster = cluster_configured(config)
    kubeconfig = config.kubeconfig
    if cluster and (config.dry_runner is None or config.kube_client is None):
        preload_kubernetes()
    dry_runner: DryRunner | None = config.dry_runner
    if dry_runner is None and cluster:
        dry_runner = LazyDryRunner(
            lambda: dry_runner_for(kubeconfig, limits, in_cluster=True), "cluster dry-run client", "dry-run-failed"
        )
    kube_client: Any = config.kube_client
    if kube_client is None and cluster:
        kube_client = LazyClient(lambda: api_client_for(kubeconfig), "cluster client", "transient-error")
    reviewer: Callable[[], TokenReviewer | None] | None = None
    if config.token_reviewer is not None:
        given: TokenReviewer = config.token_reviewer
        reviewer = lambda: given  # noqa: E731 - a one-line factory
    elif config.token_audience is not None:
        if not cluster:
            raise ConfigError(
                "MANIFEST_PROVIDER_TOKEN_AUDIENCE is set but no cluster is configured to review tokens "
                "(set MANIFEST_PROVIDER_KUBECONFIG or run in a pod)"
            )
        reviewer = lambda: _token_reviewer(kubeconfig)  # noqa: E731
    return ClusterClients(dry_runner, kube_client, reviewer)


def _token_reviewer(kubeconfig: str | None) -> TokenReviewer | None:
    configuration = kube_configuration(kubeconfig)
    return KubeTokenReviewer(configuration) if configuration is not None else None


def signature_sources(config: Config, limits: Limits) -> Sources:
    """Registries for resource bundles, and the cluster's ConfigMaps when there is one.

    The registry client follows redirects and token realms only to the registry itself and the
    operator's ``MANIFEST_PROVIDER_REGISTRY_HOSTS``; which registries a policy may name at all is
    the policy's bound (``MANIFEST_PROVIDER_BUNDLE_REPOSITORIES``, :mod:`provider.bounds`).
    """
    from ..kube.configmaps import KubeConfigMapReader
    from ..oci.bundles import OciBundleSource
    from ..oci.registry import RegistryClient

    kubeconfig = config.kubeconfig
    configmaps = (
        KubeConfigMapReader(lambda: dry_runner_for(kubeconfig, limits, in_cluster=True))
        if cluster_configured(config)
        else None
    )
    bundles = OciBundleSource(RegistryClient(hosts=config.registry_hosts))
    return Sources(bundles=bundles, configmaps=configmaps)
