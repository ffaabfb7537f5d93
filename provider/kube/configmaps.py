"""Signature ConfigMaps read from the cluster: :class:`KubeConfigMapReader` is the verifier's
:class:`~provider.signatures.sources.ConfigMapReader` (``kubectl sigstore sign -o k8s://ConfigMap/NS/NAME``).

``GET /api/v1/namespaces/<ns>/configmaps/<name>`` through the same client and
the same deadline machinery as the dry-run (:class:`provider.kube.client.KubeClient`:
one absolute deadline for the whole exchange), so a slow or silent API server
is a :class:`~provider.errors.TransientError` by the deadline, which the
verifier turns into the denial ``signature-configmap-unavailable``. The
deadline is the one the verifier passes: the dry-run timeout, and never past
the request's own deadline. The answer is read up to
:data:`MAX_CONFIGMAP_RESPONSE_BYTES`, not the dry-run's 8 MiB: a ConfigMap
holds at most 1 MiB of data. A 404 is "no such ConfigMap" (``None``: the
object is unsigned, in the same words as a ConfigMap without a signature);
401/403 and 5xx are transient. The service account needs ``get`` on
``configmaps`` in the namespaces it reads.

Which namespaces may be read at all is the policy's bound, checked by the
verifier before it calls here (:mod:`provider.bounds`: the admitted object's own
namespace and the operator's list). This reader only refuses a namespace or
name that is not a Kubernetes name, so nothing but that one object's path is
ever asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import TransientError
from ..objects import DNS_LABEL, DNS_SUBDOMAIN
from .client import KubeClient

#: Bytes of the API server's answer read for one ConfigMap. The API server refuses a ConfigMap whose
#: data and binaryData together exceed 1 MiB (kubernetes pkg/apis/core/validation/validation.go
#: ``ValidateConfigMap``, ``corev1.MaxSecretSize``; k8s.io/api core/v1/types.go); a signature
#: ConfigMap's values are base64, which JSON does not escape, so 2 MiB leaves room for its metadata.
MAX_CONFIGMAP_RESPONSE_BYTES = 2 * 1024 * 1024


class KubeConfigMapReader:
    """Reads ConfigMaps through a :class:`KubeClient` (built on first use by ``runner``)."""

    def __init__(self, runner: Callable[[], KubeClient]) -> None:
        self._runner = runner
        self._built: KubeClient | None = None

    def _client(self) -> KubeClient:
        if self._built is None:
            self._built = self._runner()
        return self._built

    def read_data(self, namespace: str, name: str, deadline: float) -> dict[str, str] | None:
        if not DNS_LABEL.match(namespace) or not DNS_SUBDOMAIN.match(name):
            raise TransientError("the signature ConfigMap's namespace or name is not a Kubernetes name")
        runner = self._client()
        path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
        late = "no time was left to read the signature ConfigMap"
        response = runner.get_within(path, deadline, MAX_CONFIGMAP_RESPONSE_BYTES, late=late)
        if response.status == 404:
            return None
        if response.status != 200:
            raise TransientError(f"{runner.source} answered GET {path} with HTTP {response.status}: {response.message}",
                                 reason="transient-error")  # fmt: skip
        body: Any = response.body
        data = body.get("data") if isinstance(body, dict) else None
        if data is None:
            return {}
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise TransientError(f"{runner.source} answered GET {path} with a ConfigMap whose data is not strings",
                                 reason="transient-error")  # fmt: skip
        return dict(data)
