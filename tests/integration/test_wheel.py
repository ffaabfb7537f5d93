"""``pip install .`` gives a working ``manifest-provider policy``: the shipped policies are package data.

A wheel is built from a copy of the files the build reads (``pip wheel
--no-deps --no-build-isolation``, as the Dockerfile builds it), installed with
``--no-deps`` into a fresh virtualenv that sees the test environment's
site-packages through a ``.pth`` line (so nothing is downloaded), and the
installed ``manifest-provider`` runs from a directory outside the checkout.
Its ``policy`` output must equal the checkout's, byte for byte.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from provider.cli import main
from provider.cli._generate import SHIPPED
from provider.keys.pem import generate_key, public_pem
from tests.support.data import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: What the build reads (the Dockerfile copies the same).
BUILD_INPUTS = ("pyproject.toml", "setup.cfg", "setup.py", "README.md", "LICENSE", "provider", "policies")


def _run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=600, check=False, **kwargs)  # type: ignore[call-overload, no-any-return]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The ``bin`` folder of a fresh virtualenv with the wheel installed."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    source.mkdir()
    for name in BUILD_INPUTS:
        origin = REPO / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(origin, source / name)
    wheels = root / "wheels"
    built = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(wheels),
            ".",
        ],
        cwd=source,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("manifest_provider-*.whl")
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip())
    # The dependencies come from the test environment: appended to sys.path, after the fresh
    # site-packages, so the installed `provider` is the one imported. (Its own .pth files, among
    # them the editable install's finder, are not run: only site directories' are.)
    (site / "zz-test-environment.pth").write_text(sysconfig.get_path("purelib") + "\n")
    installed = _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)]
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    yield env_dir / "bin"


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory outside the checkout, holding a public key."""
    (tmp_path / "team.pub").write_bytes(public_pem(generate_key("ecdsa-p256")))
    return tmp_path


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def test_the_installed_package_is_the_wheel_not_the_checkout(installed: Path, elsewhere: Path) -> None:
    found = _run(
        [str(installed / "python"), "-c", "import provider; print(provider.__file__)"], cwd=elsewhere, env=_clean_env()
    )
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()).is_relative_to(installed.parent), found.stdout
    shipped = installed.parent / "lib"
    files = sorted(p.relative_to(p.parents[3]) for p in shipped.rglob("_policies/*/*/*.yaml"))
    assert any(str(f).endswith(str(SHIPPED["kyverno"])) for f in files), files


@pytest.mark.parametrize(
    "engine, options",
    [("gatekeeper", ["--without-ca"]), ("kyverno", ["--without-ca"]), ("kyverno-cel", [])],
)
def test_policy_runs_from_the_wheel_as_from_the_checkout(
    installed: Path,
    elsewhere: Path,
    engine: str,
    options: list[str],
    *,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = ["policy", engine, "-k", "team.pub", "--match-namespace", "shop", *options]
    ran = _run([str(installed / "manifest-provider"), *args], cwd=elsewhere, env=_clean_env())
    assert ran.returncode == 0, ran.stderr
    monkeypatch.chdir(elsewhere)
    assert main(args) == 0
    assert ran.stdout == capsys.readouterr().out
    assert "kind:" in ran.stdout
