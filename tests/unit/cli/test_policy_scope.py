"""``manifest-provider policy``: the scope it wrote is said, risky scopes are warned about, kinds are forgiving.

* The summary on standard error names the kinds and namespaces read back from
  the documents written (not "the shipped kinds").
* A scope that takes in ``kube-system`` or the service's own namespace (the one
  in the URL the policy calls) is warned about, with what it means per engine.
* ``--match-kind`` suggests the built-in kind a typo meant, and takes custom
  resources as ``group/Kind``: the engines' matchers (tests/support/subresources.py,
  from Gatekeeper's ``pkg/mutation/match/match.go`` and Kyverno's
  ``pkg/utils/kube/kind.go`` / ``pkg/utils/match/kind.go``) match the custom
  resource and its status subresource, and nothing else new.
* ``--profile`` adds a profile to the defaults; a policy file whose ``defaults``
  leaves a default profile out says so, wherever the CLI reads a policy file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.cli import main
from provider.cli._generate import kyverno_kind_selector
from provider.keys.pem import generate_key, public_pem
from tests.support.data import CRDS as CRD_DATA
from tests.support.data import load_yaml
from tests.support.kube_schema import validate_object
from tests.support.kyverno import VERSIONS
from tests.support.subresources import (
    KINDS,
    SUBRESOURCES,
    WIDGET,
    admission_request,
    gatekeeper_matches,
    kyverno_kind_matches,
    rule_matches,
)

STATUS = next(s for s in SUBRESOURCES if s.name == "status")


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scope") / "team.pub"
    path.write_bytes(public_pem(generate_key("ecdsa-p256")))
    return path


def policy(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The documents printed and the lines on standard error of a successful run."""
    code = main(["policy", *map(str, args)])
    out, err = capsys.readouterr()
    assert code == 0, err
    return [d for d in yaml.safe_load_all(out) if d is not None], err.splitlines()


def refused(capsys: pytest.CaptureFixture[str], *args: str | Path) -> str:
    code = main(["policy", *map(str, args)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    return err


def summary(lines: list[str]) -> str:
    """The first line: ``manifest-provider policy: ENGINE, MODE, kinds ... in ...``."""
    return lines[0]


def warnings(lines: list[str]) -> list[str]:
    return [line for line in lines if ": warning: " in line]


# --- the scope written ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "ca", "scope"),
    [
        ("gatekeeper", ["--without-ca"], "kinds ConfigMap, apps/Deployment, autoscaling/Scale in namespace demo"),
        ("kyverno", ["--without-ca"], "kinds ConfigMap, apps/Deployment (scale, status) in namespace demo"),
        ("kyverno-cel", [], "kinds ConfigMap, apps/Deployment (scale, status) in namespace demo"),
    ],
)
def test_the_shipped_scope_is_named(
    capsys: pytest.CaptureFixture[str], key: Path, engine: str, ca: list[str], scope: str
) -> None:
    _, lines = policy(capsys, engine, "-k", key, *ca)
    assert summary(lines) == f"manifest-provider policy: {engine}, audit mode, {scope}"
    assert warnings(lines) == []  # demo is neither kube-system nor the service's namespace


@pytest.mark.parametrize(
    ("engine", "ca", "scope"),
    [
        (
            "gatekeeper",
            ["--without-ca"],
            "kinds apps/StatefulSet, autoscaling/Scale, Pod, Binding in namespaces shop, web",
        ),
        (
            "kyverno",
            ["--without-ca"],
            "kinds apps/StatefulSet (status, scale), Pod (status, ephemeralcontainers, resize, binding) in namespaces shop, web",
        ),
        (
            "kyverno-cel",
            [],
            "kinds apps/StatefulSet (status, scale), Pod (status, ephemeralcontainers, resize, binding) in namespaces shop, web",
        ),
    ],
)
def test_a_chosen_scope_is_named_as_written(
    capsys: pytest.CaptureFixture[str], key: Path, engine: str, ca: list[str], scope: str
) -> None:
    _, lines = policy(
        capsys, engine, "-k", key, *ca, "--match-kind", "statefulsets,pod", "--match-namespace", "shop,web"
    )
    assert summary(lines).endswith(f"audit mode, {scope}")


# --- namespaces an operator must think twice about ------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "ca", "service_namespace", "kube_system_why"),
    [
        ("gatekeeper", ["--without-ca"], "gatekeeper-system", "Gatekeeper checks it unless the namespace is exempt"),
        ("kyverno", ["--without-ca"], "manifest-provider", "Kyverno's default Helm values leave it out"),
        ("kyverno-cel", [], "manifest-provider", "Kyverno's default Helm values leave it out"),
    ],
)
def test_every_namespace_warns_about_kube_system_and_the_services_own(
    capsys: pytest.CaptureFixture[str],
    key: Path,
    engine: str,
    ca: list[str],
    *,
    service_namespace: str,
    kube_system_why: str,
) -> None:
    _, lines = policy(capsys, engine, "-k", key, *ca, "--match-namespace", "*")
    assert summary(lines).endswith("in every namespace")
    kube_system, own = warnings(lines)
    assert "the scope includes kube-system" in kube_system and kube_system_why in kube_system
    assert f"the scope includes {service_namespace}, the service's own namespace" in own
    assert f"https://manifest-provider.{service_namespace}.svc" in own


def test_naming_kube_system_or_the_services_namespace_warns(capsys: pytest.CaptureFixture[str], key: Path) -> None:
    _, lines = policy(capsys, "kyverno-cel", "-k", key, "--match-namespace", "kube-system")
    assert len(warnings(lines)) == 1 and "kube-system" in warnings(lines)[0]
    _, lines = policy(capsys, "kyverno", "-k", key, "--without-ca", "--match-namespace", "shop,manifest-provider")
    (own,) = warnings(lines)
    assert "manifest-provider, the service's own namespace" in own
    _, lines = policy(capsys, "gatekeeper", "-k", key, "--without-ca", "--match-namespace", "shop")
    assert warnings(lines) == []


def test_the_service_namespace_follows_the_url_the_policy_calls(
    capsys: pytest.CaptureFixture[str], key: Path, tmp_path: Path
) -> None:
    """A policies folder whose Provider calls another namespace: that one is the service's."""
    from provider.cli._generate import DEFAULT_POLICIES_DIR, SHIPPED

    root = tmp_path / "policies"
    for name in ("provider", "constraint", "template"):
        target = root / SHIPPED[name]
        target.parent.mkdir(parents=True, exist_ok=True)
        text = (DEFAULT_POLICIES_DIR / SHIPPED[name]).read_text()
        target.write_text(text.replace("manifest-provider.gatekeeper-system.svc", "verifier.security.svc"))
    from provider.service.devcerts import make_dev_pki

    ca = make_dev_pki(tmp_path / "pki").ca_cert
    _, lines = policy(
        capsys, "gatekeeper", "-k", key, "--ca-file", ca, "--policies", root, "--match-namespace", "shop,security"
    )
    (own,) = warnings(lines)
    assert "the scope includes security, the service's own namespace (https://verifier.security.svc)" in own


# --- kinds ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "suggestion"),
    [("Deploymnet", "Deployment"), ("ConfigMpa", "ConfigMap"), ("apps/StatefullSet", "StatefulSet")],
)
def test_a_misspelt_kind_is_refused_with_the_nearest(
    capsys: pytest.CaptureFixture[str], key: Path, text: str, suggestion: str
) -> None:
    err = refused(capsys, "gatekeeper", "-k", key, "--without-ca", "--match-kind", text)
    assert f"--match-kind {text}: not a built-in kind" in err
    assert f"did you mean {suggestion}?" in err


def test_kinds_are_taken_as_kubectl_writes_them(capsys: pytest.CaptureFixture[str], key: Path) -> None:
    docs, _ = policy(capsys, "gatekeeper", "-k", key, "--without-ca", "--match-kind", "deployments,configmap")
    assert docs[-1]["spec"]["match"]["kinds"] == [
        {"apiGroups": ["apps"], "kinds": ["Deployment"]},
        {"apiGroups": ["autoscaling"], "kinds": ["Scale"]},
        {"apiGroups": [""], "kinds": ["ConfigMap"]},
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("example/Widget", "is not an API group"),
        ("example.com/Wid_get", "is not a kind name"),
        ("example.com/Widget=Widgets", "is not a resource name"),
        ("apps/Deployment=deployments", "'=plural' is for custom resources"),
    ],
)
def test_custom_resource_names_are_checked_as_a_crd_would(
    capsys: pytest.CaptureFixture[str], key: Path, text: str, message: str
) -> None:
    assert message in refused(capsys, "kyverno", "-k", key, "--without-ca", "--match-kind", text)


def _requests() -> list[tuple[str, dict[str, Any]]]:
    """A create of a Widget, an update of its status, and a write of a built-in kind the policy must not take in."""
    return [
        ("widget", admission_request("Widget", None, operation="CREATE")),
        ("widget/status", admission_request("Widget", STATUS)),
        ("configmap", admission_request("ConfigMap", None, operation="CREATE")),
    ]


def test_gatekeeper_matches_a_custom_resource_by_group_and_kind(capsys: pytest.CaptureFixture[str], key: Path) -> None:
    docs, lines = policy(capsys, "gatekeeper", "-k", key, "--without-ca", "--match-kind", "example.com/Widget")
    match = docs[-1]["spec"]["match"]
    assert match["kinds"] == [{"apiGroups": ["example.com"], "kinds": ["Widget"]}]
    matched = {name for name, request in _requests() if gatekeeper_matches(match, request)}
    assert matched == {"widget", "widget/status"}
    # The shipped webhook rules send the Widget but not its status: said, with the plural it lacks.
    assert any("Gatekeeper is not sent <plural of example.com/Widget>/status" in line for line in lines)
    assert summary(lines).endswith("kinds example.com/Widget in namespace demo")


@pytest.mark.parametrize("version", VERSIONS)
def test_kyverno_matches_a_custom_resource_by_group_and_kind(
    capsys: pytest.CaptureFixture[str], key: Path, version: str
) -> None:
    (doc,), _ = policy(capsys, "kyverno", "-k", key, "--without-ca", "--match-kind", "example.com/Widget")
    (rule,) = doc["spec"]["rules"]
    kinds = rule["match"]["any"][0]["resources"]["kinds"]
    assert kinds == ["example.com/*/Widget", "example.com/*/Widget/status"]
    # A group needs the version part: kind.go reads a two-part "example.com/Widget" as kind and subresource.
    assert kyverno_kind_selector("example.com/Widget") == ("*", "*", "example.com", "Widget")
    matched = {name for name, request in _requests() if kyverno_kind_matches(kinds, request)}
    assert matched == {"widget", "widget/status"}
    crds = {
        d["spec"]["names"]["kind"]: d
        for p in sorted((CRD_DATA / "kyverno" / f"v{version}").glob("*.yaml"))
        for d in load_yaml(p)
    }
    assert validate_object(doc, crds["ClusterPolicy"]) == []


def test_the_validating_policy_needs_a_custom_resources_plural(capsys: pytest.CaptureFixture[str], key: Path) -> None:
    err = refused(capsys, "kyverno-cel", "-k", key, "--match-kind", "example.com/Widget")
    assert "give it as example.com/Widget=PLURAL" in err
    (doc,), _ = policy(capsys, "kyverno-cel", "-k", key, "--match-kind", "example.com/Widget=widgets,ConfigMap")
    rules = doc["spec"]["matchConstraints"]["resourceRules"]
    assert rules[0] == {
        "apiGroups": ["example.com"],
        "apiVersions": ["*"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["widgets", "widgets/status"],
    }
    matched = {name for name, request in _requests() if any(rule_matches(r, request) for r in rules)}
    assert matched == {"widget", "widget/status", "configmap"}
    assert "ConfigMap" in KINDS  # the control: a built-in kind named beside it is matched too
    for version in VERSIONS:
        crds = {
            d["spec"]["names"]["kind"]: d
            for p in sorted((CRD_DATA / "kyverno" / f"v{version}").glob("*.yaml"))
            for d in load_yaml(p)
        }
        assert validate_object(doc, crds["ValidatingPolicy"]) == []


def test_the_widget_is_what_the_test_models() -> None:
    assert (WIDGET.group, WIDGET.kind, WIDGET.resource) == ("example.com", "Widget", "widgets")


# --- profiles -------------------------------------------------------------------------------------


def test_profile_adds_to_the_defaults(capsys: pytest.CaptureFixture[str], key: Path) -> None:
    docs, lines = policy(
        capsys, "gatekeeper", "-k", key, "--without-ca", "--profile", "argocd", "--profile", "flux,helm"
    )
    assert docs[-1]["spec"]["parameters"]["defaults"] == ["k8s-manifest-sigstore", "common", "argocd", "flux", "helm"]
    assert warnings(lines) == []
    err = refused(capsys, "gatekeeper", "-k", key, "--without-ca", "--profile", "argcd")
    assert "--profile argcd: not a built-in profile; did you mean argocd?" in err


def test_dry_run_has_a_flag(capsys: pytest.CaptureFixture[str], key: Path) -> None:
    (doc,), _ = policy(capsys, "kyverno-cel", "-k", key, "--dry-run", "--dry-run-namespace", "scratch")
    assert '"dryRun": dyn({' in doc["spec"]["variables"][1]["expression"]
    assert '"namespace": dyn("scratch")' in doc["spec"]["variables"][1]["expression"]


def test_a_defaults_list_that_drops_the_default_profiles_is_warned_about(
    capsys: pytest.CaptureFixture[str], key: Path, tmp_path: Path
) -> None:
    config = tmp_path / "argocd.yaml"
    config.write_text("defaults: [argocd]\n")
    docs, lines = policy(capsys, "gatekeeper", "-k", key, "--without-ca", "-c", config)
    assert docs[-1]["spec"]["parameters"]["defaults"] == ["argocd"]  # as the file says: only a warning
    (warning,) = warnings(lines)
    assert f'{config}: defaults ["argocd"] leaves out the default profiles k8s-manifest-sigstore, common' in warning
    assert "--profile" in warning
    # The same file through verify: the same warning.
    signed = tmp_path / "cm.yaml"
    signed.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: shop}\n")
    assert main(["verify", "-f", str(signed), "-k", str(key), "-c", str(config)]) == 1
    assert "manifest-provider verify: warning: " + warning.split(": warning: ", 1)[1] in capsys.readouterr().err
    # A file that keeps them says nothing.
    config.write_text("defaults: [k8s-manifest-sigstore, common, argocd]\n")
    _, lines = policy(capsys, "gatekeeper", "-k", key, "--without-ca", "-c", config)
    assert warnings(lines) == []
