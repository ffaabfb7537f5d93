"""Dry-run end to end: real signatures, the real kubernetes client, recorded API-server answers.

The API server here is ``tests.support.fakeapi.FakeApiServer``: it replays what a real
kube-apiserver v1.36 answered (``tests/data/dryrun/``), so "what the cluster makes
of the signed manifest" is real data, not a guess.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider import Bounds, Policy, Review, decide
from provider.errors import TransientError
from provider.kube.dryrun import KubeDryRunner
from provider.result import Result
from tests.support.data import UPSTREAM, load_yaml
from tests.support.fakeapi import FakeApiServer, recording, recordings, runner_for
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import sign

pytestmark = pytest.mark.integration

KEY = make_key()
LIVE_OBJECT = UPSTREAM / "manifests" / "deploy-live-object-needs-dryrun.yaml"
UPSTREAM_KEY = UPSTREAM / "keys" / "testpub.pem"


@pytest.fixture
def runner(fake: FakeApiServer, tmp_path: Path) -> Iterator[KubeDryRunner]:
    with runner_for(fake, tmp_path) as r:
        yield r


def policy(dry_run: bool = True, namespace: str = "", key: str | None = None, **fields: Any) -> Policy:
    # A dedicated dry-run namespace is the operator's to allow (MANIFEST_PROVIDER_DRY_RUN_NAMESPACES).
    return Policy.from_dict(
        {"keys": [key or public_key_pem(KEY)], "dryRun": {"enabled": dry_run, "namespace": namespace}, **fields},
        bounds=Bounds(dry_run_namespaces=(namespace,) if namespace else ()),
    )


def admitted_as_recorded(stem: str, change: Any = None) -> dict[str, Any]:
    """The recorded request body signed with KEY; the admitted object is what the API server made of it."""
    rec = recording(stem)
    (signed,) = sign(rec.request_body, KEY)
    admitted = copy.deepcopy(rec.body)
    annotations = admitted["metadata"].setdefault("annotations", {})
    annotations.update(signed["metadata"]["annotations"])
    if change is not None:
        change(admitted)
    return admitted


def review(obj: dict[str, Any], operation: str = "CREATE") -> Review:
    return Review.from_admission({
        "uid": "u", "operation": operation, "object": obj, "namespace": obj["metadata"].get("namespace", ""),
        "userInfo": {"username": "jane@example.com", "groups": ["system:authenticated"]},
    })  # fmt: skip


# --- the upstream fixture ---------------------------------------------------------


def test_the_live_object_fails_without_dry_run_and_verifies_with_it(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    (obj,) = load_yaml(LIVE_OBJECT)
    key = UPSTREAM_KEY.read_text()
    without = decide(Review.for_object(obj), policy(dry_run=False, key=key), dry_runner=runner)
    # 13 defaulted fields, and the pod securityContext {}: an empty struct is a value
    assert (without.allowed, without.reason, without.diff_count) == (False, "content-mismatch", 14)
    assert fake.requests == []  # no dry-run unless the policy asks
    with_dry_run = decide(Review.for_object(obj), policy(key=key), dry_runner=runner)
    assert (with_dry_run.allowed, with_dry_run.verified, with_dry_run.reason) == (True, True, "verified")
    assert with_dry_run.used_cluster and "after a server-side dry-run" in with_dry_run.message
    (post,) = fake.creates()
    assert post.status == 201 and post.body["metadata"]["name"] == "sample-deployment-dry-run"


def test_the_live_object_with_a_changed_default_is_denied(runner: KubeDryRunner) -> None:
    (obj,) = load_yaml(LIVE_OBJECT)
    obj["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Always"
    result = decide(Review.for_object(obj), policy(key=UPSTREAM_KEY.read_text()), dry_runner=runner)
    assert (result.allowed, result.reason) == (False, "content-mismatch")
    assert [d.to_dict() for d in result.diff] == [
        {
            "key": "spec.template.spec.containers.0.imagePullPolicy",
            "values": {"before": "IfNotPresent", "after": "Always"},
        }
    ]
    assert "compared with the API server's dry-run of the signed manifest" in result.message
    assert result.used_cluster  # a deny that rests on the cluster's defaults is not cached either


# --- the seed paper's Figure 1 ----------------------------------------------------

FIGURE1 = "deployment-seed-paper-figure1"


def _container(field: str, value: Any) -> Any:
    return lambda obj: obj["spec"]["template"]["spec"]["containers"][0].__setitem__(field, value)


def _pod(field: str, value: Any) -> Any:
    return lambda obj: obj["spec"]["template"]["spec"].__setitem__(field, value)


def test_figure1_admitted_as_the_cluster_made_it_verifies(runner: KubeDryRunner) -> None:
    result = decide(review(admitted_as_recorded(FIGURE1)), policy(), dry_runner=runner)
    assert (result.allowed, result.verified, result.reason) == (True, True, "verified"), result.message
    assert result.signers == (public_key_pem_fingerprint(),)


def public_key_pem_fingerprint() -> str:
    return Policy.from_dict({"keys": [public_key_pem(KEY)]}).keys[0].fingerprint


def _diff(key: str, before: Any, after: Any) -> dict[str, Any]:
    return {"key": key, "values": {"before": before, "after": after}}


#: (what, change to the admitted object, the one difference expected).
TAMPERED = [
    (
        "imagePullPolicy-Always",
        _container("imagePullPolicy", "Always"),
        _diff("spec.template.spec.containers.0.imagePullPolicy", "IfNotPresent", "Always"),
    ),
    ("hostNetwork", _pod("hostNetwork", True), _diff("spec.template.spec.hostNetwork", None, True)),
    (
        "privileged",
        _container("securityContext", {"privileged": True}),
        _diff("spec.template.spec.containers.0.securityContext.privileged", None, True),
    ),
    (
        "runAsUser-0",
        _pod("securityContext", {"runAsUser": 0}),
        _diff("spec.template.spec.securityContext.runAsUser", None, 0),
    ),
    (
        "image",
        _container("image", "evil:latest"),
        _diff("spec.template.spec.containers.0.image", "test-image:0.0.1", "evil:latest"),
    ),
]


@pytest.mark.parametrize(("change", "expected"), [t[1:] for t in TAMPERED], ids=[t[0] for t in TAMPERED])
def test_figure1_with_a_changed_or_added_field_is_denied(
    runner: KubeDryRunner, change: Any, expected: dict[str, Any]
) -> None:
    result = decide(review(admitted_as_recorded(FIGURE1, change)), policy(), dry_runner=runner)
    assert (result.allowed, result.reason) == (False, "content-mismatch")
    assert [d.to_dict() for d in result.diff] == [expected]


def test_figure1_on_update_with_the_live_metadata_verifies(runner: KubeDryRunner) -> None:
    def live(obj: dict[str, Any]) -> None:
        obj["metadata"].update(resourceVersion="98121", generation=4)
        obj["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "3"
        obj["status"] = {"replicas": 1, "observedGeneration": 4}

    result = decide(review(admitted_as_recorded(FIGURE1, live), "UPDATE"), policy(), dry_runner=runner)
    assert result.verified, result.message


# --- every recorded kind ----------------------------------------------------------

CREATES = sorted(r.stem.removeprefix("create/") for r in recordings() if r.stem.startswith("create/"))


@pytest.mark.parametrize("profiles", [None, []], ids=["default-profiles", "no-profiles"])
@pytest.mark.parametrize("stem", CREATES)
def test_every_recorded_kind_verifies_as_the_cluster_made_it(
    fake: FakeApiServer, runner: KubeDryRunner, stem: str, profiles: list[str] | None
) -> None:
    """Fresh uids, names, allocated IPs and ports, token volume names: what differs by construction is not a difference.

    Also with no built-in profile at all: the masking of the comparison, not
    an ignore list, is what makes two creates of one manifest equal.
    """
    extra = {} if profiles is None else {"defaults": profiles}
    result = decide(review(admitted_as_recorded(stem)), policy(**extra), dry_runner=runner)
    assert (result.allowed, result.reason) == (True, "verified"), result.message
    for post in fake.creates():
        assert post.status == 201 and post.query["dryRun"] == ["All"]


@pytest.mark.parametrize("stem", CREATES)
def test_every_recorded_kind_with_an_added_label_is_denied(runner: KubeDryRunner, stem: str) -> None:
    def tamper(obj: dict[str, Any]) -> None:
        obj["metadata"].setdefault("labels", {})["tampered"] = "yes"

    result = decide(review(admitted_as_recorded(stem, tamper)), policy(), dry_runner=runner)
    assert (result.allowed, result.reason) == (False, "content-mismatch")
    assert [d.key for d in result.diff] == ["metadata.labels.tampered"]


def test_a_generate_name_manifest_is_dry_run_with_its_generate_name(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    rec = recording("edge/create-generatename-deployment")
    (signed,) = sign(rec.request_body, KEY)
    admitted = copy.deepcopy(rec.body)
    admitted["metadata"]["annotations"] = signed["metadata"]["annotations"]
    admitted["metadata"].pop("name")  # as a mutating webhook sees it: the name is not generated yet
    result = decide(review(admitted), policy(), dry_runner=runner)
    assert result.verified, result.message
    (post,) = fake.creates()
    assert post.body["metadata"]["generateName"] == rec.request_body["metadata"]["generateName"]
    assert "name" not in post.body["metadata"]


def test_the_configured_dry_run_namespace_is_used(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    fake.namespaces.add("manifest-provider")
    result = decide(review(admitted_as_recorded(FIGURE1)), policy(namespace="manifest-provider"), dry_runner=runner)
    assert result.verified
    assert fake.creates()[0].path == "/apis/apps/v1/namespaces/manifest-provider/deployments"


# --- our own dry-runs re-enter the admission chain --------------------------------


@pytest.mark.parametrize("stem", [FIGURE1, "pod", "namespace", "customresourcedefinition"])
def test_the_dry_run_request_is_allowed_by_the_policy_it_serves(
    fake: FakeApiServer, runner: KubeDryRunner, stem: str
) -> None:
    assert decide(review(admitted_as_recorded(stem)), policy(), dry_runner=runner).verified
    (post,) = fake.creates()
    request = fake.admission_request(post)
    assert request["dryRun"] is True and request["options"]["dryRun"] == ["All"]
    verdict = decide(Review.from_admission(request), policy(), dry_runner=runner)
    assert (verdict.allowed, verdict.reason) == (True, "dry-run-request")
    # The same create for real carries no signature: it would be denied.
    real = decide(Review.from_admission({**request, "dryRun": False}), policy(dry_run=False))
    assert (real.allowed, real.reason) == (False, "unsigned")
    assert len(fake.creates()) == 1  # answering our own dry-run needs no further dry-run


# --- failures ---------------------------------------------------------------------


def timed_decide(runner: KubeDryRunner, obj: dict[str, Any]) -> tuple[Result | TransientError, float]:
    start = time.monotonic()
    try:
        outcome: Result | TransientError = decide(review(obj), policy(), dry_runner=runner)
    except TransientError as exc:
        outcome = exc
    return outcome, time.monotonic() - start


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("down", "could not be reached"),
        ("slow", "did not answer within 1.5 s"),
        ("500", "500 InternalError"),
        ("403", 'may not create deployments (API group "apps") in namespace "default"'),
    ],
)
def test_a_cluster_that_cannot_answer_is_transient_within_the_deadline(
    fake: FakeApiServer, runner: KubeDryRunner, fault: str, message: str
) -> None:
    if fault == "down":
        fake.stop()
    else:
        fake.fault = fault
    outcome, elapsed = timed_decide(runner, admitted_as_recorded(FIGURE1))
    assert isinstance(outcome, TransientError), outcome
    assert outcome.reason == "dry-run-failed" and message in outcome.message
    assert elapsed < 1.5 + 0.5


def test_a_manifest_the_api_server_rejects_is_denied_within_the_deadline(
    fake: FakeApiServer, runner: KubeDryRunner
) -> None:
    fake.fault = "422"
    outcome, elapsed = timed_decide(runner, admitted_as_recorded(FIGURE1))
    assert isinstance(outcome, Result)
    assert (outcome.allowed, outcome.verified, outcome.reason) == (False, False, "dry-run-failed")
    assert 'Deployment.apps "test-app-dry-run" is invalid' in outcome.message
    assert outcome.signers  # the signature itself was good
    assert elapsed < 1.5


def test_without_a_runner_the_policy_says_why(fake: FakeApiServer) -> None:
    result = decide(review(admitted_as_recorded(FIGURE1)), policy())
    # Could not check, not tampered: the same reason through every entry point (test_one_verdict.py).
    assert result.reason == "dry-run-failed" and "no cluster is configured" in result.message


# --- the CLI ----------------------------------------------------------------------


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    return subprocess.run(
        [sys.executable, "-m", "provider.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_cli_verify_with_dry_run_and_kubeconfig(fake: FakeApiServer, tmp_path: Path) -> None:
    kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
    (obj,) = load_yaml(LIVE_OBJECT)
    tampered = copy.deepcopy(obj)
    tampered["spec"]["template"]["spec"]["hostNetwork"] = True
    objects = tmp_path / "objects.yaml"
    objects.write_text(yaml.safe_dump_all([obj, tampered]))
    base = ("verify", "-f", objects, "-k", UPSTREAM_KEY, "-o", "json")

    plain = cli(*base)
    assert plain.returncode == 1, plain.stderr
    assert [r["reason"] for r in json.loads(plain.stdout)["results"]] == ["content-mismatch"] * 2

    dry = cli(*base, "--dry-run", "--kubeconfig", kubeconfig)
    assert dry.returncode == 1, dry.stderr
    results = json.loads(dry.stdout)["results"]
    assert [(r["allowed"], r["reason"]) for r in results] == [(True, "verified"), (False, "content-mismatch")]
    assert results[1]["diff"] == [{"key": "spec.template.spec.hostNetwork", "values": {"before": None, "after": True}}]
    assert all(p.query["dryRun"] == ["All"] for p in fake.creates()) and len(fake.creates()) == 2

    only_good = tmp_path / "good.yaml"
    only_good.write_text(yaml.safe_dump(obj))
    assert cli("verify", "-f", only_good, "-k", UPSTREAM_KEY, "--dry-run", "--kubeconfig", kubeconfig).returncode == 0

    missing_ns = cli(
        "verify",
        "-f",
        only_good,
        "-k",
        UPSTREAM_KEY,
        "--dry-run-namespace",
        "nowhere",
        "--kubeconfig",
        kubeconfig,
        "-o",
        "json",
    )
    assert missing_ns.returncode == 1
    (result,) = json.loads(missing_ns.stdout)["results"]
    assert result["reason"] == "dry-run-failed" and "'nowhere' does not exist" in result["message"]

    fake.stop()
    down = cli("verify", "-f", only_good, "-k", UPSTREAM_KEY, "--dry-run", "--kubeconfig", kubeconfig, "-o", "json")
    assert down.returncode == 1
    assert json.loads(down.stdout)["results"][0]["reason"] == "dry-run-failed"


def test_cli_with_an_unusable_kubeconfig_is_a_usage_error(tmp_path: Path) -> None:
    (obj,) = load_yaml(LIVE_OBJECT)
    objects = tmp_path / "o.yaml"
    objects.write_text(yaml.safe_dump(obj))
    proc = cli("verify", "-f", objects, "-k", UPSTREAM_KEY, "--dry-run", "--kubeconfig", tmp_path / "nope")
    assert proc.returncode == 2
    assert "kubeconfig" in proc.stderr and "Traceback" not in proc.stderr
