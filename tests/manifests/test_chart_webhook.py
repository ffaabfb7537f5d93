"""The chart with ``engine: webhook``: the service as its own admission webhook, as the overlay installs it.

Rendered by the real Helm engine (``tests/support/helm.py``). The ClusterManifestPolicy
is what ``manifest-provider policy webhook`` prints for the same settings; the
ValidatingWebhookConfiguration passes the API server's validation
(``tests/support/webhook_config.py``), sends every write of the kinds of
``policies.kinds`` through every subresource that changes them, never kube-system nor
the release's namespace, and answers after the service's deadline; the CRDs are
``manifests/crds``; the RBAC and the webhooks are the overlay's.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import helm_python
import pytest
from cryptography import x509

from provider.bounds import SERVICE
from provider.policy.schema import Policy
from provider.policystore.objects import read_policy_object
from provider.service.routes import ADMISSION_PATH, API_SERVER_MARGIN_SECONDS
from tests.support.chart_policies import CHART_LABELS, SAMPLE_KEY, SETTINGS, generated, without_chart_labels
from tests.support.heldpolicies import CRD_FILES
from tests.support.helm import find, render
from tests.support.kube_schema import validate_object
from tests.support.overlays import render as render_overlay
from tests.support.subresources import KINDS, MUST_REACH_SERVICE, rules_send, subresources_of
from tests.support.subresources import admission_request as subresource_request
from tests.support.webhook_config import match_condition_holds, problems

WEBHOOK, POLICIES = "manifests.manifest-provider.io", "policies.manifest-provider.io"


def values(**extra: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"engine": "webhook", "policy": {"keys": [SAMPLE_KEY]}}
    found.update(extra)
    return found


def hooks(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {h["name"]: h for h in find(docs, "ValidatingWebhookConfiguration")["webhooks"]}


@pytest.mark.parametrize("setting", SETTINGS, ids=[s[0] for s in SETTINGS])
def test_the_chart_renders_what_policy_webhook_prints(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, setting: tuple[str, Any, Any, list[str]]
) -> None:
    _case, scope, policy, flags = setting
    docs = render(values(policies={"enabled": True, **scope}, policy=policy))
    (want,) = generated(capsys, tmp_path, "webhook", policy=policy, flags=flags, ca=None)
    got = without_chart_labels(find(docs, "ClusterManifestPolicy"))
    assert got == want
    held = read_policy_object(got, lambda raw, bounds: Policy.from_dict(raw, bounds=bounds), SERVICE)
    assert held.ready, held.error


def test_without_policies_enabled_no_policy_is_installed_but_the_webhook_is() -> None:
    docs = render(values())
    assert not [d for d in docs if d["kind"] == "ClusterManifestPolicy"]
    assert set(hooks(docs)) == {WEBHOOK, POLICIES}


def test_the_webhook_configuration_is_one_the_api_server_accepts_and_trusts_the_service() -> None:
    docs = render(values(policies={"enabled": True}))
    config = find(docs, "ValidatingWebhookConfiguration")
    assert problems(config) == []
    service = find(docs, "Service")
    (https,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "https"]
    ca = base64.b64decode(find(docs, "Secret")["data"]["ca.crt"])
    for hook in config["webhooks"]:
        called = hook["clientConfig"]["service"]
        assert (called["name"], called["namespace"], called["port"], called["path"]) == (
            service["metadata"]["name"], service["metadata"]["namespace"], https, ADMISSION_PATH,
        )  # fmt: skip
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca
        assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    x509.load_pem_x509_certificates(ca)


@pytest.mark.parametrize(("deadline", "timeout"), [(None, 3), (2.5, 5), (10, 30)])
def test_the_api_server_waits_longer_than_the_service(deadline: float | None, timeout: int) -> None:
    settings = {"deadline_seconds": deadline} if deadline is not None else {}
    docs = render(values(settings=settings, webhook={"timeoutSeconds": timeout}))
    for hook in hooks(docs).values():
        assert hook["timeoutSeconds"] == timeout
        assert (deadline or 1.5) + 1 <= timeout and timeout - API_SERVER_MARGIN_SECONDS > 0


@pytest.mark.parametrize(("deadline", "timeout"), [(None, 2), (2.5, 3)])
def test_a_timeout_the_service_cannot_answer_within_is_refused(deadline: float | None, timeout: int) -> None:
    settings = {"deadline_seconds": deadline} if deadline is not None else {}
    with pytest.raises(helm_python.HelmRenderError, match="must be at least the service's deadline"):
        render(values(settings=settings, webhook={"timeoutSeconds": timeout}))


def test_kube_system_the_releases_namespace_and_the_excluded_ones_are_never_sent() -> None:
    docs = render(values(webhook={"excludedNamespaces": ["sandbox", "kube-system"]}), namespace="signing")
    (expression,) = hooks(docs)[WEBHOOK]["namespaceSelector"]["matchExpressions"]
    assert expression == {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                          "values": ["kube-system", "signing", "sandbox"]}  # fmt: skip


def test_dry_runs_are_not_sent() -> None:
    (condition,) = hooks(render(values()))[WEBHOOK]["matchConditions"]
    request = subresource_request("ConfigMap", None, operation="CREATE")
    assert match_condition_holds(condition["expression"], request)
    assert not match_condition_holds(condition["expression"], {**request, "dryRun": True})


PROTECTED = ["ConfigMap", "Deployment", "StatefulSet", "Pod", "Namespace", "CertificateSigningRequest"]


def test_every_write_of_every_protected_kind_is_sent() -> None:
    kinds = ["ConfigMap", "apps/Deployment", "apps/StatefulSet", "core/Pod", "Namespace", "CertificateSigningRequest"]
    rules = hooks(render(values(policies={"enabled": True, "kinds": kinds, "namespaces": ["*"]})))[WEBHOOK]["rules"]
    checked = 0
    for kind in PROTECTED:
        assert kind in KINDS
        for sub in [None, *[s for s in subresources_of(kind) if s.decision in MUST_REACH_SERVICE]]:
            assert rules_send(rules, subresource_request(kind, sub)), (kind, sub)
            checked += 1
    assert checked >= 15
    assert not rules_send(rules, subresource_request("Secret" if "Secret" in KINDS else "Service", None))


def test_the_crds_are_manifests_crds_unless_installed_apart() -> None:
    docs = render(values())
    rendered = sorted((d for d in docs if d["kind"] == "CustomResourceDefinition"), key=lambda d: d["metadata"]["name"])
    from tests.support.data import load_yaml

    shipped = [load_yaml(path)[0] for path in CRD_FILES]
    assert len(rendered) == 2
    for got, want in zip(rendered, shipped, strict=True):
        labels = got["metadata"].pop("labels")
        assert set(labels) >= CHART_LABELS and labels.items() >= want["metadata"]["labels"].items()
        assert {**got, "metadata": {**got["metadata"], "labels": want["metadata"]["labels"]}} == want
    assert not [d for d in render(values(webhook={"installCRDs": False})) if d["kind"] == "CustomResourceDefinition"]


def test_the_policy_objects_fit_the_crds() -> None:
    docs = render(values(policies={"enabled": True, "enforce": True}))
    by_kind = {d["spec"]["names"]["kind"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}
    assert validate_object(find(docs, "ClusterManifestPolicy"), by_kind["ClusterManifestPolicy"]) == []


def test_the_service_watches_with_its_token_and_the_api_server_reaches_it() -> None:
    docs = render(values())
    deployment = find(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    variables = {e["name"]: e["value"] for e in container["env"]}
    assert variables["MANIFEST_PROVIDER_WATCH_POLICIES"] == "true" and pod["automountServiceAccountToken"] is True
    assert "MANIFEST_PROVIDER_CALLERS" not in variables and "MANIFEST_PROVIDER_CLIENT_CA" not in variables
    policy = find(docs, "NetworkPolicy")
    api, metrics = policy["spec"]["ingress"]
    assert api == {"ports": [{"port": "https", "protocol": "TCP"}]}  # the control plane: no selector names it
    assert metrics["ports"] == [{"port": "metrics", "protocol": "TCP"}] and metrics["from"]


def _named_rules(docs: list[dict[str, Any]], suffix: str) -> list[dict[str, Any]]:
    (role,) = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith(suffix)]
    return list(role["rules"])


def test_rbac_and_webhooks_are_the_overlays() -> None:
    chart = render(values())
    overlay = render_overlay("webhook")
    for suffix in ("-policies", "-manifestpolicies-admin", "-manifestpolicies-view"):
        assert _named_rules(chart, suffix) == _named_rules(overlay, suffix), suffix
    for role in ("-manifestpolicies-admin", "-manifestpolicies-view"):
        (got,) = [d for d in chart if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith(role)]
        (want,) = [d for d in overlay if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith(role)]
        aggregate = {k: v for k, v in got["metadata"]["labels"].items() if k.startswith("rbac.authorization")}
        assert aggregate == {k: v for k, v in want["metadata"]["labels"].items() if k.startswith("rbac.authorization")}
    got_hooks, want_hooks = hooks(chart), hooks(render_overlay("webhook"))
    for name in (WEBHOOK, POLICIES):
        got, want = copy.deepcopy(got_hooks[name]), copy.deepcopy(want_hooks[name])
        got["clientConfig"].pop("caBundle")  # the overlay's is cert-manager's to inject
        assert got == want, name
