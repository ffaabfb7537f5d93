"""Every request to a cluster carries the identity the kubernetes client loaded, whatever kind it is.

The fake API server refuses as a real one does (:mod:`tests.support.apiauth`):
no credentials is ``system:anonymous`` (403), an unknown token 401. Each
identity the client supports -- a kubeconfig token or token file, a client
certificate (files or inline data), an exec plugin's token or certificate,
and a pod's service account -- is loaded the way the service and the CLI
load it (:mod:`provider.kube.credentials`), then used for every kind of
request the project makes: a dry-run with its discovery, a list page and a
GET, a PolicyReport write, a signature ConfigMap read, a bootstrap-token
Secret read, the CLI's Secret read, and a TokenReview. The fake logs who each
request came from.
"""

from __future__ import annotations

import base64
import datetime
import json
import sys
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from provider.audit.live import Checked, ObjectRef
from provider.audit.reports import MANAGED_BY, report_for, same_content
from provider.compare.dryrun import plan_dry_run
from provider.errors import TransientError
from provider.kube.configmaps import KubeConfigMapReader
from provider.kube.dryrun import KubeDryRunner, dry_runner_for
from provider.kube.lister import KubeLister
from provider.kube.secrets import read_secret_value
from provider.kube.tokenreview import KubeTokenReviewer, TokenStatus, kube_configuration
from provider.kube.tokens import KubeTokenSource, api_client_for
from provider.kube.writer import KubeWriter
from provider.result import Result
from tests.support.apiauth import Caller
from tests.support.bootstrap import TOKEN_ID, secret
from tests.support.data import REPO, load_yaml
from tests.support.fakeapi import TokenApi, issue_client_certificate, recording
from tests.support.manifests import configmap
from tests.support.tokenreview import AUDIENCE, KYVERNO_GROUPS, KYVERNO_USER, Identity

pytestmark = pytest.mark.fake_api(make=TokenApi)

KYVERNO_TOKEN = "kyverno-token"
REPORTS = REPO / "tests" / "assets" / "policyreport"
#: Seconds one request may take here: generous, this is not a deadline test.
TIMEOUT = 10.0


@dataclass(frozen=True)
class Cluster:
    """How one face reaches the cluster: the kubeconfig it is given (None: in-cluster) and the pod's files."""

    kubeconfig: str | None
    service_account_dir: str | None = None

    def _pod(self) -> tuple[str, ...]:
        return (self.service_account_dir,) if self.service_account_dir else ()

    def runner(self) -> KubeDryRunner:
        pod = {"service_account_dir": self.service_account_dir} if self.service_account_dir else {}
        return dry_runner_for(self.kubeconfig, in_cluster=self.kubeconfig is None, **pod)

    def reviewer(self) -> KubeTokenReviewer:
        return KubeTokenReviewer(kube_configuration(self.kubeconfig, *self._pod()))

    def tokens(self) -> KubeTokenSource:
        return KubeTokenSource(api_client_for(self.kubeconfig, *self._pod()), timeout=TIMEOUT)


def exec_plugin(directory: Path, status: dict[str, Any]) -> dict[str, Any]:
    """A kubeconfig ``user`` running a credential plugin (client.authentication.k8s.io/v1) that prints ``status``."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "plugin.py"
    answer = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status}
    script.write_text(f"import json\nprint(json.dumps({answer!r}))\n")
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                     "args": [str(script)], "interactiveMode": "Never"}}  # fmt: skip


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


#: identity -> (how to reach the cluster with it, who the API server takes the caller for)
Make = Callable[[TokenApi, Path, pytest.MonkeyPatch], tuple[Cluster, str]]


def kubeconfig_token(fake: TokenApi, tmp: Path, _mp: pytest.MonkeyPatch) -> tuple[Cluster, str]:
    return Cluster(str(fake.kubeconfig(tmp / "kubeconfig"))), fake.username


def kubeconfig_token_file(fake: TokenApi, tmp: Path, _mp: pytest.MonkeyPatch) -> tuple[Cluster, str]:
    (tmp / "token").write_text(fake.token)
    return Cluster(str(fake.kubeconfig(tmp / "kubeconfig", user={"tokenFile": str(tmp / "token")}))), fake.username


def client_certificate_files(fake: TokenApi, tmp: Path, _mp: pytest.MonkeyPatch) -> tuple[Cluster, str]:
    user = fake.client_certificate(tmp / "pki", "system:node:worker-1", ("system:nodes",))
    return Cluster(str(fake.kubeconfig(tmp / "kubeconfig", user=user))), "system:node:worker-1"


def client_certificate_data(fake: TokenApi, tmp: Path, _mp: pytest.MonkeyPatch) -> tuple[Cluster, str]:
    cert, key = issue_client_certificate("jane@example.com", ("platform",))
    user = {"client-certificate-data": b64(cert), "client-key-data": b64(key)}
    return Cluster(str(fake.kubeconfig(tmp / "kubeconfig", user=user))), "jane@example.com"


def exec_plugin_token(fake: TokenApi, tmp: Path, _mp: pytest.MonkeyPatch) -> tuple[Cluster, str]:
    fake.tokens["exec-issued-token"] = Caller("oidc:jane", ("platform",))
    user = exec_plugin(tmp / "plugin", {"token": "exec-issued-token"})
    return Cluster(str(fake.kubeconfig(tmp / "kubeconfig", user=user))), "oidc:jane"


def exec_plugin_certificate(fake: TokenApi, tmp: Path, _mp: pytest.MonkeyPatch) -> tuple[Cluster, str]:
    cert, key = issue_client_certificate("exec:jane")
    user = exec_plugin(tmp / "plugin", {"clientCertificateData": cert.decode(), "clientKeyData": key.decode()})
    return Cluster(str(fake.kubeconfig(tmp / "kubeconfig", user=user))), "exec:jane"


def in_cluster(fake: TokenApi, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Cluster, str]:
    env = fake.service_account(tmp / "serviceaccount")
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.setenv(name, env[name])
    return Cluster(None, env["MANIFEST_PROVIDER_SERVICE_ACCOUNT_DIR"]), fake.username


IDENTITIES: dict[str, Make] = {
    "kubeconfig-token": kubeconfig_token,
    "kubeconfig-token-file": kubeconfig_token_file,
    "client-certificate-files": client_certificate_files,
    "client-certificate-data": client_certificate_data,
    "exec-plugin-token": exec_plugin_token,
    "exec-plugin-certificate": exec_plugin_certificate,
    "in-cluster-service-account": in_cluster,
}


@pytest.fixture
def fake_with_objects(fake: TokenApi) -> Iterator[TokenApi]:
    """The fake holding what each kind of request reads: a ConfigMap, a bootstrap token, the PolicyReport CRD."""
    fake.add(configmap("app-signature", "default", message="m", signature="s"))
    fake.secrets[f"bootstrap-token-{TOKEN_ID}"] = secret()
    fake.secrets["manifest-provider-tls"] = {"kind": "Secret", "apiVersion": "v1", "data": {"ca.crt": b64(b"CA")}}
    for name in ("policyreports", "clusterpolicyreports"):
        (crd,) = load_yaml(REPORTS / f"wgpolicyk8s.io_{name}.yaml")
        fake.install_crd(crd)
    fake.reviewable[KYVERNO_TOKEN] = Identity([AUDIENCE])
    yield fake


def every_kind_of_request(cluster: Cluster) -> None:
    """One request of each kind the project makes, through the builders the service and the CLI use."""
    with cluster.runner() as runner:
        created = runner.dry_run(plan_dry_run(recording("configmap").request_body, "default").manifest, "default")
        assert created["kind"] == "ConfigMap"
        lister = KubeLister(runner, timeout=TIMEOUT)
        resource = lister.resolve("cm")
        assert any(o["metadata"]["name"] == "app-signature" for page in lister.pages(resource, "default") for o in page)
        assert lister.get(resource, "app-signature", "default") is not None
        ref = ObjectRef("v1", "ConfigMap", "default", "app-signature", "5b1c6e0e-1111-4a57-9f0e-1d2a3b4c5d6e")
        report = report_for(Checked(ref, Result.proven("ok", ("sha256:ab",))), now=1_700_000_000.0)
        assert KubeWriter(runner, labels=MANAGED_BY, same=same_content, timeout=TIMEOUT).write(report) == "created"
        reader = KubeConfigMapReader(lambda: runner)
        assert reader.read_data("default", "app-signature", time.monotonic() + TIMEOUT) == {"message": "m",
                                                                                            "signature": "s"}  # fmt: skip
    assert cluster.tokens().lookup(TOKEN_ID) is not None
    status = cluster.reviewer().review(KYVERNO_TOKEN, AUDIENCE, time.monotonic() + TIMEOUT)
    assert status == TokenStatus(True, KYVERNO_USER, tuple(KYVERNO_GROUPS))
    if cluster.kubeconfig is not None:  # the CLI's one Secret read (policy --ca-from-cluster) takes a kubeconfig
        assert read_secret_value(cluster.kubeconfig, "kube-system", "manifest-provider-tls", "ca.crt") == b"CA"


@pytest.mark.parametrize("make", IDENTITIES.values(), ids=IDENTITIES.keys())
def test_every_request_is_made_as_the_loaded_identity(
    fake_with_objects: TokenApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: Make
) -> None:
    fake = fake_with_objects
    cluster, user = make(fake, tmp_path, monkeypatch)
    every_kind_of_request(cluster)
    paths = {r.path for r in fake.requests}
    assert "/apis/authentication.k8s.io/v1/tokenreviews" in paths and "/api/v1/namespaces/kube-system/secrets/" \
        f"bootstrap-token-{TOKEN_ID}" in paths  # fmt: skip
    refused = [(r.method, r.path, r.status, r.user) for r in fake.requests if r.status >= 400 and r.status != 404]
    assert refused == []
    assert {r.user for r in fake.requests} == {user}


def test_without_credentials_each_kind_of_request_is_refused(fake_with_objects: TokenApi, tmp_path: Path) -> None:
    """The stand-in refuses what the real server refuses: anonymous calls get 403, and the client says so."""
    fake = fake_with_objects
    cluster = Cluster(str(fake.kubeconfig(tmp_path / "kubeconfig", user={})))
    with cluster.runner() as runner, pytest.raises(TransientError, match="forbidden"):
        runner.dry_run(plan_dry_run(recording("configmap").request_body, "default").manifest, "default")
    with pytest.raises(TransientError, match="HTTP 403"):
        cluster.reviewer().review(KYVERNO_TOKEN, AUDIENCE, time.monotonic() + TIMEOUT)
    with pytest.raises(TransientError, match="HTTP 403"):
        cluster.tokens().lookup(TOKEN_ID)
    assert {r.user for r in fake.requests} == {"system:anonymous"}
    assert {r.status for r in fake.requests} == {403}


def test_an_identity_without_grants_is_refused_and_the_message_names_it(
    fake_with_objects: TokenApi, tmp_path: Path
) -> None:
    fake = fake_with_objects
    fake.unprivileged.add("nobody")
    cluster = Cluster(str(fake.kubeconfig(tmp_path / "kubeconfig", user=fake.client_certificate(tmp_path, "nobody"))))
    with cluster.runner() as runner, pytest.raises(TransientError) as denied:
        runner.dry_run(plan_dry_run(recording("configmap").request_body, "default").manifest, "default")
    assert "nobody may not create configmaps" in denied.value.message
    with pytest.raises(TransientError, match="HTTP 403"):
        cluster.reviewer().review(KYVERNO_TOKEN, AUDIENCE, time.monotonic() + TIMEOUT)


def test_with_anonymous_authentication_off_no_credentials_is_401(fake_with_objects: TokenApi, tmp_path: Path) -> None:
    fake = fake_with_objects
    fake.anonymous = False  # kube-apiserver --anonymous-auth=false
    cluster = Cluster(str(fake.kubeconfig(tmp_path / "kubeconfig", user={})))
    with pytest.raises(TransientError, match="HTTP 401"):
        cluster.reviewer().review(KYVERNO_TOKEN, AUDIENCE, time.monotonic() + TIMEOUT)
    assert [(r.user, r.status) for r in fake.requests] == [("", 401)]


def test_an_unknown_token_is_401_never_anonymous(fake_with_objects: TokenApi, tmp_path: Path) -> None:
    fake = fake_with_objects
    cluster = Cluster(str(fake.kubeconfig(tmp_path / "kubeconfig", user={"token": "not-issued"})))
    with pytest.raises(TransientError, match="HTTP 401"):
        cluster.reviewer().review(KYVERNO_TOKEN, AUDIENCE, time.monotonic() + TIMEOUT)
    with cluster.runner() as runner, pytest.raises(TransientError, match="401 Unauthorized"):
        runner.dry_run(plan_dry_run(recording("configmap").request_body, "default").manifest, "default")


def a_minute_later(monkeypatch: pytest.MonkeyPatch, seconds: float = 61.0) -> None:
    """Move the kubernetes client's in-cluster clock on, past the minute it keeps a token it read.

    ``InClusterConfigLoader`` rereads the token file once ``datetime.datetime.now()``
    passes the last read plus one minute (incluster_config.py ``_refresh_api_key``);
    only that module's clock moves: what the project does per request is unchanged.
    """
    from kubernetes.config import incluster_config

    real = datetime.datetime

    class Later(real):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return real.now(tz) + datetime.timedelta(seconds=seconds)

    monkeypatch.setattr(
        incluster_config, "datetime", types.SimpleNamespace(datetime=Later, timedelta=datetime.timedelta)
    )


def test_a_rotated_service_account_token_is_read_again_by_every_kind_of_request(
    fake_with_objects: TokenApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubelet replaces the projected token in place; every client built before keeps up with it."""
    fake = fake_with_objects
    cluster, _ = in_cluster(fake, tmp_path, monkeypatch)
    runner, reviewer, tokens = cluster.runner(), cluster.reviewer(), cluster.tokens()
    assert tokens.lookup(TOKEN_ID) is not None
    old = fake.token
    # The new token is written; the old one expires (the API server no longer accepts it).
    fake.tokens["rotated-token"] = Caller(fake.username)
    fake.token = "expired-and-no-longer-accepted"
    (tmp_path / "serviceaccount" / "token").write_text("rotated-token")
    a_minute_later(monkeypatch)
    before = len(fake.requests)
    assert runner.dry_run(plan_dry_run(recording("configmap").request_body, "default").manifest, "default")
    assert tokens.lookup(TOKEN_ID) is not None
    assert reviewer.review(KYVERNO_TOKEN, AUDIENCE, time.monotonic() + TIMEOUT).authenticated
    after = fake.requests[before:]
    assert {r.headers.get("Authorization") for r in after} == {"bearer rotated-token"}
    assert old not in json.dumps([r.headers for r in after])
    runner.close()


def test_a_token_file_gone_at_refresh_is_a_transient_failure(
    fake_with_objects: TokenApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_with_objects
    cluster, _ = in_cluster(fake, tmp_path, monkeypatch)
    runner, reviewer = cluster.runner(), cluster.reviewer()
    (tmp_path / "serviceaccount" / "token").unlink()
    a_minute_later(monkeypatch)
    with pytest.raises(TransientError, match="credentials could not be refreshed"):
        runner.dry_run(plan_dry_run(recording("configmap").request_body, "default").manifest, "default")
    with pytest.raises(TransientError, match="credentials could not be refreshed") as caught:
        reviewer.review(KYVERNO_TOKEN, AUDIENCE, time.monotonic() + TIMEOUT)
    assert caught.value.reason == "token-review-failed"
    runner.close()


def test_the_header_is_the_clients_own() -> None:
    """What auth_headers gives is what the client's generated API methods send (``auth_settings=['BearerToken']``)."""
    from kubernetes import client

    from provider.kube.credentials import auth_headers

    configuration = client.Configuration()
    configuration.api_key["BearerToken"] = "Bearer abc"
    assert auth_headers(configuration) == {"authorization": "Bearer abc"}
    api = client.ApiClient(configuration)
    _method, _url, headers, *_ = api.param_serialize("GET", "/api", auth_settings=["BearerToken"])
    assert headers["authorization"] == "Bearer abc"
    assert auth_headers(client.Configuration()) == {}


def test_the_default_service_account_directory_is_the_kubelets() -> None:
    from kubernetes.config import incluster_config

    from provider.kube.credentials import SERVICE_ACCOUNT_DIR

    assert f"{SERVICE_ACCOUNT_DIR}/token" == incluster_config.SERVICE_TOKEN_FILENAME
    assert f"{SERVICE_ACCOUNT_DIR}/ca.crt" == incluster_config.SERVICE_CERT_FILENAME
