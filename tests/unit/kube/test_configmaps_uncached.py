"""signatureResourceRef: a verdict read from the cluster is never reused.

From an attack pass without any signing key (docs/security.md): each test is named by the attack; a table
row's id names the input.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from provider import Policy, Review, decide
from provider.bounds import LOCAL
from provider.kube.configmaps import KubeConfigMapReader
from provider.signatures.sources import Sources
from tests.support.fakeapi import FakeApiServer, runner_for
from tests.support.keys import public_key_pem
from tests.support.manifests import configmap, sign
from tests.support.one_key import KEY

# --- signatureResourceRef: a verdict read from the cluster is never reused ----------------------------------


SIGNATURE_CONFIGMAP = "/api/v1/namespaces/sigs/configmaps/app-signature"


@dataclass
class _Served:
    status: int
    body: Any


def _serve(fake: FakeApiServer, obj: dict[str, Any] | None) -> None:
    if obj is None:
        fake._gets.pop(SIGNATURE_CONFIGMAP, None)
        return
    (signed,) = sign([obj], KEY)
    annotations = signed["metadata"]["annotations"]
    data = {key: annotations[f"cosign.sigstore.dev/{key}"] for key in ("message", "signature")}
    body = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "app-signature"}, "data": data}
    fake._gets[SIGNATURE_CONFIGMAP] = _Served(200, body)


@pytest.mark.parametrize(
    ("served", "admitted", "reason"),
    [
        (configmap("app", mode="production"), configmap("app", mode="production"), "verified"),
        (configmap("app", mode="production"), configmap("app", mode="debug"), "content-mismatch"),
        (configmap("other"), configmap("app"), "no-matching-manifest"),
        (None, configmap("app"), "unsigned"),
    ],
    ids=["verified", "content-mismatch", "not-in-the-message", "no-configmap"],
)
def test_a_verdict_read_from_a_signature_configmap_is_never_cached(
    fake: FakeApiServer, tmp_path: Path, served: dict[str, Any] | None, admitted: dict[str, Any], reason: str
) -> None:
    # The service caches verdicts by object and policy unless they used the cluster. A signature ConfigMap
    # is cluster state: a signature withdrawn from it (the object taken out of the message) still verified
    # from the cache for the cache's TTL (600 s by default), and a denial outlived the ConfigMap's fix.
    _serve(fake, served)
    reader = KubeConfigMapReader(lambda: runner_for(fake, tmp_path))
    policy = Policy.from_dict(
        {"keys": [public_key_pem(KEY)], "signatureResourceRef": "k8s://ConfigMap/sigs/app-signature"}, bounds=LOCAL
    )
    result = decide(Review.for_object(admitted), policy, sources=Sources(configmaps=reader))
    assert (result.reason, result.used_cluster) == (reason, True), result.message
