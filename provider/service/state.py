"""What one app holds: :class:`Service`, and :func:`current_service` for the routes.

Each worker process builds one app, and the app one :class:`Service`: the
verdict cache, the compiled-policy cache, the thread pool, the authenticator,
the cluster clients (:mod:`provider.service.cluster`) and the held policies. All of it lives on
the Service, none in module globals, so two apps in one process (tests, an
embedding) share nothing. The Service is built from a
:class:`~provider.service.config.Config` only; it never reads the request.
"""

from __future__ import annotations

from typing import Any, cast

from flask import current_app

from ..cache import LRUCache
from ..errors import ConfigError
from .auth import Authenticator, parse_callers
from .checks import CheckContext, Dispatcher, PolicyCache, Verdict
from .clientcerts import ClientCertificates
from .cluster import cluster_clients, signature_sources
from .config import Config
from .heldpolicies import HeldPolicies
from .inline import INLINE_SHARE, inline_answer

#: Where the app keeps its Service (``app.extensions[EXTENSION]``).
EXTENSION = "manifest_provider"


class Service:
    """Everything the handlers of one app share."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.limits = config.effective_limits
        self.cache: LRUCache[Verdict] = LRUCache(config.cache_entries, ttl=config.cache_ttl_seconds)
        self.policies = PolicyCache(config.policy_cache_entries)
        # Questions that wait on nothing are answered in the request's own thread (provider/service/inline.py).
        self.dispatcher = Dispatcher(self.cache, config.verify_threads, inline_answer, INLINE_SHARE)
        clients = cluster_clients(config, self.limits)
        self.dry_runner: Any = clients.dry_runner
        self.kube_client: Any = clients.kube_client
        self.sources = signature_sources(clients, config)
        self.clients = clients
        from .trustroot import refresher_for

        self.trust_root = refresher_for(
            config.tuf_url, config.tuf_root, config.tuf_cache_dir, config.tuf_refresh_seconds
        )
        if config.watch_policies and clients.configmap_runner is None:
            raise ConfigError(
                "MANIFEST_PROVIDER_WATCH_POLICIES needs a cluster (MANIFEST_PROVIDER_KUBECONFIG, or run in a pod); "
                "without one, give MANIFEST_PROVIDER_POLICY_FILE"
            )
        #: The policies the admission route decides with (provider/policystore).
        self.held = HeldPolicies(config, self.policies, clients, self.limits)
        self.auth = Authenticator(
            client_certificates=ClientCertificates(config.client_ca) if config.client_ca else None,
            audience=config.token_audience,
            callers=parse_callers(config.callers),
            metrics_callers=parse_callers(config.metrics_callers) if config.metrics_callers is not None else None,
            reviewer=clients.reviewer,
            cache_seconds=config.token_cache_seconds,
            reviews_per_second=config.token_reviews_per_second,
        )

    def prepare(self) -> None:
        """Build the cluster clients ahead of the first request (:mod:`provider.service.cluster`); start reading
        the held policies (:mod:`provider.service.heldpolicies`) and refreshing the keyless trust root in the
        background (:mod:`provider.service.trustroot`). Called in each worker, after gunicorn's fork."""
        self.clients.prepare()
        self.held.start()
        if self.trust_root is not None:
            self.trust_root.start()

    def context(self) -> CheckContext:
        return CheckContext(
            dry_runner=self.dry_runner,
            kube_client=self.kube_client,
            now=self.config.now,
            limits=self.limits,
            policies=self.policies,
            sources=self.sources,
            bounds=self.config.bounds,
        )


def current_service() -> Service:
    """The Service of the app handling the current request."""
    return cast(Service, current_app.extensions[EXTENSION])
