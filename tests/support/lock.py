"""The locked versions in ``requirements/*.txt`` and what is really installed.

``make install`` installs ``requirements/lock.txt`` and ``requirements/opa.txt`` (every
package of ``.venv``, with hashes); ``tests/unit/test_lock.py`` checks the running
interpreter holds exactly that set, and ``make test-latest`` runs this module to print how
the newest releases differ from the lock (``python -m tests.support.lock``).

The lock files are pip requirement files as ``uv pip compile --generate-hashes`` writes
them: one ``name==version`` per entry, ``--hash=sha256:...`` options on continuation lines,
``# via`` comments. Anything else in them (an unpinned entry, an option, an editable) is
refused here, so a hand edit that would weaken ``--require-hashes`` fails the tests.
"""

from __future__ import annotations

import importlib.metadata
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from tests.support.data import REPO

REQUIREMENTS = REPO / "requirements"
#: What ``make install`` puts in .venv (build.txt is a subset of lock.txt, checked in test_lock).
INSTALLED_FROM = (REQUIREMENTS / "lock.txt", REQUIREMENTS / "opa.txt")
#: The project itself, installed editable and --no-deps after the locked set.
PROJECT = canonicalize_name("manifest-provider")


@dataclass(frozen=True)
class Pin:
    name: NormalizedName
    version: Version
    hashes: tuple[str, ...]
    source: str  # "requirements/lock.txt:12", for messages


def _entries(text: str) -> list[tuple[int, str]]:
    """(first line number, logical line) per entry: continuations joined, comments dropped."""
    entries: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line and not current:
            continue
        if not current:
            start = number
        continued = line.endswith("\\")
        current.append(line.removesuffix("\\").strip())
        if not continued:
            entries.append((start, " ".join(part for part in current if part)))
            current = []
    if current:
        entries.append((start, " ".join(part for part in current if part)))
    return entries


def parse_lock(text: str, where: str) -> list[Pin]:
    """Every entry of a lock file; a ValueError names the line of anything but a hashed pin."""
    pins: list[Pin] = []
    for number, entry in _entries(text):
        at = f"{where}:{number}"
        if entry.startswith("-"):
            raise ValueError(f"{at}: an option ({entry.split()[0]}), expected name==version and its hashes")
        requirement, sep, rest = entry.partition(" --")
        options = f"--{rest}".split() if sep else []
        hashes = []
        for option in options:
            if not option.startswith("--hash=sha256:"):
                raise ValueError(f"{at}: {option!r} after {requirement}, expected only --hash=sha256:...")
            hashes.append(option.removeprefix("--hash="))
        parsed = Requirement(requirement)
        specs = list(parsed.specifier)
        if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
            raise ValueError(f"{at}: {requirement} is not pinned to one version (expected name==version)")
        if parsed.url or parsed.marker is not None:
            raise ValueError(f"{at}: {requirement} carries a URL or an environment marker; the lock has neither")
        if not hashes:
            raise ValueError(f"{at}: {requirement} has no --hash; pip --require-hashes would refuse the file")
        pins.append(Pin(canonicalize_name(parsed.name), Version(specs[0].version), tuple(hashes), at))
    return pins


def read_lock(path: Path) -> dict[NormalizedName, Pin]:
    where = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
    pins = parse_lock(path.read_text(), where)
    by_name: dict[NormalizedName, Pin] = {}
    for pin in pins:
        if pin.name in by_name:
            raise ValueError(f"{pin.source}: {pin.name} is locked twice (also {by_name[pin.name].source})")
        by_name[pin.name] = pin
    return by_name


def locked(paths: tuple[Path, ...] = INSTALLED_FROM) -> dict[NormalizedName, Version]:
    versions: dict[NormalizedName, Version] = {}
    for path in paths:
        for name, pin in read_lock(path).items():
            if name in versions and versions[name] != pin.version:
                raise ValueError(f"{pin.source}: {name}=={pin.version}, another lock says {versions[name]}")
            versions[name] = pin.version
    return versions


def installed() -> dict[NormalizedName, Version]:
    """The distributions the running interpreter sees, the project itself left out."""
    found: dict[NormalizedName, Version] = {}
    for dist in importlib.metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if name != PROJECT:
            found[name] = Version(dist.version)
    return found


def differences(lock: dict[NormalizedName, Version], present: dict[NormalizedName, Version]) -> list[str]:
    """One line per difference, sorted by name: other version, missing, or not in the lock."""
    lines = []
    for name in sorted(lock.keys() | present.keys()):
        want, have = lock.get(name), present.get(name)
        if want == have:
            continue
        if have is None:
            lines.append(f"{name}: locked {want}, not installed")
        elif want is None:
            lines.append(f"{name}: installed {have}, not in the lock")
        else:
            lines.append(f"{name}: installed {have}, locked {want}")
    return lines


def main() -> int:
    found = differences(locked(), installed())
    where = " + ".join(str(p.relative_to(REPO)) for p in INSTALLED_FROM)
    if not found:
        print(f"{sys.prefix}: exactly the versions of {where}")
        return 0
    print(f"{sys.prefix} differs from {where} in {len(found)} packages:")
    for line in found:
        print(f"  {line}")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
