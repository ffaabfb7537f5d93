"""Every file, folder and module the prose names exists.

A docstring, a comment or a page that names a module where it was before it moved
sends the reader to nothing. This reads the prose of every file git holds -- the whole text
of docs, manifests, policies and configuration files, the comments and docstrings of Python
files (their code is checked by running it) -- and resolves two kinds of names:

* a path under one of the repository's folders (``provider/service/config.py``,
  ``tests/integration/test_monitoring.py``): the file or folder exists;
* a dotted name under ``provider`` or ``tests`` (``provider.keys.signers.Binding``,
  :mod:`provider.audit.reports`): the longest prefix that is a module exists and the next
  part, if any, is a name that module defines or imports.

A pattern (``tests/data/crds/kyverno/v1.*``, ``<name>``) is not a name. What is named in
another project's tree is listed in :data:`ELSEWHERE`, with the project.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from functools import cache
from pathlib import Path

from tests.support.data import REPO

FOLDERS = ("provider", "tests", "docs", "policies", "manifests", "bench", "tools", "requirements")
PATH = re.compile(rf"(?<![\w./$-])(?:{'|'.join(FOLDERS)})/[\w./-]*")
#: A path followed by one of these is a pattern (``v1.*``, ``<name>.yaml``, ``{a,b}``), not a name.
PATTERN = ("*", "<", "{")
DOTTED = re.compile(r"(?<![\w./$-])(?:provider|tests)(?:\.[A-Za-z_]\w*)+")

#: Names of files in other projects that the prose cites by their path there.
ELSEWHERE = {
    "docs/metadata/artifacthub-pkg.yml": "artifacthub/hub",
    "docs/oid-info.md": "sigstore/fulcio",
    "tools/cache/reflector.go": "kubernetes/client-go",
}
#: Dotted names that are not modules: a file name, and the package setup.py maps onto policies/.
NOT_MODULES = {"provider.yaml", "provider._policies"}
SKIPPED_SUFFIXES = {".json", ".pem", ".gz", ".tar", ".der", ".key", ".crt", ".asc", ".gpg", ".sig", ".pub", ".png"}


def prose(path: Path) -> str:
    """The text a reader reads as prose: a Python file's comments and docstrings, any other file whole."""
    text = path.read_text()
    if path.suffix != ".py":
        return text
    parts = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                parts.append(docstring)
    return "\n".join(parts)


@cache
def defined(module: Path) -> frozenset[str]:
    """The names a module binds at any level: definitions, assignments, imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            found.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            found.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return frozenset(found)


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:end])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if not module.is_file():
            if end == len(parts) and base.is_dir():
                return True  # a namespace folder (tests.data)
            continue
        rest = parts[end:]
        return not rest or rest[0] in defined(module)
    return False


def broken_names(files: list[str]) -> dict[str, set[str]]:
    broken: dict[str, set[str]] = {}
    for name in files:
        path = REPO / name
        if path.is_symlink() or not path.is_file() or path.suffix in SKIPPED_SUFFIXES:
            continue
        if name.startswith(("tests/data/", "tests/assets/")):
            continue  # recordings and vectors from elsewhere: their text is data
        try:
            text = prose(path)
        except UnicodeDecodeError:
            continue
        for match in PATH.finditer(text):
            ref = match.group(0).rstrip(".")
            if text.startswith(PATTERN, match.end()):
                continue
            if ref not in ELSEWHERE and not (REPO / ref).exists():
                broken.setdefault(ref, set()).add(name)
        for match in DOTTED.finditer(text):
            ref = match.group(0)
            if ref not in NOT_MODULES and not resolves(ref):
                broken.setdefault(ref, set()).add(name)
    return broken


def tracked() -> list[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    assert len(listed) > 300, len(listed)
    return listed


def test_every_path_and_module_the_prose_names_exists() -> None:
    broken = broken_names(tracked())
    assert {ref: sorted(where) for ref, where in broken.items()} == {}


def test_the_names_read_are_many_and_a_stale_one_is_found(tmp_path: Path) -> None:
    """Not a check of nothing: the prose names hundreds of paths, and a moved module is caught."""
    count = sum(len(PATH.findall(prose(REPO / n))) for n in ("docs/architecture.md", "README.md"))
    assert count > 20
    page = REPO / "docs" / "architecture.md"
    assert broken_names([str(page.relative_to(REPO))]) == {}
    # A stale name in a docstring, in a module file that is not in the repository.
    stale = tmp_path / "stale.py"
    stale.write_text('"""Reads provider/config.py, as :func:`provider.verifier.check_key` did."""\n')
    found = broken_names([str(stale)])
    assert set(found) == {"provider/config.py", "provider.verifier.check_key"}
    assert resolves("provider.keys.signers.Binding") and not resolves("provider.verifier.Binding")
