"""What the service holds now: the policies, the namespaces' labels, and whether it may decide yet.

:class:`PolicyStore` is fed from one thread per source -- a watch of each
policy kind and of Namespaces (:mod:`provider.service.heldpolicies`), or the
policy files (:mod:`provider.policystore.files`) -- and read by every request.
Reads are one attribute load: each change builds a new immutable
:class:`PolicySet` (changes are rare, reads are every admission), so a request
sees one consistent set from start to end.

**Readiness.** Each source the service was configured with must have completed
its first full read before any request is decided: until then
:meth:`PolicyStore.problem` says which has not and why (its last error), the
service's ``/readyz`` is 503 and every admission request is denied with that
sentence. A source that fails *after* its first read keeps what it read (a
watch that is cut resumes or lists again; the objects it knew are still the
cluster's); only the policy files, whose next read may be broken as a whole,
can become :attr:`Source.broken` -- then every request is denied with why,
until the files read again (fail closed: a half-read file set is not a policy).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .objects import HeldPolicy

#: The policies one namespace may hold before every admission there is denied (each is judged on every
#: request of its namespace: a bound on what one tenant can make every request cost).
MAX_NAMESPACE_POLICIES = 32


@dataclass(frozen=True)
class PolicySet:
    """The policies held at one moment: cluster policies by name, each namespace's by name."""

    cluster: tuple[HeldPolicy, ...] = ()
    namespaced: Mapping[str, tuple[HeldPolicy, ...]] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, policies: Iterable[HeldPolicy]) -> PolicySet:
        cluster: list[HeldPolicy] = []
        namespaced: dict[str, list[HeldPolicy]] = {}
        for held in policies:
            if held.namespace:
                namespaced.setdefault(held.namespace, []).append(held)
            else:
                cluster.append(held)
        return cls(
            tuple(sorted(cluster, key=lambda h: h.name)),
            MappingProxyType({ns: tuple(sorted(found, key=lambda h: h.name)) for ns, found in namespaced.items()}),
        )

    def in_namespace(self, namespace: str) -> tuple[HeldPolicy, ...]:
        return self.namespaced.get(namespace, ()) if namespace else ()

    def __len__(self) -> int:
        return len(self.cluster) + sum(len(found) for found in self.namespaced.values())

    def all(self) -> tuple[HeldPolicy, ...]:
        return self.cluster + tuple(h for ns in sorted(self.namespaced) for h in self.namespaced[ns])


@dataclass
class Source:
    """One thing the store reads: a policy kind, the namespaces, the policy files."""

    #: How messages name it ("the ClusterManifestPolicies", "the policy files").
    what: str
    synced: bool = False
    #: The last error reading it ("" after a good read).
    error: str = ""
    #: Set when a read after the first failed as a whole (the policy files): every request is denied.
    broken: str = ""


class PolicyStore:
    """The held policies and the namespaces' labels (module docstring); thread-safe."""

    def __init__(self, sources: Iterable[tuple[str, str]] = ()) -> None:
        """``sources``: (key, description) of everything that must be read before the first decision."""
        self._lock = threading.Lock()
        self._policies: dict[tuple[str, str, str], HeldPolicy] = {}
        self._namespaces: dict[str, Mapping[str, str]] = {}
        self._sources = {key: Source(what) for key, what in sources}
        #: The current set: replaced, never changed in place.
        self.policies = PolicySet()
        #: Whether any source reads namespaces (a policy's namespaceSelector needs their labels).
        self.watches_namespaces = False

    # -- readiness --

    def problem(self) -> str | None:
        """Why requests cannot be decided now (module docstring), or None."""
        with self._lock:
            if not self._sources:
                return "the service holds no policies: give it --policy-file, or let it watch ClusterManifestPolicies"
            for source in self._sources.values():
                if not source.synced:
                    why = f": {source.error}" if source.error else ""
                    return f"the service has not finished reading {source.what}{why}; it decides nothing until then"
            for source in self._sources.values():
                if source.broken:
                    return source.broken
        return None

    @property
    def ready(self) -> bool:
        """Every source read once (a broken policy file set still denies, but the service is up)."""
        with self._lock:
            return bool(self._sources) and all(s.synced for s in self._sources.values())

    def failed(self, source: str, error: str, *, broken: bool = False) -> None:
        """Reading ``source`` failed; ``broken``: what it held is no longer known (every request denied)."""
        with self._lock:
            state = self._sources[source]
            state.error = error
            if broken and state.synced:
                state.broken = f"{state.what} could not be read: {error}; every request is denied until they can"

    def synced(self, source: str) -> None:
        with self._lock:
            state = self._sources[source]
            state.synced, state.error, state.broken = True, "", ""

    # -- policies --

    def _publish(self) -> None:
        self.policies = PolicySet.of(self._policies.values())

    def replace(self, kind: str, policies: Iterable[HeldPolicy], *, namespace: str | None = None) -> None:
        """Every policy of ``kind`` (in ``namespace``, or anywhere) is now exactly ``policies``."""
        with self._lock:
            for key in [k for k in self._policies if k[0] == kind and (namespace is None or k[1] == namespace)]:
                del self._policies[key]
            for held in policies:
                self._policies[held.key] = held
            self._publish()

    def put(self, held: HeldPolicy) -> None:
        with self._lock:
            self._policies[held.key] = held
            self._publish()

    def remove(self, kind: str, namespace: str, name: str) -> None:
        with self._lock:
            if self._policies.pop((kind, namespace, name), None) is not None:
                self._publish()

    def keys(self, kind: str) -> set[tuple[str, str]]:
        """(namespace, name) of every held policy of ``kind``."""
        with self._lock:
            return {(ns, name) for k, ns, name in self._policies if k == kind}

    def get(self, kind: str, namespace: str, name: str) -> HeldPolicy | None:
        with self._lock:
            return self._policies.get((kind, namespace, name))

    # -- namespaces --

    def set_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        with self._lock:
            self._namespaces[name] = MappingProxyType(dict(labels))

    def remove_namespace(self, name: str) -> None:
        with self._lock:
            self._namespaces.pop(name, None)

    def namespace_names(self) -> set[str]:
        with self._lock:
            return set(self._namespaces)

    def labels(self, namespace: str) -> Mapping[str, str] | None:
        """A namespace's labels; None when it is not known (not read yet, or no namespaces are read at all)."""
        with self._lock:
            return self._namespaces.get(namespace)
