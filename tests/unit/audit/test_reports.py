"""PolicyReports of live verdicts: the CRD's schema accepts them, and they say what Kyverno's say.

The schema is the ``wgpolicyk8s.io/v1alpha2`` CRD Kyverno installs
(``tests/assets/policyreport/``, source noted there), checked with
``tests/support/kube_schema.py`` as the API server checks a write (strict fields).
The result fields are the ones Kyverno fills (kyverno/kyverno
``pkg/utils/report/results.go`` ``ToPolicyReportResult``) and policy-reporter reads.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from provider.audit.live import Checked, ObjectRef, check
from provider.audit.reports import (
    MANAGED_BY,
    NAME_PREFIX,
    OUTCOMES,
    outcome,
    report_for,
    report_name,
    same_content,
    signer_text,
)
from provider.policy.schema import Policy
from provider.result import Result
from tests.support.data import REPO, load_yaml
from tests.support.kube_schema import validate_object
from tests.support.live import POLICY, deployment, reimaged, scaled, signed, stored

ASSETS = REPO / "tests" / "assets" / "policyreport"
CRDS = {
    "PolicyReport": load_yaml(ASSETS / "wgpolicyk8s.io_policyreports.yaml")[0],
    "ClusterPolicyReport": load_yaml(ASSETS / "wgpolicyk8s.io_clusterpolicyreports.yaml")[0],
}
NOW = 1_767_225_600.25
REF = ObjectRef("apps/v1", "Deployment", "shop", "web", "5f0c7a3e-1b2c-4d5e-8f90-a1b2c3d4e5f6", "812")
CLUSTER_REF = ObjectRef("v1", "Namespace", "", "shop", "6f0c7a3e-1b2c-4d5e-8f90-a1b2c3d4e5f6", "9")

VERDICTS = [
    ("verified", Checked(REF, Result.proven("matches", ("sha256:aa", {"subject": "jane@example.com", "issuer": "https://accounts.google.com"}))), "pass"),
    ("denied", Checked(REF, Result.deny("content-mismatch", "spec.replicas differs", diff_count=3)), "fail"),
    ("unsigned", Checked(REF, Result.deny("unsigned", "no signature")), "fail"),
    ("skipped", Checked(REF, Result.allow("skipped-object", "skipped by the policy")), "skip"),
    ("out-of-scope", Checked(REF, Result.allow("out-of-scope", "not in scope")), "skip"),
    ("no-verdict", Checked(REF, Result.deny("dry-run-failed", "the API server could not be reached"), error=True), "error"),
    ("cluster-scoped", Checked(CLUSTER_REF, Result.proven("matches", ("sha256:aa",))), "pass"),
]  # fmt: skip


@pytest.mark.parametrize(("checked", "expected"), [v[1:] for v in VERDICTS], ids=[v[0] for v in VERDICTS])
def test_every_verdict_is_a_report_the_crd_accepts(checked: Checked, expected: str) -> None:
    report = report_for(checked, now=NOW)
    assert validate_object(report, CRDS[report["kind"]]) == []
    (result,) = report["results"]
    assert result["result"] == outcome(checked) == expected
    assert report["summary"] == {o: int(o == expected) for o in OUTCOMES}


def test_a_report_has_the_fields_kyverno_fills() -> None:
    (_, checked, _) = VERDICTS[0]
    report = report_for(checked, now=NOW)
    (result,) = report["results"]
    assert set(result) == {"policy", "rule", "result", "source", "scored", "category", "severity", "message",
                           "properties", "resources", "timestamp"}  # fmt: skip
    assert (result["source"], result["policy"], result["rule"], result["scored"]) == (
        "manifest-provider",
        "verify-manifest-signature",
        "verify-signature",
        True,
    )
    assert result["timestamp"] == {"seconds": 1_767_225_600, "nanos": 250_000_000}
    assert result["properties"] == {
        "reason": "verified",
        "allowed": "true",
        "verified": "true",
        "signers": "sha256:aa, jane@example.com (https://accounts.google.com)",
        "resourceVersion": "812",
    }
    assert (
        result["resources"]
        == [report["scope"]]
        == [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "shop", "uid": REF.uid}]
    )


def test_a_report_belongs_to_its_object_and_is_named_apart_from_kyvernos() -> None:
    report = report_for(VERDICTS[0][1], now=NOW)
    meta = report["metadata"]
    assert meta["name"] == NAME_PREFIX + REF.uid != REF.uid  # Kyverno names its own report after the bare uid
    assert (meta["namespace"], meta["labels"]) == ("shop", MANAGED_BY)
    assert meta["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": REF.uid}]
    cluster = report_for(VERDICTS[-1][1], now=NOW)
    assert cluster["kind"] == "ClusterPolicyReport" and "namespace" not in cluster["metadata"]


def test_an_object_without_a_uid_gets_a_stable_name_of_its_identity() -> None:
    bare = ObjectRef("v1", "ConfigMap", "shop", "cm")
    assert report_name(bare) == report_name(bare) != report_name(ObjectRef("v1", "ConfigMap", "bank", "cm"))
    assert report_name(bare).startswith(NAME_PREFIX) and len(report_name(bare)) <= 63


BROKEN: list[tuple[str, str, Any]] = [
    ("result-outside-the-enum", "results.0.result", "passed"),
    ("property-not-a-string", "results.0.properties.differences", 3),
    ("unknown-field", "results.0.verdict", "pass"),
    ("timestamp-as-text", "results.0.timestamp", "2026-01-01T00:00:00Z"),
    ("severity-outside-the-enum", "results.0.severity", "urgent"),
]


@pytest.mark.parametrize(("path", "value"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_the_schema_check_can_fail(path: str, value: Any) -> None:
    """The validator refuses what the API server refuses: the acceptance above means something."""
    report = copy.deepcopy(report_for(VERDICTS[0][1], now=NOW))
    node: Any = report
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    for part in parents:
        node = node[part]
    node[last] = value
    assert validate_object(report, CRDS["PolicyReport"]) != []


def test_a_long_message_is_cut_to_fit() -> None:
    checked = Checked(REF, Result.deny("content-mismatch", "x" * 10_000))
    message = report_for(checked, now=NOW)["results"][0]["message"]
    assert len(message) == 2048 and message.endswith("...")


def test_same_content_ignores_only_the_timestamp() -> None:
    first = report_for(VERDICTS[0][1], now=NOW)
    assert same_content(first, report_for(VERDICTS[0][1], now=NOW + 3600))
    assert not same_content(first, report_for(VERDICTS[1][1], now=NOW))
    moved = copy.deepcopy(first)
    moved["scope"]["name"] = "other"
    assert not same_content(first, moved)


def test_signers_read_as_people_read_them() -> None:
    assert signer_text("sha256:ab") == "sha256:ab"
    assert signer_text(
        {"subject": "ci@example.com", "issuer": "https://token.actions.githubusercontent.com", "key": "sha256:cd"}
    ) == ("ci@example.com (https://token.actions.githubusercontent.com)")
    assert signer_text({"key": "sha256:cd"}) == "sha256:cd"


# --- the live verdicts the issue asks for, end to end into a report ----------------------------------


def test_the_autoscalers_change_is_a_pass_naming_spec_replicas() -> None:
    checked = check(stored(scaled(signed(deployment()))), Policy.from_dict(POLICY))
    (result,) = report_for(checked, now=NOW)["results"]
    assert result["result"] == "pass" and "spec.replicas" in result["message"]


def test_a_changed_image_is_a_fail_with_its_reason() -> None:
    checked = check(stored(reimaged(scaled(signed(deployment())))), Policy.from_dict(POLICY))
    (result,) = report_for(checked, now=NOW)["results"]
    assert (result["result"], result["properties"]["reason"]) == ("fail", "content-mismatch")
    assert "image" in result["message"]
