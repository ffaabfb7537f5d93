"""One value of one Secret, read once for the CLI (``manifest-provider policy --ca-from-cluster``).

The cluster is the kubeconfig's (``None``: ``$KUBECONFIG``, else
``~/.kube/config``, as kubectl finds it). One GET of the named Secret, never
a list. Failures say what to check, the way ``manifests/scripts/ca-bundle.sh``
does: a missing Secret or key is usually cert-manager not having issued the
certificate yet.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from ..errors import ConfigError, TransientError

#: Seconds the read may take: a person is waiting.
TIMEOUT = 10.0


def _core_api(kubeconfig: str | None) -> Any:
    from kubernetes import client

    from .client import api_client
    from .credentials import from_kubeconfig

    return client.CoreV1Api(api_client(from_kubeconfig(kubeconfig).configuration))


def read_secret_value(kubeconfig: str | None, namespace: str, name: str, key: str) -> bytes:
    """``data[key]`` of Secret ``namespace/name``, decoded."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    where = f"Secret {namespace}/{name}"
    try:
        secret = _core_api(kubeconfig).read_namespaced_secret(name, namespace, _request_timeout=TIMEOUT)
    except ApiException as exc:
        if exc.status == 404:
            raise ConfigError(
                f"{where} not found: has cert-manager issued the certificate yet? "
                f"(kubectl -n {namespace} wait --for=condition=Ready certificate/{name})"
            ) from exc
        raise TransientError(f"reading {where} failed: HTTP {exc.status} {str(exc.reason)[:80]}") from exc
    except (HTTPError, OSError) as exc:
        raise TransientError(f"reading {where} failed: {type(exc).__name__}: {str(exc)[:200]}") from exc
    value = (secret.data or {}).get(key)
    if not value:
        raise ConfigError(f"{where} has no {key} yet: is cert-manager running?")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigError(f"{where}: {key} is not base64") from exc
