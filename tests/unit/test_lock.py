"""One known set of versions: requirements/*.txt, what installs it, and what is installed.

``make install`` installs ``requirements/lock.txt`` (the package's dependencies, its ``test``
extra, pip/setuptools/wheel) and ``requirements/opa.txt`` with ``--require-hashes``; the
image installs ``requirements/serve.txt`` and builds with ``requirements/build.txt``.
``setup.cfg`` keeps the ranges library users get; the lock is one point inside them.
"""

from __future__ import annotations

import configparser
import subprocess
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.support.data import REPO
from tests.support.lock import INSTALLED_FROM, REQUIREMENTS, differences, installed, locked, parse_lock, read_lock

LOCK = REQUIREMENTS / "lock.txt"
SERVE = REQUIREMENTS / "serve.txt"
BUILD = REQUIREMENTS / "build.txt"
OPA = REQUIREMENTS / "opa.txt"
ALL_LOCKS = (LOCK, SERVE, BUILD, OPA, REQUIREMENTS / "uv.txt")


def _setup_cfg_requirements(option: str) -> list[Requirement]:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    section, key = ("options", "install_requires") if option == "install" else ("options.extras_require", option)
    lines = [line.split("#", 1)[0].strip() for line in cfg.get(section, key).splitlines()]
    return [Requirement(line) for line in lines if line]


def test_installed_versions_match_the_lock() -> None:
    """The interpreter running the tests holds exactly lock.txt + opa.txt, nothing more or less."""
    found = differences(locked(), installed())
    assert not found, "installed packages differ from the lock (make install reinstalls from it):\n  " + "\n  ".join(
        found
    )


def test_differences_name_each_package_and_both_versions() -> None:
    v = Version
    lock = {canonicalize_name(n): v(x) for n, x in {"pyyaml": "6.0.4", "flask": "3.1.3", "ruff": "0.17.6"}.items()}
    present = {canonicalize_name(n): v(x) for n, x in {"pyyaml": "6.0.2", "flask": "3.1.3", "six": "1.17"}.items()}
    assert differences(lock, present) == [
        "pyyaml: installed 6.0.2, locked 6.0.4",
        "ruff: locked 0.17.6, not installed",
        "six: installed 1.17, not in the lock",
    ]
    assert differences(lock, dict(lock)) == []


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("pyyaml>=6.0 \\\n    --hash=sha256:ab\n", "not pinned to one version"),
        ("pyyaml==6.* \\\n    --hash=sha256:ab\n", "not pinned to one version"),
        ("pyyaml==6.0.4\n", "has no --hash"),
        ("pyyaml==6.0.4 \\\n    --hash=md5:ab\n", "expected only --hash=sha256"),
        ("-e .\n", "an option"),
        ("--index-url https://example.invalid/simple\npyyaml==6.0.4 --hash=sha256:ab\n", "an option"),
        ("pyyaml==6.0.4 ; python_version < '3.12' \\\n    --hash=sha256:ab\n", "environment marker"),
    ],
    ids=["range", "wildcard", "no-hash", "md5", "editable", "index-option", "marker"],
)
def test_a_lock_entry_that_would_weaken_require_hashes_is_refused(text: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_lock(text, "lock.txt")


@pytest.mark.parametrize("path", ALL_LOCKS, ids=lambda p: p.name)
def test_each_lock_pins_every_entry_with_sha256_hashes(path) -> None:
    pins = read_lock(path)
    assert pins, f"{path} locks nothing"
    assert all(pin.hashes for pin in pins.values())


def test_the_lock_holds_every_range_of_setup_cfg_and_stays_inside_it() -> None:
    lock = read_lock(LOCK)
    wanted = _setup_cfg_requirements("install") + _setup_cfg_requirements("test")
    assert len(wanted) > 15, "setup.cfg's requirements were not found"
    outside = [
        f"{req}: locked {lock[canonicalize_name(req.name)].version}"
        for req in wanted
        if canonicalize_name(req.name) in lock and lock[canonicalize_name(req.name)].version not in req.specifier
    ]
    missing = [str(req) for req in wanted if canonicalize_name(req.name) not in lock]
    assert not missing, f"setup.cfg asks for packages requirements/lock.txt lacks (make lock): {missing}"
    assert not outside, f"requirements/lock.txt is outside setup.cfg's ranges (make lock): {outside}"


def test_the_serving_and_build_locks_are_subsets_of_the_lock_at_the_same_versions() -> None:
    lock = read_lock(LOCK)
    serve, build = read_lock(SERVE), read_lock(BUILD)
    for subset in (serve, build):
        assert {n: p.version for n, p in subset.items() if lock.get(n) is None or lock[n].version != p.version} == {}
    # serve.txt is what the package needs to run: every install_requires, no test tool.
    runtime = {canonicalize_name(r.name) for r in _setup_cfg_requirements("install")}
    test_only = {canonicalize_name(r.name) for r in _setup_cfg_requirements("test")} - set(serve)
    assert runtime <= set(serve)
    assert {"pytest", "mypy", "ruff", "hypothesis"} <= test_only
    # build.txt holds pyproject.toml's build backend, so `--no-build-isolation` fetches nothing.
    backend = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    for req in map(Requirement, backend):
        name = canonicalize_name(req.name)
        assert name in build and build[name].version in req.specifier, f"{req} is not in requirements/build.txt"
    assert canonicalize_name("pip") in build


def test_opa_bindings_are_locked_apart_at_the_version_the_rego_tests_use() -> None:
    opa = read_lock(OPA)
    assert {n: str(p.version) for n, p in opa.items()} == {"opa-golib-python-bindings": "0.4.4"}
    assert not set(opa) & set(read_lock(LOCK)), "opa.txt and lock.txt overlap"
    assert INSTALLED_FROM == (LOCK, OPA)


def test_a_changed_lock_reinstalls_the_venv() -> None:
    """make's own reading of the Makefile: the stamp of .venv depends on every lock it installs."""
    database = subprocess.run(
        ["make", "-s", "--no-print-directory", "--print-data-base", "--question", ".venv/.installed"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout
    rules = [line for line in database.splitlines() if line.startswith(".venv/.installed:")]
    assert rules, "make printed no rule for .venv/.installed"
    prerequisites = set(rules[0].split(":", 1)[1].split())
    assert {"setup.cfg", "pyproject.toml", "requirements/lock.txt", "requirements/build.txt"} <= prerequisites
    assert "requirements/opa.txt" in prerequisites
