"""The service's cluster clients: imported before the workers fork, built as each worker starts.

A cluster is configured when ``MANIFEST_PROVIDER_KUBECONFIG`` names one or the
service runs in a pod (``KUBERNETES_SERVICE_HOST``; its service account is
used, its files read from ``MANIFEST_PROVIDER_SERVICE_ACCOUNT_DIR``) -- the
rule of :func:`provider.kube.credentials.cluster_identity`. The service then
has three clients, all built in :mod:`provider.kube`, the only home of the
``kubernetes`` client, each authenticating as the client itself does
(:mod:`provider.kube.credentials`):

* the dry-runner (:func:`provider.kube.dryrun.dry_runner_for`), which also
  reads signature ConfigMaps (:class:`provider.kube.configmaps.KubeConfigMapReader`);
* the client the ``cluster-info`` check reads bootstrap token Secrets with
  (:func:`provider.kube.tokens.api_client_for`);
* the TokenReviewer for bearer-token callers
  (:class:`provider.kube.tokenreview.KubeTokenReviewer`).

What a first cluster call would otherwise pay inside its deadline is done
before the worker takes its first connection (``docs/performance.md``,
"The first cluster call"): the ``kubernetes`` modules are imported in
gunicorn's master before it forks (:func:`preload_kubernetes`: imports only,
no connection or thread crosses the fork), and each worker builds its
clients -- configuration, credentials, client objects -- as it starts
(:meth:`ClusterClients.prepare`, from the ``post_worker_init`` hook of
:mod:`provider.service.serve`), before it accepts, so before it can answer
``/readyz``. Nothing there talks to the cluster: a cluster that is down when
the service starts is asked again on the next request. A client that cannot be
built then (a kubeconfig not there yet) is logged and built again on the next
use; a failure to build is a :class:`~provider.errors.TransientError` (the
whole request fails, Gatekeeper caches nothing), never a verdict. Objects
given in the configuration (``DRY_RUNNER``, ``KUBE_CLIENT``,
``TOKEN_REVIEWER``) are used as they are.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..compare.dryrun import DryRunner
from ..errors import ConfigError, ProviderError, TransientError
from ..kube.dryrun import KubeDryRunner, dry_runner_for
from ..kube.tokenreview import KubeTokenReviewer, TokenReviewer, kube_configuration
from ..kube.tokens import api_client_for
from ..limits import Limits
from ..signatures.sources import Sources
from .config import Config

log = logging.getLogger("provider.app")


def cluster_configured(config: Config) -> bool:
    return bool(config.kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST"))


#: What the first cluster call of a worker would import (kubernetes 37.x imports lazily):
#: ``kubernetes.client`` itself, the configuration loaders, and ``CoreV1Api``, whose module
#: pulls in some 250 model classes -- 0.3 s on an idle machine, 2 s with both cores busy,
#: more than the cluster-info check's 1 s Secret read (docs/performance.md).
PRELOADED = ("kubernetes.client", "kubernetes.config", "kubernetes.client.api.core_v1_api")


def preload_kubernetes() -> None:
    """Import the ``kubernetes`` client now, at start-up, not inside the first request's deadline.

    With the app preloaded this runs once, in gunicorn's master, before the
    workers fork; it imports modules only (no connections or threads, which
    must not cross a fork). The CLI never builds a service, so it stays fast.
    """
    for module in PRELOADED:
        importlib.import_module(module)


class _Lazy:
    """Builds its target on first use (or :meth:`prepare`); a failure to build is transient (asked again next time)."""

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

    def prepare(self) -> bool:
        """Build the target now if it is not built; False (logged by :meth:`target`) when it cannot be yet."""
        try:
            self.target()
        except TransientError:
            return False
        return True


class LazyDryRunner(_Lazy):
    """A :class:`~provider.compare.dryrun.DryRunner` that connects on the first dry-run."""

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
    #: What reads signature ConfigMaps: the dry-runner's client (None without a cluster).
    configmap_runner: Callable[[], KubeDryRunner] | None = None
    #: The clients built on first use, which :meth:`prepare` builds ahead.
    lazy: tuple[_Lazy, ...] = ()

    def prepare(self) -> None:
        """Build every client now, as a worker starts (module docstring); one that cannot be built waits for its use."""
        for client in self.lazy:
            client.prepare()


def cluster_clients(config: Config, limits: Limits) -> ClusterClients:
    """The cluster clients for ``config``: given ones as they are, the rest lazy, none without a cluster.

    :class:`~provider.errors.ConfigError` when bearer tokens are configured but
    no cluster could review them.
    """
    cluster = cluster_configured(config)
    kubeconfig, accounts = config.kubeconfig, config.service_account_dir
    if cluster and (config.dry_runner is None or config.kube_client is None or config.token_reviewer is None):
        preload_kubernetes()
    lazy: list[_Lazy] = []
    runner: LazyDryRunner | None = None
    if cluster:
        runner = LazyDryRunner(
            lambda: dry_runner_for(kubeconfig, limits, in_cluster=True, service_account_dir=accounts),
            "cluster dry-run client",
            "dry-run-failed",
        )
    dry_runner: DryRunner | None = config.dry_runner
    if dry_runner is None and runner is not None:
        dry_runner = runner
        lazy.append(runner)
    configmap_runner: Callable[[], KubeDryRunner] | None = None
    if runner is not None:
        # The same client, connection pool and discovery cache as the dry-runs.
        configmap_runner = runner.target
        if runner not in lazy:
            lazy.append(runner)
    kube_client: Any = config.kube_client
    if kube_client is None and cluster:
        kube_client = LazyClient(lambda: api_client_for(kubeconfig, accounts), "cluster client", "transient-error")
        lazy.append(kube_client)
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
        reviews = _Lazy(lambda: _token_reviewer(kubeconfig, accounts), "TokenReview client", "token-review-failed")
        lazy.append(reviews)
        reviewer = reviews.target
    return ClusterClients(dry_runner, kube_client, reviewer, configmap_runner, tuple(lazy))


def _token_reviewer(kubeconfig: str | None, service_account_dir: str | None) -> TokenReviewer | None:
    configuration = kube_configuration(kubeconfig, service_account_dir)
    return KubeTokenReviewer(configuration) if configuration is not None else None


def signature_sources(clients: ClusterClients, config: Config) -> Sources:
    """Registries for resource bundles, and the cluster's ConfigMaps when there is one.

    The registry client follows redirects and token realms only to the registry itself and the
    operator's ``MANIFEST_PROVIDER_REGISTRY_HOSTS``; which registries a policy may name at all is
    the policy's bound (``MANIFEST_PROVIDER_BUNDLE_REPOSITORIES``, :mod:`provider.bounds`). ConfigMaps
    are read with the dry-runner's client (its identity, pool and deadlines), and so are keys kept in
    Secrets (each value reused for ``MANIFEST_PROVIDER_KEY_SECRET_TTL_SECONDS``).
    """
    from ..kube.configmaps import KubeConfigMapReader
    from ..kube.keysecrets import KubeKeySecretReader
    from ..oci.auth import AuthFile
    from ..oci.bundles import OciBundleSource
    from ..oci.registry import RegistryClient

    runner = clients.configmap_runner
    auth_file = AuthFile(config.registry_auth_file) if config.registry_auth_file else None
    configmaps = KubeConfigMapReader(runner) if runner is not None else None
    keys = KubeKeySecretReader(runner, ttl=config.key_secret_ttl_seconds) if runner is not None else None
    return Sources(
        bundles=OciBundleSource(RegistryClient(hosts=config.registry_hosts), auth_file=auth_file),
        configmaps=configmaps,
        keys=keys,
    )
