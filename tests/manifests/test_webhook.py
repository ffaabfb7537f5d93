"""The webhook overlay (``manifests/overlays/webhook``): what the API server is told to send, and what the service may do.

The ValidatingWebhookConfiguration is checked as the API server validates one
(``tests/support/webhook_config.py``, cited there), its matchConditions type-checked
and run, its rules against every subresource through which a protected object
changes (``tests/support/subresources.py``); its timeout against the service's
deadline; the RBAC against what the service asks the API server for.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.service.config import Config
from provider.service.routes import ADMISSION_PATH, API_SERVER_MARGIN_SECONDS
from tests.support.heldpolicies import CRD_FILES
from tests.support.overlays import MANIFESTS, env, kustomize_command, one, render
from tests.support.subresources import MUST_REACH_SERVICE, rules_send, subresources_of
from tests.support.subresources import admission_request as subresource_request
from tests.support.webhook_config import match_condition_holds, problems

WEBHOOK = "manifests.manifest-provider.io"
POLICIES = "policies.manifest-provider.io"


def hooks(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {h["name"]: h for h in one(docs, "ValidatingWebhookConfiguration")["webhooks"]}


def test_the_webhook_configuration_is_one_the_api_server_accepts() -> None:
    config = one(render("webhook"), "ValidatingWebhookConfiguration")
    assert problems(config) == []
    assert set(hooks(render("webhook"))) == {WEBHOOK, POLICIES}


def test_the_check_can_fail() -> None:
    config = one(render("webhook"), "ValidatingWebhookConfiguration")
    broken = yaml.safe_load(yaml.safe_dump(config))
    hook = broken["webhooks"][0]
    hook.update(name="short.name", timeoutSeconds=31, sideEffects="Some")
    hook["rules"][0]["resources"] = ["*/*", "configmaps"]
    hook["matchConditions"] = [{"name": "x", "expression": "request.namespace"}]
    found = problems(broken)
    for words in ("three segments", "between 1 and 30", "sideEffects", "'*/*'", "must evaluate to bool"):
        assert any(words in p for p in found), (words, found)


@pytest.mark.parametrize("name", [WEBHOOK, POLICIES])
def test_it_fails_closed_and_answers_after_the_service(name: str) -> None:
    docs = render("webhook")
    hook = hooks(docs)[name]
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    deadline = float(env(one(docs, "Deployment")).get("MANIFEST_PROVIDER_DEADLINE_SECONDS", Config().deadline_seconds))
    # The API server sends ?timeout=<timeoutSeconds>s; the service answers by its own deadline, and never later than
    # API_SERVER_MARGIN_SECONDS before that timeout (routes._admission_deadline): its reason, not the API server's.
    assert 1 <= hook["timeoutSeconds"] <= 30
    assert deadline <= hook["timeoutSeconds"] - API_SERVER_MARGIN_SECONDS - 0.5
    assert hook["clientConfig"]["service"]["path"] == ADMISSION_PATH


def test_kube_system_and_the_services_namespace_are_never_sent() -> None:
    hook = hooks(render("webhook"))[WEBHOOK]
    (expression,) = hook["namespaceSelector"]["matchExpressions"]
    assert expression == {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                          "values": ["kube-system", "manifest-provider"]}  # fmt: skip


def test_another_namespace_moves_every_name_that_points_at_the_service(tmp_path: Path) -> None:
    command = kustomize_command()
    if command is None:
        pytest.skip("no kustomize or kubectl to render the overlay")
    root = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, root, symlinks=True)
    # As the overlay's comment says: change its namespace line, and the replacements keep the rest in step.
    kustomization = root / "overlays" / "webhook" / "kustomization.yaml"
    text = kustomization.read_text()
    assert text.count("\nnamespace: manifest-provider\n") == 1
    kustomization.write_text(text.replace("\nnamespace: manifest-provider\n", "\nnamespace: signing\n"))
    out = subprocess.run(
        [*command, str(kustomization.parent)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    config = one(docs, "ValidatingWebhookConfiguration")
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "signing/manifest-provider-tls"
    for hook in config["webhooks"]:
        assert hook["clientConfig"]["service"]["namespace"] == "signing"
    (expression,) = {h["name"]: h for h in config["webhooks"]}[WEBHOOK]["namespaceSelector"]["matchExpressions"]
    assert expression["values"] == ["kube-system", "signing"]
    (binding,) = [
        d for d in docs if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"] == "manifest-provider-policies"
    ]
    assert binding["subjects"][0]["namespace"] == "signing"


def test_dry_runs_are_not_sent_everything_else_is() -> None:
    hook = hooks(render("webhook"))[WEBHOOK]
    (condition,) = hook["matchConditions"]
    request = subresource_request("ConfigMap", None, operation="CREATE")
    assert match_condition_holds(condition["expression"], request)
    assert not match_condition_holds(condition["expression"], {**request, "dryRun": True})


@pytest.mark.parametrize("kind", ["ConfigMap", "Deployment"])
def test_every_write_of_a_protected_kind_is_sent_deletes_are_not(kind: str) -> None:
    rules = hooks(render("webhook"))[WEBHOOK]["rules"]
    checked = 0
    for sub in [None, *[s for s in subresources_of(kind) if s.decision in MUST_REACH_SERVICE]]:
        assert rules_send(rules, subresource_request(kind, sub)), (kind, sub)
        checked += 1
    assert checked >= 1
    assert not rules_send(rules, subresource_request(kind, None, operation="DELETE"))


def test_policy_objects_are_sent_for_validation_and_their_status_writes_are_not() -> None:
    rules = hooks(render("webhook"))[POLICIES]["rules"]
    for plural in ("clustermanifestpolicies", "manifestpolicies"):
        request = {"operation": "CREATE", "resource": {"group": "manifest-provider.io", "version": "v1alpha1",
                                                       "resource": plural}, "subResource": ""}  # fmt: skip
        assert rules_send(rules, request)
        assert rules_send(rules, {**request, "operation": "UPDATE"})
        assert not rules_send(rules, {**request, "operation": "UPDATE", "subResource": "status"})


def test_the_ca_cert_manager_injects_is_the_services_own() -> None:
    docs = render("webhook")
    config = one(docs, "ValidatingWebhookConfiguration")
    namespace, name = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
    certificate = one(docs, "Certificate", name)
    assert certificate["metadata"]["namespace"] == namespace
    assert certificate["spec"]["secretName"] in {
        v["secret"]["secretName"]
        for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    }


def test_the_service_holds_the_policies_of_the_installed_crds() -> None:
    docs = render("webhook")
    assert env(one(docs, "Deployment"))["MANIFEST_PROVIDER_WATCH_POLICIES"] == "true"
    rendered = sorted((d for d in docs if d["kind"] == "CustomResourceDefinition"), key=lambda d: d["metadata"]["name"])
    assert rendered == [yaml.safe_load(path.read_text()) for path in CRD_FILES]


def _allows(rules: list[dict[str, Any]], verb: str, group: str, resource: str) -> bool:
    return any(
        (verb in r["verbs"] or "*" in r["verbs"])
        and (group in r["apiGroups"] or "*" in r["apiGroups"])
        and (resource in r["resources"] or "*" in r["resources"])
        for r in rules
    )


#: What the service asks for (provider/service/heldpolicies.py): list and watch of both kinds and of Namespaces,
#: PUT of each kind's status. tests/unit/service/test_heldpolicies.py checks every request it made against this role.
USED = [("list", "manifest-provider.io", "clustermanifestpolicies"), ("watch", "manifest-provider.io", "clustermanifestpolicies"),
        ("list", "manifest-provider.io", "manifestpolicies"), ("watch", "manifest-provider.io", "manifestpolicies"),
        ("list", "", "namespaces"), ("watch", "", "namespaces"),
        ("update", "manifest-provider.io", "clustermanifestpolicies/status"),
        ("update", "manifest-provider.io", "manifestpolicies/status")]  # fmt: skip


def test_the_service_may_read_the_policies_and_write_their_status_and_nothing_more() -> None:
    rules = one(render("webhook"), "ClusterRole", "manifest-provider-policies")["rules"]
    for verb, group, resource in USED:
        assert _allows(rules, verb, group, resource), (verb, group, resource)
    for verb, group, resource in [("update", "manifest-provider.io", "manifestpolicies"),
                                  ("create", "manifest-provider.io", "clustermanifestpolicies"),
                                  ("get", "", "namespaces"), ("update", "", "namespaces"), ("list", "", "secrets")]:  # fmt: skip
        assert not _allows(rules, verb, group, resource), (verb, group, resource)


def test_tenants_may_write_their_manifest_policies_and_never_a_cluster_policy() -> None:
    docs = render("webhook")
    aggregated = [d for d in docs if d["kind"] == "ClusterRole" and any(
        k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in d["metadata"].get("labels", {}))]  # fmt: skip
    writers = [d for d in aggregated if _allows(d["rules"], "create", "manifest-provider.io", "manifestpolicies")]
    (writer,) = writers
    assert set(writer["metadata"]["labels"]) & {f"rbac.authorization.k8s.io/aggregate-to-{r}" for r in ("admin", "edit", "view")} == {
        "rbac.authorization.k8s.io/aggregate-to-admin"
    }  # fmt: skip
    for role in aggregated:
        assert not any("clustermanifestpolicies" in r["resources"] for r in role["rules"])


def test_the_timeout_rounds_as_the_api_server_rounds_it() -> None:
    """The API server passes a whole number of seconds (rounded up); the service's margin fits inside the smallest."""
    hook = hooks(render("webhook"))[WEBHOOK]
    assert math.ceil(hook["timeoutSeconds"]) - API_SERVER_MARGIN_SECONDS > 0
