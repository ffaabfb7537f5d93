"""provider.kube.dryrun: the real kubernetes client against the fake API server (recorded answers).

Every test here speaks HTTPS to ``tests.support.fakeapi.FakeApiServer``, which
replays what a real kube-apiserver v1.36 answered (``tests/data/dryrun/``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from provider.compare.dryrun import plan_dry_run
from provider.errors import PolicyError, TransientError, VerificationFailure
from provider.kube.client import MISS_REFETCH_SECONDS
from provider.kube.dryrun import KubeDryRunner
from provider.limits import Limits
from tests.support.clock import Clock
from tests.support.fakeapi import FakeApiServer, recording, runner_for


@pytest.fixture
def runner(fake: FakeApiServer, tmp_path: Path) -> Iterator[KubeDryRunner]:
    with runner_for(fake, tmp_path) as r:
        yield r


def manifest(stem: str, namespace: str | None = "default") -> dict[str, Any]:
    return plan_dry_run(recording(stem).request_body, namespace).manifest


def gets(fake: FakeApiServer, path: str) -> int:
    return sum(1 for r in fake.requests if r.method == "GET" and r.path == path)


# --- discovery --------------------------------------------------------------------

#: (apiVersion, kind) -> (resource, namespaced), as the recorded discovery documents say.
#: Several would come out wrong from naive pluralisation (kind.lower() + "s").
DISCOVERY = [
    ("v1", "ConfigMap", "configmaps", True),
    ("v1", "Endpoints", "endpoints", True),
    ("v1", "Namespace", "namespaces", False),
    ("networking.k8s.io/v1", "Ingress", "ingresses", True),
    ("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", True),
    ("networking.k8s.io/v1", "IngressClass", "ingressclasses", False),
    ("storage.k8s.io/v1", "StorageClass", "storageclasses", False),
    ("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", True),
    ("autoscaling/v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", True),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", False),
    ("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", False),
]


@pytest.mark.parametrize(("api_version", "kind", "name", "namespaced"), DISCOVERY, ids=[k for _, k, _, _ in DISCOVERY])
def test_discovery_maps_kind_to_resource_and_scope(
    runner: KubeDryRunner, api_version: str, kind: str, name: str, namespaced: bool
) -> None:
    resource = runner.resource_for(api_version, kind)
    assert (resource.name, resource.namespaced) == (name, namespaced)
    assert "create" in resource.verbs


def test_discovery_is_fetched_once_per_group_version(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    for _ in range(3):
        runner.dry_run(manifest("deployment-seed-paper-figure1"), "default")
    runner.resource_for("apps/v1", "StatefulSet")
    assert gets(fake, "/apis/apps/v1") == 1
    assert [r.path for r in fake.requests if r.method == "GET"] == [
        "/apis/apps/v1"
    ]  # not /version, /apis, every group's v1


def test_discovery_expires_after_its_ttl(fake: FakeApiServer, tmp_path: Path) -> None:
    clock = Clock()
    with runner_for(fake, tmp_path, clock=clock, discovery_ttl=60) as runner:
        runner.resource_for("v1", "ConfigMap")
        clock.now += 59
        runner.resource_for("v1", "ConfigMap")
        assert gets(fake, "/api/v1") == 1
        clock.now += 2
        runner.resource_for("v1", "ConfigMap")
        assert gets(fake, "/api/v1") == 2


def test_a_missing_kind_refetches_at_most_every_few_seconds(fake: FakeApiServer, tmp_path: Path) -> None:
    clock = Clock()
    with runner_for(fake, tmp_path, clock=clock) as runner:
        runner.resource_for("apps/v1", "Deployment")
        clock.now += MISS_REFETCH_SECONDS
        for _ in range(3):
            with pytest.raises(VerificationFailure, match="does not serve kind Widget in apps/v1"):
                runner.resource_for("apps/v1", "Widget")
        assert gets(fake, "/apis/apps/v1") == 2  # one refetch for the miss, then the cache answers
        clock.now += MISS_REFETCH_SECONDS
        with pytest.raises(VerificationFailure):
            runner.resource_for("apps/v1", "Widget")
        assert gets(fake, "/apis/apps/v1") == 3


def test_an_unknown_group_is_a_clear_deterministic_failure(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    with pytest.raises(VerificationFailure, match=r"does not serve kind Widget in example.com/v1 at all") as caught:
        runner.dry_run({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w-dry-run"}}, "default")
    assert caught.value.reason == "dry-run-failed"
    assert [(r.path, r.status) for r in fake.requests] == [("/apis/example.com/v1", 404)]


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [("", "ConfigMap"), ("v1", ""), (None, "ConfigMap"), ("v1", 7)],
    ids=["no-version", "no-kind", "null", "number"],
)
def test_an_unusable_api_version_or_kind_is_refused_before_asking(
    fake: FakeApiServer, runner: KubeDryRunner, api_version: Any, kind: Any
) -> None:
    with pytest.raises(VerificationFailure, match="no usable apiVersion/kind"):
        runner.dry_run({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}}, "default")
    assert fake.requests == []


def test_a_manifest_without_metadata_is_refused_before_the_create(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    with pytest.raises(VerificationFailure, match="no metadata mapping"):
        runner.dry_run({"apiVersion": "v1", "kind": "ConfigMap", "metadata": "cm"}, "default")
    assert fake.creates() == []


# --- the create -------------------------------------------------------------------


def test_a_dry_run_create_is_what_the_api_server_made_of_the_manifest(
    fake: FakeApiServer, runner: KubeDryRunner
) -> None:
    created = runner.dry_run(manifest("deployment-seed-paper-figure1"), "default")
    assert created["metadata"]["name"] == "test-app-dry-run"
    assert created["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    (post,) = fake.creates()
    assert post.path == "/apis/apps/v1/namespaces/default/deployments"
    assert post.query == {"dryRun": ["All"], "fieldManager": ["manifest-provider"]}
    assert post.headers["Authorization"] == f"Bearer {fake.token}"
    assert post.headers["User-Agent"].startswith("manifest-provider/")
    assert post.body["metadata"]["namespace"] == "default"


def test_namespaced_kinds_go_to_the_namespace_asked_for(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    fake.namespaces.add("dry-runs")
    created = runner.dry_run(manifest("configmap", "dry-runs"), "dry-runs")
    assert created["metadata"]["namespace"] == "dry-runs"
    assert fake.creates()[0].path == "/api/v1/namespaces/dry-runs/configmaps"


def test_without_a_namespace_the_kubeconfig_context_namespace_is_used(fake: FakeApiServer, tmp_path: Path) -> None:
    fake.namespaces.add("team-a")
    config = fake.kubeconfig(tmp_path / "kc", namespace="team-a")
    with KubeDryRunner.from_kubeconfig(str(config)) as runner:
        assert runner.default_namespace == "team-a"
        runner.dry_run(manifest("configmap", None), None)
    assert fake.creates()[0].path == "/api/v1/namespaces/team-a/configmaps"


@pytest.mark.parametrize(
    "stem", ["clusterrole", "namespace", "storageclass", "customresourcedefinition", "priorityclass"]
)
def test_cluster_scoped_kinds_are_created_cluster_wide(fake: FakeApiServer, runner: KubeDryRunner, stem: str) -> None:
    created = runner.dry_run(manifest(stem, "default"), "default")
    (post,) = fake.creates()
    assert "/namespaces/" not in post.path
    assert "namespace" not in post.body["metadata"] and "namespace" not in created["metadata"]


def test_a_name_clash_renames_and_retries_once(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    fake.fault = "conflict-once"
    created = runner.dry_run(manifest("configmap"), "default")
    first, second = fake.creates()
    assert (first.status, second.status) == (409, 201)
    assert first.body["metadata"]["name"] == "test-app-config-dry-run"
    assert second.body["metadata"]["name"].startswith("test-app-config-dry-run-")
    assert created["metadata"]["name"] == second.body["metadata"]["name"]


def test_the_kubeconfig_from_the_environment(
    fake: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig(tmp_path / "env-kubeconfig")))
    with KubeDryRunner.from_kubeconfig(None) as runner:
        assert "env-kubeconfig" in runner.source
        assert runner.dry_run(manifest("configmap"), "default")["kind"] == "ConfigMap"


def test_concurrent_dry_runs_share_one_runner(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    with ThreadPoolExecutor(8) as pool:
        names = list(
            pool.map(
                lambda _: runner.dry_run(manifest("deployment-seed-paper-figure1"), "default")["metadata"]["name"],
                range(32),
            )
        )
    assert names == ["test-app-dry-run"] * 32


# --- failures ---------------------------------------------------------------------


def timed(runner: KubeDryRunner, doc: dict[str, Any], namespace: str | None = "default") -> tuple[BaseException, float]:
    start = time.monotonic()
    with pytest.raises((TransientError, VerificationFailure)) as caught:
        runner.dry_run(doc, namespace)
    return caught.value, time.monotonic() - start


def test_api_server_down_fails_fast_as_transient(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    fake.stop()
    error, elapsed = timed(runner, manifest("configmap"))
    assert isinstance(error, TransientError) and error.reason == "dry-run-failed"
    assert "could not be reached" in error.message
    assert elapsed < 1.0


@pytest.mark.parametrize("scope", ["post", "all"], ids=["slow-create", "slow-discovery"])
def test_a_slow_api_server_fails_within_the_deadline(fake: FakeApiServer, runner: KubeDryRunner, scope: str) -> None:
    fake.fault, fake.fault_scope = "slow", scope
    error, elapsed = timed(runner, manifest("configmap"))
    assert isinstance(error, TransientError) and error.reason == "dry-run-failed"
    assert "within 1.5 s" in error.message
    assert 1.4 < elapsed < 2.0  # the default deadline, not the server's 5 s


def test_the_deadline_is_configurable(fake: FakeApiServer, tmp_path: Path) -> None:
    fake.fault = "slow"
    with runner_for(fake, tmp_path, timeout=0.3) as runner:
        runner.resource_for("v1", "ConfigMap")
        error, elapsed = timed(runner, manifest("configmap"))
    assert isinstance(error, TransientError) and elapsed < 0.8


def test_a_server_error_is_transient(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    fake.fault = "500"
    error, _ = timed(runner, manifest("configmap"))
    assert isinstance(error, TransientError)
    assert "500 InternalError" in error.message and "etcdserver" in error.message


@pytest.mark.parametrize(
    ("stem", "namespace", "wanted"),
    [
        (
            "configmap",
            "default",
            ['may not create configmaps (API group "")', 'in namespace "default"', "a Role in that namespace"],
        ),
        (
            "deployment-seed-paper-figure1",
            "default",
            ['may not create deployments (API group "apps")', 'grant verb "create" on resource "deployments"'],
        ),
        (
            "clusterrole",
            None,
            ['may not create clusterroles (API group "rbac.authorization.k8s.io") cluster-wide', "a ClusterRole"],
        ),
    ],
    ids=["configmaps", "deployments", "cluster-scoped"],
)
def test_forbidden_names_the_missing_permission(
    fake: FakeApiServer, runner: KubeDryRunner, stem: str, namespace: str | None, wanted: list[str]
) -> None:
    fake.fault = "403"
    error, _ = timed(runner, manifest(stem, namespace), namespace)
    assert isinstance(error, TransientError) and error.reason == "dry-run-failed"
    for text in wanted:
        assert text in error.message
    assert "manifests/base/dryrun-rbac.yaml" in error.message


def test_an_invalid_manifest_is_the_objects_fault(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    fake.fault = "422"
    error, _ = timed(runner, manifest("deployment-seed-paper-figure1"))
    assert type(error) is VerificationFailure and error.reason == "dry-run-failed"
    assert (
        'the API server rejects the signed manifest (dry-run create of Deployment default/test-app-dry-run): Deployment.apps "test-app-dry-run" is invalid'
        in error.message
    )


@pytest.mark.parametrize(
    ("stem", "text"),
    [
        (
            "edge/create-wrong-field-type-400",
            "cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas",
        ),
        ("edge/create-invalid-service-no-ports-422", "spec.ports: Required value"),
    ],
    ids=["400-field-type", "422-no-ports"],
)
def test_recorded_rejections_are_replayed_with_the_api_servers_message(
    runner: KubeDryRunner, stem: str, text: str
) -> None:
    error, _ = timed(runner, plan_dry_run(recording(stem).request_body, "default").manifest)
    assert type(error) is VerificationFailure
    assert text in error.message


def test_a_missing_dry_run_namespace_is_transient(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    error, _ = timed(runner, manifest("configmap", "does-not-exist"), "does-not-exist")
    assert isinstance(error, TransientError)
    assert "the dry-run namespace 'does-not-exist' does not exist" in error.message


def test_rejected_credentials_are_transient(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    fake.token = "rotated"
    error, _ = timed(runner, manifest("configmap"))
    assert isinstance(error, TransientError) and "401 Unauthorized" in error.message


def test_an_oversized_answer_is_refused(fake: FakeApiServer, tmp_path: Path) -> None:
    with runner_for(fake, tmp_path, limits=Limits(max_api_response_bytes=4096)) as runner:
        error, _ = timed(runner, manifest("configmap"))  # /api/v1 discovery is ~8 KiB
    assert isinstance(error, TransientError) and "more than 4096 bytes" in error.message


@pytest.mark.parametrize(
    "content",
    ["", "not: [yaml", "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n"],
    ids=["empty", "broken", "no-context"],
)
def test_an_unusable_kubeconfig_is_a_configuration_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(content)
    with pytest.raises(PolicyError, match="kubeconfig"):
        KubeDryRunner.from_kubeconfig(str(path))


def test_a_missing_kubeconfig_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="does-not-exist"):
        KubeDryRunner.from_kubeconfig(str(tmp_path / "does-not-exist"))


def test_in_cluster_outside_a_cluster_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(PolicyError, match="in-cluster"):
        KubeDryRunner.in_cluster()
