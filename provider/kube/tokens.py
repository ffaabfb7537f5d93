"""Bootstrap tokens read from the cluster.

:class:`KubeTokenSource` answers :class:`provider.neighbours.bootstrap.TokenSource` lookups
by reading the Secret ``kube-system/bootstrap-token-<id>`` -- the same objects
the bootstrap signer signs with -- one GET per token id, never a list: with a
policy ``tokenIds`` allow-list the service's RBAC can be narrowed to those
Secret names (``docs/neighbours.md``). A missing Secret is an unknown token; a
Secret the signer would ignore (wrong type, mismatched ``token-id``) is one too.
Anything else that keeps the answer from arriving -- the API server down, a
timeout, RBAC refusing the read -- is a :class:`~provider.errors.TransientError`
(the whole request fails and Gatekeeper asks again: never a cached verdict).

The ``cluster-info`` check the service runs with it is
:func:`provider.service.checks.check_cluster_info`. The ``kubernetes`` package is
imported only when a lookup happens.
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import ConfigError, RequestError, TransientError
from ..limits import DEFAULT_LIMITS, Limits
from ..neighbours.bootstrap import (
    TOKEN_SECRET_NAMESPACE,
    TOKEN_SECRET_PREFIX,
    BootstrapToken,
)
from ..parsing import load_json
from .client import api_client
from .tokenreview import kube_configuration

log = logging.getLogger("provider.kube_tokens")

#: Seconds one Secret read may take: the service answers Gatekeeper within its
#: 2.5 s deadline (Gatekeeper's webhook gives policies 3 s).
DEFAULT_TIMEOUT = 1.0


class KubeTokenSource:
    """Looks bootstrap tokens up as Secrets through the official ``kubernetes`` client.

    ``client`` is a ``kubernetes.client.ApiClient`` or anything with
    ``CoreV1Api.read_namespaced_secret``'s signature.
    """

    description = (
        f"no usable Secret {TOKEN_SECRET_NAMESPACE}/{TOKEN_SECRET_PREFIX}<id> of type bootstrap.kubernetes.io/token"
    )

    def __init__(self, client: Any, *, timeout: float = DEFAULT_TIMEOUT, limits: Limits = DEFAULT_LIMITS) -> None:
        self._client = client
        self._timeout = timeout
        self._limits = limits
        #: Token ids looked up so far (a verdict that used any is not cacheable).
        self.lookups = 0

    def _core(self) -> Any:
        client = self._client
        if hasattr(client, "read_namespaced_secret"):
            return client
        from kubernetes import client as k8s

        return k8s.CoreV1Api(client)

    def lookup(self, token_id: str) -> BootstrapToken | None:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        self.lookups += 1
        name = TOKEN_SECRET_PREFIX + token_id
        where = f"Secret {TOKEN_SECRET_NAMESPACE}/{name}"
        try:
            response = self._core().read_namespaced_secret(
                name, TOKEN_SECRET_NAMESPACE, _preload_content=False, _request_timeout=self._timeout
            )
            body = response.data
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status in (401, 403):
                raise TransientError(
                    f"the API server refused to let the provider read {where} (HTTP {exc.status}); grant it get on "
                    "that Secret"
                ) from exc
            raise TransientError(f"reading {where} failed: HTTP {exc.status} {str(exc.reason)[:80]}") from exc
        except (HTTPError, OSError) as exc:
            raise TransientError(f"reading {where} failed: {type(exc).__name__}") from exc
        try:
            secret = load_json(body, limits=self._limits, error=RequestError, what=where)
        except RequestError as exc:
            raise TransientError(f"the API server answered {where} with something that is not JSON") from exc
        token = BootstrapToken.from_secret(secret, token_id)
        if token is None:
            log.info("ignoring %s: not a bootstrap token the signer would use", where)
        return token


def api_client_for(kubeconfig: str | None, service_account_dir: str | None = None) -> Any:
    """The client a :class:`KubeTokenSource` reads Secrets with, for the service's cluster.

    The cluster is the one :func:`~provider.kube.credentials.cluster_identity`
    finds: ``kubeconfig``, else the pod's service account inside a pod;
    :class:`~provider.errors.ConfigError` when there is neither.
    """
    configuration = kube_configuration(kubeconfig, service_account_dir)
    if configuration is None:
        raise ConfigError(
            "no cluster is configured to read bootstrap token Secrets (set MANIFEST_PROVIDER_KUBECONFIG or run in a "
            "pod)"
        )
    return api_client(configuration)
