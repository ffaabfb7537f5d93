"""Writing PolicyReports to the fake API server: create, leave alone, update at the version read, never another's.

The fake serves the PolicyReport CRDs Kyverno installs (``tests/assets/policyreport``)
and validates every write against their schema, as the API server does.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provider.audit.live import Checked, ObjectRef
from provider.audit.reports import MANAGED_BY, report_for, report_stub, same_content
from provider.errors import RequestError, TransientError
from provider.kube.dryrun import KubeDryRunner
from provider.kube.writer import KubeWriter
from provider.result import Result
from tests.support.data import REPO, load_yaml
from tests.support.fakeapi import FakeApiServer, Logged, runner_for

ASSETS = REPO / "tests" / "assets" / "policyreport"
REF = ObjectRef("apps/v1", "Deployment", "shop", "web", "0b0e3c1c-8d1f-4a57-9f0e-1d2a3b4c5d6e", "41")
CLUSTER_REF = ObjectRef(
    "rbac.authorization.k8s.io/v1", "ClusterRole", "", "reader", "7d0e3c1c-8d1f-4a57-9f0e-1d2a3b4c5d6e"
)


def install(fake: FakeApiServer) -> None:
    for name in ("policyreports", "clusterpolicyreports"):
        (crd,) = load_yaml(ASSETS / f"wgpolicyk8s.io_{name}.yaml")
        fake.install_crd(crd)


@pytest.fixture
def runner(fake: FakeApiServer, tmp_path: Path) -> Iterator[KubeDryRunner]:
    install(fake)
    with runner_for(fake, tmp_path) as r:
        yield r


@pytest.fixture
def writer(runner: KubeDryRunner) -> KubeWriter:
    return KubeWriter(runner, labels=MANAGED_BY, same=same_content)


def report(result: Result, ref: ObjectRef = REF, now: float = 1_700_000_000.0) -> dict[str, Any]:
    return report_for(Checked(ref, result), now=now)


PASS = Result.proven("Deployment shop/web matches its signed manifest", ("sha256:ab",))
FAIL = Result.deny("content-mismatch", "Deployment shop/web: spec.template.spec.containers[0].image differs")


def writes(fake: FakeApiServer) -> list[tuple[str, int]]:
    return [(r.method, r.status) for r in fake.requests if "policyreports" in r.path and r.method != "GET"]


@pytest.mark.parametrize("ref", [REF, CLUSTER_REF], ids=["namespaced", "cluster-scoped"])
def test_a_new_report_is_created_and_the_server_accepts_its_shape(
    fake: FakeApiServer, writer: KubeWriter, ref: ObjectRef
) -> None:
    assert writer.write(report(PASS, ref)) == "created"
    kind = "PolicyReport" if ref.namespace else "ClusterPolicyReport"
    (stored,) = fake.stored("wgpolicyk8s.io/v1alpha2", kind)
    assert stored["results"][0]["result"] == "pass" and stored["metadata"]["labels"] == MANAGED_BY
    post = next(r for r in fake.requests if r.method == "POST")
    assert post.query == {"fieldManager": ["manifest-provider"]}  # a real write, never a dry-run


def test_the_same_verdict_again_writes_nothing(fake: FakeApiServer, writer: KubeWriter) -> None:
    writer.write(report(PASS, now=1_700_000_000.0))
    assert writer.write(report(PASS, now=1_700_000_999.5)) == "unchanged"  # only the timestamp differs
    assert writes(fake) == [("POST", 201)]


def test_a_changed_verdict_is_updated_at_the_version_read(fake: FakeApiServer, writer: KubeWriter) -> None:
    writer.write(report(PASS))
    (before,) = fake.stored("wgpolicyk8s.io/v1alpha2", "PolicyReport")
    assert writer.write(report(FAIL)) == "updated"
    put = next(r for r in fake.requests if r.method == "PUT")
    assert put.body["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    (after,) = fake.stored("wgpolicyk8s.io/v1alpha2", "PolicyReport")
    assert (after["results"][0]["result"], after["summary"]["fail"]) == ("fail", 1)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]


class RacingApi(FakeApiServer):
    """Someone else rewrites the report between our GET and our PUT, once."""

    raced = False

    def answer(self, logged: Logged) -> tuple[int, Any, dict[str, str]]:
        if logged.method == "PUT" and not self.raced:
            self.raced = True
            (current,) = self.stored("wgpolicyk8s.io/v1alpha2", "PolicyReport")
            self.change(current)
        return super().answer(logged)


@pytest.mark.fake_api(make=RacingApi)
def test_a_conflict_reads_the_report_again_and_retries(fake: FakeApiServer, writer: KubeWriter) -> None:
    writer.write(report(PASS))
    assert writer.write(report(FAIL)) == "updated"
    assert writes(fake) == [("POST", 201), ("PUT", 409), ("PUT", 200)]


def test_a_report_this_project_does_not_own_is_left_alone(fake: FakeApiServer, writer: KubeWriter) -> None:
    theirs = copy.deepcopy(report(PASS))
    theirs["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "kyverno"}
    fake.add(theirs)
    with pytest.raises(RequestError, match="not managed by manifest-provider"):
        writer.write(report(FAIL))
    assert writes(fake) == []


def test_a_report_the_schema_refuses_is_refused(fake: FakeApiServer, writer: KubeWriter) -> None:
    """The fake validates writes against the CRD: a result outside the enum is what the API server refuses."""
    bad = report(PASS)
    bad["results"][0]["result"] = "passed"
    with pytest.raises(RequestError, match="422"):
        writer.write(bad)


def test_without_the_crd_the_error_says_what_to_install(tmp_path: Path) -> None:
    with (
        FakeApiServer() as bare,
        runner_for(bare, tmp_path) as runner,
        pytest.raises(TransientError, match="install its CustomResourceDefinition"),
    ):
        KubeWriter(runner, labels=MANAGED_BY, same=same_content).write(report(PASS))


def test_a_forbidden_write_names_the_permission(fake: FakeApiServer, writer: KubeWriter) -> None:
    fake.forbidden_resources = {"policyreports"}
    with pytest.raises(TransientError, match="grant verbs get, create and update on resource 'policyreports'"):
        writer.write(report(PASS))


# --- deleting the report of an object that is gone -----------------------------------------------------


def test_a_report_is_deleted_and_a_missing_one_is_absent(fake: FakeApiServer, writer: KubeWriter) -> None:
    writer.write(report(PASS))
    stub = report_stub(REF)
    assert writer.delete(stub) == "deleted"
    assert fake.stored("wgpolicyk8s.io/v1alpha2", "PolicyReport") == []
    assert writer.delete(stub) == "absent"  # the garbage collector was first: not an error
    (deleted,) = [r for r in fake.requests if r.method == "DELETE"]
    assert deleted.body["preconditions"]["uid"] and deleted.body["preconditions"]["resourceVersion"]
    assert writer.delete(report_stub(CLUSTER_REF)) == "absent"  # a ClusterPolicyReport, by the same rule


def test_a_report_this_project_does_not_own_is_not_deleted(fake: FakeApiServer, writer: KubeWriter) -> None:
    theirs = copy.deepcopy(report(PASS))
    theirs["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "kyverno"}
    fake.add(theirs)
    with pytest.raises(RequestError, match="not managed by manifest-provider"):
        writer.delete(report_stub(REF))
    assert len(fake.stored("wgpolicyk8s.io/v1alpha2", "PolicyReport")) == 1


class RewritingApi(FakeApiServer):
    """Rewrites the report between the writer's GET and its first DELETE (another writer), once."""

    rewritten = False

    def answer(self, logged: Logged) -> tuple[int, Any, dict[str, str]]:
        if logged.method == "DELETE" and not self.rewritten:
            self.rewritten = True
            (current,) = self.stored("wgpolicyk8s.io/v1alpha2", "PolicyReport")
            self.change(current)
        return super().answer(logged)


@pytest.mark.fake_api(make=RewritingApi)
def test_a_report_changed_meanwhile_is_read_again_before_it_is_deleted(fake: FakeApiServer, writer: KubeWriter) -> None:
    """The preconditions hold the version read: the API server refuses a stale delete (409), the writer retries."""
    writer.write(report(PASS))
    assert writer.delete(report_stub(REF)) == "deleted"
    assert [(r.method, r.status) for r in fake.requests if r.method == "DELETE"] == [("DELETE", 409), ("DELETE", 200)]
    first, second = [r.body["preconditions"]["resourceVersion"] for r in fake.requests if r.method == "DELETE"]
    assert int(second) > int(first)  # read again after the rewrite


def test_a_forbidden_delete_names_the_permission(fake: FakeApiServer, writer: KubeWriter) -> None:
    writer.write(report(PASS))
    fake.forbidden_resources = {"policyreports"}
    with pytest.raises(
        TransientError, match=r"get policyreports\.wgpolicyk8s\.io in namespace 'shop' forbidden: grant"
    ):
        writer.delete(report_stub(REF))
