"""The neighbouring checks through the real HTTPS service (gunicorn, TLS, client certificates).

``cluster-info`` reads bootstrap-token Secrets with the real kubernetes client
from the fake API server (:class:`tests.support.fakeapi.TokenApi`),
which the service reaches through ``MANIFEST_PROVIDER_KUBECONFIG``;
``kubelet-serving-csr`` needs no cluster. Vectors: the JWS and CSRs the unit
tests build (JWS per RFC 7515 in the test, CSRs with ``cryptography``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import bootstrap
from tests.support import csr as csrs
from tests.support.bootstrap import (
    KUBECONFIG,
    OTHER_ID,
    OTHER_SECRET,
    SIG_KEY,
    TOKEN_ID,
    TOKEN_SECRET,
    cluster_info,
    jws,
    secret,
)
from tests.support.fakeapi import TokenApi
from tests.support.server import VERDICT_DEADLINE, Server, running_server

pytestmark = pytest.mark.integration

GATEKEEPER = "/v1/gatekeeper/verify"
KYVERNO = "/v1/kyverno/verify"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, TokenApi]]:
    """The service with a cluster: an API server holding token abcdef (valid) and 07401b (expired)."""
    expired = secret(expiration="2020-01-01T00:00:00Z", **{"token-id": OTHER_ID, "token-secret": OTHER_SECRET})
    expired["metadata"]["name"] = f"bootstrap-token-{OTHER_ID}"
    api = TokenApi(secrets={f"bootstrap-token-{TOKEN_ID}": secret(), f"bootstrap-token-{OTHER_ID}": expired}).start()
    kubeconfig = api.kubeconfig(Path(tmp_path_factory.mktemp("kube")) / "kubeconfig")
    try:
        with running_server(env={"MANIFEST_PROVIDER_KUBECONFIG": str(kubeconfig), **VERDICT_DEADLINE}) as server:
            yield server, api
    finally:
        api.stop()


def admission(
    obj: dict[str, Any], operation: str = "UPDATE", username: str = "system:serviceaccount:kube-system:bootstrap-signer"
) -> dict[str, Any]:
    meta = obj.get("metadata", {})
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    return {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": obj.get("kind")},
        "operation": operation,
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": obj,
    }


def key(check: str, review: dict[str, Any], policy: Any = None) -> str:
    return json.dumps({"check": check, "review": review, "policy": policy or {}})


def ask_gatekeeper(server: Server, keys: list[str]) -> dict[str, Any]:
    body = {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest", "request": {"keys": keys}}
    answer: dict[str, Any] = server.post_json(GATEKEEPER, body)["response"]
    return answer


def value(item: dict[str, Any]) -> dict[str, Any]:
    assert "value" in item, item
    result: dict[str, Any] = item["value"]
    assert set(result) == {"allowed", "verified", "reason", "message", "signers", "diff"}
    return result


# --- cluster-info ------------------------------------------------------------------------


def test_cluster_info_batch(cluster: tuple[Server, TokenApi]) -> None:
    server, api = cluster
    tampered = cluster_info(
        {"kubeconfig": KUBECONFIG.replace("10.138.0.2", "10.66.6.6"), SIG_KEY: jws(KUBECONFIG, TOKEN_ID, TOKEN_SECRET)}
    )
    by_expired = cluster_info(
        {"kubeconfig": KUBECONFIG, f"jws-kubeconfig-{OTHER_ID}": jws(KUBECONFIG, OTHER_ID, OTHER_SECRET)}
    )
    by_unknown = cluster_info(
        {"kubeconfig": KUBECONFIG, "jws-kubeconfig-zzzzzz": jws(KUBECONFIG, "zzzzzz", TOKEN_SECRET)}
    )
    keys = [
        key("cluster-info", admission(cluster_info())),
        key("cluster-info", admission(tampered)),
        key("cluster-info", admission(by_expired)),
        key("cluster-info", admission(by_unknown)),
        key("cluster-info", admission(cluster_info({"kubeconfig": KUBECONFIG}))),
        key("cluster-info", admission(cluster_info()), {"tokenIds": [OTHER_ID]}),
        key("cluster-info", admission(cluster_info()), {"tokenIDs": [TOKEN_ID]}),
        key("cluster-info", {"object": cluster_info()}),  # Gatekeeper audit: no user, no operation
    ]
    answer = ask_gatekeeper(server, keys)
    assert answer["systemError"] == ""
    items = answer["items"]
    assert [i["key"] for i in items] == keys
    ok, changed, expired, unknown, unsigned, not_allowed, typo, audited = items
    assert value(ok)["allowed"] is True and value(ok)["reason"] == "verified"
    assert value(ok)["signers"] == [{"bootstrapToken": TOKEN_ID}]
    assert (value(changed)["allowed"], value(changed)["reason"]) == (False, "signature-invalid")
    assert (value(expired)["allowed"], value(expired)["reason"]) == (False, "token-expired")
    assert "2020-01-01T00:00:00+00:00" in value(expired)["message"]
    assert (value(unknown)["allowed"], value(unknown)["reason"]) == (False, "token-unknown")
    assert (value(unsigned)["allowed"], value(unsigned)["reason"]) == (True, "no-signatures")
    assert (value(not_allowed)["allowed"], value(not_allowed)["reason"]) == (False, "token-unknown")
    assert "value" not in typo and typo["error"].startswith(
        "policy-invalid: the cluster-info policy: unknown field 'tokenIDs'; did you mean 'tokenIds'?"
    )
    assert value(audited)["reason"] == "verified"
    read = [r.path.rsplit("/", 1)[-1] for r in api.requests if r.method == "GET" and "/secrets/" in r.path]
    assert {f"bootstrap-token-{TOKEN_ID}", f"bootstrap-token-{OTHER_ID}", "bootstrap-token-zzzzzz"} <= set(read)


def test_every_broken_signature_through_gatekeeper(cluster: tuple[Server, TokenApi]) -> None:
    # The library's table of JWS breaks (tests/support/bootstrap.py) in one batch, after a valid
    # control: the same reasons must come back through TLS, the wire format and the token Secrets the
    # service reads from the API server. No case needs token 07401b (expired here) to verify.
    server, _ = cluster
    cases = [("valid", cluster_info()["data"], "verified"), *bootstrap.BROKEN]
    keys = [key("cluster-info", admission(cluster_info(data))) for _, data, _ in cases]
    answer = ask_gatekeeper(server, keys)
    assert answer["systemError"] == ""
    got = {case[0]: value(item)["reason"] for case, item in zip(cases, answer["items"], strict=True)}
    assert got == {case: reason for case, _, reason in cases}
    assert value(answer["items"][0])["allowed"] is True
    for (case, _, _), item in zip(cases[1:], answer["items"][1:], strict=True):
        assert (value(item)["allowed"], value(item)["verified"]) == (False, False), case
        assert value(item)["message"].startswith("ConfigMap kube-public/cluster-info"), case
    assert TOKEN_SECRET not in json.dumps(answer)


def test_cluster_info_verdicts_are_not_cached(cluster: tuple[Server, TokenApi]) -> None:
    server, api = cluster
    the_key = key("cluster-info", admission(cluster_info(), username="cache-test"))
    assert value(ask_gatekeeper(server, [the_key])["items"][0])["reason"] == "verified"
    token = api.secrets.pop(f"bootstrap-token-{TOKEN_ID}")
    try:
        # The token Secret is gone (rotated out): the same key must not get the old verdict.
        assert value(ask_gatekeeper(server, [the_key])["items"][0])["reason"] == "token-unknown"
    finally:
        api.secrets[f"bootstrap-token-{TOKEN_ID}"] = token


def test_cluster_info_when_the_api_server_is_down_is_a_system_error(tmp_path: Path) -> None:
    api = TokenApi(secrets={f"bootstrap-token-{TOKEN_ID}": secret()}).start()
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    api.stop()
    with running_server(env={"MANIFEST_PROVIDER_KUBECONFIG": str(kubeconfig), **VERDICT_DEADLINE}) as server:
        answer = ask_gatekeeper(server, [key("cluster-info", admission(cluster_info()))])
        assert answer["items"] == []
        assert "bootstrap-token-abcdef" in answer["systemError"]
        # Unsigned needs no token: still answered.
        unsigned = ask_gatekeeper(server, [key("cluster-info", admission(cluster_info({"kubeconfig": KUBECONFIG})))])
        assert value(unsigned["items"][0])["reason"] == "no-signatures"


def test_cluster_info_through_kyverno(cluster: tuple[Server, TokenApi]) -> None:
    server, _ = cluster
    body = {"request": admission(cluster_info({"kubeconfig": KUBECONFIG + "# edited\n", SIG_KEY: jws(KUBECONFIG, TOKEN_ID, TOKEN_SECRET)})),
            "policy": {}, "check": "cluster-info"}  # fmt: skip
    status, _, data = server.post(KYVERNO, json.dumps(body).encode())  # no Content-Type, as Kyverno sends it
    assert status == 200
    answer = json.loads(data)
    assert (answer["allowed"], answer["reason"]) == (False, "signature-invalid")
    assert "statusCode" not in answer
    assert answer["message"].startswith("ConfigMap kube-public/cluster-info: 1 of 1 signatures refused")


# --- kubelet-serving CSRs ----------------------------------------------------------------


def csr_review(obj: dict[str, Any]) -> dict[str, Any]:
    return admission(obj, operation="CREATE", username=obj["spec"]["username"])


def test_every_broken_csr_rule_through_gatekeeper(cluster: tuple[Server, TokenApi]) -> None:
    server, _ = cluster
    cases = [("compliant", csrs.csr(), {}, "verified"), *csrs.BROKEN]
    keys = [key("kubelet-serving-csr", csr_review(obj), policy) for _, obj, policy, _ in cases]
    answer = ask_gatekeeper(server, keys)
    assert answer["systemError"] == ""
    got = {case[0]: value(item)["reason"] for case, item in zip(cases, answer["items"], strict=True)}
    assert got == {case[0]: case[3] for case in cases}
    assert value(answer["items"][0])["allowed"] is True
    assert not any(value(i)["allowed"] for i in answer["items"][1:])


def test_csr_policy_and_check_errors_are_per_key(cluster: tuple[Server, TokenApi]) -> None:
    server, _ = cluster
    keys = [
        key("kubelet-serving-csr", csr_review(csrs.csr()), {"providerRegex": "(unclosed"}),
        key("kubelet-serving-csr", csr_review(csrs.csr()), {"bypassDnsResolution": True}),
        key("kubelet-serving-csrs", csr_review(csrs.csr())),
        key("kubelet-serving-csr", csr_review(csrs.csr())),
    ]
    items = ask_gatekeeper(server, keys)["items"]
    assert items[0]["error"].startswith("policy-invalid: providerRegex: not a valid regular expression")
    assert items[1]["error"].startswith(
        "policy-invalid: the kubelet-serving-csr policy: unknown field 'bypassDnsResolution'"
    )
    assert items[2]["error"].startswith("request-invalid: unknown check 'kubelet-serving-csrs'")
    assert value(items[3])["reason"] == "verified"


def test_csr_requester_and_scope_through_kyverno(cluster: tuple[Server, TokenApi]) -> None:
    server, _ = cluster
    forged = admission(csrs.csr(), operation="CREATE", username="system:node:worker-2")
    other_signer = csr_review(
        csrs.csr(usages=["digital signature", "client auth"], signer="kubernetes.io/kube-apiserver-client-kubelet")
    )
    for review, allowed, reason in ((forged, False, "csr-requester-mismatch"), (other_signer, True, "out-of-scope")):
        status, _, data = server.post(
            KYVERNO, json.dumps({"request": review, "policy": {}, "check": "kubelet-serving-csr"}).encode()
        )
        assert status == 200
        answer = json.loads(data)
        assert (answer["allowed"], answer["reason"]) == (allowed, reason), answer["message"]


def test_csr_with_dns_resolution_through_the_service(cluster: tuple[Server, TokenApi]) -> None:
    server, _ = cluster
    ok = csrs.localhost_csr()
    stray = csrs.localhost_csr(("127.0.0.1", "10.0.0.5"))
    policy = {"resolveDnsNames": True, "providerIpPrefixes": ["127.0.0.0/8", "10.0.0.0/8"]}
    items = ask_gatekeeper(server, [key("kubelet-serving-csr", csr_review(o), policy) for o in (ok, stray)])["items"]
    assert [value(i)["reason"] for i in items] == ["verified", "csr-ip-not-resolved"]
