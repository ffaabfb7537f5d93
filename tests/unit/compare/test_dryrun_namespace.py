"""Attack class 17 (docs/security.md): a policy's ``dryRun.namespace`` sends the signed document through another
tenant's admission.

Every test here failed on the code before the fix.
"""

from __future__ import annotations

from typing import Any

import pytest

from provider import Bounds, Policy, Review, decide
from provider.bounds import SERVICE
from provider.errors import PolicyError
from provider.result import Result
from provider.signatures.signing import sign_documents
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap

KEY = make_key("ecdsa-p256", 250)


# --- dryRun.namespace sends the signed document through another tenant's admission -----------------------------


class _DryRuns:
    """A dry-run port that records where it was asked to create (the verifier's choice is under test)."""

    def __init__(self) -> None:
        self.namespaces: list[str | None] = []

    def dry_run(self, manifest: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        self.namespaces.append(namespace)
        return manifest  # what the server made of it: unchanged, so the admitted object still differs


def _dry_run_verdict(target: str, obj: dict[str, Any], bounds: Bounds = SERVICE) -> tuple[Result, list[str | None]]:
    (signed,) = sign_documents([configmap("app", namespace=None, mode="production")], KEY)
    obj["metadata"]["annotations"] = signed["metadata"]["annotations"]
    policy = Policy.from_dict(
        {"keys": [public_key_pem(KEY)], "dryRun": {"enabled": True, "namespace": target}}, bounds=bounds
    )
    runner = _DryRuns()
    return decide(Review(object=obj, namespace=obj["metadata"].get("namespace")), policy, dry_runner=runner), (
        runner.namespaces
    )


def test_a_policy_cannot_send_dry_runs_into_another_namespace() -> None:
    """Before: dryRun.namespace named any namespace, and the verdict showed what B's admission made of the document
    (B's LimitRange defaults, its injected sidecars)."""
    with pytest.raises(PolicyError, match="MANIFEST_PROVIDER_DRY_RUN_NAMESPACES") as refused:
        _dry_run_verdict("tenant-b", configmap("app", namespace="tenant-a", mode="debug"))
    assert refused.value.reason == "policy-invalid"
    own, sent = _dry_run_verdict("tenant-a", configmap("app", namespace="tenant-a", mode="debug"))
    assert sent == ["tenant-a"] and own.reason == "content-mismatch"
    listed, sent = _dry_run_verdict(
        "dry-run", configmap("app", namespace="tenant-a", mode="debug"), Bounds(dry_run_namespaces=("dry-run",))
    )
    assert sent == ["dry-run"] and listed.reason == "content-mismatch"
