"""provider.kube.tokens: token Secrets read with the real kubernetes client from a fake API server over HTTPS."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provider.errors import TransientError
from provider.kube.tokens import KubeTokenSource
from provider.neighbours.bootstrap import BootstrapToken
from provider.review import Review
from provider.service.checks import CheckContext, check_cluster_info
from tests.support.bootstrap import (
    KUBECONFIG,
    NOW,
    OTHER_ID,
    SIG_KEY,
    TOKEN_ID,
    TOKEN_SECRET,
    cluster_info,
    jws,
    secret,
)
from tests.support.fakeapi import SECRET_PATH, TokenApi


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[TokenApi, Any]]:
    from kubernetes import config

    server = TokenApi(secrets={f"bootstrap-token-{TOKEN_ID}": secret()}).start()
    client = config.new_client_from_config(config_file=str(server.kubeconfig(tmp_path / "kubeconfig")))
    try:
        yield server, client
    finally:
        client.close()
        server.stop()


def ctx(client: Any) -> CheckContext:
    return CheckContext(kube_client=client, now=NOW)


def test_lookup_reads_the_token_secret(api: tuple[TokenApi, Any]) -> None:
    server, client = api
    token = KubeTokenSource(client).lookup(TOKEN_ID)
    assert token == BootstrapToken(
        TOKEN_ID, TOKEN_SECRET, signing=True, origin="Secret kube-system/bootstrap-token-abcdef"
    )
    assert [r.path for r in server.requests] == [SECRET_PATH + f"bootstrap-token-{TOKEN_ID}"]
    assert KubeTokenSource(client).lookup("zzzzzz") is None


def test_lookup_through_a_core_v1_api(api: tuple[TokenApi, Any]) -> None:
    from kubernetes import client as k8s

    _, client = api
    assert KubeTokenSource(k8s.CoreV1Api(client)).lookup(TOKEN_ID) is not None


def test_lookup_through_the_services_lazy_client(api: tuple[TokenApi, Any]) -> None:
    from provider.service.cluster import LazyClient

    _, client = api
    lazy = LazyClient(lambda: client, "cluster client", "transient-error")
    assert KubeTokenSource(lazy).lookup(TOKEN_ID) is not None


def test_check_verifies_and_is_not_cacheable(api: tuple[TokenApi, Any]) -> None:
    _, client = api
    result = check_cluster_info(
        Review(
            object=cluster_info(), operation="UPDATE", username="system:serviceaccount:kube-system:bootstrap-signer"
        ),
        {},
        ctx(client),
    )
    assert (result.allowed, result.verified, result.reason, result.used_cluster) == (True, True, "verified", True)


def test_deleted_secret_means_unknown_token(api: tuple[TokenApi, Any]) -> None:
    server, client = api
    server.secrets.clear()
    result = check_cluster_info(Review.for_object(cluster_info()), {}, ctx(client))
    assert (result.allowed, result.reason) == (False, "token-unknown")
    assert "bootstrap-token-<id>" in result.message


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"expiration": "2026-01-15T11:00:00Z"}, "token-expired"),
        ({"usage-bootstrap-signing": "false"}, "token-not-for-signing"),
    ],
    ids=["expired", "not-for-signing"],
)
def test_secret_fields_are_honoured(api: tuple[TokenApi, Any], fields: dict[str, str], reason: str) -> None:
    server, client = api
    server.secrets[f"bootstrap-token-{TOKEN_ID}"] = secret(**fields)
    result = check_cluster_info(Review.for_object(cluster_info()), {}, ctx(client))
    assert (result.allowed, result.reason, result.used_cluster) == (False, reason, True)


def test_secret_of_the_wrong_type_is_no_token(api: tuple[TokenApi, Any]) -> None:
    server, client = api
    server.secrets[f"bootstrap-token-{TOKEN_ID}"] = {**secret(), "type": "Opaque"}
    assert KubeTokenSource(client).lookup(TOKEN_ID) is None


def test_allow_list_is_applied_before_any_lookup(api: tuple[TokenApi, Any]) -> None:
    server, client = api
    result = check_cluster_info(Review.for_object(cluster_info()), {"tokenIds": [OTHER_ID]}, ctx(client))
    assert (result.reason, result.used_cluster) == ("token-unknown", False)
    assert server.requests == []


def test_unsigned_needs_no_lookup(api: tuple[TokenApi, Any]) -> None:
    server, client = api
    result = check_cluster_info(Review.for_object(cluster_info({"kubeconfig": KUBECONFIG})), {}, ctx(client))
    assert (result.reason, result.used_cluster) == ("no-signatures", False)
    assert server.requests == []


@pytest.mark.parametrize("fault", ["forbidden", "server-error", "slow", "down"])
def test_cluster_trouble_is_transient(api: tuple[TokenApi, Any], fault: str) -> None:
    server, client = api
    if fault == "forbidden":
        server.forbidden.add(f"bootstrap-token-{TOKEN_ID}")
    elif fault == "server-error":
        server.answer = lambda logged: (
            500,
            {"kind": "Status", "status": "Failure", "code": 500, "reason": "InternalError"},
            {},
        )  # type: ignore[method-assign]
    elif fault == "slow":
        server.fault, server.fault_scope, server.slow_seconds = "slow", "all", 2.0
    else:
        server.stop()
    with pytest.raises(TransientError) as caught:
        KubeTokenSource(client, timeout=0.3).lookup(TOKEN_ID)
    assert "bootstrap-token-abcdef" in caught.value.message
    assert TOKEN_SECRET not in caught.value.message
    if fault == "forbidden":
        assert "403" in caught.value.message


def test_no_cluster_configured() -> None:
    with pytest.raises(TransientError, match="no Kubernetes client"):
        check_cluster_info(Review.for_object(cluster_info()), {}, CheckContext(now=NOW))
    unsigned = check_cluster_info(
        Review.for_object(cluster_info({"kubeconfig": KUBECONFIG})), {}, CheckContext(now=NOW)
    )
    assert unsigned.reason == "no-signatures"


def test_clock_comes_from_the_context(api: tuple[TokenApi, Any]) -> None:
    server, client = api
    server.secrets[f"bootstrap-token-{TOKEN_ID}"] = secret(expiration="2026-01-15T12:00:01Z")
    review = Review.for_object(
        cluster_info({"kubeconfig": KUBECONFIG, SIG_KEY: jws(KUBECONFIG, TOKEN_ID, TOKEN_SECRET)})
    )
    assert check_cluster_info(review, {}, ctx(client)).verified
    later = CheckContext(kube_client=client, now=NOW + dt.timedelta(seconds=1))
    assert check_cluster_info(review, {}, later).reason == "token-expired"
    assert (
        base64.b64decode(server.secrets[f"bootstrap-token-{TOKEN_ID}"]["data"]["expiration"]) == b"2026-01-15T12:00:01Z"
    )
