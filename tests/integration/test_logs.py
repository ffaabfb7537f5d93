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

The neighbouring checks get the same treatment: cluster-info ConfigMaps signed with
bootstrap tokens the service reads from the API server (a Secret with base64 ``data``
and one with the secret written inline in ``stringData``), a token pasted whole into a
policy by mistake, and kubelet-serving CSRs. No token secret, ``id.secret`` string, JWS
value, kubeconfig or CSR PEM may reach the log.
"""

from __future__ import annotations

import base64
import copy
import json
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import csr as csrs
from tests.support.bootstrap import b64u, cluster_info, jws, kubeconfig
from tests.support.fakeapi import FakeApiServer, TokenApi, recording
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign
from tests.support.server import VERDICT_DEADLINE, Server, running_server

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
    return json.dumps(
        {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest", "request": {"keys": keys}}
    ).encode()


HEADERS = {
    "Authorization": f"Bearer {MARKERS['bearer token']}",
    "Cookie": f"session={MARKERS['cookie']}",
    "X-Api-Key": MARKERS["api key header"],
    "User-Agent": MARKERS["user agent"],
    "X-Forwarded-For": MARKERS["forwarded-for header"],
}


#: Bootstrap tokens the fake API server holds, fresh each run (a hit in the log can only come from here):
#: one Secret as the API server returns it (base64 ``data``), one with the secret inline (``stringData``).
TOKEN_ID, TOKEN_SECRET = "l0gged", secrets.token_hex(8)
INLINE_ID, INLINE_SECRET = "1nl1ne", secrets.token_hex(8)


def token_secret(token_id: str, secret: str, *, inline: bool = False) -> dict[str, Any]:
    values = {"token-id": token_id, "token-secret": secret, "usage-bootstrap-signing": "true"}
    data = (
        {"stringData": values}
        if inline
        else {"data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}}
    )
    return {"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"}, **data}  # fmt: skip


def token_api() -> TokenApi:
    """The replaying fake API server, plus the bootstrap-token Secrets the cluster-info check reads."""
    tokens = {f"bootstrap-token-{TOKEN_ID}": token_secret(TOKEN_ID, TOKEN_SECRET),
              f"bootstrap-token-{INLINE_ID}": token_secret(INLINE_ID, INLINE_SECRET, inline=True)}  # fmt: skip
    return TokenApi(secrets=tokens)


#: One fake API server (holding those tokens) for the module's one real server.
pytestmark = [pytest.mark.integration, pytest.mark.fake_api(per="module", make=token_api)]


@pytest.fixture(scope="module")
def server(fake: FakeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    kubeconfig = fake.kubeconfig(Path(tmp_path_factory.mktemp("kube")) / "kubeconfig")
    env = {"MANIFEST_PROVIDER_LOG_LEVEL": "debug", "MANIFEST_PROVIDER_KUBECONFIG": str(kubeconfig),
           "MANIFEST_PROVIDER_TOKEN_AUDIENCE": "kyverno-svc.kyverno.io", **VERDICT_DEADLINE}  # fmt: skip
    with running_server(env=env) as started:
        yield started


def post(server: Server, path: str, body: bytes, *, client_cert: bool = True) -> tuple[int, bytes]:
    status, _, data = server.request("POST", path, body, HEADERS, client_cert=client_cert)
    return status, data


def log_since(server: Server, offset: int) -> tuple[str, list[dict[str, Any]]]:
    """What the server logged after ``offset`` characters, as text and as JSON records: each test reads its own traffic."""
    text = server.log_text()[offset:]
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return text, records


def test_a_full_run_logs_decisions_but_no_secret_and_no_object_content(server: Server, fake: FakeApiServer) -> None:
    offset = len(server.log_text())
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
        (
            KYVERNO,
            json.dumps(
                {
                    "request": review(obj),
                    "policy": {
                        "keys": [f"-----BEGIN PUBLIC KEY-----\n{MARKERS['garbage body']}\n-----END PUBLIC KEY-----\n"]
                    },
                }
            ).encode(),
        ),
        # Dry-run: a verdict through the cluster, a change the dry-run cannot explain.
        (
            GATEKEEPER,
            gatekeeper_body(review(figure1()), review(figure1(MARKERS["dry-run change"])), policy=DRY_RUN_POLICY),
        ),
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
    fake.fault = "500"
    try:
        status, data = post(
            server, KYVERNO, json.dumps({"request": review(obj), "policy": POLICY}).encode(), client_cert=False
        )
    finally:
        fake.fault = None
    assert status == 503 and MARK.encode() not in data

    # The markers reached the service: the tampered value and the dry-run change come back in diffs.
    every_answer = b"".join(answers)
    assert MARKERS["tampered value"].encode() in every_answer
    assert MARKERS["dry-run change"].encode() in every_answer

    log, records = log_since(server, offset)
    decisions = [r for r in records if r.get("message") == "decision"]
    assert len(decisions) == 7, log[-3000:]  # 3 + 1 + 1 + 2: one per verdict, none for errors
    assert {r["reason"] for r in decisions} >= {"verified", "content-mismatch", "unsigned"}
    assert {"kind": "ConfigMap", "namespace": "team", "name": "logged"} in [r["object"] for r in decisions]
    assert any(r.get("reason") == "dry-run-failed" for r in records)
    leaked = {where: marker for where, marker in MARKERS.items() if marker in log}
    assert not leaked, leaked
    assert MARK not in log
    # Nor the service's own credential for the API server, the signature envelope or the policy's key.
    envelope = obj["metadata"]["annotations"]
    for secret in (fake.token, envelope["cosign.sigstore.dev/signature"][:40], envelope["cosign.sigstore.dev/message"][:40],
                   public_key_pem(KEY).splitlines()[1]):  # fmt: skip
        assert secret not in log


def neighbour_review(obj: dict[str, Any], operation: str = "UPDATE", username: str | None = None) -> dict[str, Any]:
    meta = obj["metadata"]
    group, _, version = obj["apiVersion"].rpartition("/")
    return {"uid": MARKERS["request uid"], "kind": {"group": group, "version": version, "kind": obj["kind"]}, "operation": operation,
            "namespace": meta.get("namespace"), "name": meta["name"],
            "userInfo": {"username": username or MARKERS["requester"], "groups": ["system:authenticated"]}, "object": obj}  # fmt: skip


def neighbour_keys(*keys: tuple[str, dict[str, Any], dict[str, Any]]) -> bytes:
    request = {"keys": [json.dumps({"check": check, "review": rv, "policy": policy}) for check, rv, policy in keys]}
    return json.dumps(
        {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest", "request": request}
    ).encode()


def test_cluster_info_and_csr_traffic_logs_decisions_but_no_token_jws_kubeconfig_or_csr(server: Server) -> None:
    offset = len(server.log_text())
    # A kubeconfig that carries a marker (in the server address), signed by each token; then tampered.
    config = kubeconfig(server=f"https://{MARK}-api.example:6443")
    signature, inline_signature = jws(config, TOKEN_ID, TOKEN_SECRET), jws(config, INLINE_ID, INLINE_SECRET)
    signed = cluster_info({"kubeconfig": config, f"jws-kubeconfig-{TOKEN_ID}": signature})
    inline_signed = cluster_info({"kubeconfig": config, f"jws-kubeconfig-{INLINE_ID}": inline_signature})
    tampered = cluster_info({"kubeconfig": config.replace("6443", "7443"), f"jws-kubeconfig-{TOKEN_ID}": signature})
    # A CSR whose DNS SAN carries a marker, and one that breaks a rule.
    request = csrs.pem_request(dns=(f"{csrs.NODE}.{MARK}.example.com",))
    csr, masters = csrs.csr(request), csrs.csr(csrs.pem_request(orgs=("system:masters",)))
    # Someone pastes the whole token where a token id belongs: refused with policy-invalid, and
    # neither the answer (it reaches whoever's write was denied) nor the log holds any of it.
    pasted = {"tokenIds": [f"{TOKEN_ID}.{TOKEN_SECRET}"]}
    answers: list[bytes] = []

    for path, body in (
        (GATEKEEPER, neighbour_keys(("cluster-info", neighbour_review(signed), {}), ("cluster-info", neighbour_review(inline_signed), {}),
                                    ("cluster-info", neighbour_review(tampered), {}), ("cluster-info", neighbour_review(signed), pasted),
                                    ("kubelet-serving-csr", neighbour_review(csr, "CREATE", csrs.USER), {}),
                                    ("kubelet-serving-csr", neighbour_review(masters, "CREATE", csrs.USER), {}))),
        (KYVERNO, json.dumps({"request": neighbour_review(tampered), "policy": {}, "check": "cluster-info"}).encode()),
        (KYVERNO, json.dumps({"request": neighbour_review(signed), "policy": pasted, "check": "cluster-info"}).encode()),
        (KYVERNO, json.dumps({"request": neighbour_review(csr, "CREATE", csrs.USER), "policy": {}, "check": "kubelet-serving-csr"}).encode()),
    ):  # fmt: skip
        status, data = post(server, path, body)
        assert status == 200, data[:300]
        answers.append(data)

    # The service read both tokens and judged everything as the library does.
    items = json.loads(answers[0])["response"]["items"]
    assert [i.get("value", {}).get("reason") for i in items] == [
        "verified",
        "verified",
        "signature-invalid",
        None,
        "verified",
        "csr-organization-invalid",
    ]
    assert items[3]["error"].startswith("policy-invalid: tokenIds:")
    assert f"{TOKEN_ID}." not in items[3]["error"] and TOKEN_SECRET[:4] not in items[3]["error"]
    assert TOKEN_SECRET[:4] not in json.loads(answers[2])["message"]
    assert json.loads(answers[1])["reason"] == "signature-invalid"
    assert json.loads(answers[3])["reason"] == "verified"

    log, records = log_since(server, offset)
    decisions = [(r["check"], r["reason"], r["object"]["kind"]) for r in records if r.get("message") == "decision"]
    assert sorted(decisions) == sorted([
        ("cluster-info", "verified", "ConfigMap"), ("cluster-info", "verified", "ConfigMap"), ("cluster-info", "signature-invalid", "ConfigMap"),
        ("kubelet-serving-csr", "verified", "CertificateSigningRequest"),
        ("kubelet-serving-csr", "csr-organization-invalid", "CertificateSigningRequest"),
        ("cluster-info", "signature-invalid", "ConfigMap"), ("kubelet-serving-csr", "verified", "CertificateSigningRequest"),
    ]), log[-3000:]  # fmt: skip
    assert {"kind": "ConfigMap", "namespace": "kube-public", "name": "cluster-info"} in [
        r["object"] for r in records if "object" in r
    ]
    never = {
        "token secret": TOKEN_SECRET,
        "inline token secret": INLINE_SECRET,
        "token secret, base64 as the Secret holds it": base64.b64encode(TOKEN_SECRET.encode()).decode(),
        # A whole token pasted into tokenIds: not even a part of the secret may follow its id.
        "start of the token secret": f"{TOKEN_ID}.{TOKEN_SECRET[:4]}",
        "start of the inline token secret": INLINE_SECRET[:10],
        "JWS value": signature,
        "JWS MAC": signature.split("..")[1],
        "inline JWS MAC": inline_signature.split("..")[1],
        "a marker (kubeconfig address, CSR DNS SAN, requester, uid)": MARK,
        "kubeconfig CA": config.split("certificate-authority-data: ")[1][:40],
        "kubeconfig, base64 as signed": b64u(config.encode())[:40],
        "CSR PEM": request.decode().splitlines()[1],
        "CSR PEM header": "CERTIFICATE REQUEST",
        "CSR as spec.request holds it": csr["spec"]["request"][60:120],
    }
    leaked = {where: text for where, text in never.items() if text in log}
    assert not leaked, leaked
