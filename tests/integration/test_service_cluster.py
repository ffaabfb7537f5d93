"""The service's cache and deadline with a cluster behind it (``tests.support.fakeapi.FakeApiServer``).

Verdicts that used the cluster are never cached, and the service's own
deadline -- not the dry-run client's timeout -- bounds a request.
(``test_service_dryrun.py`` covers the dry-run answers themselves.)
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.data import UPSTREAM, load_yaml
from tests.support.fakeapi import FakeApiServer
from tests.support.server import Server, running_server

#: One fake API server for the module's real server (tests/conftest.py).
pytestmark = [pytest.mark.integration, pytest.mark.fake_api(per="module")]

KYVERNO_ROUTE = "/v1/kyverno/verify"
GATEKEEPER = "/v1/gatekeeper/verify"
LIVE_OBJECT = UPSTREAM / "manifests" / "deploy-live-object-needs-dryrun.yaml"
UPSTREAM_KEY = UPSTREAM / "keys" / "testpub.pem"


def policy(dry_run: bool = True) -> dict[str, Any]:
    return {"keys": [UPSTREAM_KEY.read_text()], "dryRun": {"enabled": dry_run}}


def live_review() -> dict[str, Any]:
    (obj,) = load_yaml(LIVE_OBJECT)
    return {"uid": "u", "operation": "CREATE", "namespace": obj["metadata"].get("namespace", "default"),
            "userInfo": {"username": "jane@example.com", "groups": ["system:authenticated"]}, "object": obj}  # fmt: skip


def gatekeeper_body(review: dict[str, Any], pol: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest",
            "request": {"keys": [json.dumps({"review": review, "policy": pol})]}}  # fmt: skip


@pytest.fixture(scope="module")
def cluster_server(fake: FakeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    kubeconfig = fake.kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
    with running_server(env={"MANIFEST_PROVIDER_KUBECONFIG": str(kubeconfig)}) as server:
        yield server


@pytest.fixture(autouse=True)
def healthy(fake: FakeApiServer) -> Iterator[None]:
    fake.fault = None
    yield
    fake.fault = None


def test_a_live_object_verifies_after_a_dry_run_and_is_never_cached(
    cluster_server: Server, fake: FakeApiServer
) -> None:
    before = len(fake.creates())
    without = cluster_server.post_json(KYVERNO_ROUTE, {"request": live_review(), "policy": policy(dry_run=False)})
    assert (without["allowed"], without["reason"]) == (False, "content-mismatch")
    for _ in range(2):
        answer = cluster_server.post_json(KYVERNO_ROUTE, {"request": live_review(), "policy": policy()})
        assert (answer["allowed"], answer["verified"], answer["reason"]) == (True, True, "verified")
        assert "after a server-side dry-run" in answer["message"]
    # Each verdict that used the cluster asked it again: dry-run verdicts are not cached.
    assert len(fake.creates()) - before == 2


def test_a_slow_api_server_is_a_dry_run_failure_inside_the_deadline(fake: FakeApiServer, tmp_path: Path) -> None:
    """The dry-run timeout follows a short deadline (60% of it: 0.6 s of 1 s), so the answer names the cause."""
    fake.fault, fake.slow_seconds = "slow", 5.0
    env = {
        "MANIFEST_PROVIDER_KUBECONFIG": str(fake.kubeconfig(tmp_path / "kubeconfig")),
        "MANIFEST_PROVIDER_DEADLINE_SECONDS": "1.0",
    }
    with running_server(env=env) as server:
        start = time.monotonic()
        answer = server.post_json(GATEKEEPER, gatekeeper_body(live_review(), policy()))
        elapsed = time.monotonic() - start
        assert answer["response"]["items"] == []
        assert answer["response"]["systemError"].startswith("dry-run-failed: ")
        assert elapsed < 1.4  # our deadline, not the dry-run client's default 1.5 s nor the server's 5 s
        kyverno = server.post_json(KYVERNO_ROUTE, {"request": live_review(), "policy": policy()})
        assert (kyverno["allowed"], kyverno["reason"]) == (False, "dry-run-failed")


def test_a_dry_run_timeout_at_or_over_the_deadline_is_refused() -> None:
    from provider.errors import ConfigError
    from provider.service.config import load_config

    with pytest.raises(ConfigError, match="must be under"):
        load_config({"DEADLINE_SECONDS": 1.0, "DRY_RUN_TIMEOUT_SECONDS": 1.0})
    assert load_config({"DEADLINE_SECONDS": 1.0}).effective_limits.dry_run_timeout == pytest.approx(0.6)
    assert load_config({}).effective_limits.dry_run_timeout == pytest.approx(0.9)  # 60% of the default 1.5 s deadline
