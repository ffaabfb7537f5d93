"""Where the test data lives, and how to read its YAML.

The conformance data in ``tests/data`` (interop fixtures, API-server recordings,
the audit log, the engines' CRDs): byte-identical copies of their sources, each
folder's README says where they came from, and ``SHA256SUMS`` pins their bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
INTEROP = DATA / "interop"
UPSTREAM = INTEROP / "k8s-manifest-sigstore"
KYVERNO = INTEROP / "kyverno"
DRYRUN = DATA / "dryrun"
AUDIT = DATA / "audit"
CRDS = DATA / "crds"


def load_yaml(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
