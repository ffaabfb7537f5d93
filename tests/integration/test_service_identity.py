"""The real service and CLI reach the cluster as the identity they were given, for every kind of call.

The fake API server refuses what kube-apiserver refuses (:mod:`tests.support.apiauth`):
a TokenReview sent without the service's credential is ``system:anonymous``
and gets 403 -- what a real cluster answered the Kyverno route (issue 33).
The service (``manifest-provider serve``, gunicorn, TLS) is started with a
kubeconfig token, as a pod (``KUBERNETES_SERVICE_HOST``/``_PORT`` and
service-account files), and with a client certificate; each time a
``cluster-info`` key (a Secret read), a dry-run, a signature ConfigMap and a
Kyverno call authenticated by a token (a TokenReview) must be answered, and
every request the fake saw must come from that identity. The CLI is driven
the same way (``verify --dry-run``, ``observe --once`` in a pod).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.support import cluster_calls
from tests.support.apiauth import Caller
from tests.support.data import REPO, load_yaml
from tests.support.fakeapi import TokenApi
from tests.support.live import PUBLIC_KEY, deployment, signed
from tests.support.server import Server, running_server

pytestmark = pytest.mark.integration

#: identity -> (the service's environment for it, the user the API server takes it for)
Setup = Callable[[TokenApi, Path], tuple[dict[str, str], str]]


def kubeconfig_token(fake: TokenApi, tmp: Path) -> tuple[dict[str, str], str]:
    return {"MANIFEST_PROVIDER_KUBECONFIG": str(fake.kubeconfig(tmp / "kubeconfig"))}, fake.username


def in_cluster(fake: TokenApi, tmp: Path) -> tuple[dict[str, str], str]:
    return fake.service_account(tmp / "serviceaccount"), fake.username


def client_certificate(fake: TokenApi, tmp: Path) -> tuple[dict[str, str], str]:
    user = fake.client_certificate(tmp / "pki", "manifest-provider", ("manifest-provider",))
    return {"MANIFEST_PROVIDER_KUBECONFIG": str(fake.kubeconfig(tmp / "kubeconfig", user=user))}, "manifest-provider"


IDENTITIES: dict[str, Setup] = {
    "kubeconfig-token": kubeconfig_token,
    "in-cluster-token-file": in_cluster,
    "client-certificate": client_certificate,
}


def every_call(server: Server) -> dict[str, str]:
    return {
        "cluster-info": cluster_calls.cluster_info(server),
        "dry-run": cluster_calls.dry_run(server),
        "signature ConfigMap": cluster_calls.configmap_signature(server),
        "TokenReview": cluster_calls.token_review(server),
    }


EXPECTED = {"cluster-info": "verified", "dry-run": "verified", "signature ConfigMap": "verified",
            "TokenReview": "unsigned"}  # fmt: skip


@pytest.mark.parametrize("setup", IDENTITIES.values(), ids=IDENTITIES.keys())
def test_the_service_calls_its_cluster_as_the_identity_it_was_given(tmp_path: Path, setup: Setup) -> None:
    with cluster_calls.fake_cluster() as fake:
        env, user = setup(fake, tmp_path)
        with running_server(env=cluster_calls.service_env(**env)) as server:
            assert every_call(server) == EXPECTED
        paths = {r.path for r in fake.requests}
        assert "/apis/authentication.k8s.io/v1/tokenreviews" in paths
        assert {r.user for r in fake.requests} == {user}
        assert [r for r in fake.requests if r.status in (401, 403)] == []


def test_without_the_services_credential_the_token_review_is_refused_as_a_real_cluster_does(tmp_path: Path) -> None:
    """What the shipped Kyverno route met in a real cluster: the TokenReview as system:anonymous, 403, every call 503."""
    with cluster_calls.fake_cluster() as fake:
        kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig", user={})
        with running_server(env=cluster_calls.service_env(MANIFEST_PROVIDER_KUBECONFIG=str(kubeconfig))) as server:
            assert cluster_calls.token_review(server) == "503 token-review-failed"
            assert "TokenReview failed: HTTP 403" in server.log_text()
        reviews = [r for r in fake.requests if r.path == "/apis/authentication.k8s.io/v1/tokenreviews"]
        assert [(r.user, r.status) for r in reviews] == [("system:anonymous", 403)]


@pytest.mark.slow
def test_a_service_account_token_rotated_while_the_service_runs_is_used(tmp_path: Path) -> None:
    """The kubelet rewrites the projected token in place; the old one stays valid for a while, then expires.

    The kubernetes client rereads the file a minute after it last read it
    (incluster_config.py ``_token_refresh_period``): this waits that minute
    out, on the real clock, in the real server.
    """
    with cluster_calls.fake_cluster() as fake:
        env = fake.service_account(tmp_path / "serviceaccount")
        with running_server(env=cluster_calls.service_env(**env)) as server:
            assert every_call(server) == EXPECTED
            fake.tokens["rotated-token"] = Caller(fake.username)
            (tmp_path / "serviceaccount" / "token").write_text("rotated-token")
            time.sleep(62)  # both tokens valid meanwhile, as the kubelet's rotation guarantees
            fake.token = "expired"  # the old token is no longer accepted
            before = len(fake.requests)
            assert every_call(server) == EXPECTED
        after = fake.requests[before:]
        assert after and {r.headers.get("Authorization") for r in after} == {"bearer rotated-token"}


# --- the CLI ------------------------------------------------------------------------------


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provider.cli", *args], capture_output=True, text=True, timeout=120,
                          check=False, env=env)  # fmt: skip


@pytest.mark.parametrize(
    "setup", [kubeconfig_token, client_certificate], ids=["kubeconfig-token", "client-certificate"]
)
def test_the_cli_dry_runs_as_the_kubeconfigs_identity(tmp_path: Path, setup: Setup) -> None:
    with cluster_calls.fake_cluster() as fake:
        env, user = setup(fake, tmp_path)
        (obj,) = load_yaml(cluster_calls.LIVE_OBJECT)
        (tmp_path / "live.yaml").write_text(yaml.safe_dump(obj))
        done = cli("verify", "-f", str(tmp_path / "live.yaml"), "-k", str(cluster_calls.UPSTREAM_KEY), "--dry-run",
                   "--kubeconfig", env["MANIFEST_PROVIDER_KUBECONFIG"], "-o", "json")  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert [r["reason"] for r in json.loads(done.stdout)["results"]] == ["verified"]
        assert fake.creates() and {r.user for r in fake.requests} == {user}


def test_observe_in_a_pod_lists_and_reports_as_its_service_account(tmp_path: Path) -> None:
    with cluster_calls.fake_cluster() as fake:
        for path in sorted((REPO / "tests" / "assets" / "policyreport").glob("*.yaml")):
            fake.install_crd(load_yaml(path)[0])
        fake.add(signed(deployment("web")))
        pod = fake.service_account(tmp_path / "serviceaccount")
        (tmp_path / "key.pub").write_text(PUBLIC_KEY)
        (tmp_path / "targets.yaml").write_text(yaml.safe_dump({"targets": [{"resource": "deployments.apps"}]}))
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("KUBE")},
               "KUBERNETES_SERVICE_HOST": pod["KUBERNETES_SERVICE_HOST"],
               "KUBERNETES_SERVICE_PORT": pod["KUBERNETES_SERVICE_PORT"]}  # fmt: skip
        done = cli("observe", "--once", "--metrics-port", "0", "--targets", str(tmp_path / "targets.yaml"),
                   "-k", str(tmp_path / "key.pub"), "--service-account-dir", pod["MANIFEST_PROVIDER_SERVICE_ACCOUNT_DIR"],
                   env=env)  # fmt: skip
        assert done.returncode == 0, done.stderr
        (passed,) = [json.loads(line) for line in done.stderr.splitlines() if '"event": "pass"' in line]
        assert passed["objects"] == 1 and passed["reports"] == {"created": 1}
        assert {r.user for r in fake.requests} == {fake.username}
        assert {r.headers.get("Authorization") for r in fake.requests} == {f"bearer {fake.token}"}
