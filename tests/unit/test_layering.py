"""The layering contract: the library never depends on its faces or on a cluster.

Layers 1-2 (formats, primitives, the verifier) must import neither the web
stack (flask, werkzeug, gunicorn) nor the kubernetes client, nor the modules
of layers 3-4, so the library imports fast and embeds anywhere.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "provider"

#: Layer 3 (adapters) and layer 4 (faces): allowed to import anything.
OUTER = {
    "app", "config", "checks", "auth", "metrics", "cache", "serve", "dev", "devcerts",
    "kube", "kube_tokens", "wire", "cli", "worker", "tokenreview", "clientcerts",
}  # fmt: skip
FORBIDDEN_PACKAGES = ("flask", "werkzeug", "gunicorn", "kubernetes")


def core_modules() -> list[Path]:
    return sorted(
        p for p in PACKAGE.rglob("*.py")
        if p.relative_to(PACKAGE).parts[0].removesuffix(".py") not in OUTER
    )  # fmt: skip


def imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names.add(base)
            names.update(f"{base}.{alias.name}" if base.endswith(".") is False else f"{base}{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_core_module_imports_no_outer_layer(path: Path) -> None:
    for name in imported_names(path):
        top = name.lstrip(".").split(".")[0]
        assert top not in FORBIDDEN_PACKAGES, f"{path.name} imports {name}"
        if name.startswith("."):
            first = name.lstrip(".").split(".")[0]
            assert first not in OUTER, f"{path.name} imports the outer-layer module {name}"


def test_importing_the_library_loads_no_web_stack_or_cluster_client() -> None:
    code = (
        "import sys, provider, provider.verifier, provider.signing, provider.policy\n"
        f"bad = [m for m in {FORBIDDEN_PACKAGES!r} if m in sys.modules]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
