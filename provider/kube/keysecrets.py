"""Keys kept in Secrets, read from the cluster: :class:`KubeKeySecretReader` is the verifier's
:class:`~provider.keys.refs.KeySecretReader` (``k8s://NAMESPACE/NAME``, ``secretRef``, Kyverno's ``keys.secret``).

One ``GET /api/v1/namespaces/<ns>/secrets/<name>`` -- never a list or a watch,
so the service account needs ``get`` on the named Secrets only (RBAC
``resourceNames``; ``manifests/components/key-secrets/rbac.yaml``) -- through the
dry-runner's client, identity and deadline machinery
(:class:`provider.kube.client.KubeClient`), like signature ConfigMaps
(:mod:`provider.kube.configmaps`).

**Re-read on a time-to-live, not watched.** Each worker process keeps the
value it read for ``ttl`` seconds (``MANIFEST_PROVIDER_KEY_SECRET_TTL_SECONDS``,
default :data:`DEFAULT_TTL`) and reads the Secret again on the first use after
that. Why not a watch: a watch needs ``list`` and ``watch`` on Secrets (with
``resourceNames`` only through a ``metadata.name`` field selector), one
long-lived connection and a thread per Secret in every worker process, and a
reconnect loop whose failures must still deny; a re-read needs ``get`` alone,
happens inside the request's deadline, and bounds how long a rotated or
withdrawn key is still used to the time-to-live. What a re-read costs: one GET
per Secret per worker every ``ttl`` seconds. A re-read that fails is not
answered with the old value: a Secret the service can no longer read denies,
as one it never could (fail closed; the last value is not a licence).

What is kept: only the one value asked for, decoded; the rest of the Secret --
a cosign key-pair Secret also holds ``cosign.key`` and ``cosign.password``
(sigstore/cosign v3.1.2 ``pkg/cosign/kubernetes/secret.go`` ``secret()``) --
is dropped as soon as the answer is read, never logged, never quoted. When a
Secret holds a private key the log says so, by data key name, so the operator
can move the public key to a Secret of its own.

Bounds: the answer is read up to :data:`MAX_SECRET_RESPONSE_BYTES` (the API
server refuses Secrets over 1 MiB of data); the value up to
:data:`MAX_KEY_BYTES`; every read ends by the deadline the verifier passes (the
dry-run timeout, never past the request's); at most :data:`MAX_ENTRIES` values
are kept per worker.

Answers: 200 with the key: its text. 404, 403, a Secret without the key, a
value that is empty, too large or not UTF-8: :class:`~provider.errors.PolicyError`
with one message naming the reference -- which of these it was goes to the
service's log, not to the policy's author, so the answer does not tell whether
a Secret exists or is readable -- remembered for the time-to-live too. 401,
429, 5xx, a connection that fails, a passed deadline:
:class:`~provider.errors.TransientError` (the verifier's ``key-secret-unavailable``),
not remembered.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..cache import LRUCache, digest
from ..errors import PolicyError, TransientError
from ..keys.refs import KEY_REFERENCE, PRIVATE_KEYS
from ..objects import DNS_LABEL, DNS_SUBDOMAIN
from .client import KubeClient

log = logging.getLogger("provider.keysecrets")

#: Seconds a value read is used before the Secret is read again (module docstring).
DEFAULT_TTL = 30.0
#: Bytes of the API server's answer for one Secret: at most 1 MiB of data (kubernetes
#: pkg/apis/core/validation/validation.go ``ValidateSecret``, ``core.MaxSecretSize``), base64 in JSON.
MAX_SECRET_RESPONSE_BYTES = 2 * 1024 * 1024
#: Bytes of one key value: a PEM key or certificate is a few KiB, an OpenPGP certificate with its
#: signatures rarely more than 64 KiB.
MAX_KEY_BYTES = 256 * 1024
#: Values kept per worker process; a policy names Secrets only in the namespaces the operator lists.
MAX_ENTRIES = 256


@dataclasses.dataclass(frozen=True)
class _Read:
    """What one read found: the value, or why it cannot be used (said to the policy as one message)."""

    value: str | None
    why: str = ""


def unusable(namespace: str, name: str, key: str) -> PolicyError:
    """The one answer for a key Secret that cannot be used, whatever the reason (module docstring)."""
    return PolicyError(
        f"the key Secret {KEY_REFERENCE}{namespace}/{name} (key {key}) could not be used: it does not exist, the "
        "service may not read it, or it holds no usable value under that key; the service's log says which"
    )


class KubeKeySecretReader:
    """Reads key values from Secrets through a :class:`KubeClient` (built on first use by ``runner``)."""

    def __init__(
        self,
        runner: Callable[[], KubeClient],
        *,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._runner = runner
        self._built: KubeClient | None = None
        self._cache: LRUCache[_Read] = LRUCache(MAX_ENTRIES if ttl > 0 else 0, ttl=ttl or None, clock=clock)
        self._locks: LRUCache[threading.Lock] = LRUCache(MAX_ENTRIES)
        self._guard = threading.Lock()

    def _client(self) -> KubeClient:
        if self._built is None:
            self._built = self._runner()
        return self._built

    def _lock_for(self, key: bytes) -> threading.Lock:
        with self._guard:
            lock = self._locks.get(key)
            if lock is None:
                lock = threading.Lock()
                self._locks.put(key, lock)
            return lock

    def read_key(self, namespace: str, name: str, key: str, deadline: float) -> str:
        if not DNS_LABEL.match(namespace) or not DNS_SUBDOMAIN.match(name):
            raise PolicyError("a key Secret's namespace or name is not a Kubernetes name")
        cache_key = digest(namespace, name, key)
        found = self._cache.get(cache_key)
        if found is None:
            # One read per Secret at a time: the other requests of a burst wait for it (within their deadline).
            lock = self._lock_for(cache_key)
            if not lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise TransientError("no time was left to read a key Secret", reason="transient-error")
            try:
                found = self._cache.get(cache_key)
                if found is None:
                    found = self._read(namespace, name, key, deadline)
                    self._cache.put(cache_key, found)
            finally:
                lock.release()
        if found.value is None:
            raise unusable(namespace, name, key)
        return found.value

    def _read(self, namespace: str, name: str, key: str, deadline: float) -> _Read:
        runner = self._client()
        path = f"/api/v1/namespaces/{namespace}/secrets/{name}"
        response = runner.get_within(
            path, deadline, MAX_SECRET_RESPONSE_BYTES, late="no time was left to read a key Secret"
        )
        where = f"{KEY_REFERENCE}{namespace}/{name}"
        if response.status in (403, 404):
            return self._refused(where, key, f"the API server answered HTTP {response.status}: {response.message}")
        if response.status != 200:
            raise TransientError(f"{runner.source} answered GET {path} with HTTP {response.status}: {response.message}",
                                 reason="transient-error")  # fmt: skip
        body: Any = response.body
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, dict):
            return self._refused(where, key, "the Secret has no data")
        private = sorted(k for k in PRIVATE_KEYS if k in data)
        if private:
            log.warning(
                "the key Secret %s also holds %s: the service can read a private key; keep the public key in a Secret "
                "of its own",
                where,
                ", ".join(private),
            )
        encoded = data.get(key)
        del body, data  # nothing but the one value is kept
        if not isinstance(encoded, str) or not encoded:
            return self._refused(where, key, f"the Secret has no value under {key!r}")
        if len(encoded) > MAX_KEY_BYTES * 4 // 3 + 4:
            return self._refused(where, key, f"the value under {key!r} is larger than {MAX_KEY_BYTES} bytes")
        try:
            return _Read(base64.b64decode(encoded, validate=True).decode("utf-8"))
        except (binascii.Error, ValueError):
            return self._refused(where, key, f"the value under {key!r} is not base64 of UTF-8 text")

    @staticmethod
    def _refused(where: str, key: str, why: str) -> _Read:
        # The operator's to read: the policy's author gets unusable() alone.
        log.warning("the key Secret %s (key %s) cannot be used: %s", where, key, why)
        return _Read(None, why)
