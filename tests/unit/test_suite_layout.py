"""The test suite's own layout: unit tests mirror the package, helpers live in tests/support/.

* No module imports a test module (``test_*``), lazy imports inside functions
  included: what two tests share is a helper in ``tests/support/``, so a test
  module can be moved, renamed or deleted without breaking another.
* ``tests/unit/<folder>/`` exists exactly for each subpackage of ``provider/``
  (``tests/unit/service/wire/`` for ``provider/service/wire/``), and the library's
  own modules are tested at the top of ``tests/unit/``.
* Each module of ``provider/`` has a ``test_<module>.py`` (or ``test_<module>_<what>.py``) in
  the mirrored folder, or is listed in :data:`UNMIRRORED` with the tests that cover it.
* The tests of the shipped policies and manifests are in ``tests/policies/`` and
  ``tests/manifests/``, mirroring ``policies/`` and ``manifests/``.
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


# --- every module has its tests where the package says ---------------------------------------------------------

#: A command's module: tested through ``provider.cli.main``, as a person runs the command.
_COMMAND = "a command, run through main by"
#: Modules of provider/ with no ``test_<module>.py`` (nor ``test_<module>_<what>.py``) in the mirrored folder of
#: tests/unit/, each with the tests that exercise it instead. A package's ``__init__.py`` (it re-exports) and
#: ``cli/__main__.py`` (it calls ``main``) are not modules of their own here.
UNMIRRORED: dict[str, str] = {
    "bounds.py": "the operator's bounds, where a policy meets each: tests/unit/oci/test_bundle_repositories.py, "
    "tests/unit/kube/test_configmap_tenants.py, tests/unit/compare/test_dryrun_namespace.py, "
    "tests/unit/keyless/test_trust_files.py",
    "errors.py": "the error types and their reason codes: tests/unit/test_result.py",
    "limits.py": "the limits against the dependencies' own: tests/unit/test_dependency_limits.py, tests/unit/test_parsing.py",
    "objects.py": "name patterns and object references: tests/unit/test_patterns.py, tests/unit/test_name_patterns.py",
    "readers.py": "the strict readers, through the policy they read: tests/unit/policy/test_schema.py",
    "resources.py": "resources to kinds, through audit events: tests/unit/audit/test_events.py",
    "review.py": "a review read from each engine's request: tests/unit/service/wire/test_admission.py, "
    "tests/unit/verifier/test_verification.py",
    "version.py": "--version: tests/integration/test_cli_habits.py",
    "keyless/identity.py": "a signer's identity: tests/unit/keyless/test_signer.py",
    "keys/signers.py": "who signed, counted once: tests/unit/keyless/test_signer.py, tests/unit/test_properties.py",
    "keys/trusted.py": "a policy's key text read as PEM or OpenPGP: tests/unit/keys/test_openpgp.py, "
    "tests/integration/test_cli_imports.py",
    "kube/client.py": "the API client, through what it carries: tests/unit/kube/test_dryrun.py, "
    "tests/unit/kube/test_dryrun_deadline.py, tests/unit/kube/test_keysecrets.py",
    "verifier/anchors.py": "step 2, through verify and decide: tests/unit/verifier/test_verification.py, "
    "tests/unit/test_properties.py",
    "verifier/context.py": "what decide and verify pass on: tests/unit/verifier/test_verification.py",
    "verifier/fetching.py": "step 1's signatures and Secret-held keys: tests/unit/verifier/test_verification.py, "
    "tests/unit/kube/test_keysecrets.py",
    "kube/secrets.py": "Secrets read for keys and credentials: tests/unit/kube/test_keysecrets.py, "
    "tests/unit/kube/test_credentials.py",
    "oci/auth.py": "registry credentials: tests/unit/oci/test_registry_auth.py",
    "policystore/match.py": "what a held policy matches: tests/unit/policystore/test_objects.py",
    "policystore/store.py": "what is held and whether it may decide: tests/unit/policystore/test_combine.py, "
    "tests/unit/policystore/test_files.py",
    "service/body.py": "the request body's bound: tests/unit/service/test_app.py, tests/integration/test_hostile_service.py",
    "service/cluster.py": "the lazy clients: tests/unit/service/test_app.py",
    "service/dev.py": "make run's server: tests/unit/service/test_serve.py",
    "service/devcerts.py": "throw-away certificates: tests/unit/service/test_serve.py, tests/integration/test_tls.py",
    "service/ports.py": "ports bound before gunicorn: tests/integration/test_ports.py",
    "service/processes.py": "the process_* series: tests/integration/test_metrics_conventions.py",
    "service/routes.py": "the blueprints and their error ladders: tests/unit/service/test_app.py, "
    "tests/unit/service/test_face.py",
    "service/state.py": "the per-process service: tests/unit/service/test_face.py, tests/unit/service/wire/test_admission.py",
    "service/worker.py": "gunicorn's hooks: tests/unit/service/test_serve.py",
    "cli/_args.py": f"the parser's declarations, {_COMMAND} tests/unit/cli/test_parser_declarations.py",
    "cli/_common.py": f"the shared flags, {_COMMAND} tests/unit/cli/test_policy_flags.py",
    "cli/_convert_kyverno.py": f"convert-policy's Kyverno reader, {_COMMAND} tests/unit/cli/test_convert_policy.py",
    "cli/_follow.py": f"observe --follow, {_COMMAND} tests/integration/test_observe_cli.py",
    "cli/_generate.py": f"the shipped policies filled in, {_COMMAND} tests/unit/cli/test_policy_command.py",
    "cli/_keys.py": f"private keys and passwords, {_COMMAND} tests/unit/cli/test_sign.py, "
    "tests/integration/test_cli_habits.py",
    "cli/_observer_metrics.py": f"the observer's metrics, {_COMMAND} tests/integration/test_observe_cli.py",
    "cli/_signature_configmap.py": f"sign --configmap, {_COMMAND} tests/unit/cli/test_sign_configmap.py",
    "cli/_summary.py": f"the verdicts' summary, {_COMMAND} tests/unit/cli/test_verify_output.py, "
    "tests/integration/test_verify_resource_cli.py",
    "cli/_webhook.py": f"policy webhook, {_COMMAND} tests/unit/cli/test_policy_command.py",
    "cli/classify.py": f"{_COMMAND} tests/integration/test_classify_cli.py",
    "cli/completion.py": f"{_COMMAND} tests/integration/test_cli_habits.py",
    "cli/keygen.py": f"{_COMMAND} tests/integration/test_cli.py",
    "cli/observe.py": f"{_COMMAND} tests/integration/test_observe_cli.py",
    "cli/serve.py": f"{_COMMAND} tests/unit/service/test_serve.py, tests/integration/test_service.py",
    "cli/trusted_root.py": f"{_COMMAND} tests/unit/service/test_trustroot.py",
    "cli/verify_cluster_info.py": f"{_COMMAND} tests/integration/test_neighbours_cli.py",
    "cli/verify_csr.py": f"{_COMMAND} tests/integration/test_neighbours_cli.py",
    "cli/verify_resource.py": f"{_COMMAND} tests/integration/test_verify_resource_cli.py",
    "cli/version.py": f"{_COMMAND} tests/integration/test_cli_habits.py",
}
NAMED_TEST = re.compile(r"tests/[\w/]+\.py")


def unmirrored_modules(root: Path) -> set[str]:
    """Modules of provider/ (``service/body.py``) with no ``test_<module>.py`` or ``test_<module>_*.py`` in the
    mirrored folder of tests/unit/ (``tests/unit/service/``; the root's modules: ``tests/unit/``)."""
    found = set()
    for path in (root / "provider").rglob("*.py"):
        module = path.relative_to(root / "provider")
        if path.name in FRAMEWORK_FILES | {"__main__.py"}:
            continue
        folder = root / "tests" / "unit" / module.parent
        if not [*folder.glob(f"test_{module.stem}.py"), *folder.glob(f"test_{module.stem}_*.py")]:
            found.add(str(module))
    return found


def test_every_module_has_its_tests_in_the_mirrored_place_or_says_where() -> None:
    """A new module without tests of its name fails here, and so does an exception that no longer is one."""
    modules = list((REPO / "provider").rglob("*.py"))
    assert len(modules) > 100, f"only {len(modules)} modules under provider/: the scan looks in the wrong place"
    assert unmirrored_modules(REPO) == set(UNMIRRORED)


@pytest.mark.parametrize("module", sorted(UNMIRRORED))
def test_each_exception_names_the_tests_that_cover_it(module: str) -> None:
    named = NAMED_TEST.findall(UNMIRRORED[module])
    assert named, f"{module}: the reason names no test file"
    assert [name for name in named if not (REPO / name).is_file()] == []


def test_the_mirror_check_finds_a_module_without_tests(tmp_path: Path) -> None:
    for name in ("provider/keys/pem.py", "provider/keys/rules.py", "provider/keys/__init__.py", "provider/cache.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    for name in ("tests/unit/keys/test_pem.py", "tests/unit/keys/test_rules_strength.py", "tests/unit/test_cache.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    assert unmirrored_modules(tmp_path) == set()
    (tmp_path / "tests/unit/keys/test_pem.py").rename(tmp_path / "tests/unit/test_pem.py")  # the wrong folder
    (tmp_path / "provider/keys/signers.py").touch()
    assert unmirrored_modules(tmp_path) == {"keys/pem.py", "keys/signers.py"}


def test_the_policy_and_manifest_tests_hold_only_tests() -> None:
    """tests/policies/ and tests/manifests/ mirror the repository's policies/ and manifests/; helpers live in tests/support/."""
    folders = [REPO / "tests" / "policies", REPO / "tests" / "manifests"]
    found = sorted(p.name for folder in folders for p in folder.glob("*.py"))
    assert len(found) > 10, found
    assert [name for name in found if name not in FRAMEWORK_FILES and not name.startswith("test_")] == []
