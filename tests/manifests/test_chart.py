"""The Helm chart (``manifests/charts/manifest-provider``), linted and rendered by the real Helm v4 engine.

helm-python-sdk carries Helm's own Go code as a shared library: ``helm lint
--strict``, ``helm template`` with the chart's ``values.schema.json`` applied
as on install. Every object rendered for a matrix of values is checked as the
API server would check it -- built-in kinds against the ``kubernetes``
client's models (``tests/support/kube_models.py``), the engines' kinds against
their CRDs (``tests/data/crds``) and Gatekeeper's webhook rules for a Provider
-- and for what makes it work: selectors, ports, mounted Secrets, settings, the
host the engines call and the certificate that names it, RBAC exactly as each
feature needs it. Values a user could get wrong are schema errors (or one
clear ``fail``), never a broken manifest.

What the policies hold is compared with ``manifest-provider policy`` in
``test_chart_policies.py``; what the chart installs with what the overlays
install in ``test_chart_overlays.py``.
"""

from __future__ import annotations

import base64
import copy
import datetime
import importlib.util
import json
import os
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import helm_python
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from provider.audit.observer import read_targets
from provider.policy.schema import Policy
from provider.service.certificates import inspect
from provider.service.config import ENV_PREFIX, Config, load_config
from tests.support.data import CRDS, REPO, load_yaml
from tests.support.gatekeeper_framework import provider_problems
from tests.support.heldpolicies import crds as held_crds
from tests.support.helm import CHART, find, lint, render, render_files
from tests.support.kube_models import problems as model_problems
from tests.support.kube_schema import validate, validate_object
from tests.support.kyverno import VERSIONS
from tests.support.kyverno import crds as kyverno_crds
from tests.support.pods import tuf_cache_volume

SAMPLE_KEY = load_yaml(
    REPO / "policies/gatekeeper/verify-manifest-signature/samples/k8sverifymanifestsignature/constraint.yaml"
)[0]["spec"]["parameters"]["keys"][0]
SETTINGS = {ENV_PREFIX + name.upper() for name in Config.__dataclass_fields__}
ENGINE_NAMESPACES = {
    "gatekeeper": "gatekeeper-system",
    "kyverno": "manifest-provider",
    "kyverno-cel": "manifest-provider",
    "webhook": "manifest-provider",
}


def _make_chart_module() -> Any:
    spec = importlib.util.spec_from_file_location("make_chart", REPO / "tools" / "make_chart.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKE_CHART = _make_chart_module()


def crds() -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    """(group, kind) -> {release: its CRD}: Gatekeeper's (tests/data/crds/gatekeeper), and each supported Kyverno
    release's (tests/data/crds/kyverno/v<release>), so a Kyverno object is checked against every release."""
    found: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for path in sorted((CRDS / "gatekeeper").glob("*.yaml")):
        for crd in load_yaml(path):
            found.setdefault((crd["spec"]["group"], crd["spec"]["names"]["kind"]), {})["gatekeeper"] = crd
    for version in VERSIONS:
        for crd in kyverno_crds(version).values():
            found.setdefault((crd["spec"]["group"], crd["spec"]["names"]["kind"]), {})[f"kyverno {version}"] = crd
    for crd in held_crds():  # the service's own (manifests/crds), for engine webhook
        found.setdefault((crd["spec"]["group"], crd["spec"]["names"]["kind"]), {})["manifest-provider"] = crd
    return found


CRD = crds()
#: (group, kind) -> namespaced, for the built-in kinds (the recorded discovery).
BUILTIN_SCOPE = {(ref["group"], ref["kind"]): ref["namespaced"] for ref in MAKE_CHART.kinds_table().values()}
#: Kinds no CRD in tests/data describes: cert-manager's and the Prometheus Operator's. The chart's objects of
#: these kinds are the base's and the components' (test_chart_overlays.py compares them).
UNCHECKED = {
    ("cert-manager.io", "Issuer"),
    ("cert-manager.io", "Certificate"),
    ("monitoring.coreos.com", "ServiceMonitor"),
    ("monitoring.coreos.com", "PrometheusRule"),
}


def policy_values(engine: str, **extra: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"engine": engine, "policies": {"enabled": True}, "policy": {"keys": [SAMPLE_KEY]}}
    for key, value in extra.items():
        values[key] = {**values.get(key, {}), **value} if isinstance(value, dict) else value
    return values


#: Values for a matrix of options: (id, values, namespace).
MATRIX: list[tuple[str, dict[str, Any], str]] = [
    ("defaults", {}, "manifest-provider"),
    ("gatekeeper", {"engine": "gatekeeper"}, "gatekeeper-system"),
    ("gatekeeper-policy", policy_values("gatekeeper"), "gatekeeper-system"),
    (
        "gatekeeper-everything",
        policy_values(
            "gatekeeper",
            policies={"enabled": True, "enforce": True, "kinds": ["ConfigMap", "apps/Deployment", "core/Pod"]},
            policy={"keys": [SAMPLE_KEY], "dryRun": {"enabled": True, "namespace": "gatekeeper-system"}},
            observer={"enabled": True},
            metrics={
                "serviceMonitor": {"enabled": True},
                "prometheusRule": {"enabled": True},
                "dashboard": {"enabled": True},
            },
        ),
        "gatekeeper-system",
    ),
    ("kyverno-policy", policy_values("kyverno"), "manifest-provider"),
    (
        "kyverno-everywhere-dry-run",
        policy_values(
            "kyverno",
            policies={"enabled": True, "namespaces": ["*"], "kinds": ["ConfigMap", "ClusterRole"]},
            policy={"keys": [SAMPLE_KEY], "dryRun": {"enabled": True}, "keyOperation": "MustAll"},
            observer={"enabled": True},
        ),
        "manifest-provider",
    ),
    (
        "kyverno-cel-policy",
        policy_values("kyverno-cel", policies={"enabled": True, "enforce": True}),
        "manifest-provider",
    ),
    (
        "kyverno-cel-per-namespace-dry-run",
        policy_values(
            "kyverno-cel",
            policies={"enabled": True, "namespaces": ["shop", "web"], "kinds": ["apps/StatefulSet", "core/Secret"]},
            policy={"keys": [SAMPLE_KEY], "dryRun": {"enabled": True}, "defaults": ["k8s-manifest-sigstore", "argocd"]},
        ),
        "security",
    ),
    ("webhook", {"engine": "webhook"}, "manifest-provider"),
    (
        "webhook-policy-everywhere",
        policy_values(
            "webhook",
            policies={
                "enabled": True,
                "enforce": True,
                "namespaces": ["*"],
                "kinds": ["ConfigMap", "apps/Deployment", "core/Pod"],
            },
            webhook={"timeoutSeconds": 5, "excludedNamespaces": ["team-sandbox"], "installCRDs": False},
            settings={"deadline_seconds": 2.5},
        ),
        "signing",
    ),
    (
        "cert-manager",
        {"tls": {"mode": "certManager"}, "autoscaling": {"enabled": False}, "podAntiAffinity": "hard"},
        "manifest-provider",
    ),
    (
        # The first install with cert-manager, before the CA exists: no ConfigMap for Kyverno's trust store yet.
        "kyverno-cel-cert-manager-first-install",
        {"engine": "kyverno-cel", "tls": {"mode": "certManager"}, "kyverno": {"caConfigMap": {"enabled": False}}},
        "manifest-provider",
    ),
    (
        "cert-manager-issuer-and-ca",
        policy_values(
            "kyverno",
            tls={
                "mode": "certManager",
                "certManager": {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}},
            },
        ),
        "manifest-provider",
    ),
    (
        "existing-secret",
        {
            "tls": {"mode": "secret", "secretName": "my-tls"},
            "networkPolicy": {"enabled": False},
            "image": {"digest": "sha256:" + "a" * 64},
        },
        "manifest-provider",
    ),
    (
        "no-metrics-annotations",
        {
            "metrics": {"podAnnotations": False},
            "settings": {
                "cache_entries": 0,
                "metrics_callers": ["token:x"],
                "cache_ttl_seconds": 60.5,
                "deadline_seconds": 1,
            },
        },
        "manifest-provider",
    ),
]
MATRIX_IDS = [m[0] for m in MATRIX]


@pytest.fixture(scope="module")
def pki() -> dict[str, str]:
    """A CA for the values that need one given (cert-manager with an issuer of its own, an existing Secret)."""
    import tempfile

    from provider.service.devcerts import make_dev_pki

    with tempfile.TemporaryDirectory() as tmp:
        made = make_dev_pki(Path(tmp))
        return {"ca": made.ca_cert.read_text()}


def with_ca(values: dict[str, Any], ca: str) -> dict[str, Any]:
    tls = values.get("tls") or {}
    if tls.get("mode") in ("certManager", "secret") and values.get("policies", {}).get("enabled"):
        return {**values, "tls": {**tls, "caBundle": ca}}
    return values


def rendered(case: str, pki: dict[str, str]) -> list[dict[str, Any]]:
    (values, namespace) = next((v, ns) for name, v, ns in MATRIX if name == case)
    return render(with_ca(values, pki["ca"]), namespace=namespace)


# --- Helm's own checks ----------------------------------------------------------------------------


def messages(report: dict[str, Any]) -> list[tuple[int, str]]:
    return [(m["severity"], m["error"]) for m in report["messages"]]


@pytest.mark.parametrize("case", MATRIX_IDS)
def test_helm_lint_strict_is_clean(case: str, pki: dict[str, str]) -> None:
    """Warnings and errors fail ``--strict``; the one info message is Helm's wish for an icon URL, which we have none of."""
    (values, namespace) = next((v, ns) for name, v, ns in MATRIX if name == case)
    report = lint(with_ca(values, pki["ca"]), namespace=namespace)
    assert report["errors"] == [], report
    assert messages(report) == [(1, "icon is recommended")], report


def test_lint_fails_on_what_the_schema_refuses() -> None:
    """The lint call is not a stub: a value the schema refuses is an error in its report."""
    report = lint({"replicaCount": 1})
    assert report["errors"] and any("replicaCount" in e for e in report["errors"]), report


def test_the_generated_parts_are_current() -> None:
    """files/kinds.yaml, the code-derived schema enums and README.md are what tools/make_chart.py writes now."""
    for name, make in MAKE_CHART.OUTPUTS.items():
        assert (CHART / name).read_text() == make(), f"{name} is out of date: run make chart"


def test_the_readme_lists_every_value() -> None:
    """Each value of values.yaml has a row (an object whose schema names its fields: each field has one)."""
    readme = (CHART / "README.md").read_text()
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def rows(node: dict[str, Any], value: Any, prefix: str) -> Iterator[str]:
        for key, item in value.items():
            sub = node["properties"][key]
            if isinstance(item, dict) and sub.get("properties") and sub.get("x-readme") != "leaf":
                yield from rows(sub, item, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}"

    found = list(rows(schema, values, ""))
    assert len(found) > 60
    for path in found:
        assert f"| `{path}` |" in readme, path


def test_files_link_to_the_shipped_policies_and_components() -> None:
    """Not copies: a change to a shipped policy is the chart's change too."""
    links = sorted(p for p in (CHART / "files").iterdir() if p.is_symlink())
    assert len(links) == 9, links  # the shipped policies, alerts and dashboard, and the held policies' CRDs
    for link in links:
        target = link.resolve()
        assert target.is_file() and REPO in target.parents, link
        assert not os.path.isabs(os.readlink(link)), link  # relative, so a clone anywhere works


def test_every_value_has_a_schema_entry_and_no_schema_entry_lacks_a_default() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        assert node.get("additionalProperties") is False or path in ("policy",) or "additionalProperties" in node, path
        for key, item in value.items():
            assert key in node["properties"], f"{path}.{key}: no schema"
            sub = node["properties"][key]
            if isinstance(item, dict) and sub.get("properties") and item:
                walk(item, sub, f"{path}.{key}")

    walk(values, schema, "")
    internal = {"global", "_computed"}
    assert set(schema["properties"]) - internal == set(values), "every top-level value has a default in values.yaml"


# --- values a user could get wrong ----------------------------------------------------------------

#: (id, values, namespace, words the error must hold): schema errors name the value.
REFUSED: list[tuple[str, dict[str, Any], str, str]] = [
    ("one-replica", {"replicaCount": 1}, "manifest-provider", "/replicaCount"),
    ("unknown-value", {"replicas": 3}, "manifest-provider", "replicas"),
    ("engine-typo", {"engine": "gatekeepr"}, "manifest-provider", "/engine"),
    ("policy-without-keys", {"policies": {"enabled": True}}, "manifest-provider", "/policy"),
    ("observer-without-keys", {"observer": {"enabled": True}}, "manifest-provider", "/policy"),
    ("kind-typo", {"policies": {"kinds": ["Deploymnet"]}}, "manifest-provider", "/policies/kinds/0"),
    ("custom-resource", {"policies": {"kinds": ["example.com/Widget"]}}, "manifest-provider", "/policies/kinds/0"),
    ("star-and-a-namespace", {"policies": {"namespaces": ["*", "demo"]}}, "manifest-provider", "/policies/namespaces"),
    ("namespace-not-a-name", {"policies": {"namespaces": ["Demo_NS"]}}, "manifest-provider", "/policies/namespaces"),
    ("secret-mode-without-name", {"tls": {"mode": "secret"}}, "manifest-provider", "/tls/secretName"),
    ("tls-mode-typo", {"tls": {"mode": "self-signed"}}, "manifest-provider", "/tls/mode"),
    ("ca-not-pem", {"tls": {"caBundle": "MIIB..."}}, "manifest-provider", "/tls/caBundle"),
    ("digest-not-sha256", {"image": {"digest": "latest"}}, "manifest-provider", "/image/digest"),
    ("unknown-setting", {"settings": {"deadline": 1}}, "manifest-provider", "deadline"),
    ("setting-the-chart-owns", {"settings": {"client_ca": "/x"}}, "manifest-provider", "client_ca"),
    (
        "setting-of-a-wrong-type",
        {"settings": {"cache_entries": "many"}},
        "manifest-provider",
        "/settings/cache_entries",
    ),
    ("policy-field-typo", {"policy": {"keyOpertion": "MustAll"}}, "manifest-provider", "keyOpertion"),
    ("key-operation-typo", {"policy": {"keyOperation": "Any"}}, "manifest-provider", "/policy/keyOperation"),
    ("threshold-zero", {"policy": {"threshold": 0}}, "manifest-provider", "/policy/threshold"),
    ("profile-typo", {"policy": {"defaults": ["argo"]}}, "manifest-provider", "/policy/defaults/0"),
    ("root-user", {"securityContext": {"runAsUser": 0}}, "manifest-provider", "/securityContext/runAsUser"),
    (
        "provider-timeout-zero",
        {"gatekeeper": {"provider": {"timeout": 0}}},
        "manifest-provider",
        "/gatekeeper/provider/timeout",
    ),
    (
        "pod-label-the-selector-uses",
        {"podLabels": {"app.kubernetes.io/component": "x"}},
        "manifest-provider",
        "propertyName",
    ),
    (
        "pod-annotation-the-chart-sets",
        {"podAnnotations": {"prometheus.io/port": "9"}},
        "manifest-provider",
        "propertyName",
    ),
    ("port-out-of-range", {"service": {"port": 70000}}, "manifest-provider", "/service/port"),
    (
        "prometheus-selector-emptied",
        {"networkPolicy": {"prometheus": {"podSelector": {"matchLabels": None}}}},
        "manifest-provider",
        "/networkPolicy/prometheus/podSelector",
    ),
]


@pytest.mark.parametrize(("case", "values", "namespace", "words"), REFUSED, ids=[r[0] for r in REFUSED])
def test_the_schema_refuses(case: str, values: dict[str, Any], namespace: str, words: str) -> None:
    with pytest.raises(helm_python.HelmValuesError) as error:
        render(values, namespace=namespace)
    assert words in str(error.value), str(error.value)


#: (id, values, namespace, words): what only the templates can see, refused with one message.
FAILED: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "gatekeeper-outside-its-namespace",
        {"engine": "gatekeeper"},
        "manifest-provider",
        "install the release into Gatekeeper's namespace gatekeeper-system",
    ),
    (
        "cert-manager-ca-unknown",
        policy_values("kyverno", tls={"mode": "certManager"}),
        "manifest-provider",
        "set tls.caBundle",
    ),
    (
        "existing-secret-ca-unknown",
        {"engine": "gatekeeper", "tls": {"mode": "secret", "secretName": "mine"}},
        "gatekeeper-system",
        "The Gatekeeper Provider needs the CA",
    ),
    (
        "cel-ca-configmap-ca-unknown",
        {"engine": "kyverno-cel", "tls": {"mode": "certManager"}},
        "manifest-provider",
        "The CA ConfigMap for Kyverno's trust store (kyverno.caConfigMap.enabled) needs the CA",
    ),
    ("max-below-min", {"autoscaling": {"minReplicas": 4, "maxReplicas": 3}}, "manifest-provider", "maxReplicas"),
    (
        "kyverno-would-substitute",
        policy_values("kyverno", policy={"keys": [SAMPLE_KEY], "skipObjects": [{"name": "{{ request.name }}"}]}),
        "manifest-provider",
        "Kyverno would substitute",
    ),
    (
        "fraction-in-a-cel-policy",
        policy_values("kyverno-cel", policy={"keys": [SAMPLE_KEY], "skipObjects": [{"name": 1.5}]}),
        "manifest-provider",
        "not a whole number",
    ),
]


@pytest.mark.parametrize(("case", "values", "namespace", "words"), FAILED, ids=[f[0] for f in FAILED])
def test_the_templates_refuse(case: str, values: dict[str, Any], namespace: str, words: str) -> None:
    with pytest.raises(helm_python.HelmRenderError) as error:
        render(values, namespace=namespace)
    assert words in str(error.value), str(error.value)


# --- every object, as the API server checks it ----------------------------------------------------


def object_problems(doc: dict[str, Any]) -> list[str]:
    group = doc["apiVersion"].rpartition("/")[0]
    key = (group, doc["kind"])
    if key in BUILTIN_SCOPE:
        return model_problems(doc, namespaced=BUILTIN_SCOPE[key])
    if key in CRD:
        return [f"{release}: {problem}" for release, crd in CRD[key].items() for problem in validate_object(doc, crd)]
    if key in UNCHECKED:
        return []
    if key == ("constraints.gatekeeper.sh", "K8sVerifyManifestSignature"):
        return []  # its CRD is made from the ConstraintTemplate: checked in test_every_object_is_valid
    return [f"{doc['apiVersion']} {doc['kind']}: no schema to check it against"]


@pytest.mark.parametrize("case", MATRIX_IDS)
def test_every_object_is_valid(case: str, pki: dict[str, str]) -> None:
    docs = rendered(case, pki)
    assert docs
    for doc in docs:
        assert object_problems(doc) == [], (doc["kind"], doc["metadata"]["name"])
        if doc["kind"] == "Provider":
            assert provider_problems(doc) == []
        if doc["kind"] == "K8sVerifyManifestSignature":
            template = find(docs, "ConstraintTemplate")
            schema = template["spec"]["crd"]["spec"]["validation"]["openAPIV3Schema"]
            assert validate(doc["spec"]["parameters"], schema) == []
            Policy.from_dict(doc["spec"]["parameters"])
    names = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs]
    assert len(names) == len(set(names)), "two objects with one name"


def test_kyverno_objects_are_checked_against_every_supported_release() -> None:
    for kind in (("kyverno.io", "ClusterPolicy"), ("policies.kyverno.io", "ValidatingPolicy")):
        assert set(CRD[kind]) == {f"kyverno {version}" for version in VERSIONS}, kind
    policy = find(render(policy_values("kyverno")), "ClusterPolicy")
    policy["spec"]["background"] = "no"
    assert [p.split(":")[0] for p in object_problems(policy)] == [f"kyverno {version}" for version in VERSIONS]


def test_the_model_check_can_fail() -> None:
    deployment = find(render(), "Deployment")
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8443"
    assert any("containerPort" in e and "valid integer" in e for e in model_problems(wrong_type, namespaced=True))
    unknown = copy.deepcopy(deployment)
    unknown["spec"]["replica"] = 2
    assert model_problems(unknown, namespaced=True) == ["spec.replica: unknown field"]
    missing = copy.deepcopy(deployment)
    del missing["spec"]["template"]["spec"]["containers"][0]["name"]
    assert any("name" in e and "valid string" in e for e in model_problems(missing, namespaced=True))
    assert model_problems(deployment, namespaced=True) == []


# --- what makes it work ---------------------------------------------------------------------------


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(c)


def env(deployment: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(deployment)["env"]}


@pytest.mark.parametrize("case", MATRIX_IDS)
def test_selectors_ports_secrets_and_settings_agree(case: str, pki: dict[str, str]) -> None:
    docs = rendered(case, pki)
    deployment = next(
        d
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["labels"]["app.kubernetes.io/component"] == "verifier"
    )
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    selectors = [
        deployment["spec"]["selector"]["matchLabels"],
        find(docs, "Service")["spec"]["selector"],
        find(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
    ]
    affinity = pod["spec"]["affinity"]["podAntiAffinity"]
    for terms in affinity.values():
        for term in terms:
            selectors.append(term.get("podAffinityTerm", term)["labelSelector"]["matchLabels"])
    for constraint in pod["spec"].get("topologySpreadConstraints", []):
        selectors.append(constraint["labelSelector"]["matchLabels"])
    policies = [
        d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == deployment["metadata"]["name"]
    ]
    selectors += [p["spec"]["podSelector"]["matchLabels"] for p in policies]
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    for selector in selectors + [m["spec"]["selector"]["matchLabels"] for m in monitors]:
        assert selector and selector.items() <= labels.items()
    assert "app.kubernetes.io/instance" in deployment["spec"]["selector"]["matchLabels"]  # no other release's pods

    c = container(deployment)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    variables = env(deployment)
    assert set(variables) <= SETTINGS, set(variables) - SETTINGS
    config = load_config(environ=variables)  # as the service reads them at start: each parses
    assert (config.port, config.metrics_port) == (ports["https"], ports["metrics"])
    for name, value in next(v for n, v, _ in MATRIX if n == case).get("settings", {}).items():
        assert getattr(config, name) == (tuple(value) if isinstance(value, list) else value), name
    assert int(variables["MANIFEST_PROVIDER_PORT"]) == ports["https"]
    assert int(variables["MANIFEST_PROVIDER_METRICS_PORT"]) == ports["metrics"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["port"] in ports and c[probe]["httpGet"]["scheme"] == "HTTPS"
    for port in find(docs, "Service")["spec"]["ports"]:
        assert port["targetPort"] in ports
    for policy in policies:
        for rule in policy["spec"]["ingress"]:
            assert all(p["port"] in ports for p in rule["ports"])
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    for name in ("MANIFEST_PROVIDER_CERT", "MANIFEST_PROVIDER_KEY", "MANIFEST_PROVIDER_CLIENT_CA"):
        if name in variables:
            assert mounts[str(Path(variables[name]).parent)] in volumes
    tls_secret = volumes["tls"]["secret"]["secretName"]
    made = {d["metadata"]["name"] for d in docs if d["kind"] == "Secret"} | {
        d["spec"]["secretName"] for d in docs if d["kind"] == "Certificate"
    }
    values = next(v for name, v, _ in MATRIX if name == case)
    assert tls_secret in made or values.get("tls", {}).get("mode") == "secret"
    # Restricted pod security, whatever the values.
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True and security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert tuf_cache_volume(c, pod["spec"]["volumes"]) is not None  # the read-only root's TUF cache is writable
    if "replicas" in deployment["spec"]:
        assert deployment["spec"]["replicas"] >= 2
    else:
        assert find(docs, "HorizontalPodAutoscaler")["spec"]["minReplicas"] >= 2


@pytest.mark.parametrize("case", MATRIX_IDS)
def test_the_engines_call_the_host_the_certificate_names(case: str, pki: dict[str, str]) -> None:
    docs = rendered(case, pki)
    service = find(docs, "Service")
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    (https,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "https"]
    urls = [d["spec"]["url"] for d in docs if d["kind"] == "Provider"]
    urls += [
        e["apiCall"]["service"]["url"]
        for d in docs
        if d["kind"] == "ClusterPolicy"
        for r in d["spec"]["rules"]
        for e in r.get("context", [])
        if "apiCall" in e
    ]
    urls += [
        v["expression"].strip("'")
        for d in docs
        if d["kind"] == "ValidatingPolicy"
        for v in d["spec"]["variables"]
        if v["name"] == "serviceURL"
    ]
    urls += [
        f"https://{h['clientConfig']['service']['name']}.{h['clientConfig']['service']['namespace']}.svc:"
        f"{h['clientConfig']['service']['port']}{h['clientConfig']['service']['path']}"
        for d in docs
        if d["kind"] == "ValidatingWebhookConfiguration"
        for h in d["webhooks"]
    ]
    values = next(v for name, v, _ in MATRIX if name == case)
    if values.get("engine") == "webhook":  # the API server calls: two webhooks, with or without a policy
        assert urls == [f"https://{host}:{https}/v1/admission/validate"] * 2
        urls = []
    else:
        assert len(urls) == (
            1 if values.get("policies", {}).get("enabled") or values.get("engine") == "gatekeeper" else 0
        )
    route = "gatekeeper" if values.get("engine") == "gatekeeper" else "kyverno"
    for url in urls:
        assert url == f"https://{host}:{https}/v1/{route}/verify"
    for certificate in (d for d in docs if d["kind"] == "Certificate" and not d["spec"].get("isCA")):
        assert host in certificate["spec"]["dnsNames"]
    for secret in (d for d in docs if d["kind"] == "Secret"):
        cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.DNSName
        )
        assert host in names


def test_another_release_calls_its_own_service() -> None:
    docs = render(policy_values("kyverno"), name="signatures", namespace="security")
    service = find(docs, "Service")
    assert service["metadata"]["name"] == "signatures-manifest-provider"
    (call,) = find(docs, "ClusterPolicy")["spec"]["rules"][0]["context"]
    assert (
        call["apiCall"]["service"]["url"] == "https://signatures-manifest-provider.security.svc:8443/v1/kyverno/verify"
    )
    binding = find(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "signatures-manifest-provider", "namespace": "security"}
    ]


# --- TLS: the generated pair works, and the engines trust it ---------------------------------------


def serve_once(cert: bytes, key: bytes, tmp: Path) -> tuple[int, threading.Thread]:
    (tmp / "tls.crt").write_bytes(cert)
    (tmp / "tls.key").write_bytes(key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp / "tls.crt", tmp / "tls.key")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def run() -> None:
        with listener:
            conn, _ = listener.accept()
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")
            except ssl.SSLError:
                conn.close()  # the client refused the certificate: what the second handshake expects

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return port, thread


@pytest.mark.parametrize("engine", ["gatekeeper", "kyverno", "kyverno-cel"])
def test_the_generated_certificate_is_trusted_through_what_the_engine_is_given(engine: str, tmp_path: Path) -> None:
    """A TLS handshake with the chart's Secret, verified with the CA as the engine's object carries it, for the URL's host."""
    docs = render(policy_values(engine), namespace=ENGINE_NAMESPACES[engine])
    secret = find(docs, "Secret")
    cert, key = (base64.b64decode(secret["data"][k]) for k in ("tls.crt", "tls.key"))
    assert isinstance(x509.load_pem_x509_certificate(cert).public_key(), ec.EllipticCurvePublicKey)
    if engine == "gatekeeper":
        provider = find(docs, "Provider")
        ca, url = base64.b64decode(provider["spec"]["caBundle"]).decode(), provider["spec"]["url"]
    elif engine == "kyverno":
        (entry,) = find(docs, "ClusterPolicy")["spec"]["rules"][0]["context"]
        ca, url = entry["apiCall"]["service"]["caBundle"], entry["apiCall"]["service"]["url"]
    else:
        # http.Post trusts Kyverno's trust store: the chart's ConfigMap for it, which Kyverno's values mount.
        ca = find(docs, "ConfigMap", "manifest-provider-ca")["data"]["ca.crt"]
        variables = {v["name"]: v["expression"] for v in find(docs, "ValidatingPolicy")["spec"]["variables"]}
        cel = celpy.Environment()
        url = str(cel.program(cel.compile(variables["serviceURL"])).evaluate({}))
    assert ca == base64.b64decode(secret["data"]["ca.crt"]).decode()
    host = url.split("/")[2].split(":")[0]
    port, thread = serve_once(cert, key, tmp_path)
    # The service's own start-up check of its files (refuse expired, warn within 14 days): nothing to say.
    health = inspect(str(tmp_path / "tls.crt"), None, datetime.datetime.now(datetime.UTC), margin_days=14)
    assert (health.fatal, health.warnings) == ((), ())
    client = ssl.create_default_context(cadata=ca)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
        client.wrap_socket(raw, server_hostname=host) as tls,
    ):
        assert tls.recv(2) == b"ok"
    thread.join(timeout=30)
    # ... and another name is refused: the certificate names the Service only.
    port, thread = serve_once(cert, key, tmp_path)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw, pytest.raises(ssl.SSLCertVerificationError):
        client.wrap_socket(raw, server_hostname="evil.example.com")
    thread.join(timeout=30)


def test_one_render_uses_one_ca() -> None:
    """The Secret, the deployment's checksum and the policy come from one generated pair, not one per template."""
    docs = render(policy_values("gatekeeper"), namespace="gatekeeper-system")
    secret = find(docs, "Secret")
    provider = find(docs, "Provider")
    assert provider["spec"]["caBundle"] == secret["data"]["ca.crt"]
    import hashlib

    checksum = find(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/tls"]
    assert checksum == hashlib.sha256(base64.b64decode(secret["data"]["tls.crt"])).hexdigest()


def test_a_given_ca_is_what_the_engines_trust(pki: dict[str, str]) -> None:
    docs = render(
        policy_values("gatekeeper", tls={"mode": "certManager", "caBundle": pki["ca"]}), namespace="gatekeeper-system"
    )
    assert base64.b64decode(find(docs, "Provider")["spec"]["caBundle"]).decode() == pki["ca"].strip() + "\n"
    assert "Secret" not in {d["kind"] for d in docs}  # cert-manager writes it


# --- RBAC: exactly what each feature needs --------------------------------------------------------


def rbac(docs: list[dict[str, Any]]) -> dict[tuple[str, str, str], Any]:
    return {
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d.get("rules") or d.get("subjects")
        for d in docs
        if d["apiVersion"].startswith("rbac.authorization.k8s.io/")
    }


def test_no_feature_no_token() -> None:
    for engine in ("gatekeeper", "kyverno-cel"):
        docs = render({"engine": engine}, namespace=ENGINE_NAMESPACES[engine])
        assert rbac(docs) == {}
        assert find(docs, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
        assert find(docs, "ServiceAccount")["automountServiceAccountToken"] is False


def test_kyverno_may_review_tokens_and_nothing_else() -> None:
    docs = render({"engine": "kyverno"})
    assert rbac(docs) == {
        ("ClusterRole", "", "manifest-provider-tokenreview"): [
            {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}
        ],
        ("ClusterRoleBinding", "", "manifest-provider-tokenreview"): [
            {"kind": "ServiceAccount", "name": "manifest-provider", "namespace": "manifest-provider"}
        ],
    }
    deployment = find(docs, "Deployment")
    assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    assert env(deployment)["MANIFEST_PROVIDER_TOKEN_AUDIENCE"] == "kyverno-svc.kyverno.io"


SERVICE = [{"kind": "ServiceAccount", "name": "manifest-provider", "namespace": "manifest-provider"}]


@pytest.mark.parametrize(
    ("scope", "dry_run_namespace", "expected"),
    [
        (
            {"kinds": ["ConfigMap", "apps/Deployment"], "namespaces": ["demo"]},
            "manifest-provider",
            {
                ("Role", "manifest-provider", "manifest-provider-dry-run"): [
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
                    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create"]},
                ],
                ("RoleBinding", "manifest-provider", "manifest-provider-dry-run"): SERVICE,
            },
        ),
        (
            {"kinds": ["ConfigMap"], "namespaces": ["shop", "web"]},
            "",
            {
                **{
                    ("Role", ns, "manifest-provider-dry-run"): [
                        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}
                    ]
                    for ns in ("shop", "web")
                },
                **{("RoleBinding", ns, "manifest-provider-dry-run"): SERVICE for ns in ("shop", "web")},
            },
        ),
        (
            {"kinds": ["ConfigMap", "ClusterRole"], "namespaces": ["*"]},
            "",
            {
                ("ClusterRole", "", "manifest-provider-dry-run"): [
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
                    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["create"]},
                ],
                ("ClusterRoleBinding", "", "manifest-provider-dry-run"): SERVICE,
            },
        ),
        (
            {"kinds": ["ConfigMap", "ClusterRole"], "namespaces": ["demo"]},
            "dry-run",
            {
                ("Role", "dry-run", "manifest-provider-dry-run"): [
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}
                ],
                ("RoleBinding", "dry-run", "manifest-provider-dry-run"): SERVICE,
                ("ClusterRole", "", "manifest-provider-dry-run"): [
                    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["create"]}
                ],
                ("ClusterRoleBinding", "", "manifest-provider-dry-run"): SERVICE,
            },
        ),
    ],
    ids=["one-dry-run-namespace", "each-objects-namespace", "every-namespace", "cluster-scoped-kind"],
)
def test_dry_run_may_create_exactly_the_protected_kinds_where_it_dry_runs(
    scope: dict[str, Any], dry_run_namespace: str, expected: dict[tuple[str, str, str], Any]
) -> None:
    values = policy_values(
        "kyverno-cel",
        policies={"enabled": True, **scope},
        policy={"keys": [SAMPLE_KEY], "dryRun": {"enabled": True, "namespace": dry_run_namespace}},
    )
    docs = render(values)
    assert rbac(docs) == expected
    assert find(docs, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"] is True


@pytest.mark.parametrize("watch", [True, False], ids=["watch", "schedule"])
def test_the_observer_lists_what_it_observes_and_writes_only_reports(watch: bool) -> None:
    """With ``--watch`` (the default, as the overlay) it also watches the kinds and deletes reports of what is gone."""
    values = policy_values(
        "kyverno-cel",
        policies={"enabled": True, "namespaces": ["shop"], "kinds": ["ConfigMap", "apps/Deployment", "ClusterRole"]},
        observer={"enabled": True, "watch": watch},
    )
    docs = render(values)
    config = find(docs, "ConfigMap", "manifest-provider-observer")
    targets = read_targets(yaml.safe_load(config["data"]["targets.yaml"]))
    assert [(t.resource, t.namespaces) for t in targets] == [
        ("configmaps", ("shop",)),
        ("deployments.apps", ("shop",)),
        ("clusterroles.rbac.authorization.k8s.io", ()),
    ]
    assert Policy.from_dict(yaml.safe_load(config["data"]["policy.yaml"])).keys
    kinds = ["list", "watch"] if watch else ["list"]
    reports = ["get", "create", "update", "delete"] if watch else ["get", "create", "update"]
    observer = {k: v for k, v in rbac(docs).items() if k[2] == "manifest-provider-observer"}
    assert observer[("Role", "shop", "manifest-provider-observer")] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": kinds},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": kinds},
        {"apiGroups": ["wgpolicyk8s.io"], "resources": ["policyreports"], "verbs": reports},
    ]
    assert observer[("ClusterRole", "", "manifest-provider-observer")] == [
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": kinds},
        {
            "apiGroups": ["wgpolicyk8s.io"],
            "resources": ["policyreports", "clusterpolicyreports"],
            "verbs": reports,
        },
    ]
    deployment = find(docs, "Deployment", "manifest-provider-observer")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert ("--watch" in container["args"]) is watch


# --- metrics --------------------------------------------------------------------------------------


def test_alerts_and_dashboard_are_the_components_for_this_releases_job() -> None:
    values = {
        "metrics": {"prometheusRule": {"enabled": True, "labels": {"release": "kps"}}, "dashboard": {"enabled": True}}
    }
    docs = render(values, name="sig", namespace="ops")
    rule = find(docs, "PrometheusRule")
    (shipped,) = load_yaml(REPO / "manifests/components/prometheusrule/prometheusrule.yaml")
    assert rule["metadata"]["labels"]["release"] == "kps"
    spec = json.dumps(rule["spec"], sort_keys=True)
    assert spec.replace('job=\\"sig-manifest-provider\\"', 'job=\\"manifest-provider\\"') == json.dumps(
        shipped["spec"], sort_keys=True
    )
    assert 'job="sig-manifest-provider"' in rule["spec"]["groups"][0]["rules"][0]["expr"]
    dashboard = json.loads(find(docs, "ConfigMap", "sig-manifest-provider-dashboard")["data"]["manifest-provider.json"])
    shipped_dashboard = json.loads((REPO / "manifests/components/grafana-dashboard/dashboard.json").read_text())
    assert json.dumps(dashboard).replace("sig-manifest-provider", "manifest-provider") == json.dumps(shipped_dashboard)
    assert 'job=\\"sig-manifest-provider\\"' in json.dumps(dashboard)
    assert "sig-manifest-provider" in json.dumps(dashboard)
    kinds = {d["kind"] for d in render()}
    assert not kinds & {"ServiceMonitor", "PrometheusRule"}  # opt-in: the CRDs may be absent


def test_notes_tell_how_to_test_for_real() -> None:
    notes = render_files(policy_values("kyverno"))["manifest-provider/templates/NOTES.txt"]
    assert "--dry-run=server request" in notes and "audit mode" in notes


def test_notes_tell_the_cel_engine_to_mount_the_ca_into_kyverno() -> None:
    notes = render_files({"engine": "kyverno-cel", "kyverno": {"namespace": "kyverno-system"}})
    text = notes["manifest-provider/templates/NOTES.txt"]
    assert "kyverno-system/manifest-provider-ca" in text and "kyverno-values.yaml" in text
    for values in ({"engine": "kyverno"}, {"engine": "kyverno-cel", "kyverno": {"caConfigMap": {"enabled": False}}}):
        assert "manifest-provider-ca" not in render_files(values)["manifest-provider/templates/NOTES.txt"]


def test_the_provider_timeout_sets_the_services_deadline() -> None:
    docs = render({"engine": "gatekeeper", "gatekeeper": {"provider": {"timeout": 3}}}, namespace="gatekeeper-system")
    assert find(docs, "Provider")["spec"]["timeout"] == 3
    assert env(find(docs, "Deployment"))["MANIFEST_PROVIDER_DEADLINE_SECONDS"] == "2.5"


def test_a_packaged_chart_carries_the_shipped_files(tmp_path: Path) -> None:
    """``helm package`` follows the links in files/: the archive holds the shipped policies themselves."""
    archive = helm_python.package(CHART, destination=tmp_path)
    with helm_python.Chart.load(archive) as packaged:
        files = {f["name"]: f["data"] for f in packaged.files}
        for link in sorted((CHART / "files").iterdir()):
            if link.is_symlink():
                assert files[f"files/{link.name}"] == link.resolve().read_text(), link.name
        out = packaged.render(policy_values("kyverno-cel"), name="manifest-provider", namespace="manifest-provider")
    texts = [text for path, text in out.items() if not path.endswith("NOTES.txt")]
    (doc,) = [d for text in texts for d in yaml.safe_load_all(text) if d and d["kind"] == "ValidatingPolicy"]
    assert object_problems(doc) == []


def test_secrets_are_read_by_name_only_and_their_namespaces_allowed() -> None:
    values = {
        "engine": "kyverno-cel",
        "secrets": {
            "keys": [{"namespace": "sigstore-keys", "name": "team"}, {"namespace": "sigstore-keys", "name": "ops"}],
            "pullSecrets": [{"namespace": "registry-auth", "name": "bundles"}],
        },
    }
    docs = render(values)
    assert rbac(docs) == {
        ("Role", "sigstore-keys", "manifest-provider-read-secrets"): [
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["ops", "team"], "verbs": ["get"]}
        ],
        ("RoleBinding", "sigstore-keys", "manifest-provider-read-secrets"): SERVICE,
        ("Role", "registry-auth", "manifest-provider-read-secrets"): [
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["bundles"], "verbs": ["get"]}
        ],
        ("RoleBinding", "registry-auth", "manifest-provider-read-secrets"): SERVICE,
    }
    deployment = find(docs, "Deployment")
    assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    assert env(deployment)["MANIFEST_PROVIDER_KEY_SECRET_NAMESPACES"] == "sigstore-keys"
    assert env(deployment)["MANIFEST_PROVIDER_PULL_SECRET_NAMESPACES"] == "registry-auth"
