"""The architecture a machine checks (docs/architecture.md).

* The import contracts in setup.cfg (``[importlinter]``: the layers, the primitives,
  the library without a web framework or the kubernetes client) hold, every import
  counted -- lazy ones inside functions included. ``make lint`` runs them too.
* The package has no import cycle, lazy imports included.
* Importing the library loads neither the web stack nor the kubernetes client.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import grimp
from importlinter import api as importlinter

REPO = Path(__file__).resolve().parents[2]


def test_the_import_contracts_hold() -> None:
    command = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    proc = subprocess.run([sys.executable, "-c", command, "--config", str(REPO / "setup.cfg"), "--no-cache"],
                          cwd=REPO, capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def _contracts() -> dict[str, dict[str, Any]]:
    configuration = importlinter.read_configuration(str(REPO / "setup.cfg"))
    return {c["id"]: c for c in configuration["contracts_options"]}


def tiers() -> list[str]:
    """The contracts' tiers: each layer of the layers contract (independent ones split), then each primitive."""
    contracts = _contracts()
    layered = [t.strip() for layer in contracts["layers"]["layers"] for t in layer.split("|")]
    return [*layered, *contracts["primitives"]["source_modules"]]


#: Faces and the adapters that hold the web stack or the kubernetes client: all but these are the library.
NOT_LIBRARY = {"provider.cli", "provider.service", "provider.kube"}


def _within(module: str, tier: str) -> bool:
    return module == tier or module.startswith(tier + ".")


def _package_modules() -> list[str]:
    """Every module of the package, read from the files (so a module nothing imports counts too)."""
    root = REPO / "provider"
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    assert len(found) > 50
    return found


def test_the_contracts_are_the_three_named() -> None:
    assert set(_contracts()) == {"layers", "primitives", "library"}


def test_every_module_sits_in_exactly_one_tier() -> None:
    """A module in no tier is checked by no contract; in two, the contracts contradict each other."""
    named = tiers()
    assert len(named) == len(set(named)), named
    misplaced = {}
    for module in _package_modules():
        if module == "provider":
            continue  # the public face re-exports the library; it is no tier's member
        holding = [t for t in named if _within(module, t)]
        if len(holding) != 1:
            misplaced[module] = holding
    assert misplaced == {}


def test_every_subpackage_is_a_tier_by_name() -> None:
    """Each folder of the package is named whole in the contracts, so a module added to it is covered."""
    named = set(tiers())
    subpackages = sorted(
        ".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "provider").rglob("__init__.py") if p.parent.name
    )
    top = [s for s in subpackages if s.count(".") == 1]
    assert len(top) >= 7, top
    assert [s for s in top if s not in named] == []
    # A deeper folder (service.wire) sits in its parent's tier, never in a tier of its own.
    assert [s for s in subpackages if s.count(".") > 1 and s in named] == []


def test_the_library_contract_covers_every_tier_but_the_faces_and_the_cluster_client() -> None:
    sources = set(_contracts()["library"]["source_modules"])
    assert sources == set(tiers()) - NOT_LIBRARY


def test_the_tier_checks_can_fail() -> None:
    """A module in no tier is found, and so is one in two."""
    assert [t for t in ["provider.keys.pem", "provider.keyless"] if _within("provider.keyless.rekor", t)] == [
        "provider.keyless"
    ]
    assert not any(_within("provider.keysmith", t) for t in ["provider.keys.pem"])


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_package_has_no_import_cycle() -> None:
    graph = grimp.build_graph("provider")
    assert len(graph.modules) > 50
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check above can fail: the same finder on a graph with a cycle reports it."""
    graph = grimp.ImportGraph()
    for module in ("a", "b", "c", "d"):
        graph.add_module(module)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    graph.add_import(importer="c", imported="a")
    graph.add_import(importer="c", imported="d")
    assert _cycles(graph) == [["a", "b", "c"]]


LINTED = ("provider", "tests", "bench", "tools", "policies")


def test_the_code_is_formatted() -> None:
    """``ruff format`` at 120 columns (pyproject.toml) is enforced, here and in ``make lint``."""
    ruff = Path(sys.executable).with_name("ruff")
    proc = subprocess.run([str(ruff), "format", "--check", *LINTED], cwd=REPO,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-1000:]


def scripts() -> list[Path]:
    """The scripts outside the package that write committed files: the policies' generators and tools/."""
    found = sorted({*REPO.glob("policies/**/*.py"), *REPO.glob("tools/*.py")})
    assert len(found) >= 6, found
    return found


def test_the_scripts_outside_the_package_pass_ruff_and_strict_mypy(tmp_path: Path) -> None:
    """policies/**/*.py and tools/ are code like the package's: ruff's rules, and mypy --strict one script
    at a time (several are called make_samples.py), as ``make lint`` runs them."""
    ruff, mypy = (Path(sys.executable).with_name(tool) for tool in ("ruff", "mypy"))
    proc = subprocess.run([str(ruff), "check", "tools", "policies"], cwd=REPO,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-1000:]
    makefile = (REPO / "Makefile").read_text()
    assert "ruff check provider tests bench tools policies" in makefile
    assert '$(VENV)/bin/mypy "$$script"' in makefile
    for script in scripts():
        proc = subprocess.run([str(mypy), "--cache-dir", str(tmp_path), str(script.relative_to(REPO))], cwd=REPO,
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-1000:]


FORBIDDEN_PACKAGES = ("flask", "werkzeug", "gunicorn", "kubernetes", "prometheus_client")


def test_importing_the_library_loads_no_web_stack_or_cluster_client() -> None:
    code = (
        "import sys, provider, provider.verifier, provider.signatures.signing, provider.policy.schema, provider.keyless.signer, provider.audit.classify\n"
        f"bad = [m for m in {FORBIDDEN_PACKAGES!r} if m in sys.modules]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
