"""The Flask app, through Flask's test client: routes, error semantics, limits, cluster clients, logs."""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from provider.errors import ConfigError, TransientError, VerificationFailure
from provider.result import Result
from provider.review import Review
from provider.service.app import Service, create_app
from provider.service.checks import CHECKS, CheckContext
from provider.service.cluster import LazyClient, LazyDryRunner
from provider.service.routes import GATEKEEPER_PATH, KYVERNO_PATH
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign


def policy(**extra: Any) -> dict[str, Any]:
    return {"keys": [public_key_pem(make_key())], **extra}


def signed(name: str = "cm", **data: str) -> dict[str, Any]:
    return sign(configmap(name, "ns", **(data or {"key": "value"})))[0]


def review(obj: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "uid": "u",
        "operation": "CREATE",
        "userInfo": {"username": "alice"},
        "namespace": "ns",
        "object": obj,
        **fields,
    }


def provider_request(*keys: str) -> bytes:
    return json.dumps(
        {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest", "request": {"keys": list(keys)}}
    ).encode()


def key(obj: dict[str, Any], pol: Any = None, **fields: Any) -> str:
    return json.dumps({"review": review(obj), "policy": policy() if pol is None else pol, **fields})


def make(config: dict[str, Any] | None = None) -> tuple[Flask, FlaskClient]:
    app = create_app({"TESTING": True, "LOG_LEVEL": "warning", **(config or {})})
    return app, app.test_client()


@pytest.fixture
def client() -> Iterator[FlaskClient]:
    app, test_client = make()
    yield test_client
    app.extensions["manifest_provider"].dispatcher.shutdown()


def items(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 200
    answer = response.get_json()
    assert answer["response"]["systemError"] == "", answer
    return list(answer["response"]["items"])


# --- the two routes ---------------------------------------------------------------


def test_gatekeeper_answers_each_key(client: FlaskClient) -> None:
    tampered = copy.deepcopy(signed())
    tampered["data"]["key"] = "x"
    keys = [key(signed()), key(tampered), "[1, 2]"]
    answer = items(client.post(GATEKEEPER_PATH, data=provider_request(*keys)))
    assert [i["key"] for i in answer] == keys
    assert answer[0]["value"]["reason"] == "verified"
    assert answer[1]["value"]["reason"] == "content-mismatch"
    assert answer[2]["error"].startswith("request-invalid: the key is a JSON list")


def test_an_empty_provider_request_gets_no_items(client: FlaskClient) -> None:
    assert items(client.post(GATEKEEPER_PATH, data=b'{"request": {}}')) == []


@pytest.mark.parametrize(
    "content_type",
    [None, "application/json", "application/x-www-form-urlencoded", "text/plain"],
    ids=["none", "json", "form-as-curl-sends", "text"],
)
def test_kyverno_body_is_json_whatever_the_content_type(client: FlaskClient, content_type: str | None) -> None:
    data = json.dumps({"request": review(signed()), "policy": policy()}).encode()
    response = client.post(KYVERNO_PATH, data=data, content_type=content_type)
    assert response.status_code == 200
    assert response.get_json()["reason"] == "verified"


def test_an_unknown_check_is_a_per_key_error(client: FlaskClient) -> None:
    (item,) = items(client.post(GATEKEEPER_PATH, data=provider_request(key(signed(), check="nope"))))
    assert item["error"].startswith("request-invalid: unknown check 'nope'")
    kyverno = client.post(
        KYVERNO_PATH, data=json.dumps({"request": review(signed()), "policy": policy(), "check": "nope"})
    ).get_json()
    assert (kyverno["allowed"], kyverno["reason"]) == (False, "request-invalid")


def test_a_registered_check_is_dispatched_by_name(client: FlaskClient, monkeypatch: pytest.MonkeyPatch) -> None:
    def always(review: Review, policy_raw: Any, ctx: CheckContext) -> Result:
        return Result(True, False, "skipped-object", f"asked about {policy_raw['what']}")

    monkeypatch.setitem(CHECKS, "always", always)
    (item,) = items(client.post(GATEKEEPER_PATH, data=provider_request(key(signed(), {"what": "it"}, check="always"))))
    assert item["value"]["message"] == "asked about it"


# --- errors keep their shape ------------------------------------------------------


class DownCluster:
    def dry_run(self, manifest: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        raise TransientError("the API server did not answer", reason="dry-run-failed")


class CountingCluster:
    """A cluster whose dry-run returns the signed manifest unchanged (or refuses it), counting calls."""

    def __init__(self, refuse: bool = False) -> None:
        self.calls = 0
        self.refuse = refuse

    def dry_run(self, manifest: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        self.calls += 1
        if self.refuse:
            raise VerificationFailure("ConfigMap is invalid: data: Invalid value", reason="dry-run-failed")
        return copy.deepcopy(manifest)


@pytest.mark.parametrize("refuse", [False, True], ids=["content-mismatch-after-dry-run", "dry-run-refused-422"])
def test_a_denial_that_asked_the_cluster_is_computed_again_each_time(refuse: bool) -> None:
    """The cluster's defaults, webhooks and schemas can change: a verdict that used them is never cached."""
    cluster = CountingCluster(refuse)
    app, client = make({"DRY_RUNNER": cluster})
    tampered = copy.deepcopy(signed())
    tampered["data"]["key"] = "x"
    body = provider_request(key(tampered, policy(dryRun={"enabled": True})))
    for _ in range(3):
        (item,) = items(client.post(GATEKEEPER_PATH, data=body))
        assert item["value"]["reason"] == ("dry-run-failed" if refuse else "content-mismatch")
    assert cluster.calls == 3
    # A verdict that needed no cluster is cached as before.
    plain = provider_request(key(signed(), policy(dryRun={"enabled": True})))
    for _ in range(2):
        assert items(client.post(GATEKEEPER_PATH, data=plain))[0]["value"]["reason"] == "verified"
    assert cluster.calls == 3
    app.extensions["manifest_provider"].dispatcher.shutdown()


def test_a_transient_failure_is_a_system_error_for_gatekeeper_and_a_denial_for_kyverno() -> None:
    app, client = make({"DRY_RUNNER": DownCluster()})
    tampered = copy.deepcopy(signed())
    tampered["data"]["key"] = "x"
    dry = policy(dryRun={"enabled": True})
    gatekeeper = client.post(GATEKEEPER_PATH, data=provider_request(key(signed()), key(tampered, dry))).get_json()
    assert gatekeeper["response"]["items"] == []
    assert gatekeeper["response"]["systemError"] == "dry-run-failed: the API server did not answer"
    kyverno = client.post(KYVERNO_PATH, data=json.dumps({"request": review(tampered), "policy": dry})).get_json()
    assert (kyverno["allowed"], kyverno["reason"], kyverno["message"]) == (
        False,
        "dry-run-failed",
        "the API server did not answer",
    )
    app.extensions["manifest_provider"].dispatcher.shutdown()


def test_a_bug_in_a_check_is_answered_without_detail(client: FlaskClient, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(review: Review, policy_raw: Any, ctx: CheckContext) -> Result:
        raise ZeroDivisionError("internal detail")

    monkeypatch.setitem(CHECKS, "broken", broken)
    response = client.post(GATEKEEPER_PATH, data=provider_request(key(signed(), check="broken")))
    assert response.status_code == 200
    assert (
        response.get_json()["response"]["systemError"]
        == "internal-error: internal error while verifying; see the service's log"
    )
    kyverno = client.post(KYVERNO_PATH, data=json.dumps({"request": review(signed()), "policy": {}, "check": "broken"}))
    assert kyverno.status_code == 200 and kyverno.get_json()["reason"] == "internal-error"
    assert b"internal detail" not in response.data + kyverno.data


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", GATEKEEPER_PATH, 405), ("POST", "/v2/verify", 404), ("DELETE", "/healthz", 405)],
    ids=["get-on-verify", "unknown-path", "delete-probe"],
)
def test_http_errors_are_short_json(client: FlaskClient, method: str, path: str, status: int) -> None:
    response = client.open(path, method=method)
    assert response.status_code == status
    assert response.is_json and set(response.get_json()) == {"error"}


def test_probes_and_metrics(client: FlaskClient) -> None:
    assert client.get("/healthz").get_json() == {"status": "ok"}
    assert client.get("/readyz").get_json() == {"status": "ready"}
    client.post(GATEKEEPER_PATH, data=provider_request(key(signed())))
    metrics = client.get("/metrics")
    assert metrics.status_code == 200 and metrics.content_type.startswith("text/plain")
    text = metrics.data.decode()
    assert (
        'manifest_provider_decisions_total{check="manifest",class="valid-signature",reason="verified",route="/v1/gatekeeper/verify"}'
        in text
    )
    assert "manifest_provider_request_duration_seconds_bucket" in text


def test_the_decision_counter_carries_each_of_the_six_traffic_classes(client: FlaskClient) -> None:
    """The paper's table, live: one request per class, each counted under its class label."""
    tampered = copy.deepcopy(signed())
    tampered["data"]["key"] = "x"
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "ns"}}
    controller = {
        "username": "system:serviceaccount:kube-system:replicaset-controller",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system"],
    }
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-abc12", "namespace": "ns"}, "spec": {}}
    app_profile = policy(skipUsers=[{"users": ["system:serviceaccount:ns:operator"]}])
    bodies = {
        "out-of-scope": {"request": review(event), "policy": policy()},
        "common-profile": {"request": review(pod, userInfo=controller), "policy": policy()},
        "app-profile": {
            "request": review(
                configmap("cm", "ns"),
                userInfo={
                    "username": "system:serviceaccount:ns:operator",
                    "groups": ["system:serviceaccounts", "system:serviceaccounts:ns"],
                },
            ),
            "policy": app_profile,
        },
        "valid-signature": {"request": review(signed()), "policy": policy()},
        "invalid-signature": {"request": review(tampered), "policy": policy()},
        "unprocessed": {"request": review(configmap("cm", "ns")), "policy": policy()},
    }

    def counts() -> Counter[tuple[str, str]]:
        found: Counter[tuple[str, str]] = Counter()
        for family in text_string_to_metric_families(client.get("/metrics").data.decode()):
            for s in family.samples:
                if s.name == "manifest_provider_decisions_total" and s.labels.get("route") == KYVERNO_PATH:
                    found[(s.labels["class"], s.labels["reason"])] += int(s.value)  # summed over the checks
        return found

    before = counts()
    for body in bodies.values():
        assert client.post(KYVERNO_PATH, data=json.dumps(body)).status_code == 200
    after = counts()
    after.subtract(before)
    assert +after == {
        ("out-of-scope", "out-of-scope"): 1, ("common-profile", "skipped-user"): 1, ("app-profile", "skipped-user"): 1,
        ("valid-signature", "verified"): 1, ("invalid-signature", "content-mismatch"): 1, ("unprocessed", "unsigned"): 1,
    }  # fmt: skip


# --- limits -----------------------------------------------------------------------


def test_a_body_over_the_limit_is_413_with_or_without_content_length() -> None:
    app, client = make({"MAX_BODY_BYTES": 1000})
    big = b'{"request": {"keys": ["' + b"x" * 1000 + b'"]}}'
    with_length = client.post(GATEKEEPER_PATH, data=big)
    assert with_length.status_code == 413
    assert with_length.get_json()["response"]["systemError"] == "request-invalid: request body larger than 1000 bytes"
    chunked = client.post(KYVERNO_PATH, input_stream=io.BytesIO(big), environ_overrides={"wsgi.input_terminated": True})
    assert chunked.status_code == 413 and chunked.get_json()["reason"] == "request-invalid"
    small = client.post(KYVERNO_PATH, input_stream=io.BytesIO(b"{}"), environ_overrides={"wsgi.input_terminated": True})
    # Escaped as Kyverno's scanner skips it (\{{), or Kyverno would put the request into the message;
    # its last step turns it back into {{ (provider/service/wire/kyverno.py).
    assert (
        small.status_code == 200
        and small.get_json()["message"] == 'the request body has no "request" (pass \\{{ request }} from the policy)'
    )
    app.extensions["manifest_provider"].dispatcher.shutdown()


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_oversized_body_is_drained_before_the_413_so_the_answer_arrives(chunked: bool) -> None:
    """Closing with unread bytes makes the kernel reset the connection, which can overtake the 413."""
    app, client = make({"MAX_BODY_BYTES": 1000})
    for size, drained in ((3000, True), (5000, False)):  # up to four times the limit is read and thrown away
        stream = io.BytesIO(b"x" * size)
        overrides: dict[str, Any] = {"wsgi.input": stream}
        if chunked:
            overrides["wsgi.input_terminated"] = True
            response = client.post(KYVERNO_PATH, input_stream=stream, environ_overrides=overrides)
        else:
            response = client.post(
                KYVERNO_PATH, input_stream=stream, environ_overrides=overrides, headers={"Content-Length": str(size)}
            )
        assert response.status_code == 413 and response.get_json()["reason"] == "request-invalid"
        assert (stream.tell() == size) is drained, (size, stream.tell())
    app.extensions["manifest_provider"].dispatcher.shutdown()


def test_max_keys_is_configurable() -> None:
    _app, client = make({"MAX_KEYS": 2})
    answer = client.post(GATEKEEPER_PATH, data=provider_request("{}", "{}", "{}")).get_json()
    assert answer["response"]["systemError"] == "request-invalid: 3 keys in one request; at most 2 are allowed"


# --- cluster clients --------------------------------------------------------------


def test_without_a_cluster_there_are_no_cluster_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    app, _ = make()
    ctx = app.extensions["manifest_provider"].context()
    assert ctx.dry_runner is None and ctx.kube_client is None


def test_given_objects_are_used_as_they_are() -> None:
    runner, client_object = DownCluster(), object()
    app, _ = make({"DRY_RUNNER": runner, "KUBE_CLIENT": client_object})
    ctx = app.extensions["manifest_provider"].context()
    assert ctx.dry_runner is runner and ctx.kube_client is client_object


def test_a_kubeconfig_gives_lazy_clients_that_fail_transiently_when_unusable(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing-kubeconfig")
    app, client = make({"KUBECONFIG": missing})
    service: Service = app.extensions["manifest_provider"]
    assert isinstance(service.dry_runner, LazyDryRunner) and isinstance(service.kube_client, LazyClient)
    with pytest.raises(TransientError) as caught:
        service.dry_runner.dry_run({}, None)
    assert caught.value.reason == "dry-run-failed" and "missing-kubeconfig" in caught.value.message
    with pytest.raises(TransientError):
        service.kube_client.read_namespaced_secret  # noqa: B018 - attribute access builds the client
    # Policies that need no cluster are unaffected; one that does fails the request, not the key.
    tampered = copy.deepcopy(signed())
    tampered["data"]["key"] = "x"
    assert items(client.post(GATEKEEPER_PATH, data=provider_request(key(signed()))))[0]["value"]["reason"] == "verified"
    failed = client.post(
        GATEKEEPER_PATH, data=provider_request(key(tampered, policy(dryRun={"enabled": True})))
    ).get_json()
    assert failed["response"]["systemError"].startswith("dry-run-failed: the cluster dry-run client is not available")


def test_a_kubeconfig_builds_a_real_api_client_on_first_use(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))  # fmt: skip
    app, _ = make({"KUBECONFIG": str(kubeconfig)})
    kube_client = app.extensions["manifest_provider"].kube_client
    assert kube_client.configuration.host == "https://127.0.0.1:1"
    assert kube_client.configuration.retries is False


def test_the_kubernetes_client_is_imported_at_start_up_only_when_a_cluster_is_configured(tmp_path: Path) -> None:
    """Its import must not land inside the first cluster call's deadline, nor slow a service without a cluster.

    ``CoreV1Api``'s module counts: kubernetes 37.x imports it (and its ~250
    models: 2 s on a busy machine) only when ``client.CoreV1Api`` is first used.
    """
    probe = (
        "import sys; from provider.service.app import create_app; create_app({%s}); "
        "print('kubernetes.client' in sys.modules and 'kubernetes.client.api.core_v1_api' in sys.modules)"
    )
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("MANIFEST_PROVIDER_") and k != "KUBERNETES_SERVICE_HOST"
    }
    answers = []
    for setting in ("", f"'KUBECONFIG': {str(tmp_path / 'kubeconfig')!r}"):
        done = subprocess.run(
            [sys.executable, "-c", probe % setting], capture_output=True, text=True, env=env, timeout=60, check=True
        )
        answers.append(done.stdout.split()[-1])
    assert answers == ["False", "True"]


# --- configuration and logs -------------------------------------------------------


def test_an_unknown_setting_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown setting 'DEADLINE'"):
        create_app({"DEADLINE": 1})


def test_decisions_are_logged_as_json_lines_without_the_object(capsys: pytest.CaptureFixture[str]) -> None:
    _app, client = make({"LOG_LEVEL": "info"})
    capsys.readouterr()
    client.post(
        KYVERNO_PATH,
        data=json.dumps({"request": review(signed("logged", key="hidden-value")), "policy": policy()}),
        headers={"Authorization": "Bearer hidden-token"},
    )
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    (decision,) = [line for line in lines if line.get("message") == "decision"]
    assert (
        decision["decision"] == "allow" and decision["reason"] == "verified" and decision["class"] == "valid-signature"
    )
    assert decision["object"] == {"kind": "ConfigMap", "namespace": "ns", "name": "logged"}
    assert decision["cached"] is False and decision["latency_ms"] > 0
    text = json.dumps(lines)
    assert "hidden-value" not in text and "hidden-token" not in text


def test_unsafe_http_warns_on_every_request(capsys: pytest.CaptureFixture[str]) -> None:
    _app, client = make({"UNSAFE_HTTP": True})
    capsys.readouterr()
    for _ in range(3):
        client.get("/healthz")
    warnings = [line for line in capsys.readouterr().err.splitlines() if "--unsafe-http" in line]
    assert len(warnings) == 3


def test_the_openapi_document_describes_every_route_the_app_serves() -> None:
    import yaml

    from tests.support.data import REPO

    document = yaml.safe_load((REPO / "docs" / "openapi.yaml").read_text())
    app, _ = make()
    served = {(rule.rule, method.lower()) for rule in app.url_map.iter_rules() if rule.endpoint != "static"
              for method in rule.methods or () if method not in ("HEAD", "OPTIONS")}  # fmt: skip
    documented = {(path, method) for path, item in document["paths"].items() for method in item}
    assert documented == served
    verdict = document["components"]["schemas"]["Verdict"]
    assert (
        set(verdict["required"])
        == set(verdict["properties"])
        == {"allowed", "verified", "reason", "message", "signers", "diff"}
    )
