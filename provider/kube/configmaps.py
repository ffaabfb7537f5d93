"""Signature ConfigMaps read from the cluster: :class:`KubeConfigMapReader` is the verifier's
:class:`~provider.bundles.ConfigMapReader` (``kubectl sigstore sign -o k8s://ConfigMap/NS/NAME``).

``GET /api/v1/namespaces/<ns>/configmaps/<name>`` through the same client and
the same deadline machinery as the dry-run (:class:`provider.kube.dryrun.KubeDryRunner`:
one absolute deadline for the whole exchange, the answer bounded by
``Limits.max_api_response_bytes``), so a slow or silent API server is a
:class:`~provider.errors.TransientError` by the deadline, which the verifier
turns into the denial ``signature-configmap-unavailable``. A 404 is "no such
ConfigMap" (``None``: the object is unsigned); 401/403 and 5xx are transient.
The service account needs ``get`` on ``configmaps`` in that namespace.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..errors import TransientError
from .dryrun import KubeDryRunner, _Deadline


class KubeConfigMapReader:
    """Reads ConfigMaps through a :class:`KubeDryRunner`'s client (built on first use by ``runner``)."""

    def __init__(self, runner: Callable[[], KubeDryRunner]) -> None:
        self._runner = runner
        self._built: KubeDryRunner | None = None

    def _client(self) -> KubeDryRunner:
        if self._built is None:
            self._built = self._runner()
        return self._built

    def read_data(self, namespace: str, name: str, deadline: float) -> dict[str, str] | None:
        seconds = deadline - time.monotonic()
        if seconds <= 0:
            raise TransientError("no time was left to read the signature ConfigMap", reason="transient-error")
        runner = self._client()
        path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
        response = runner._exchange("GET", path, _Deadline(seconds), what=f"GET {path}")
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
