"""Every generator of committed files, rerun on a copy of the repository, writes what is committed.

A generator nobody runs breaks silently when code moves (``/work``'s style notes, "Finding
things"; two sample generators did). Each script that writes committed files --
``policies/**/make_*.py`` (the policies' samples, Kyverno test files and Artifact Hub
metadata) and ``tools/make_*.py`` (the Helm chart's generated parts, the kind schemas, the
profiles' JSON) -- runs
here as a person runs it, in a fresh interpreter, on a copy of the folders it reads and
writes; then every file of the copy is compared with the repository's, and the copy may hold
no file the repository does not.

The sample generators make fresh keys on purpose (a sample policy must trust no key anybody
holds), so a signature, a public key, a CA certificate, a certificate request, and what is
computed from them -- a key fingerprint in a message, the Artifact Hub digest of a policy
that holds the key -- differ from run to run. Those values, and only those (:data:`RANDOM`),
are compared up to a renaming: each one stands for the same value everywhere it appears (the
key of the sample constraint is the key in the three Kyverno policies and the observer's
policy). Everything else -- the objects, the verdicts, their messages, the headers -- must be
byte-equal.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.data import REPO

#: What the generators read and write, copied before they run.
COPIED = ("policies", "manifests", "tools", "tests/data/dryrun/discovery")

#: ``(script, arguments, file it writes outside the copied folders -> the committed file)``; the
#: kind schemas go to the package's data folder, which is not copied (a ``provider`` folder in
#: the copy would shadow the installed package).
ELSEWHERE: dict[str, tuple[list[str], str, str]] = {
    "tools/make_kind_schemas.py": (
        ["--output", "kind_schemas.json"],
        "kind_schemas.json",
        "provider/data/kind_schemas.json",
    ),
    "tools/make_profiles.py": (
        ["--output", "profiles.json"],
        "profiles.json",
        "provider/data/profiles.json",
    ),
}

#: The values a run draws at random, each by the context that names it.
RANDOM = [
    re.compile(r"-----BEGIN [A-Z ]+-----(?:\\n|\s)*((?:[A-Za-z0-9+/=]+(?:\\n|\s)*)+?)-----END"),  # PEM bodies
    re.compile(r"/signature(?:_\d+)?: (\S+)"),  # cosign.sigstore.dev/signature
    re.compile(r"sha256:([0-9a-f]{64})"),  # key fingerprints in messages
    re.compile(r"jws-kubeconfig-[a-z0-9]{6}: (\S+)"),  # bootstrap-token signatures
    re.compile(r"certificate-authority-data: (\S+)"),  # the throw-away CA in the kubeconfig
    re.compile(r"\brequest: (\S+)"),  # a CSR's PEM, base64
    re.compile(r"^digest: ([0-9a-f]{64})$", re.MULTILINE),  # Artifact Hub: sha256 of the policy file
]


def generators() -> list[str]:
    found = sorted(
        str(p.relative_to(REPO)) for p in (*REPO.glob("policies/**/make_*.py"), *REPO.glob("tools/make_*.py"))
    )
    assert len(found) >= 6, found
    return found


def masked(text: str, names: dict[str, str]) -> str:
    """``text`` with every :data:`RANDOM` value replaced by its name (``<random-N>``, numbered by first sight)."""
    spans: list[tuple[int, int]] = []
    for pattern in RANDOM:
        for match in pattern.finditer(text):
            for token in re.finditer(r"[A-Za-z0-9+/=._-]{8,}", match.group(1)):
                spans.append((match.start(1) + token.start(), match.start(1) + token.end()))
    out, last = [], 0
    for start, end in sorted(spans):
        if start < last:
            continue
        value = text[start:end]
        out.append(text[last:start] + names.setdefault(value, f"<random-{len(names) + 1}>"))
        last = end
    return "".join(out) + text[last:]


def tree(root: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(root)): p
        for folder in COPIED
        for p in sorted((root / folder).rglob("*"))
        if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of :data:`COPIED` after every generator ran in it, in the order a person would run them."""
    root = tmp_path_factory.mktemp("repo")
    for folder in COPIED:
        # symlinks=True: the chart's files/ link to the policies, and must see them rewritten.
        shutil.copytree(REPO / folder, root / folder, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    # The samples first: the Artifact Hub digests are of the policies the samples rewrite.
    order = sorted(generators(), key=lambda s: ("make_artifacthub" in s, s))
    for script in order:
        arguments = ELSEWHERE.get(script, ([], "", ""))[0]
        proc = subprocess.run([sys.executable, str(root / script), *arguments], cwd=root,
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        assert proc.returncode == 0, f"{script}:\n{proc.stderr[-3000:]}"
        assert "by hand" not in proc.stderr, f"{script}:\n{proc.stderr[-3000:]}"
    return root


def test_every_generator_writes_what_is_committed(regenerated: Path) -> None:
    ours, theirs = tree(REPO), tree(regenerated)
    assert sorted(set(theirs) - set(ours)) == [], "generators wrote files the repository does not hold"
    assert sorted(set(ours) - set(theirs)) == []
    committed: dict[str, str] = {}
    rerun: dict[str, str] = {}
    differing = [
        name
        for name, path in ours.items()
        if masked(path.read_text(), committed) != masked(theirs[name].read_text(), rerun)
    ]
    assert differing == [], "out of date: rerun the generators (tests/policies/test_generators.py lists them)"
    # The masks are not the whole story: random values were found, and as many in each tree.
    assert len(committed) == len(rerun) > 10


def test_the_generators_that_write_elsewhere_write_what_is_committed(regenerated: Path) -> None:
    for script, (_, written, committed) in ELSEWHERE.items():
        assert script in generators()
        assert (regenerated / written).read_bytes() == (REPO / committed).read_bytes(), committed


def test_a_changed_verdict_is_a_difference_and_a_new_key_is_not() -> None:
    """The comparison can fail: a fresh key compares equal to another, a changed message does not."""
    committed = (
        "keys:\n- |\n  -----BEGIN PUBLIC KEY-----\n  MFkwEwYHKoZIzj0CAQ\n  AbCdEfGh==\n  -----END PUBLIC KEY-----\n"
    )
    committed += "verdict.message: signed by sha256:" + "a" * 64 + " admitted 'debug'\n"
    fresh = committed.replace("MFkwEwYHKoZIzj0CAQ", "MFkwEwYHKoZIzj0CZZ").replace("a" * 64, "b" * 64)
    assert masked(committed, {}) == masked(fresh, {})
    assert masked(committed, {}) != masked(fresh.replace("admitted", "stored"), {})
    # One value in two places must be one value in the rerun too.
    twice = committed + "again: sha256:" + "a" * 64 + "\n"
    assert masked(twice, {}) != masked(fresh + "again: sha256:" + "c" * 64 + "\n", {})
