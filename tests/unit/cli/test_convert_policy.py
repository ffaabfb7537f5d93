"""convert-policy: Kyverno, Integrity Shield and kubectl sigstore policies become ours, losses listed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.bounds import LOCAL
from provider.cli import main
from provider.cli.convert_policy import convert, convert_document, not_in_the_output, outputs
from provider.policy.schema import Policy
from tests.support.data import INTEROP, load_yaml

KYVERNO = sorted((INTEROP / "kyverno" / "policies").glob("cpol-*.yaml"))


@pytest.mark.parametrize("path", KYVERNO, ids=lambda p: p.stem)
def test_kyverno_manifests_rules_convert_to_valid_policies(path: Path) -> None:
    (doc,) = load_yaml(path)
    policy, lost = convert(doc)
    compiled = Policy.from_dict(policy)
    # Their Rekor and CT-log settings ignore the logs (nothing to carry); the webhook's failurePolicy is the
    # engine's, listed as not carried over, never dropped silently
    assert compiled.attestors and all("failurePolicy" in item for item in lost), lost
    original = doc["spec"]["rules"][0]["validate"]["manifests"]["attestors"][0]
    assert compiled.attestors[0].count == original.get("count", len(compiled.attestors[0].entries))


def test_an_integrity_shield_constraint_lists_what_it_cannot_carry() -> None:
    constraint: dict[str, Any] = {
        "apiVersion": "constraints.gatekeeper.sh/v1beta1",
        "kind": "ManifestIntegrityConstraint",
        "metadata": {"name": "cm"},
        "spec": {
            "match": {"kinds": [{"kinds": ["ConfigMap"], "apiGroups": [""]}]},
            "parameters": {
                "signers": ["sample@signer.com"],
                "keyConfigs": [{"keySecretName": "pub", "keySecretNamespace": "ishield"}],
                "signatureRef": {"imageRef": "registry.example.com/sigs/cm:0.1.0",
                                 "signatureResourceRef": {"name": "cm-sig", "namespace": "sigs"}},
                "skipUsers": [{"users": ["system:admin"]}],
                "ignoreAttrs": [{"fields": ["data.comment"], "objects": [{"kind": "ConfigMap"}]}],
            },
        },
    }  # fmt: skip
    policy, lost = convert(constraint)
    Policy.from_dict(policy, bounds=LOCAL)
    assert policy["resourceBundleRef"] == {"repositories": ["registry.example.com/sigs/cm"]}
    assert policy["signatureResourceRef"] == "k8s://ConfigMap/sigs/cm-sig"
    assert any("keyConfigs" in item for item in lost)
    # The constraint's own match is Gatekeeper's: carried as it is by -o gatekeeper, listed by the others
    conversion = convert_document(constraint)
    (gatekeeper,) = outputs(conversion, "gatekeeper")
    assert gatekeeper["spec"]["match"] == constraint["spec"]["match"]
    assert any("spec.match" in item for item in not_in_the_output(conversion, "policy"))


def test_the_cli_exits_3_when_something_did_not_carry_over(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "config.yaml"
    source.write_text(yaml.safe_dump({"signers": ["jane@example.com"], "maxResourceManifestNum": 3}))
    assert main(["convert-policy", "-f", str(source), "-o", "gatekeeper"]) == 3
    out, err = capsys.readouterr()
    assert yaml.safe_load(out)["spec"]["parameters"] == {"signers": ["jane@example.com"]}
    assert "maxResourceManifestNum" in err


def test_the_gatekeeper_output_is_a_constraint_of_the_shipped_template(tmp_path: Path) -> None:
    """The constraint's kind is the one the shipped ConstraintTemplate creates, or Gatekeeper has no CRD for it."""
    from tests.support.data import KYVERNO, REPO, load_yaml

    (template,) = load_yaml(REPO / "policies" / "gatekeeper" / "verify-manifest-signature" / "template.yaml")
    proc = subprocess.run(
        [sys.executable, "-m", "provider.cli", "convert-policy", "-f",
         str(KYVERNO / "policies" / "cpol-count1-two-keys.yaml"), "-o", "gatekeeper"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    # exit 3: the source's webhook failurePolicy: Fail is the engine's, and only listed
    assert proc.returncode == 3 and proc.stderr.count("not carried over") == 1, proc.stderr
    assert "failurePolicy" in proc.stderr
    constraint = yaml.safe_load(proc.stdout)
    assert constraint["kind"] == template["spec"]["crd"]["spec"]["names"]["kind"]


# --- -o manifest-policy: off Kyverno's validate.manifests, onto the service's own webhook ------------------


def _held(obj: dict[str, Any]) -> Any:
    from provider.policystore.objects import read_policy_object

    return read_policy_object(obj, lambda raw, bounds: Policy.from_dict(raw, bounds=bounds), LOCAL)


@pytest.mark.parametrize("path", KYVERNO, ids=lambda p: p.stem)
def test_kyverno_manifests_rules_become_held_policies_the_crds_accept(path: Path) -> None:
    from tests.support.heldpolicies import crds
    from tests.support.kube_schema import validate_object

    (doc,) = load_yaml(path)
    conversion = convert_document(doc)
    by_kind = {crd["spec"]["names"]["kind"]: crd for crd in crds()}
    documents = outputs(conversion, "manifest-policy")
    assert len(documents) == len(conversion.rules) > 0
    for obj, rule in zip(documents, conversion.rules, strict=True):
        assert validate_object(obj, by_kind[obj["kind"]]) == []
        held = _held(obj)
        assert held.ready, held.error
        assert obj["spec"]["policy"] == rule.policy  # the converted policy, unchanged
        assert obj["spec"]["action"] == ("Enforce" if rule.enforcement == "deny" else "Audit")
    assert not_in_the_output(conversion, "manifest-policy") == []  # scope and enforcement carry over


def test_a_namespaced_kyverno_policy_becomes_a_tenant_policy_in_its_namespace() -> None:
    (doc,) = load_yaml(KYVERNO[0])
    doc = {**doc, "kind": "Policy", "metadata": {**doc["metadata"], "namespace": "shop"}}
    (obj,) = outputs(convert_document(doc), "manifest-policy")
    assert obj["kind"] == "ManifestPolicy" and obj["metadata"]["namespace"] == "shop"
    assert _held(obj).ready


def test_an_enforcing_rule_stays_enforcing_and_its_kinds_are_the_match() -> None:
    (doc,) = load_yaml(KYVERNO[0])
    rule = doc["spec"]["rules"][0]
    rule["validate"]["failureAction"] = "Enforce"
    rule["match"] = {"any": [{"resources": {"kinds": ["ConfigMap", "apps/v1/Deployment"]}}]}
    (obj,) = outputs(convert_document(doc), "manifest-policy")
    assert obj["spec"]["action"] == "Enforce"
    # Kyverno's "ConfigMap" names no group: every group's ConfigMap (pkg/utils/kube/kind.go ParseKindSelector)
    assert obj["spec"]["match"]["kinds"] == [{"apiGroups": ["*"], "kinds": ["ConfigMap"]},
                                             {"apiGroups": ["apps"], "kinds": ["Deployment"]}]  # fmt: skip


def test_a_gatekeeper_match_carries_what_a_held_policy_says_and_lists_the_rest() -> None:
    constraint = {"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "ManifestIntegrityConstraint",
                  "metadata": {"name": "cm"},
                  "spec": {"match": {"kinds": [{"kinds": ["ConfigMap"], "apiGroups": [""]}], "namespaces": ["shop", "team-*"],
                                     "excludedNamespaces": ["kube-system"], "labelSelector": {"matchLabels": {"app": "web"}}},
                           "parameters": {"signers": ["sample@signer.com"]}}}  # fmt: skip
    conversion = convert_document(constraint)
    (obj,) = outputs(conversion, "manifest-policy")
    assert obj["spec"]["match"] == {"kinds": [{"kinds": ["ConfigMap"], "apiGroups": [""]}],
                                    "objectSelector": {"matchLabels": {"app": "web"}}}  # fmt: skip
    lost = not_in_the_output(conversion, "manifest-policy")
    assert any("excludedNamespaces" in item for item in lost) and any("prefix or suffix" in item for item in lost)
