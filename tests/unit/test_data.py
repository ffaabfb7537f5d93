"""The conformance data in tests/data is what its READMEs say it is: byte-identical copies.

Every file is listed in ``tests/data/SHA256SUMS`` with its digest, and nothing else is there.
An edit by hand, a formatter or a line-ending conversion would silently change what a test
means; this fails instead (``make data-sums`` refreshes the list after a deliberate change).
"""

from __future__ import annotations

import hashlib

from tests.support.data import DATA


def listed() -> dict[str, str]:
    sums = {}
    for line in (DATA / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split("  ", 1)
        sums[name.removeprefix("./")] = digest
    return sums


def test_every_data_file_is_listed_with_its_digest() -> None:
    sums = listed()
    present = {p.relative_to(DATA).as_posix() for p in DATA.rglob("*") if p.is_file() and p.name != "SHA256SUMS"}
    assert len(present) > 100, "expected the interop, dry-run, audit and CRD files in tests/data"
    assert present == set(sums), "tests/data and SHA256SUMS disagree: copy files unchanged, then run make data-sums"
    changed = [
        name for name, digest in sums.items() if hashlib.sha256((DATA / name).read_bytes()).hexdigest() != digest
    ]
    assert changed == [], f"changed since they were copied: {changed}"


def test_every_folder_says_where_its_files_came_from() -> None:
    folders = {p.parent for p in DATA.rglob("*") if p.is_file() and p.name not in {"SHA256SUMS"}}
    tops = {
        DATA / "interop" / "k8s-manifest-sigstore",
        DATA / "interop" / "kyverno",
        DATA / "dryrun",
        DATA / "audit",
        DATA / "crds",
    }
    for top in tops:
        assert (top / "README.md").is_file(), f"{top.relative_to(DATA)} has no README saying where its files came from"
    orphans = [f for f in folders if f != DATA and not any(f == t or t in f.parents for t in tops)]
    assert orphans == [], f"data outside a documented folder: {orphans}"
