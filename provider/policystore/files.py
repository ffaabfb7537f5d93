"""Policies from files, for clusters without the CRDs: ``serve --policy-file PATH``.

``PATH`` is a YAML file, or a directory whose ``*.yaml``, ``*.yml`` and
``*.json`` files are read (not its sub-directories, nor names starting with a
dot): a mounted ConfigMap is such a directory, its keys as files. Each document
is a ``ClusterManifestPolicy`` or a ``ManifestPolicy`` exactly as it would be
applied to a cluster (``kind: List`` of them too), so a file moves to the CRDs
unchanged.

**Reloaded on change.** Every :data:`POLL_SECONDS` the files' identities (name,
device, inode, size, modification time -- through symlinks, so the kubelet's
swap of a ConfigMap volume's ``..data`` link is a change) are compared with the
last read; when they differ the whole set is read again and replaces the last
one at once. A set that cannot be read as a whole -- a file that is not YAML, a
document that is not a policy object, two documents naming the same policy, a
file over :data:`MAX_FILE_BYTES` -- replaces nothing: before the first good read
the service is not ready; after it the set is *broken* and every request is
denied with why, until a read succeeds again (fail closed: a half-read set is
not the operator's policy, and the last one may be what they meant to replace).
A policy that reads but does not compile is held as invalid, like a watched one.
Files that change while they are read (their identities differ after the read) replace
nothing either; they are read again at the next look. A file rewritten in place can still
be seen between its truncation and its new content -- an empty or cut set, read as what it
says: write policy files as the kubelet writes a ConfigMap volume, to a new file renamed into
place (``docs/operations.md``).

Only regular files are opened, without blocking (a FIFO or device in the
directory is an error, never a hang), and each is size-limited.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DataError, PolicyError
from ..limits import DEFAULT_LIMITS, Limits
from ..parsing import load_yaml_stream
from .objects import CLUSTER_KIND, KINDS, HeldPolicy
from .store import PolicyStore

#: Seconds between two looks at the files.
POLL_SECONDS = 5.0
#: Bytes of one policy file (a policy with many keys is tens of KiB).
MAX_FILE_BYTES = 4 * 1024 * 1024
#: Files read from one directory.
MAX_FILES = 256
SUFFIXES = (".yaml", ".yml", ".json")
#: The store's source key.
SOURCE = "files"

Fingerprint = tuple[tuple[str, int, int, int, int], ...]


def _files(path: Path) -> list[Path]:
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ConfigError(f"--policy-file {path}: {exc.strerror or type(exc).__name__}") from None
    if stat.S_ISDIR(info.st_mode):
        try:
            names = sorted(n for n in os.listdir(path) if not n.startswith(".") and n.endswith(SUFFIXES))
        except OSError as exc:
            raise ConfigError(f"--policy-file {path}: {exc.strerror or type(exc).__name__}") from None
        if len(names) > MAX_FILES:
            raise ConfigError(f"--policy-file {path}: {len(names)} files; at most {MAX_FILES} are read")
        return [path / name for name in names]
    return [path]


def fingerprint(path: Path) -> Fingerprint:
    """What identifies the current files (module docstring); a file gone meanwhile is left out."""
    found = []
    for file in _files(path):
        try:
            info = os.stat(file)
        except OSError:
            continue
        found.append((file.name, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns))
    return tuple(found)


def _read(file: Path) -> bytes:
    """A regular file's bytes, never blocking, at most :data:`MAX_FILE_BYTES`."""
    try:
        before = os.stat(file)
        if not stat.S_ISREG(before.st_mode):
            raise ConfigError(f"{file}: not a regular file")
        if before.st_size > MAX_FILE_BYTES:
            raise ConfigError(f"{file}: larger than {MAX_FILE_BYTES} bytes")
        descriptor = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{file}: {exc.strerror or type(exc).__name__}") from None
    try:
        opened = os.fstat(descriptor)
        if not stat.S_ISREG(opened.st_mode):
            raise ConfigError(f"{file}: not a regular file")
        data = b""
        while len(data) <= MAX_FILE_BYTES:
            chunk = os.read(descriptor, 64 * 1024)
            if not chunk:
                return data
            data += chunk
        raise ConfigError(f"{file}: larger than {MAX_FILE_BYTES} bytes")
    except OSError as exc:
        raise ConfigError(f"{file}: {exc.strerror or type(exc).__name__}") from None
    finally:
        os.close(descriptor)


def read_policy_files(path: Path, limits: Limits = DEFAULT_LIMITS) -> list[tuple[str, dict[str, Any]]]:
    """Every policy object under ``path``, with where it was read; :class:`ConfigError` when the set is unusable."""
    found: list[tuple[str, dict[str, Any]]] = []
    seen: dict[tuple[str, str, str], str] = {}
    for file in _files(path):
        try:
            documents = load_yaml_stream(_read(file), limits=limits, error=PolicyError, what=str(file))
        except DataError as exc:
            raise ConfigError(exc.message) from None
        for index, document in enumerate(documents):
            items = document.get("items") if isinstance(document, dict) and document.get("kind") == "List" else None
            for position, obj in enumerate(items if isinstance(items, list) else [document]):
                where = f"{file}, document {index + 1}" + (f", item {position + 1}" if items is not None else "")
                if not isinstance(obj, dict) or obj.get("kind") not in KINDS:
                    kind = obj.get("kind") if isinstance(obj, dict) else type(obj).__name__
                    raise ConfigError(f"{where}: a {str(kind)[:60]}, not a ClusterManifestPolicy or ManifestPolicy")
                meta = obj.get("metadata")
                meta = meta if isinstance(meta, dict) else {}
                # A cluster policy's namespace is cleared when it is held (policystore/objects.py, as the API
                # server clears it): two of one name are one policy whatever namespace each file writes in.
                namespace = "" if obj["kind"] == CLUSTER_KIND else str(meta.get("namespace") or "")
                key = (str(obj["kind"]), namespace, str(meta.get("name") or ""))
                if key in seen:
                    raise ConfigError(f"{where}: {key[0]} {key[2]!r} is also in {seen[key]}")
                seen[key] = where
                found.append((where, obj))
    return found


class PolicyFiles:
    """Reads the policy files into a store, and again whenever they change (module docstring)."""

    def __init__(
        self,
        path: str,
        store: PolicyStore,
        load: Callable[[dict[str, Any]], HeldPolicy],
        *,
        poll_seconds: float = POLL_SECONDS,
        log: Callable[..., None] = lambda event, **fields: None,
    ) -> None:
        self.path = Path(path)
        self.store = store
        self.load = load
        self.poll_seconds = poll_seconds
        self.log = log
        self._stop = threading.Event()
        self._seen: Fingerprint | None = None

    def read(self) -> bool:
        """Read the files now; False (and the store told) when they cannot be read as a whole."""
        try:
            seen = fingerprint(self.path)
            objects = read_policy_files(self.path)
            held: list[HeldPolicy] = []
            for where, obj in objects:
                try:
                    held.append(self.load(obj))
                except PolicyError as exc:
                    raise ConfigError(f"{where}: {exc.message}") from None
            if fingerprint(self.path) != seen:
                # Written while read: what was read may be half of it (a file rewritten in place).
                # Keep what is held, and read again at the next look.
                self.log("policy-files-changing", path=str(self.path))
                return False
        except ConfigError as exc:
            self.store.failed(SOURCE, exc.message, broken=True)
            self.log("policy-files-unreadable", path=str(self.path), error=exc.message[:400])
            self._seen = None
            return False
        for kind in KINDS:
            self.store.replace(kind, [h for h in held if h.kind == kind])
        self.store.synced(SOURCE)
        self._seen = seen
        invalid = [h.ref for h in held if not h.ready]
        self.log("policy-files-read", path=str(self.path), policies=len(held), invalid=invalid[:20])
        for bad in (h for h in held if not h.ready):
            self.log("policy-invalid", policy=bad.ref, error=bad.error[:400])
        return True

    def changed(self) -> bool:
        try:
            return fingerprint(self.path) != self._seen
        except ConfigError:
            return True

    def run(self) -> None:
        """Read, then look again every ``poll_seconds`` until :meth:`stop`."""
        self.read()
        while not self._stop.wait(self.poll_seconds):
            if self.changed():
                self.read()

    def stop(self) -> None:
        self._stop.set()
