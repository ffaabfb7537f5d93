"""The test suite's own layout: unit tests mirror the package, helpers live in tests/support/.

* No module imports a test module (``test_*``), lazy imports inside functions
  included: what two tests share is a helper in ``tests/support/``, so a test
  module can be moved, renamed or deleted without breaking another.
* ``tests/unit/<folder>/`` exists exactly for each subpackage of ``provider/``
  (``tests/unit/service/wire/`` for ``provider/service/wire/``), and the library's
  own modules are tested at the top of ``tests/unit/``.
* Beside the tests, ``tests/``, ``tests/unit/`` and ``tests/integration/`` hold only
  ``conftest.py`` and package markers: a helper module there is a helper outside
  ``tests/support/``.
* The fake API server fixture ``fake`` is defined once, in ``tests/conftest.py``
  (a module that needs another lifetime or another server says so with its
  ``fake_api`` marker).

Each check is a function of the repository root, so it can be run on another
checkout (the old layout fails every one).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.data import REPO

#: Where test code lives; bench/ imports test helpers too, so it is held to the same rule.
SCANNED = ("tests", "bench")
#: Python files a folder of tests may hold besides test_*.py.
FRAMEWORK_FILES = {"__init__.py", "conftest.py"}


def _module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(root: Path, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names an import statement loads (for ``from a import b``: both ``a`` and ``a.b``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = _module_name(root, path).split(".")
        if path.name != "__init__.py":
            package = package[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([base] if base else [])])
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def _is_test_module(name: str) -> bool:
    return name.startswith("tests.") and any(part.startswith("test_") for part in name.split("."))


def imports_of_test_modules(root: Path) -> list[str]:
    """``file:line imports module``, once for each statement under ``SCANNED`` that imports a test module."""
    found = []
    for folder in SCANNED:
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                names = [n for n in _imported(root, path, node) if _is_test_module(n)]
                if names:
                    found.append(f"{path.relative_to(root)}:{node.lineno} imports {min(names, key=len)}")
    return found


def package_folders(root: Path) -> set[str]:
    """Subpackages of provider/, as paths relative to it (``service/wire``)."""
    package = root / "provider"
    return {str(p.parent.relative_to(package)) for p in package.rglob("__init__.py") if p.parent != package}


def unit_folders(root: Path) -> set[str]:
    """Folders under tests/unit/ that hold test modules, as paths relative to it."""
    unit = root / "tests" / "unit"
    return {str(p.parent.relative_to(unit)) for p in unit.rglob("test_*.py") if p.parent != unit}


def stray_modules(root: Path) -> list[str]:
    """Python files in the test folders that are neither tests nor conftest/package markers."""
    folders = [root / "tests", *(root / "tests" / name for name in ("unit", "integration"))]
    folders += [p.parent for p in (root / "tests" / "unit").rglob("test_*.py")]
    return sorted(
        str(path.relative_to(root))
        for folder in set(folders)
        for path in folder.glob("*.py")
        if path.name not in FRAMEWORK_FILES and not path.name.startswith("test_")
    )


def fixture_definitions(root: Path, name: str) -> list[str]:
    """``file:line`` of every function called ``name`` under tests/ that a ``pytest.fixture`` decorator makes a fixture."""
    found = []
    for path in sorted((root / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                decorators = [d.func if isinstance(d, ast.Call) else d for d in node.decorator_list]
                if any(isinstance(d, ast.Attribute) and d.attr == "fixture" for d in decorators):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_module_imports_a_test_module() -> None:
    scanned = [p for folder in SCANNED for p in (REPO / folder).rglob("*.py")]
    assert len(scanned) > 100, f"only {len(scanned)} Python files under {SCANNED}: the scan looks in the wrong place"
    assert imports_of_test_modules(REPO) == []


def test_unit_folders_mirror_the_subpackages() -> None:
    packages = package_folders(REPO)
    assert {"keyless", "neighbours", "audit", "kube", "service", "service/wire", "cli"} <= packages
    assert unit_folders(REPO) == packages


def test_helpers_live_in_the_support_package() -> None:
    assert stray_modules(REPO) == []
    assert (REPO / "tests" / "support" / "__init__.py").is_file()


def test_the_fake_api_server_fixture_is_defined_once() -> None:
    (definition,) = fixture_definitions(REPO, "fake")
    assert definition.startswith("tests/conftest.py:")


@pytest.mark.parametrize(
    ("source", "module", "imported"),
    [
        ("from tests.unit.test_keys import ed25519ph_sign\n", "tests/unit/test_cosign_keys.py", True),
        ("from tests.unit.neighbours import test_csr as csrs\n", "tests/integration/test_logs.py", True),
        ("import tests.integration.test_tls\n", "bench/handshake.py", True),
        ("def f():\n    from tests.unit.test_cosign_keys import seal\n", "tests/integration/test_cli.py", True),
        ("from .test_bootstrap import jws\n", "tests/unit/neighbours/test_csr.py", True),
        ("from . import test_bootstrap\n", "tests/unit/neighbours/test_csr.py", True),
        ("from tests.support.bootstrap import jws\n", "tests/unit/neighbours/test_csr.py", False),
        ("from tests.support import csr as csrs\n", "tests/integration/test_logs.py", False),
        ("from provider.neighbours import bootstrap\n", "tests/unit/neighbours/test_csr.py", False),
    ],
    ids=[
        "from-test-module",
        "test-module-from-package",
        "import",
        "lazy",
        "relative",
        "relative-package",
        "support",
        "support-package",
        "library",
    ],
)
def test_the_scan_finds_every_form_of_import(tmp_path: Path, source: str, module: str, imported: bool) -> None:
    path = tmp_path / module
    path.parent.mkdir(parents=True)
    path.write_text(source)
    assert bool(imports_of_test_modules(tmp_path)) is imported


def test_the_quick_subset_holds_no_integration_test() -> None:
    """``make test-fast`` deselects by marker; every test under tests/integration/ must carry it."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-m", "not slow and not integration", "tests/integration"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    # pytest exits 5 when every collected test was deselected: nothing of tests/integration is quick.
    assert proc.returncode == 5, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert re.search(r"no tests collected \([1-9]\d* deselected\)", proc.stdout), proc.stdout[-500:]
