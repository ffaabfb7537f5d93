"""The shipped alerts and dashboard ask about series the real server exports.

``manifests/components/prometheusrule`` and ``manifests/components/grafana-dashboard``
are rendered with kustomize as their comments say to use them. Every expression is
parsed by a real PromQL parser (``promql-parser``: Python bindings of GreptimeTeam's
Rust parser, which also checks function arity and argument types), and every series
it selects must be one a scrape of the real server shows -- names from the scrape,
not from a list here -- or ``up``, which Prometheus records for each target. Each
matcher on a label the service sets must match some series of that scrape (every
known series is there from the first scrape at 0), so a misspelt reason or route
fails here instead of never firing. docs/operations.md shows each alert's expression.
"""

from __future__ import annotations

import http.client
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support.data import REPO
from tests.support.server import running_server

pytestmark = pytest.mark.integration

COMPONENTS = REPO / "manifests" / "components"
OPERATIONS = REPO / "docs" / "operations.md"
#: Series Prometheus itself records for every target ("Jobs and instances" in Prometheus's documentation).
PROMETHEUS_OWN = {"up"}
#: Labels Prometheus adds from the target (the ServiceMonitor's job, the pod's namespace and name, ...).
TARGET_LABELS = {"job", "namespace", "pod", "instance", "service", "endpoint", "container"}
#: The alerts docs/operations.md promises.
ALERTS = {
    "ManifestProviderDown",
    "ManifestProviderCertificateExpiring",
    "ManifestProviderErrors",
    "ManifestProviderDeadlineExceeded",
    "ManifestProviderPolicyInvalid",
}
#: What Grafana puts in place of its variables before a query runs.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "${namespace}": "ns", "$namespace": "ns"}

Series = list[tuple[str, dict[str, str]]]


@pytest.fixture(scope="module")
def exported() -> Iterator[Series]:
    """Every sample of a first scrape of the real server's metrics port (two workers, so a multiprocess scrape)."""
    with running_server(args=("--workers", "2")) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.metrics_port, timeout=10)
        try:
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
        finally:
            conn.close()
    series = [(s.name, dict(s.labels)) for f in text_string_to_metric_families(text) for s in f.samples]
    assert len(series) > 100
    yield series


def kustomize_command() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


def render(component: str, tmp_path: Path) -> list[dict[str, Any]]:
    command = kustomize_command()
    if command is None:
        pytest.skip("no kustomize or kubectl to render the component")
    root = tmp_path / "manifests"
    shutil.copytree(REPO / "manifests", root)
    overlay = root / "overlays" / "with-monitoring"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: gatekeeper-system\n"
        f"resources:\n  - ../gatekeeper\ncomponents:\n  - ../../components/servicemonitor\n"
        f"  - ../../components/{component}\n"
    )
    out = subprocess.run([*command, str(overlay)], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def selectors(expr: str) -> list[promql_parser.VectorSelector]:
    """Every vector selector of ``expr``, after the real parser accepted it (it raises on anything invalid)."""
    found: list[promql_parser.VectorSelector] = []

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def _matches(matcher: Any, value: str) -> bool:
    op = str(matcher.op).rsplit(".", 1)[-1]
    return {
        "Equal": value == matcher.value,
        "NotEqual": value != matcher.value,
        "Re": re.fullmatch(matcher.value, value) is not None,
        "NotRe": re.fullmatch(matcher.value, value) is None,
    }[op]


def problems(expr: str, series: Series) -> list[str]:
    """What in ``expr`` names something the scrape does not have."""
    found = []
    chosen = selectors(expr)
    if not chosen:
        found.append(f"{expr}: selects no series")
    for selector in chosen:
        if selector.name in PROMETHEUS_OWN:
            continue
        same = [labels for name, labels in series if name == selector.name]
        if not same:
            found.append(f"{selector.name}: not exported")
            continue
        ours = [m for m in selector.matchers.matchers if m.name not in TARGET_LABELS and m.name != "__name__"]
        unknown = [m.name for m in ours if not any(m.name in labels for labels in same)]
        if unknown:
            found.append(f"{selector.name}: no label {unknown}")
        elif not any(all(_matches(m, labels.get(m.name, "")) for m in ours) for labels in same):
            found.append(f"{selector}: matches no exported series")
    return found


# --- the alerts -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rules(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    docs = render("prometheusrule", tmp_path_factory.mktemp("rules"))
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "gatekeeper-system"
    found = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    assert found
    return found


def test_the_rules_have_the_promised_alerts_with_severities_and_durations(rules: list[dict[str, Any]]) -> None:
    assert {r["alert"] for r in rules} >= ALERTS
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        promql_parser.parse_duration(rule["for"])  # raises on a duration Prometheus would refuse


def test_every_alert_expression_parses_and_names_only_exported_series(
    rules: list[dict[str, Any]], exported: Series
) -> None:
    found = {rule["alert"]: problems(rule["expr"], exported) for rule in rules}
    assert found == {alert: [] for alert in found}


def test_a_misspelt_series_or_reason_would_be_caught(exported: Series) -> None:
    """The check above can fail: a wrong name, a wrong label, a reason nobody counts, invalid PromQL."""
    assert problems("rate(manifest_provider_request_total[5m])", exported)
    assert problems('manifest_provider_decisions_total{reasons="policy-invalid"}', exported)
    assert problems('manifest_provider_decisions_total{reason="policy-invalide"}', exported)
    with pytest.raises(Exception, match="expected type matrix"):
        problems("rate(manifest_provider_requests_total)", exported)


def test_operations_md_shows_every_alert_expression(rules: list[dict[str, Any]]) -> None:
    text = " ".join(OPERATIONS.read_text().split())
    for rule in rules:
        expr = " ".join(rule["expr"].split())
        assert f"`{expr}`" in text, rule["alert"]


# --- the dashboard ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    docs = render("grafana-dashboard", tmp_path_factory.mktemp("dashboard"))
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("dashboard")]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == "gatekeeper-system"
    (text,) = config_map["data"].values()
    assert text == (COMPONENTS / "grafana-dashboard" / "dashboard.json").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def grafana_to_promql(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, expr
    return expr


def test_every_dashboard_query_parses_and_names_only_exported_series(
    dashboard: dict[str, Any], exported: Series
) -> None:
    targets = {
        f"{panel['title']} / {target['refId']}": target["expr"]
        for panel in dashboard["panels"]
        for target in panel["targets"]
    }
    assert len(targets) >= 10
    found = {where: problems(grafana_to_promql(expr), exported) for where, expr in targets.items()}
    assert found == {where: [] for where in found}
    names = {s.name for expr in targets.values() for s in selectors(grafana_to_promql(expr))}
    for wanted in (
        "manifest_provider_certificate_expiry_timestamp_seconds",
        "manifest_provider_requests_in_flight",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
    ):
        assert wanted in names


def test_the_dashboards_namespace_variable_asks_an_exported_series(dashboard: dict[str, Any], exported: Series) -> None:
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "namespace"]
    inner = re.fullmatch(r"label_values\((.+), namespace\)", variable["query"]["query"])
    assert inner is not None
    assert problems(inner.group(1), exported) == []
