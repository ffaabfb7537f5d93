"""The deployment: every YAML parses, the kustomize overlays render consistently (the image: test_dockerfile.py).

Rendering uses ``kubectl kustomize`` (or a ``kustomize`` binary) when one is
installed; the structural checks on the base files run either way. What
"consistent" means here: the Service, PodDisruptionBudget, NetworkPolicy and
anti-affinity select the Deployment's pods; every port a probe, the Service
or the NetworkPolicy names exists on the container; every Secret mounted is
one the overlay provides or documents; every ``MANIFEST_PROVIDER_*``
variable is a real setting and every file it names is mounted; the
certificate, the Service and the callers' URLs agree on the host; bindings
name the service account where it lives.
"""

from __future__ import annotations

import base64
import os
import shutil
import stat
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.service.config import ENV_PREFIX, Config
from provider.service.devcerts import make_dev_pki
from tests.support.data import REPO
from tests.support.gatekeeper_framework import provider_problems
from tests.support.overlays import (
    BASE,
    DRYRUN_RBAC,
    DRYRUN_RBAC_STAND_IN,
    MANIFESTS,
    OVERLAYS,
    container,
    env,
    kustomize_command,
    one,
    render,
)
from tests.support.pods import tuf_cache_volume

CA_SCRIPT = MANIFESTS / "scripts" / "ca-bundle.sh"
SETTINGS = {ENV_PREFIX + name.upper() for name in Config.__dataclass_fields__}
#: Secrets an overlay mounts that something other than these manifests creates.
EXTERNAL_SECRETS = {
    "gatekeeper": {"gatekeeper-webhook-server-cert"},
    "kyverno": set(),
    "kyverno-cel": set(),
    "webhook": set(),
}
EXPECTED_NAMESPACE = {
    "gatekeeper": "gatekeeper-system",
    "kyverno": "manifest-provider",
    "kyverno-cel": "manifest-provider",
    "webhook": "manifest-provider",
}


def yaml_files() -> list[Path]:
    """YAML files, not Helm templates (Go templates whose output tests/manifests/test_chart.py parses)."""
    files = [p for d in (REPO / "policies", MANIFESTS) for p in sorted(d.rglob("*")) if p.suffix in (".yaml", ".yml")]
    return [p for p in files if "templates" not in p.relative_to(MANIFESTS.parent).parts]


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_yaml_parses(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs
    for doc in docs:
        assert isinstance(doc, dict)


def test_base_kustomization_lists_existing_files() -> None:
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    assert DRYRUN_RBAC in kustomization["resources"]
    missing = [r for r in kustomization["resources"] if not (BASE / r).exists()]
    if missing == [DRYRUN_RBAC]:
        pytest.skip(f"manifests/base/{DRYRUN_RBAC} is not written yet (the dry-run feature); the base lists it")
    assert missing == [], f"listed in manifests/base/kustomization.yaml but absent: {missing}"


# --- rendering ----------------------------------------------------------------------------


def engines_rule(policy: dict[str, Any]) -> dict[str, Any]:
    """The NetworkPolicy's rule for the API port; the only other one admits Prometheus to the metrics port."""
    rules = policy["spec"]["ingress"]
    assert [[p["port"] for p in r["ports"]] for r in rules] == [["https"], ["metrics"]]
    return dict(rules[0])


OVERLAY_NAMES = list(OVERLAYS)


@pytest.mark.parametrize("overlay", OVERLAY_NAMES)
def test_selectors_match_the_pods(overlay: str) -> None:
    docs = render(overlay)
    deployment = one(docs, "Deployment", "manifest-provider")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selectors = [
        deployment["spec"]["selector"]["matchLabels"],
        one(docs, "Service")["spec"]["selector"],
        one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        one(docs, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"],
        deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ][0]["podAffinityTerm"]["labelSelector"]["matchLabels"],
    ]
    for selector in selectors:
        assert selector.items() <= pod_labels.items()
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "manifest-provider"}
    assert hpa["spec"]["minReplicas"] >= 2


@pytest.mark.parametrize("overlay", OVERLAY_NAMES)
def test_ports_are_consistent(overlay: str) -> None:
    docs = render(overlay)
    c = container(one(docs, "Deployment"))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["port"] in ports
        assert c[probe]["httpGet"]["scheme"] == "HTTPS"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    service_ports = {p["name"]: p for p in one(docs, "Service")["spec"]["ports"]}
    assert set(service_ports) == {"https", "metrics"}
    assert all(p["targetPort"] in ports for p in service_ports.values())
    variables = env(one(docs, "Deployment"))
    assert int(variables["MANIFEST_PROVIDER_PORT"]) == ports[service_ports["https"]["targetPort"]]
    assert int(variables["MANIFEST_PROVIDER_METRICS_PORT"]) == ports[service_ports["metrics"]["targetPort"]]
    for rule in one(docs, "NetworkPolicy")["spec"]["ingress"]:
        assert all(p["port"] in ports for p in rule["ports"])


@pytest.mark.parametrize("overlay", OVERLAY_NAMES)
def test_secrets_and_files_are_consistent(overlay: str) -> None:
    docs = render(overlay)
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    issued = {d["spec"]["secretName"] for d in docs if d["kind"] == "Certificate"}
    mounted = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert mounted - issued == EXTERNAL_SECRETS[overlay]
    mounts = {m["mountPath"]: m["name"] for m in container(deployment)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    variables = env(deployment)
    assert set(variables) <= SETTINGS, set(variables) - SETTINGS
    for name in ("MANIFEST_PROVIDER_CERT", "MANIFEST_PROVIDER_KEY", "MANIFEST_PROVIDER_CLIENT_CA"):
        if name not in variables:
            continue
        path = Path(variables[name])
        volume = volumes[mounts[str(path.parent)]]
        if "items" in volume["secret"]:
            assert path.name in {i["path"] for i in volume["secret"]["items"]}
        else:
            assert path.name in ("tls.crt", "tls.key", "ca.crt")  # what cert-manager writes


CLUSTER_SCOPED = (
    "Provider", "ClusterRole", "ClusterRoleBinding", "Namespace", "CustomResourceDefinition",
    "ValidatingWebhookConfiguration",
)  # fmt: skip


@pytest.mark.parametrize("overlay", OVERLAY_NAMES)
def test_names_and_namespaces_agree(overlay: str) -> None:
    docs = render(overlay)
    namespace = EXPECTED_NAMESPACE[overlay]
    service = one(docs, "Service")
    for doc in docs:
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], doc["kind"]
        else:
            assert doc["metadata"]["namespace"] == namespace, doc["kind"]
    host = f"{service['metadata']['name']}.{namespace}.svc"
    certificate = one(docs, "Certificate", "manifest-provider-tls")
    assert host in certificate["spec"]["dnsNames"]
    for doc in docs:
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            for subject in doc["subjects"]:
                if subject["kind"] == "ServiceAccount":
                    assert subject["namespace"] == namespace, doc["metadata"]["name"]
    assert (
        one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
        == one(docs, "ServiceAccount")["metadata"]["name"]
    )
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == "https"]
    if overlay == "webhook":
        for hook in one(docs, "ValidatingWebhookConfiguration")["webhooks"]:
            called = hook["clientConfig"]["service"]
            assert (called["name"], called["namespace"], called["port"], called["path"]) == (
                service["metadata"]["name"], namespace, port["port"], "/v1/admission/validate",
            )  # fmt: skip
    elif overlay == "gatekeeper":
        url = urllib.parse.urlsplit(provider_template()["spec"]["url"])
        assert (url.scheme, url.hostname, url.port, url.path) == ("https", host, port["port"], "/v1/gatekeeper/verify")
    else:
        policies = sorted(
            (REPO / "policies" / "kyverno").glob("verify-manifest-signature*/verify-manifest-signature*.yaml")
        )
        assert len(policies) >= 2, policies  # the apiCall policy and the CEL one
        for path in policies:
            assert f"https://{host}:{port['port']}/v1/kyverno/verify" in path.read_text()


def test_gatekeeper_overlay_requires_gatekeepers_client_certificate() -> None:
    docs = render("gatekeeper")
    assert "Namespace" not in {d["kind"] for d in docs}  # gatekeeper-system is Gatekeeper's
    variables = env(one(docs, "Deployment"))
    assert variables["MANIFEST_PROVIDER_CLIENT_CA"].endswith("/ca.crt")
    # The budgets' order is tests/unit/test_deadlines.py's; here: the rendered value is the patched one.
    assert float(variables["MANIFEST_PROVIDER_DEADLINE_SECONDS"]) < provider_template()["spec"]["timeout"]
    rule = engines_rule(one(docs, "NetworkPolicy"))
    assert rule["from"] == [{"podSelector": {"matchLabels": {"gatekeeper.sh/system": "yes"}}}]


def provider_template() -> dict[str, Any]:
    (provider,) = yaml.safe_load_all((OVERLAYS["gatekeeper"] / "provider.yaml").read_text())
    return dict(provider)


def test_the_gatekeeper_overlay_renders_no_provider() -> None:
    """Gatekeeper's webhook refuses a Provider without a real caBundle: the CA exists only after the apply.

    So the kustomization leaves it out and ``ca-bundle.sh --apply-provider`` creates it once
    cert-manager has issued the CA (the tests of the script below).
    """
    docs = render("gatekeeper")
    assert "Provider" not in {d["kind"] for d in docs}
    template = provider_template()
    assert "caBundle" not in template["spec"]
    assert provider_problems(template) == ["caBundle should be set for HTTPS scheme"]


def test_the_kyverno_cel_overlay_admits_kyverno_only_and_reviews_no_tokens() -> None:
    """CEL's http library sends no credentials: a token audience would refuse every call of the policy."""
    docs = render("kyverno-cel")
    assert "MANIFEST_PROVIDER_TOKEN_AUDIENCE" not in env(one(docs, "Deployment"))
    assert not [d for d in docs if d["metadata"]["name"] == "manifest-provider-tokenreview"]
    rule = engines_rule(one(docs, "NetworkPolicy"))
    (source,) = rule["from"]
    assert source == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kyverno"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/component": "admission-controller"}},
    }
    # The ClusterPolicy overlay is this one plus token review, nothing else.
    cluster_policy = render("kyverno")
    extra = {(d["kind"], d["metadata"]["name"]) for d in cluster_policy} - {
        (d["kind"], d["metadata"]["name"]) for d in docs
    }
    assert extra == {
        ("ClusterRole", "manifest-provider-tokenreview"),
        ("ClusterRoleBinding", "manifest-provider-tokenreview"),
    }


def test_kyverno_overlay_reviews_tokens() -> None:
    docs = render("kyverno")
    assert env(one(docs, "Deployment"))["MANIFEST_PROVIDER_TOKEN_AUDIENCE"] == "kyverno-svc.kyverno.io"
    role = one(docs, "ClusterRole", "manifest-provider-tokenreview")
    assert role["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}
    ]
    binding = one(docs, "ClusterRoleBinding", "manifest-provider-tokenreview")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    rule = engines_rule(one(docs, "NetworkPolicy"))
    (source,) = rule["from"]
    assert source["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "kyverno"}


# --- metrics: what Prometheus scrapes ---------------------------------------------------------

SERVICEMONITOR = MANIFESTS / "components" / "servicemonitor"


@pytest.mark.parametrize("overlay", OVERLAY_NAMES)
def test_prometheus_reaches_the_plain_metrics_port_and_nothing_else(overlay: str) -> None:
    """Scrape annotations, the container port, the setting and the NetworkPolicy name the same plain-HTTP port."""
    docs = render(overlay)
    deployment = one(docs, "Deployment")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    ports = {p["name"]: p["containerPort"] for p in container(deployment)["ports"]}
    assert annotations["prometheus.io/scrape"] == "true"
    assert (annotations["prometheus.io/path"], annotations["prometheus.io/scheme"]) == ("/metrics", "http")
    assert int(annotations["prometheus.io/port"]) == ports["metrics"] == Config().metrics_port == 8888
    assert int(env(deployment)["MANIFEST_PROVIDER_METRICS_PORT"]) == ports["metrics"]
    policy = one(docs, "NetworkPolicy")
    engines, scraper = policy["spec"]["ingress"]
    assert engines == engines_rule(policy)  # the engines still reach only the API port
    assert scraper["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    (peer,) = scraper["from"]
    assert peer["podSelector"]["matchLabels"] and peer["namespaceSelector"]["matchLabels"]  # not "anyone"


def test_the_servicemonitor_component_scrapes_the_services_metrics_port(tmp_path: Path) -> None:
    """Rendered with an overlay (as its comment says to use it): it selects the Service and names its plain port."""
    command = kustomize_command()
    if command is None:
        pytest.skip("no kustomize or kubectl to render the component")
    root = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, root)
    if not (root / "base" / DRYRUN_RBAC).exists():
        (root / "base" / DRYRUN_RBAC).write_text(DRYRUN_RBAC_STAND_IN)
    overlay = root / "overlays" / "with-servicemonitor"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: gatekeeper-system\n"
        "resources:\n  - ../gatekeeper\ncomponents:\n  - ../../components/servicemonitor\n"
    )
    out = subprocess.run([*command, str(overlay)], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    monitor = one(docs, "ServiceMonitor")
    service = one(docs, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"] == "gatekeeper-system"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    assert (endpoint["scheme"], endpoint["path"], port["port"]) == ("http", "/metrics", 8888)
    assert "ServiceMonitor" not in {d["kind"] for d in render("gatekeeper")}  # the CRD may be absent: opt-in


def key_secret_grants(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Every rule of every Role and ClusterRole that mentions Secrets, with the role's namespace."""
    return [
        (doc["metadata"].get("namespace", ""), rule)
        for doc in docs
        if doc["kind"] in ("Role", "ClusterRole")
        for rule in doc.get("rules", [])
        if {"secrets", "*"} & set(rule.get("resources", []))
    ]


def test_the_key_secrets_component_grants_get_on_the_named_secrets_and_nothing_wider(tmp_path: Path) -> None:
    """manifests/components/key-secrets, rendered with an overlay as its comment says to use it.

    The service may read exactly the key Secrets it names: one rule, ``get`` only (never ``list``
    or ``watch``, which hand over every Secret of the namespace), with ``resourceNames`` (empty
    would mean all), bound to the service's own account, and the policy bound
    ``MANIFEST_PROVIDER_KEY_SECRET_NAMESPACES`` naming the Role's namespace -- no more.
    """
    component = MANIFESTS / "components" / "key-secrets"
    read = [d for d in yaml.safe_load_all((component / "rbac.yaml").read_text()) if d]
    command = kustomize_command()
    if command is None:
        pytest.skip("no kustomize or kubectl to render the component")
    root = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, root)
    if not (root / "base" / DRYRUN_RBAC).exists():
        (root / "base" / DRYRUN_RBAC).write_text(DRYRUN_RBAC_STAND_IN)
    overlay = root / "overlays" / "with-key-secrets"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources:\n  - ../kyverno\ncomponents:\n  - ../../components/key-secrets\n"
    )
    out = subprocess.run([*command, str(overlay)], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    without = render("kyverno")
    assert key_secret_grants(without) == []  # the overlay alone reads no Secret: the component is opt-in
    ((namespace, rule),) = key_secret_grants(docs)  # one rule, in one Role
    assert (namespace, rule) == key_secret_grants(read)[0]  # rendered as written: kustomize moved nothing
    assert rule["verbs"] == ["get"]
    assert rule["apiGroups"] == [""]
    assert rule["resources"] == ["secrets"]
    assert rule["resourceNames"] and all(isinstance(n, str) and n for n in rule["resourceNames"])
    (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "manifest-provider-read-key-secrets"]
    assert role["metadata"]["namespace"] == namespace and namespace
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding" and d["roleRef"]["name"] == role["metadata"]["name"]]
    assert binding["metadata"]["namespace"] == namespace and binding["roleRef"]["kind"] == "Role"
    deployment = one(docs, "Deployment")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": deployment["metadata"]["namespace"]}
    ]
    assert env(deployment)["MANIFEST_PROVIDER_KEY_SECRET_NAMESPACES"] == namespace
    assert "MANIFEST_PROVIDER_KEY_SECRET_NAMESPACES" not in env(one(without, "Deployment"))
    bindings = [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    new_bindings = [b for b in bindings if b not in [d for d in without if d["kind"] == b["kind"]]]
    assert new_bindings == [binding]  # and nothing else granted to anyone


# --- the base, structurally (no renderer needed) ---------------------------------------------


def base_doc(name: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all((BASE / name).read_text()) if d]
    return dict(doc)


def test_deployment_is_hardened() -> None:
    deployment = base_doc("deployment.yaml")
    spec = deployment["spec"]
    assert spec["replicas"] >= 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = container(deployment)
    security = c["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert {"cpu", "memory"} <= set(c["resources"]["requests"])
    assert "memory" in c["resources"]["limits"]
    assert c["args"] == ["serve"]
    # The read-only root needs a writable /tmp for gunicorn, the metrics directory and the TUF cache.
    assert "/tmp" in {m["mountPath"] for m in c["volumeMounts"]}
    assert tuf_cache_volume(c, pod["volumes"]) == {"medium": "Memory", "sizeLimit": "64Mi"}
    assert "podAntiAffinity" in pod["affinity"]
    assert base_doc("poddisruptionbudget.yaml")["spec"]["minAvailable"] == 1


def test_base_configures_tls_but_no_caller_authentication() -> None:
    variables = env(base_doc("deployment.yaml"))
    assert {"MANIFEST_PROVIDER_CERT", "MANIFEST_PROVIDER_KEY"} <= set(variables)
    assert "MANIFEST_PROVIDER_UNSAFE_HTTP" not in variables
    assert not {"MANIFEST_PROVIDER_CLIENT_CA", "MANIFEST_PROVIDER_TOKEN_AUDIENCE"} & set(
        variables
    )  # the overlays' choice
    assert set(variables) <= SETTINGS


def test_network_policy_admits_only_the_engines() -> None:
    policy = base_doc("networkpolicy.yaml")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    rule = engines_rule(policy)
    namespaces = {peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for peer in rule["from"]}
    assert namespaces == {"gatekeeper-system", "kyverno"}
    assert all("podSelector" in peer for peer in rule["from"])


# --- the CA script --------------------------------------------------------------------------------


def write_kubectl(bindir: Path, calls: Path, secret_b64: str) -> None:
    """A ``kubectl`` that answers ``get secret`` with ``secret_b64``, records every call, and keeps what ``apply -f -`` reads."""
    bindir.mkdir(exist_ok=True)
    script = bindir / "kubectl"
    script.write_text(
        "#!/bin/sh\n"
        f'for a in "$@"; do printf "%s\\n" "$a" >> {calls}; done; echo ---- >> {calls}\n'
        f'case "$*" in *"get secret"*) printf "%s" "{secret_b64}" ;; *"apply -f -"*) cat > {calls}.applied ;; esac\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def fake_kubectl(tmp_path: Path) -> tuple[Path, Path, str]:
    """A ``kubectl`` whose Secret holds a real CA, as cert-manager writes it."""
    pki = make_dev_pki(tmp_path / "pki")
    pem = pki.ca_cert.read_text()
    bindir, calls = tmp_path / "bin", tmp_path / "calls"
    write_kubectl(bindir, calls, base64.b64encode(pem.encode()).decode())
    return bindir, calls, pem


def run_script(bindir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    return subprocess.run(
        ["sh", str(CA_SCRIPT), *args], capture_output=True, text=True, env=environ, timeout=30, check=check
    )


def test_ca_script_prints_pem_and_base64(fake_kubectl: tuple[Path, Path, str]) -> None:
    bindir, _, pem = fake_kubectl
    assert run_script(bindir).stdout == pem.rstrip("\n") + "\n"
    assert base64.b64decode(run_script(bindir, "--base64").stdout).decode() == pem
    # The CEL literal was for the ValidatingPolicy's CA, which it no longer takes (Kyverno's http.Client(ca)
    # cannot call): the option is gone.
    gone = run_script(bindir, "--cel", check=False)
    assert gone.returncode == 2 and "unknown argument --cel" in gone.stderr


def calls_of(path: Path) -> list[list[str]]:
    return [chunk.strip("\n").split("\n") for chunk in path.read_text().split("----\n") if chunk.strip()]


def test_ca_script_prints_a_provider_gatekeeper_takes(fake_kubectl: tuple[Path, Path, str]) -> None:
    """The Provider as the script renders it passes Gatekeeper's validation, caBundle the Secret's CA."""
    bindir, calls, pem = fake_kubectl
    out = run_script(bindir, "--namespace", "gatekeeper-system", "--provider").stdout
    (provider,) = yaml.safe_load_all(out)
    assert provider_problems(provider) == []
    assert base64.b64decode(provider["spec"]["caBundle"]).decode() == pem
    template = provider_template()
    del provider["spec"]["caBundle"]
    assert provider == template  # nothing else changed
    (get,) = calls_of(calls)
    assert get[:5] == ["-n", "gatekeeper-system", "get", "secret", "manifest-provider-tls"]


@pytest.mark.parametrize("flag", ["--apply-provider", "--patch-provider"])
def test_ca_script_applies_the_provider(fake_kubectl: tuple[Path, Path, str], flag: str) -> None:
    """Created with kubectl apply -- it does not exist before (the old --patch-provider failed NotFound)."""
    bindir, calls, pem = fake_kubectl
    run_script(bindir, "--namespace", "gatekeeper-system", flag)
    _get, apply = calls_of(calls)
    assert apply == ["apply", "-f", "-"]
    (provider,) = yaml.safe_load_all(Path(f"{calls}.applied").read_text())
    assert provider_problems(provider) == []
    assert base64.b64decode(provider["spec"]["caBundle"]).decode() == pem


@pytest.mark.parametrize(
    ("secret", "message"),
    [("", "has no ca.crt yet"), (base64.b64encode(b"not a certificate").decode(), "is not a PEM certificate")],
    ids=["no-ca-yet", "not-pem"],
)
def test_ca_script_applies_nothing_without_a_ca(tmp_path: Path, secret: str, message: str) -> None:
    bindir, calls = tmp_path / "bin", tmp_path / "calls"
    write_kubectl(bindir, calls, secret)
    out = run_script(bindir, "--apply-provider", check=False)
    assert out.returncode == 1 and message in out.stderr
    assert [c for c in calls_of(calls) if c[0] == "apply"] == []


@pytest.mark.parametrize(
    ("bundle", "problem"),
    [
        ("REPLACE-WITH-BASE64-CA-BUNDLE", "failed to base64 decode caBundle"),  # the placeholder that used to ship
        (base64.b64encode(b"no PEM here").decode(), "bad caBundle"),
        (
            base64.b64encode(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").decode(),
            "failed to parse caBundle",
        ),
    ],
    ids=["placeholder", "not-pem", "pem-not-a-certificate"],
)
def test_gatekeepers_provider_rules_refuse_a_bad_bundle(bundle: str, problem: str) -> None:
    provider = provider_template()
    provider["spec"]["caBundle"] = bundle
    assert any(problem in p for p in provider_problems(provider))


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("url", "http://manifest-provider.gatekeeper-system.svc:8443/v1/gatekeeper/verify", "only HTTPS"),
        ("timeout", 0, "timeout 0"),
        ("timeout", -1, "positive integer"),
        ("timeout", 1.5, "positive integer"),
    ],
    ids=["http", "timeout-0", "timeout-negative", "timeout-fraction"],
)
def test_gatekeepers_provider_rules_refuse_url_and_timeout(
    fake_kubectl: tuple[Path, Path, str], field: str, value: Any, problem: str
) -> None:
    bindir, _, _ = fake_kubectl
    (provider,) = yaml.safe_load_all(run_script(bindir, "--provider").stdout)
    provider["spec"][field] = value
    assert any(problem in p for p in provider_problems(provider))


def test_ca_script_patches_the_cluster_policy(fake_kubectl: tuple[Path, Path, str]) -> None:
    import json

    bindir, calls, pem = fake_kubectl
    run_script(bindir, "--patch-kyverno")
    (patch,) = [c for c in calls_of(calls) if c[0] == "patch"]
    assert patch[1:3] == ["clusterpolicy", "verify-manifest-signature"]
    (op,) = json.loads(patch[patch.index("-p") + 1])
    assert op["path"] == "/spec/rules/0/context/0/apiCall/service/caBundle"
    assert op["value"] == pem.rstrip("\n")


@pytest.mark.parametrize("namespace", [None, "kyverno-system"])
def test_ca_script_puts_the_ca_where_kyverno_values_mount_it(
    fake_kubectl: tuple[Path, Path, str], namespace: str | None
) -> None:
    """--kyverno-trust applies ConfigMap manifest-provider-ca with ca.crt, what kyverno-values.yaml mounts."""
    bindir, calls, pem = fake_kubectl
    run_script(bindir, "--kyverno-trust", *(["--kyverno-namespace", namespace] if namespace else []))
    _get, apply = calls_of(calls)
    assert apply == ["apply", "-f", "-"]
    (configmap,) = yaml.safe_load_all(Path(f"{calls}.applied").read_text())
    assert (configmap["kind"], configmap["metadata"]["name"]) == ("ConfigMap", "manifest-provider-ca")
    assert configmap["metadata"]["namespace"] == (namespace or "kyverno")
    assert configmap["data"] == {"ca.crt": pem.rstrip("\n") + "\n"}
    values = yaml.safe_load((REPO / "manifests/overlays/kyverno-cel/kyverno-values.yaml").read_text())
    (volume,) = values["admissionController"]["extraVolumes"]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert {i["key"] for i in volume["configMap"]["items"]} == set(configmap["data"])


def test_policy_paths_the_script_patches_exist() -> None:
    doc = yaml.safe_load(
        (REPO / "policies/kyverno/verify-manifest-signature/verify-manifest-signature.yaml").read_text()
    )
    assert "caBundle" in doc["spec"]["rules"][0]["context"][0]["apiCall"]["service"]
