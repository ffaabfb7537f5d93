"""The chart installs what the kustomize overlays install, for the same settings; each difference is listed.

For each engine the overlay is built with ``kubectl kustomize`` (or
``kustomize build``) and the chart rendered by Helm with the values that say
the same thing: the engine, the overlay's namespace, cert-manager for TLS,
server-side dry-run of ConfigMaps and Deployments in the service's namespace
(what the base's dry-run Role grants), and the shipped scope. The objects must
be equal but for what :data:`ONLY_OVERLAY`, :data:`ONLY_CHART` and
:func:`documented` list, each with its reason -- the same list as
docs/quickstart-helm.md, "The chart and the overlays".

Helm's own labels (``helm.sh/chart``, ``app.kubernetes.io/instance``,
``version``, ``managed-by``) are taken out of labels and selectors before
comparing: the chart selects its pods by release as well, so two releases in
one namespace never select each other's pods.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.data import REPO, load_yaml
from tests.support.helm import OVERLAY_NAMESPACES, find, render

MANIFESTS = REPO / "manifests"
SAMPLE_KEY = load_yaml(
    REPO / "policies/gatekeeper/verify-manifest-signature/samples/k8sverifymanifestsignature/constraint.yaml"
)[0]["spec"]["parameters"]["keys"][0]
HELM_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
}
Key = tuple[str, str, str]

#: Objects the overlays create and the chart does not, and why.
ONLY_OVERLAY: dict[str, dict[Key, str]] = {
    "gatekeeper": {
        (
            "ClusterRole",
            "",
            "manifest-provider-dry-run-cluster-scoped",
        ): "the base's empty ClusterRole for cluster-scoped "
        "kinds; the chart makes one only when policies.kinds holds such a kind",
        ("ClusterRoleBinding", "", "manifest-provider-dry-run-cluster-scoped"): "its binding",
    },
    "kyverno": {
        ("Namespace", "", "manifest-provider"): "Helm installs into a namespace it does not own (helm install "
        "--create-namespace); label it pod-security.kubernetes.io/enforce=restricted yourself",
        ("ClusterRole", "", "manifest-provider-dry-run-cluster-scoped"): "as for gatekeeper",
        ("ClusterRoleBinding", "", "manifest-provider-dry-run-cluster-scoped"): "as for gatekeeper",
    },
}
ONLY_OVERLAY["kyverno-cel"] = ONLY_OVERLAY["kyverno"]
#: Objects the chart creates and the overlays do not, and why.
ONLY_CHART: dict[str, dict[Key, str]] = {
    "gatekeeper": {
        (
            "Provider",
            "",
            "manifest-provider",
        ): "the overlay leaves it to ca-bundle.sh --apply-provider, once cert-manager "
        "has issued the CA; the chart knows the CA when it renders (tls.caBundle, or the one it generates)",
        ("ConstraintTemplate", "", "k8sverifymanifestsignature"): "the overlays install no policy; the quickstarts "
        "apply policies/ by hand",
        ("K8sVerifyManifestSignature", "", "verify-manifest-signature"): "policies.enabled",
    },
    "kyverno": {("ClusterPolicy", "", "verify-manifest-signature"): "policies.enabled"},
    "kyverno-cel": {
        ("ValidatingPolicy", "", "verify-manifest-signature-cel"): "policies.enabled",
        ("ConfigMap", "kyverno", "manifest-provider-ca"): "the service CA for Kyverno's trust store "
        "(kyverno.caConfigMap.enabled); the overlay leaves it to ca-bundle.sh --kyverno-trust, once cert-manager "
        "has issued the CA",
    },
}


def kustomize(overlay: Path) -> list[dict[str, Any]]:
    if shutil.which("kustomize"):
        command = ["kustomize", "build", str(overlay)]
    elif shutil.which("kubectl"):
        command = ["kubectl", "kustomize", str(overlay)]
    else:
        pytest.skip("no kustomize or kubectl to build the overlays")
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> str:
    from provider.service.devcerts import make_dev_pki

    return make_dev_pki(tmp_path_factory.mktemp("pki")).ca_cert.read_text()


def same_settings(engine: str, ca: str) -> dict[str, Any]:
    """Chart values that say what the overlay says."""
    namespace = OVERLAY_NAMESPACES[engine]
    return {
        "engine": engine,
        "tls": {"mode": "certManager", "caBundle": ca},
        "policies": {"enabled": True, "kinds": ["ConfigMap", "apps/Deployment"], "namespaces": ["demo"]},
        "policy": {"keys": [SAMPLE_KEY], "dryRun": {"enabled": True, "namespace": namespace}},
    }


def strip_helm_labels(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            kept = value
            if key in ("labels", "matchLabels", "selector") and isinstance(value, dict):
                kept = {k: v for k, v in value.items() if k not in HELM_LABELS}
                if not kept and key == "labels":
                    continue
            out[key] = strip_helm_labels(kept)
        return out
    if isinstance(node, list):
        return [strip_helm_labels(item) for item in node]
    return node


def keyed(docs: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): strip_helm_labels(d) for d in docs}


def documented(engine: str, key: Key, overlay: dict[str, Any], chart: dict[str, Any]) -> None:
    """Take out of both what differs on purpose, after checking that it differs as documented."""
    if "labels" not in overlay["metadata"]:
        # The base leaves cert-manager's objects without app.kubernetes.io/name; the chart labels everything it makes.
        assert chart["metadata"].pop("labels") == {"app.kubernetes.io/name": "manifest-provider"}, key
    if key[0] == "Deployment":
        o_pod, c_pod = overlay["spec"]["template"], chart["spec"]["template"]
        # The chart leaves replicas to the HorizontalPodAutoscaler (an upgrade would reset its count).
        assert overlay["spec"].pop("replicas") == 2 and "replicas" not in chart["spec"]
        # Token only where a feature calls the API server (here: dry-run): the ServiceAccount mounts none by default.
        assert c_pod["spec"].pop("automountServiceAccountToken") is True
        # A generated certificate's checksum, to roll the pods when it changes: none with cert-manager.
        assert not any(k.startswith("checksum/") for k in c_pod["metadata"].get("annotations", {}))
        (o_container,), (c_container,) = o_pod["spec"]["containers"], c_pod["spec"]["containers"]
        o_env = {e["name"]: e["value"] for e in o_container.pop("env")}
        c_env = {e["name"]: e["value"] for e in c_container.pop("env")}
        # The chart lets in only the engine it serves; the overlays keep the base's two callers.
        caller = {
            "gatekeeper": "cert:gatekeeper-webhook-service.gatekeeper-system.svc",
            "kyverno": "token:system:serviceaccount:kyverno:kyverno-admission-controller",
            "kyverno-cel": "token:system:serviceaccount:kyverno:kyverno-admission-controller",
        }[engine]
        assert caller in o_env.pop("MANIFEST_PROVIDER_CALLERS").split(",")
        assert c_env.pop("MANIFEST_PROVIDER_CALLERS") == caller
        assert o_env == c_env
    if key[0] == "ServiceAccount":
        assert chart.pop("automountServiceAccountToken") is False


@pytest.mark.parametrize("engine", ["gatekeeper", "kyverno", "kyverno-cel"])
def test_the_chart_installs_what_the_overlay_installs(engine: str, ca: str) -> None:
    overlay = keyed(kustomize(MANIFESTS / "overlays" / engine))
    chart = keyed(render(same_settings(engine, ca), namespace=OVERLAY_NAMESPACES[engine]))
    assert {
        k: ONLY_OVERLAY[engine][k] for k in overlay.keys() - chart.keys() if k in ONLY_OVERLAY[engine]
    } == ONLY_OVERLAY[engine]
    assert overlay.keys() - chart.keys() == ONLY_OVERLAY[engine].keys()
    assert chart.keys() - overlay.keys() == ONLY_CHART[engine].keys()
    for key in sorted(overlay.keys() & chart.keys()):
        o, c = copy.deepcopy(overlay[key]), copy.deepcopy(chart[key])
        documented(engine, key, o, c)
        assert c == o, key


def test_the_comparison_can_fail(ca: str) -> None:
    """A value that changes an object the overlays share is a difference the comparison sees."""
    overlay = keyed(kustomize(MANIFESTS / "overlays" / "kyverno"))
    values = same_settings("kyverno", ca)
    values["podDisruptionBudget"] = {"minAvailable": 2}
    chart = keyed(render(values))
    key = ("PodDisruptionBudget", "manifest-provider", "manifest-provider")
    assert chart[key] != overlay[key]


def test_the_image_is_a_value_in_both(ca: str, tmp_path: Path) -> None:
    """Helm: image.repository/image.tag; kustomize: an `images:` override in an overlay of one's own (what
    `kustomize edit set image manifest-provider=...` writes), no tracked file edited."""
    own = tmp_path / "mine"
    shutil.copytree(MANIFESTS, tmp_path / "manifests")
    own.mkdir()
    (own / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["../manifests/overlays/kyverno"],
                "images": [
                    {
                        "name": "ghcr.io/manifest-provider/manifest-provider",
                        "newName": "registry.example.com/mp",
                        "newTag": "1.2.3",
                    }
                ],
            }
        )
    )
    (deployment,) = [d for d in kustomize(own) if d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example.com/mp:1.2.3"
    docs = render({"image": {"repository": "registry.example.com/mp", "tag": "1.2.3"}})
    assert (
        find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
        == "registry.example.com/mp:1.2.3"
    )
    docs = render({"image": {"repository": "registry.example.com/mp", "digest": "sha256:" + "0" * 64}})
    image = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.example.com/mp@sha256:" + "0" * 64


def test_the_chart_installs_what_the_observer_overlay_installs() -> None:
    """``observer.enabled`` with the overlay's scope and policy: its objects, but for the listed differences."""
    overlay = keyed(kustomize(MANIFESTS / "overlays" / "observer"))
    values = {"observer": {"enabled": True}, "policy": {"keys": [SAMPLE_KEY.rstrip("\n")]}}
    docs = [
        d for d in render(values) if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "observer"
    ]
    chart = keyed(docs)
    # The overlay's Namespace: as for the service, Helm installs into a namespace it does not own.
    assert overlay.keys() - chart.keys() == {("Namespace", "", "manifest-provider")}
    assert chart.keys() <= overlay.keys()
    config = ("ConfigMap", "manifest-provider", "manifest-provider-observer")
    o_data, c_data = overlay[config].pop("data"), chart[config].pop("data")
    assert {k: yaml.safe_load(v) for k, v in c_data.items()} == {k: yaml.safe_load(v) for k, v in o_data.items()}
    deployment = ("Deployment", "manifest-provider", "manifest-provider-observer")
    # A changed scope or policy rolls the pod (the observer also re-reads both before every pass).
    assert set(chart[deployment]["spec"]["template"]["metadata"].pop("annotations")) == {"checksum/config"}
    policy = ("NetworkPolicy", "manifest-provider", "manifest-provider-observer")
    # The chart admits Prometheus's pods (networkPolicy.prometheus, as for the service), not the whole namespace.
    (peer,) = chart[policy]["spec"]["ingress"][0]["from"]
    assert peer.pop("podSelector") == {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}
    for key in sorted(chart.keys()):
        assert chart[key] == overlay[key], key
