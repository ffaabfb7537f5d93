"""The library's face: ``provider.__all__`` resolves, docs/library.md lists exactly it, and its examples run.

The stable API is what ``provider`` exports; docs/library.md's table names each
export once, and its ``python`` blocks -- run here in order, as one program, in a
scratch directory -- use every one of them, and each ``print`` prints what its ``# ...``
comment says (up to a `` -- `` remark).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import provider
from tests.support.data import REPO

DOC = REPO / "docs" / "library.md"
ROW = re.compile(r"^\| `(?P<name>\w+)` \|", re.MULTILINE)
BLOCK = re.compile(r"^```python\n(?P<body>.*?)^```$", re.DOTALL | re.MULTILINE)


def blocks() -> list[str]:
    found = [m["body"] for m in BLOCK.finditer(DOC.read_text())]
    assert len(found) >= 5, "docs/library.md lost its examples"
    return found


def test_every_exported_name_resolves() -> None:
    assert len(provider.__all__) == len(set(provider.__all__))
    for name in provider.__all__:
        assert getattr(provider, name) is not None, name
    assert set(provider.__all__) <= set(dir(provider))


def test_the_lazy_table_and_all_agree() -> None:
    assert sorted([*provider._EXPORTS, "__version__"]) == sorted(provider.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Verifier'"):
        provider.Verifier  # noqa: B018 - the lookup is the test


def test_the_page_lists_exactly_the_exported_names() -> None:
    listed = [m["name"] for m in ROW.finditer(DOC.read_text())]
    assert len(listed) == len(set(listed)), "a name is listed twice"
    assert sorted(listed) == sorted(provider.__all__)


def test_every_exported_name_has_an_example() -> None:
    code = "\n".join(blocks())
    missing = [name for name in provider.__all__ if not re.search(rf"\b{name}\b", code)]
    assert missing == []


def test_the_examples_run_and_print_what_they_say(tmp_path: Path) -> None:
    namespace: dict[str, object] = {"__name__": "library_md"}
    out = io.StringIO()
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        for body in blocks():
            before = out.tell()
            with contextlib.redirect_stdout(out):
                exec(compile(body, str(DOC), "exec"), namespace)
            printed = out.getvalue()[before:].splitlines()
            promised = [line.split("  # ", 1)[1] for line in body.splitlines() if line.lstrip().startswith("print(")]
            assert len(printed) == len(promised), (body, printed)
            for line, words in zip(printed, promised, strict=True):
                assert line == words.split(" -- ", 1)[0], (body, line)
    finally:
        os.chdir(cwd)


def test_import_provider_loads_none_of_the_library() -> None:
    # A fresh interpreter: this one has loaded everything by now.
    program = "import sys, provider; print(sorted(m for m in sys.modules if m.startswith('provider')))"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "['provider', 'provider.version']"
