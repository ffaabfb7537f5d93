"""Verifying live objects: reviewed as stored (``live=True``), alone or on a bounded pool of processes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from provider.audit.live import Checked, LiveChecker, ObjectRef, check, policy_digest
from provider.errors import TransientError
from provider.policy.schema import Policy
from tests.support.live import POLICY, deployment, reimaged, scaled, signed, signed_configmap, stored
from tests.support.manifests import configmap

SIGNED = signed(deployment())


def test_a_deployment_the_autoscaler_scaled_is_verified_with_spec_replicas_named() -> None:
    checked = check(stored(scaled(SIGNED)), Policy.from_dict(POLICY))
    assert (checked.result.verified, checked.error) == (True, False)
    assert "spec.replicas" in checked.result.message


def test_a_changed_image_is_a_failure_even_when_scaled_too() -> None:
    checked = check(stored(reimaged(scaled(SIGNED))), Policy.from_dict(POLICY))
    assert (checked.result.allowed, checked.result.reason, checked.error) == (False, "content-mismatch", False)


def test_the_reference_says_which_version_was_checked() -> None:
    checked = check(stored(SIGNED, resource_version="77", uid="u-1"), Policy.from_dict(POLICY))
    assert checked.ref == ObjectRef("apps/v1", "Deployment", "shop", "web", "u-1", "77")
    assert checked.ref.describe() == "Deployment.apps shop/web"


class DownCluster:
    """A dry-run client whose cluster cannot be asked."""

    def dry_run(self, manifest: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        raise TransientError("the API server could not be reached", reason="dry-run-failed")


def test_a_cluster_that_cannot_be_asked_is_no_verdict_on_the_object() -> None:
    policy = Policy.from_dict({**POLICY, "dryRun": {"enabled": True}})
    checked = check(stored(reimaged(SIGNED)), policy, DownCluster())
    assert (checked.error, checked.result.allowed, checked.result.reason) == (True, False, "dry-run-failed")


def test_the_policy_digest_covers_the_trust_material() -> None:
    assert policy_digest(POLICY) == policy_digest(dict(POLICY))
    assert policy_digest(POLICY) != policy_digest({"keys": [*POLICY["keys"], "-----BEGIN PUBLIC KEY-----"]})
    assert policy_digest(POLICY) != policy_digest({**POLICY, "threshold": 1})
    assert policy_digest(POLICY) != policy_digest({**POLICY, "trustedRoot": {"mediaType": "x"}})


def objects(count: int) -> list[dict[str, Any]]:
    """Verified, unsigned and failing objects, mixed."""
    out = []
    for i in range(count):
        if i % 3 == 0:
            out.append(stored(signed_configmap(f"cm-{i}"), uid=f"u-{i}"))
        elif i % 3 == 1:
            out.append(stored(configmap(f"cm-{i}", "shop"), uid=f"u-{i}"))
        else:
            out.append(stored(reimaged(signed(deployment(f"d-{i}"))), uid=f"u-{i}"))
    return out


def verdicts(checked: Iterator[Checked]) -> dict[str, str]:
    return {c.ref.uid: c.result.reason for c in checked}


@pytest.mark.slow
def test_worker_processes_reach_the_verdicts_this_process_reaches() -> None:
    data = objects(40)
    with LiveChecker(POLICY) as alone, LiveChecker(POLICY, concurrency=2, batch_size=4) as pool:
        one, two = verdicts(alone.check_all(data)), verdicts(pool.check_all(data))
    assert one == two and len(one) == 40
    assert set(one.values()) == {"verified", "unsigned", "content-mismatch"}


@pytest.mark.slow
def test_the_pool_holds_a_bounded_number_of_objects() -> None:
    """Memory flat in the number of objects: never more than in_flight batches (and one filling) are out."""
    data = objects(60)
    pulled = 0
    most = 0

    def source() -> Iterator[dict[str, Any]]:
        nonlocal pulled
        for obj in data:
            pulled += 1
            yield obj

    with LiveChecker(POLICY, concurrency=2, batch_size=3) as pool:
        done = 0
        for _ in pool.check_all(source()):
            done += 1
            most = max(most, pulled - done)
        assert done == 60
        assert most <= (pool.in_flight + 1) * pool.batch_size


def test_an_invalid_policy_fails_before_any_object_is_read() -> None:
    from provider.errors import PolicyError

    with pytest.raises(PolicyError):
        LiveChecker({"keys": []})
