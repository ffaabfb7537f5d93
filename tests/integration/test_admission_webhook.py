"""The service as its own admission webhook, for real: gunicorn with two workers, TLS, the fake API server's watch.

The API server's side is the fake API server (``tests/support/fakeapi.py``) serving the
CRDs of ``manifests/crds`` and their watch, and the tests posting AdmissionReviews as the
API server does, reading each answer as it reads them (``tests/support/apiserver_webhook.py``).
Every request opens a new connection, so both workers answer: each holds the policies
itself. The waits are deadlines for something to happen at all, never for how fast.
"""

from __future__ import annotations

import copy
import http.client
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.apiserver_webhook import Outcome, read_answer
from tests.support.fakeapi import FakeApiServer
from tests.support.heldpolicies import admission_review, cluster_policy, crds, tenant_policy
from tests.support.keys import make_key, public_key_pem
from tests.support.kube_schema import validate_object
from tests.support.manifests import configmap, sign
from tests.support.server import VERDICT_CLIENT_TIMEOUT, VERDICT_DEADLINE, Server, running_server

pytestmark = [pytest.mark.integration, pytest.mark.fake_api(per="module")]

PATH = "/v1/admission/validate"
PATIENCE = 60.0
KEY = make_key("ecdsa-p256", 371)
TEAM = make_key("ecdsa-p256", 372)
(SIGNED,) = sign(configmap("app", "shop", mode="prod"), KEY)
TAMPERED = copy.deepcopy(SIGNED)
TAMPERED["data"]["mode"] = "debug"
UNSIGNED = configmap("app", "shop", mode="prod")
CRDS = {crd["spec"]["names"]["kind"]: crd for crd in crds()}


@pytest.fixture(scope="module")
def server(fake: FakeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    for crd in CRDS.values():
        fake.install_crd(crd)
    for name in ("shop", "lab"):
        fake.add({"apiVersion": "v1", "kind": "Namespace",
                  "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}})  # fmt: skip
    kubeconfig = fake.kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
    env = {
        "MANIFEST_PROVIDER_KUBECONFIG": str(kubeconfig),
        "MANIFEST_PROVIDER_WATCH_POLICIES": "true",
        **VERDICT_DEADLINE,
    }
    with running_server(env=env, args=("--workers", "2")) as running:
        yield running


def ask(server: Server, obj: dict[str, Any], **fields: Any) -> Outcome:
    """One request, as the API server sends it, on a new connection; the answer as it reads it."""
    body = admission_review(obj, **fields)
    connection = server.connection(timeout=VERDICT_CLIENT_TIMEOUT)
    try:
        connection.request("POST", f"{PATH}?timeout=30s", json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200
        answer = json.loads(response.read())
    finally:
        connection.close()
    return read_answer(answer, body["request"]["uid"])


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {PATIENCE} s: {what}")
        time.sleep(0.05)


def every_worker(server: Server, check: Callable[[Outcome], bool], obj: dict[str, Any], what: str) -> None:
    """Until ten answers in a row, on new connections (both workers), pass ``check``."""
    until(lambda: all(check(ask(server, obj)) for _ in range(10)), what)


def reason(outcome: Outcome) -> str:
    return outcome.annotations["manifests.manifest-provider.io/reason"]


def the_cluster_policy(fake: FakeApiServer) -> None:
    """The ClusterManifestPolicy the tests share, added once (the first test watches it arrive)."""
    if fake.stored("manifest-provider.io/v1alpha1", "ClusterManifestPolicy"):
        return
    policy = cluster_policy(
        "signed-configmaps",
        {"keys": [public_key_pem(KEY)]},
        match={"kinds": [{"apiGroups": [""], "kinds": ["ConfigMap"]}]},
    )
    assert validate_object(policy, CRDS["ClusterManifestPolicy"]) == []
    fake.add(policy)


def test_a_signed_write_is_admitted_and_a_tampered_one_denied(server: Server, fake: FakeApiServer) -> None:
    if not fake.stored("manifest-provider.io/v1alpha1", "ClusterManifestPolicy"):
        # No policy yet: allowed, and counted as such.
        assert ask(server, UNSIGNED).allowed and reason(ask(server, UNSIGNED)) == "out-of-scope"
    the_cluster_policy(fake)
    every_worker(server, lambda o: not o.allowed, UNSIGNED, "every worker holds the new policy")
    admitted = ask(server, SIGNED)
    assert admitted.allowed and reason(admitted) == "verified"
    assert admitted.annotations["manifests.manifest-provider.io/policy"] == "ClusterManifestPolicy signed-configmaps"
    denied = ask(server, TAMPERED)
    assert not denied.allowed and denied.status is not None
    assert denied.status["reason"] == "content-mismatch" and denied.status["code"] == 403
    assert denied.status["message"].endswith("ConfigMap shop/app: data.mode differs: signed 'prod', admitted 'debug'")
    # The policy's status says it compiled, written as the service.
    until(lambda: bool(((fake.stored("manifest-provider.io/v1alpha1", "ClusterManifestPolicy") or [{}])[0].get("status") or {}).get("conditions")),
          "status written")  # fmt: skip
    (stored,) = fake.stored("manifest-provider.io/v1alpha1", "ClusterManifestPolicy")
    (condition,) = stored["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == ("Ready", "True", "Compiled")


def test_a_tenant_policy_adds_a_requirement_in_its_namespace_only(server: Server, fake: FakeApiServer) -> None:
    the_cluster_policy(fake)
    every_worker(server, lambda o: o.allowed, SIGNED, "the cluster policy admits the signed write")
    fake.add(tenant_policy("team-keys", "shop", {"keys": [public_key_pem(TEAM)]}))
    every_worker(server, lambda o: not o.allowed, SIGNED, "the tenant's requirement applies")
    denied = ask(server, SIGNED)
    assert denied.status is not None and denied.status["reason"] == "signature-invalid"
    assert denied.annotations["manifests.manifest-provider.io/policy"] == "ManifestPolicy shop/team-keys"
    elsewhere = copy.deepcopy(SIGNED)
    elsewhere["metadata"]["namespace"] = "lab"  # signed for shop: the cluster policy decides alone there
    assert reason(ask(server, elsewhere)) == "no-matching-manifest"
    fake.remove("manifest-provider.io/v1alpha1", "ManifestPolicy", "shop", "team-keys")
    every_worker(server, lambda o: o.allowed, SIGNED, "the tenant's policy is gone")


def test_a_policy_object_that_would_not_compile_is_refused(server: Server) -> None:
    broken = tenant_policy("broken", "shop", {"keys": [public_key_pem(TEAM)], "trustedRoot": "/etc/passwd",
                                               "signers": [{"subject": "a@example.com", "issuer": "https://x"}]})  # fmt: skip
    outcome = ask(server, broken)
    assert not outcome.allowed and outcome.status is not None and outcome.status["reason"] == "policy-invalid"
    assert "trustedRoot" in outcome.status["message"]


def scrape(server: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    conn = http.client.HTTPConnection("127.0.0.1", server.metrics_port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_metrics_and_logs_name_the_route(server: Server) -> None:
    ask(server, TAMPERED)

    def counted() -> bool:  # a worker's counts reach the scrape within about a second (provider/service/metrics.py)
        samples = scrape(server)
        denials = sum(v for (name, labels), v in samples.items() if name == "manifest_provider_decisions_total"
                      and ("route", PATH) in labels and ("reason", "content-mismatch") in labels)  # fmt: skip
        return samples[("manifest_provider_requests_total", (("code", "200"), ("route", PATH)))] >= 1 and denials >= 1

    until(counted, "the admission route's requests and decisions are counted")
    records = [r for r in server.log_records() if r.get("message") == "decision" and r.get("route") == "admission"]
    assert records and {"policy", "warnings", "caller"} <= set(records[-1])
