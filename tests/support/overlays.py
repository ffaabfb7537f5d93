"""The kustomize overlays under manifests/overlays/, rendered once per run, and what the tests read from them.

Shared by the overlay tests (``tests/manifests/test_deployment.py``) and the webhook overlay's and
chart's tests that compare with them.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.data import REPO

MANIFESTS = REPO / "manifests"
BASE = MANIFESTS / "base"
OVERLAYS = {name: MANIFESTS / "overlays" / name for name in ("gatekeeper", "kyverno", "kyverno-cel", "webhook")}
#: Written with the dry-run feature (docs/dryrun.md); listed in the base from the start.
DRYRUN_RBAC = "dryrun-rbac.yaml"
#: What renders in its place while it is absent, so the other checks still run.
DRYRUN_RBAC_STAND_IN = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: manifest-provider-dryrun
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: manifest-provider-dryrun}
subjects:
  - {kind: ServiceAccount, name: manifest-provider, namespace: manifest-provider}
"""


def kustomize_command() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


_rendered: dict[str, list[dict[str, Any]]] = {}


def render(overlay: str) -> list[dict[str, Any]]:
    if overlay not in _rendered:
        command = kustomize_command()
        if command is None:
            pytest.skip("no kustomize or kubectl to render the overlays; the base checks below still run")
        root = MANIFESTS
        if not (BASE / DRYRUN_RBAC).exists():
            root = Path(tempfile.mkdtemp(prefix="manifests-")) / "manifests"
            shutil.copytree(MANIFESTS, root)
            (root / "base" / DRYRUN_RBAC).write_text(DRYRUN_RBAC_STAND_IN)
        target = root / OVERLAYS[overlay].relative_to(MANIFESTS)
        out = subprocess.run([*command, str(target)], capture_output=True, text=True, timeout=120, check=False)
        if root != MANIFESTS:
            shutil.rmtree(root.parent, ignore_errors=True)
        assert out.returncode == 0, out.stderr
        _rendered[overlay] = [d for d in yaml.safe_load_all(out.stdout) if d]
    return _rendered[overlay]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, len(found))
    return dict(found[0])


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(c)


def env(deployment: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container(deployment)["env"]}
