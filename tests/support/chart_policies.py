"""The settings under which the chart's policies are compared with ``manifest-provider policy``.

Shared by ``tests/manifests/test_chart_policies.py`` and the webhook chart's test
(``tests/manifests/test_chart_webhook.py``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.cli import main
from tests.support.data import REPO, load_yaml

GATEKEEPER = REPO / "policies" / "gatekeeper" / "verify-manifest-signature"
SAMPLES = GATEKEEPER / "samples" / "k8sverifymanifestsignature"
SAMPLE_KEY = load_yaml(SAMPLES / "constraint.yaml")[0]["spec"]["parameters"]["keys"][0]
CHART_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
}


#: (id, scope and enforcement values, policy document, the same as flags of `manifest-provider policy`).
SETTINGS: list[tuple[str, dict[str, Any], dict[str, Any], list[str]]] = [
    (
        "as-shipped-scope",
        {"kinds": ["ConfigMap", "apps/Deployment"], "namespaces": ["demo"]},
        {"keys": [SAMPLE_KEY]},
        ["--match-kind", "ConfigMap,apps/Deployment", "--match-namespace", "demo"],
    ),
    (
        "enforced-everywhere-signers",
        {"kinds": ["core/Pod", "apps/StatefulSet", "CertificateSigningRequest"], "namespaces": ["*"], "enforce": True},
        {
            "signers": [{"subject": "release-bot@example.com", "issuer": "https://accounts.google.com"}],
            "keys": [SAMPLE_KEY],
            "keyOperation": "MustAll",
        },
        [
            "--match-kind",
            "core/Pod",
            "--match-kind",
            "apps/StatefulSet,CertificateSigningRequest",
            "--match-namespace",
            "*",
            "--enforce",
        ],
    ),
    (
        "threshold-dry-run-profiles",
        {"kinds": ["apps/Deployment", "ConfigMap", "core/ConfigMap"], "namespaces": ["shop", "web"]},
        {
            "keys": [{"publicKey": SAMPLE_KEY, "name": "team"}],
            "threshold": 1,
            "dryRun": {"enabled": True, "namespace": "manifest-provider"},
            "defaults": ["k8s-manifest-sigstore", "common", "argocd"],
            "ignoreFields": [{"objects": [{"kind": "ConfigMap"}], "fields": ["data.note"]}],
            "skipUsers": [{"users": ["system:serviceaccount:shop:operator"], "objects": [{"kind": "Deployment"}]}],
        },
        ["--match-kind", "apps/Deployment,ConfigMap", "--match-namespace", "shop,web"],
    ),
    (
        "text-cel-spells-differently",
        {"kinds": ["ConfigMap"], "namespaces": ["demo"]},
        {"keys": [SAMPLE_KEY], "signers": ['jöhn\t<dev>&"ops"@example.com', "🔑@example.com"]},
        ["--match-kind", "ConfigMap", "--match-namespace", "demo"],
    ),
]


def generated(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    engine: str,
    *,
    policy: dict[str, Any],
    flags: list[str],
    ca: str | None,
) -> list[dict[str, Any]]:
    """``manifest-provider policy ENGINE -c policy.yaml [--ca-file ca.crt] FLAGS``, parsed."""
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy, allow_unicode=True))
    ca_flags: list[str] = []
    if ca is not None:
        (tmp_path / "ca.crt").write_text(ca)
        ca_flags = ["--ca-file", str(tmp_path / "ca.crt")]
    code = main(["policy", engine, "-c", str(tmp_path / "policy.yaml"), *ca_flags, *flags])
    out, err = capsys.readouterr()
    assert code == 0, err
    return [d for d in yaml.safe_load_all(out) if d]


def without_chart_labels(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    labels = doc["metadata"].pop("labels")
    assert set(labels) == CHART_LABELS, labels  # the chart adds its labels and nothing else
    return doc
