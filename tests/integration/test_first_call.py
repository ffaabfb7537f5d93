"""A new worker's first cluster calls are answered within the service's deadline, on a busy machine too.

The ``kubernetes`` client imports lazily: ``CoreV1Api``'s module alone pulls
in some 250 model classes, two seconds with both cores busy -- inside the
first ``cluster-info`` key's 1.5 s deadline when a worker paid for it then.
The service imports the client in gunicorn's master before forking and each
worker builds its clients before it accepts (``docs/performance.md``, "The
first cluster call"). These tests keep both cores busy with CPU hogs of their
own and check verdicts, never durations: every first call must be answered,
not ``deadline-exceeded`` or another transient failure. And a cluster that is
down when the service starts is asked again on the next request.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support import cluster_calls
from tests.support.server import running_server

pytestmark = pytest.mark.integration

ANSWERED = {"cluster-info": "verified", "dry-run": "verified", "signature ConfigMap": "verified",
            "TokenReview": "unsigned"}  # fmt: skip


def test_a_new_workers_first_cluster_calls_are_answered_while_both_cores_are_busy(tmp_path: Path) -> None:
    """A client-certificate identity, which TokenReviews could always use: only the start-up's work is at stake."""
    with cluster_calls.fake_cluster() as fake, cluster_calls.cpu_hogs(2):
        user = fake.client_certificate(tmp_path / "pki")
        kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig", user=user)
        env = cluster_calls.service_env(MANIFEST_PROVIDER_KUBECONFIG=str(kubeconfig))
        with running_server(env=env) as server:
            # Each is the first call of its kind in this worker, and the first cluster-info key comes first.
            answers = {
                "cluster-info": cluster_calls.cluster_info(server),
                "dry-run": cluster_calls.dry_run(server),
                "signature ConfigMap": cluster_calls.configmap_signature(server),
                "TokenReview": cluster_calls.token_review(server),
            }
    assert answers == ANSWERED


def test_each_worker_loads_its_cluster_identity_before_it_is_ready(tmp_path: Path) -> None:
    """Before any request, each worker -- not the master -- has loaded the kubeconfig (here: run its exec plugin)."""
    runs = tmp_path / "plugin-runs"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, os\n"
        f"with open({str(runs)!r}, 'a') as log:\n"
        "    log.write(f'{os.getppid()}\\n')\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',\n"
        "                  'status': {'token': 'exec-token'}}))\n"
    )
    with cluster_calls.fake_cluster() as fake:
        fake.tokens["exec-token"] = fake.authentication().tokens[fake.token]
        user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                         "args": [str(plugin)], "interactiveMode": "Never"}}  # fmt: skip
        env = cluster_calls.service_env(
            MANIFEST_PROVIDER_KUBECONFIG=str(fake.kubeconfig(tmp_path / "kubeconfig", user=user))
        )
        with running_server(env=env, args=["--workers", "2"]) as server:
            assert fake.requests == []  # nothing has asked the cluster yet
            ran_in = set(runs.read_text().split()) if runs.exists() else set()
            # Two workers, neither the master (the process started); built ahead of their first request.
            assert len(ran_in) == 2 and str(server.pid) not in ran_in
            assert cluster_calls.dry_run(server) == "verified"
        assert {r.headers.get("Authorization") for r in fake.requests} == {"Bearer exec-token"}


def test_a_cluster_that_is_down_at_start_is_asked_again_on_the_next_request(tmp_path: Path) -> None:
    first = cluster_calls.fake_cluster().start()
    port, token = first.port, first.token
    kubeconfig = first.kubeconfig(tmp_path / "kubeconfig")
    first.stop()  # down before the service starts
    env = cluster_calls.service_env(MANIFEST_PROVIDER_KUBECONFIG=str(kubeconfig))
    with running_server(env=env) as server:
        down = {"cluster-info": cluster_calls.cluster_info(server), "dry-run": cluster_calls.dry_run(server),
                "TokenReview": cluster_calls.token_review(server)}  # fmt: skip
        assert down == {"cluster-info": "transient-error", "dry-run": "dry-run-failed",
                        "TokenReview": "503 token-review-failed"}  # fmt: skip
        again = cluster_calls.fake_cluster()
        again.token, again.listen_port = token, port
        with again:  # back up, on the same address
            up = {"cluster-info": cluster_calls.cluster_info(server), "dry-run": cluster_calls.dry_run(server),
                  "TokenReview": cluster_calls.token_review(server)}  # fmt: skip
    assert up == {"cluster-info": "verified", "dry-run": "verified", "TokenReview": "unsigned"}
