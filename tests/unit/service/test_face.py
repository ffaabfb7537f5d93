"""The service's thin face: per-app state, cache keys from the wire modules, one error ladder per route family,
one way to build a dry-runner."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from provider.errors import ConfigError, PolicyError, RequestError
from provider.kube.dryrun import dry_runner_for
from provider.kube.tokens import api_client_for
from provider.limits import Limits
from provider.policy.schema import Policy
from provider.review import Review
from provider.service.app import create_app
from provider.service.checks import run_check
from provider.service.config import load_config
from provider.service.routes import GATEKEEPER_PATH, KYVERNO_PATH
from provider.service.state import Service
from provider.service.wire import gatekeeper, kyverno
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign


def policy(**extra: Any) -> dict[str, Any]:
    return {"keys": [public_key_pem(make_key())], **extra}


def signed() -> dict[str, Any]:
    return sign(configmap("cm", "ns", key="value"))[0]


def provider_request(*keys: str) -> dict[str, Any]:
    return {
        "apiVersion": "externaldata.gatekeeper.sh/v1beta1",
        "kind": "ProviderRequest",
        "request": {"keys": list(keys)},
    }


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {"uid": "u", "operation": "CREATE", "userInfo": {"username": "alice"}, "namespace": "ns", "object": obj}


# --- per-app state ----------------------------------------------------------------


def test_each_service_compiles_policies_into_its_own_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[int] = []
    real = Policy.from_dict

    def counting(raw: Any, **options: Any) -> Policy:
        compiled.append(1)
        return real(raw, **options)

    monkeypatch.setattr(Policy, "from_dict", counting)
    first = Service(load_config({}))
    obj, pol = signed(), policy()
    for _ in range(2):
        assert run_check("manifest", Review.for_object(obj), pol, first.context()).reason == "verified"
    assert len(compiled) == 1
    # A second service, of another size, neither resets the first one's cache nor shares it.
    second = Service(load_config({"POLICY_CACHE_ENTRIES": 1}))
    run_check("manifest", Review.for_object(obj), pol, first.context())
    assert len(compiled) == 1
    run_check("manifest", Review.for_object(obj), pol, second.context())
    assert len(compiled) == 2


# --- cache keys come from the wire modules ----------------------------------------


def test_the_routes_cache_verdicts_under_the_wire_modules_keys() -> None:
    app = create_app({"TESTING": True, "LOG_LEVEL": "warning"})
    service: Service = app.extensions["manifest_provider"]
    client = app.test_client()
    key = json.dumps({"review": review(signed()), "policy": policy()})
    assert client.post(GATEKEEPER_PATH, json=provider_request(key)).status_code == 200
    body = json.dumps({"request": review(signed()), "policy": policy()}).encode()
    assert client.post(KYVERNO_PATH, data=body).status_code == 200
    gatekeeper_hit = service.cache.get(gatekeeper.cache_key(key))
    kyverno_hit = service.cache.get(kyverno.read_body(body)[1])
    assert gatekeeper_hit is not None and gatekeeper_hit.result.reason == "verified"
    assert kyverno_hit is not None and kyverno_hit.result.reason == "verified"
    service.dispatcher.shutdown()


# --- the wire formats read their fields once ----------------------------------------


@pytest.mark.parametrize(
    ("read", "text", "message"),
    [
        (gatekeeper.read_key, '{"review": {}, "polcy": {}}', "the key: unknown field 'polcy'; did you mean 'policy'?"),
        (
            lambda text: kyverno.read_body(text.encode()),
            '{"request": {}, "chek": "manifest"}',
            "the request body: unknown field 'chek'; did you mean 'check'?",
        ),
    ],
    ids=["gatekeeper-key", "kyverno-body"],
)
def test_an_unknown_field_is_named_with_a_close_match_by_both_formats(read: Any, text: str, message: str) -> None:
    with pytest.raises(RequestError, match=re.escape(message)):
        read(text)


# --- one error ladder per route family ----------------------------------------------


def test_a_bug_while_shaping_the_answer_is_the_routes_own_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: Any) -> Any:
        raise ZeroDivisionError("internal detail")

    monkeypatch.setattr(gatekeeper, "encode_response", broken)
    monkeypatch.setattr(kyverno, "encode_answer", broken)
    app = create_app({"TESTING": True, "LOG_LEVEL": "warning"})
    client = app.test_client()
    key = json.dumps({"review": review(signed()), "policy": policy()})
    answer = client.post(GATEKEEPER_PATH, json=provider_request(key))
    assert answer.status_code == 200
    assert answer.get_json()["response"] == {
        "idempotent": True,
        "items": [],
        "systemError": "internal-error: see the service's log",
    }
    denial = client.post(KYVERNO_PATH, data=json.dumps({"request": review(signed()), "policy": policy()}))
    assert denial.status_code == 200
    assert (denial.get_json()["allowed"], denial.get_json()["reason"]) == (False, "internal-error")
    assert b"internal detail" not in answer.data + denial.data
    app.extensions["manifest_provider"].dispatcher.shutdown()


def test_the_app_is_named_after_its_module_and_serves_no_files() -> None:
    app = create_app({"TESTING": True, "LOG_LEVEL": "warning"})
    assert app.import_name == "provider.service.app"
    assert "static" not in {rule.endpoint for rule in app.url_map.iter_rules()}
    assert app.test_client().get("/static/app.py").status_code == 404


# --- one way to build a dry-runner ------------------------------------------------


def kubeconfig(directory: Path) -> Path:
    path = directory / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "team"}}],
    }))  # fmt: skip
    return path


@pytest.mark.parametrize("in_cluster", [False, True], ids=["cli", "service"])
def test_a_named_kubeconfig_is_used_by_both_faces(tmp_path: Path, in_cluster: bool) -> None:
    path = kubeconfig(tmp_path)
    with dry_runner_for(str(path), Limits(dry_run_timeout=0.7), in_cluster=in_cluster) as runner:
        assert str(path) in runner.source and runner.default_namespace == "team"
        assert runner.timeout == 0.7


def test_without_a_kubeconfig_the_cli_reads_kubeconfig_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = kubeconfig(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # a pod's environment does not change the CLI's default
    with dry_runner_for(None) as runner:
        assert str(path) in runner.source


def test_without_a_kubeconfig_the_service_uses_the_pods_service_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path)))  # never read by the service
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(PolicyError, match="in-cluster configuration"):
        dry_runner_for(None, in_cluster=True)


def test_the_secret_reading_client_needs_a_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="no cluster is configured"):
        api_client_for(None)
