"""An upgrade keeps the CA the engines trust: the chart's ``lookup`` of its Secret, rendered cluster-aware.

``helm template`` finds nothing with ``lookup``; ``helm upgrade`` asks the API
server. Here Helm's engine renders with a kubeconfig for the fake API server
(``tests/support/fakeapi.py``), which holds the Secret a first install wrote
(or cert-manager wrote), and Helm's own client reads it through discovery and
a GET, as on a cluster:

* ``tls.mode: generate``: the certificate, key and CA are reused, so the
  Provider's or policy's ``caBundle`` (for engine kyverno-cel: the ConfigMap
  for Kyverno's trust store) stays what the running pods serve, and the pods
  do not roll; a Secret without one of its three files is replaced whole,
  never half reused;
* ``tls.mode: certManager`` without ``tls.caBundle``: the first render refuses
  the policy or the ConfigMap (the CA does not exist yet), the upgrade after
  cert-manager wrote the Secret takes its ``ca.crt``.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from provider.service.devcerts import make_dev_pki
from tests.support.data import REPO, load_yaml
from tests.support.fakeapi import FakeApiServer
from tests.support.helm import chart, find, render

SAMPLE_KEY = load_yaml(
    REPO / "policies/gatekeeper/verify-manifest-signature/samples/k8sverifymanifestsignature/constraint.yaml"
)[0]["spec"]["parameters"]["keys"][0]
NAMESPACE = "manifest-provider"


def upgrade_render(api: FakeApiServer, tmp_path: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig", NAMESPACE)
    with helm_python.Config(kubeconfig_path=kubeconfig, namespace=NAMESPACE) as config:
        out = config.render(chart(), values, name="manifest-provider", namespace=NAMESPACE, is_upgrade=True)
    return [d for path, text in out.items() if not path.endswith("NOTES.txt") for d in yaml.safe_load_all(text) if d]


def kyverno_ca(docs: list[dict[str, Any]]) -> str:
    """The CA Kyverno trusts: the ClusterPolicy's caBundle, or (engine kyverno-cel) its trust store's ConfigMap."""
    if any(d["kind"] == "ValidatingPolicy" for d in docs):
        return str(find(docs, "ConfigMap", "manifest-provider-ca")["data"]["ca.crt"])
    (entry,) = find(docs, "ClusterPolicy")["spec"]["rules"][0]["context"]
    return str(entry["apiCall"]["service"]["caBundle"])


VALUES = {"engine": "kyverno", "policies": {"enabled": True}, "policy": {"keys": [SAMPLE_KEY]}}
ENGINES = {"kyverno": VALUES, "kyverno-cel": {**VALUES, "engine": "kyverno-cel"}}


@pytest.mark.parametrize("engine", list(ENGINES))
def test_an_upgrade_reuses_the_generated_pair(tmp_path: Path, engine: str) -> None:
    installed = render(ENGINES[engine])
    secret = find(installed, "Secret")
    with FakeApiServer() as api:
        api.add(secret)
        upgraded = upgrade_render(api, tmp_path, ENGINES[engine])
        asked = [(r.method, r.path) for r in api.requests]
    assert ("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/manifest-provider-tls") in asked
    assert find(upgraded, "Secret")["data"] == secret["data"]
    assert kyverno_ca(upgraded) == kyverno_ca(installed) == base64.b64decode(secret["data"]["ca.crt"]).decode()
    annotations = [find(d, "Deployment")["spec"]["template"]["metadata"]["annotations"] for d in (installed, upgraded)]
    assert annotations[0]["checksum/tls"] == annotations[1]["checksum/tls"]  # the pods do not roll


def test_without_the_secret_a_render_makes_a_new_pair(tmp_path: Path) -> None:
    """The control: two renders with nothing to look up generate two CAs."""
    with FakeApiServer() as api:
        first, second = upgrade_render(api, tmp_path, VALUES), upgrade_render(api, tmp_path, VALUES)
    assert find(first, "Secret")["data"]["ca.crt"] != find(second, "Secret")["data"]["ca.crt"]


def test_a_secret_missing_a_file_is_replaced_whole(tmp_path: Path) -> None:
    secret = find(render(VALUES), "Secret")
    del secret["data"]["ca.crt"]
    with FakeApiServer() as api:
        api.add(secret)
        upgraded = upgrade_render(api, tmp_path, VALUES)
    data = find(upgraded, "Secret")["data"]
    assert data["tls.crt"] != secret["data"]["tls.crt"] and data["tls.key"] != secret["data"]["tls.key"]
    assert kyverno_ca(upgraded) == base64.b64decode(data["ca.crt"]).decode()


@pytest.mark.parametrize("engine", list(ENGINES))
def test_cert_manager_ca_is_read_once_cert_manager_wrote_it(tmp_path: Path, engine: str) -> None:
    values = {**ENGINES[engine], "tls": {"mode": "certManager"}}
    with pytest.raises(helm_python.HelmRenderError, match=r"set tls\.caBundle"):
        render(values)  # the first install: no CA yet, so no policy (or trust) that would fail every call
    pki = make_dev_pki(tmp_path / "pki")
    written = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": "manifest-provider-tls", "namespace": NAMESPACE},
        "data": {
            name: base64.b64encode(path.read_bytes()).decode()
            for name, path in (("tls.crt", pki.server_cert), ("tls.key", pki.server_key), ("ca.crt", pki.ca_cert))
        },
    }
    with FakeApiServer() as api:
        api.add(written)
        upgraded = upgrade_render(api, tmp_path, values)
    assert kyverno_ca(upgraded) == pki.ca_cert.read_text().strip() + "\n"
    assert "Secret" not in {d["kind"] for d in upgraded}  # cert-manager's, not the chart's
