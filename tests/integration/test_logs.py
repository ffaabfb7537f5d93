"""No secret and no object content in the service's logs: a full run, then a grep.

The real server runs at log level ``debug`` with everything switched on -- client
certificates, bearer tokens (TokenReview through the fake API server), a cluster for
dry-runs -- and gets traffic of every kind on both routes: verified, tampered,
unsigned, garbage, dry-run verdicts, a dry-run the API server fails, a caller with a
bearer token. Unique marker strings ride in every place a secret or object content
travels: the Authorization header, cookies and other headers, data values, annotation
and label values, the requester's name, the request uid, the signature envelope, the
policy's key, and the service's own API-server token. The answers show the markers
reached the service; the log must hold none of them.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakeapi import FakeApiServer, recording
from tests.integration.server import Server, running_server
from tests.support import configmap, make_key, public_key_pem, sign

pytestmark = pytest.mark.integration

GATEKEEPER = "/v1/gatekeeper/verify"
KYVERNO = "/v1/kyverno/verify"
MARK = "m4rk3r" + uuid.uuid4().hex[:12]
KEY = make_key("ecdsa-p256", 11)
POLICY = {"keys": [public_key_pem(KEY)]}
DRY_RUN_POLICY = {"keys": [public_key_pem(KEY)], "dryRun": {"enabled": True}}

#: Where each marker travels.
MARKERS = {
    "bearer token": f"eyJhbGciOiJSUzI1NiJ9.{MARK}tok.sig",
    "cookie": f"{MARK}cookie",
    "api key header": f"{MARK}apikey",
    "user agent": f"{MARK}agent",
    "forwarded-for header": f"{MARK}xff",
    "data value": f"{MARK}data",
    "tampered value": f"{MARK}tampered",
    "annotation value": f"{MARK}annotation",
    "label value": f"{MARK}label",
    "requester": f"{MARK}user@example.com",
    "request uid": f"{MARK}uid",
    "garbage body": f"{MARK}garbage",
    "dry-run change": f"{MARK}image",
}


def signed_object() -> dict[str, Any]:
    obj = configmap("logged", "team", secret=MARKERS["data value"])
    obj["metadata"]["labels"] = {"tier": MARKERS["label value"]}
    obj["metadata"]["annotations"] = {"example.com/note": MARKERS["annotation value"]}
    return sign(obj, KEY)[0]


def figure1(change: str | None = None) -> dict[str, Any]:
    rec = recording("deployment-seed-paper-figure1")
    (signed,) = sign(rec.request_body, KEY)
    admitted = copy.deepcopy(rec.body)
    admitted["metadata"]["annotations"] = signed["metadata"]["annotations"]
    admitted["metadata"]["uid"] = str(uuid.uuid4())
    if change:
        admitted["spec"]["template"]["spec"]["containers"][0]["image"] = change
    return admitted


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {"uid": MARKERS["request uid"], "operation": "UPDATE", "namespace": obj["metadata"].get("namespace", "default"),
            "name": obj["metadata"]["name"], "userInfo": {"username": MARKERS["requester"], "groups": ["system:authenticated"]},
            "object": obj}  # fmt: skip


def gatekeeper_body(*reviews: dict[str, Any], policy: dict[str, Any] = POLICY) -> bytes:
    keys = [json.dumps({"review": r, "policy": policy}) for r in reviews]
    return json.dumps({"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest", "request": {"keys": keys}}).encode()


HEADERS = {
    "Authorization": f"Bearer {MARKERS['bearer token']}",
    "Cookie": f"session={MARKERS['cookie']}",
    "X-Api-Key": MARKERS["api key header"],
    "User-Agent": MARKERS["user agent"],
    "X-Forwarded-For": MARKERS["forwarded-for header"],
}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


@pytest.fixture(scope="module")
def server(fake: FakeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    kubeconfig = fake.kubeconfig(Path(tmp_path_factory.mktemp("kube")) / "kubeconfig")
    env = {"MANIFEST_PROVIDER_LOG_LEVEL": "debug", "MANIFEST_PROVIDER_KUBECONFIG": str(kubeconfig),
           "MANIFEST_PROVIDER_TOKEN_AUDIENCE": "kyverno-svc.kyverno.io"}  # fmt: skip
    with running_server(env=env) as started:
        yield started


def post(server: Server, path: str, body: bytes, *, client_cert: bool = True) -> tuple[int, bytes]:
    status, _, data = server.request("POST", path, body, HEADERS, client_cert=client_cert)
    return status, data


def test_a_full_run_logs_decisions_but_no_secret_and_no_object_content(server: Server, fake: FakeApiServer) -> None:
    obj = signed_object()
    tampered = copy.deepcopy(obj)
    tampered["data"]["secret"] = MARKERS["tampered value"]
    unsigned = configmap("unsigned", "team", secret=MARKERS["data value"])
    answers: list[bytes] = []

    # Both routes, every kind of verdict.
    for path, body in (
        (GATEKEEPER, gatekeeper_body(review(obj), review(tampered), review(unsigned))),
        (KYVERNO, json.dumps({"request": review(tampered), "policy": POLICY}).encode()),
        (KYVERNO, json.dumps({"request": review(obj), "policy": POLICY}).encode()),
        (GATEKEEPER, json.dumps({"request": {"keys": [f"{{not json {MARKERS['garbage body']}"]}}).encode()),
        (GATEKEEPER, f"{{garbage {MARKERS['garbage body']}".encode()),
        (KYVERNO, f"{{garbage {MARKERS['garbage body']}".encode()),
        (KYVERNO, json.dumps({"request": review(obj), "policy": {"keys": [f"-----BEGIN PUBLIC KEY-----\n{MARKERS['garbage body']}\n-----END PUBLIC KEY-----\n"]}}).encode()),
        # Dry-run: a verdict through the cluster, a change the dry-run cannot explain.
        (GATEKEEPER, gatekeeper_body(review(figure1()), review(figure1(MARKERS["dry-run change"])), policy=DRY_RUN_POLICY)),
    ):
        status, data = post(server, path, body)
        assert status == 200, data[:300]
        answers.append(data)
    # The API server fails a dry-run: a systemError whose detail is logged.
    fake.fault = "500"
    try:
        status, data = post(server, GATEKEEPER, gatekeeper_body(review(figure1()), policy=DRY_RUN_POLICY))
    finally:
        fake.fault = None
    assert status == 200 and b"dry-run-failed" in data
    # A caller without a certificate, with a bearer token the cluster cannot review (503, no detail).
    status, data = post(server, KYVERNO, json.dumps({"request": review(obj), "policy": POLICY}).encode(), client_cert=False)
    assert status == 503 and MARK.encode() not in data

    # The markers reached the service: the tampered value and the dry-run change come back in diffs.
    every_answer = b"".join(answers)
    assert MARKERS["tampered value"].encode() in every_answer
    assert MARKERS["dry-run change"].encode() in every_answer

    log = server.log_text()
    decisions = [r for r in server.log_records() if r.get("message") == "decision"]
    assert len(decisions) == 7, log[-3000:]  # 3 + 1 + 1 + 2: one per verdict, none for errors
    assert {r["reason"] for r in decisions} >= {"verified", "content-mismatch", "unsigned"}
    assert {"kind": "ConfigMap", "namespace": "team", "name": "logged"} in [r["object"] for r in decisions]
    assert any(r.get("reason") == "dry-run-failed" for r in server.log_records())
    leaked = {where: marker for where, marker in MARKERS.items() if marker in log}
    assert not leaked, leaked
    assert MARK not in log
    # Nor the service's own credential for the API server, the signature envelope or the policy's key.
    envelope = obj["metadata"]["annotations"]
    for secret in (fake.token, envelope["cosign.sigstore.dev/signature"][:40], envelope["cosign.sigstore.dev/message"][:40],
                   public_key_pem(KEY).splitlines()[1]):  # fmt: skip
        assert secret not in log
