"""Where the test data lives, and how to read its YAML.

The conformance data in ``../shared`` (interop fixtures, API-server recordings,
the audit log) is read in place, never copied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
SHARED = (REPO / ".." / "shared").resolve()
INTEROP = SHARED / "interop"
UPSTREAM = INTEROP / "k8s-manifest-sigstore"
KYVERNO = INTEROP / "kyverno"
DRYRUN = SHARED / "dryrun"
AUDIT = SHARED / "audit"


def load_yaml(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
