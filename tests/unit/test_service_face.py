"""The service's thin face: per-app state, one way to build a dry-runner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from provider.errors import ConfigError, PolicyError
from provider.kube.dryrun import dry_runner_for
from provider.kube.tokens import api_client_for
from provider.limits import Limits
from provider.policy import Policy
from provider.review import Review
from provider.service.app import Service
from provider.service.checks import run_check
from provider.service.config import load_config
from tests.support import configmap, make_key, public_key_pem, sign


def policy(**extra: Any) -> dict[str, Any]:
    return {"keys": [public_key_pem(make_key())], **extra}


def signed() -> dict[str, Any]:
    return sign(configmap("cm", "ns", key="value"))[0]


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
