"""The real service over TLS: gunicorn, client certificates, both wire formats, limits and deadlines."""

from __future__ import annotations

import contextlib
import copy
import http.client
import json
import socket
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from provider.service.devcerts import make_dev_pki
from tests.support.data import KYVERNO
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign
from tests.support.server import START_TIMEOUT, Server, command, running_server

pytestmark = pytest.mark.integration

GATEKEEPER = "/v1/gatekeeper/verify"
KYVERNO_ROUTE = "/v1/kyverno/verify"


# --- building requests ------------------------------------------------------------


def policy(**extra: Any) -> dict[str, Any]:
    return {"keys": [public_key_pem(make_key())], **extra}


def admission(obj: dict[str, Any], **fields: Any) -> dict[str, Any]:
    meta = obj.get("metadata", {})
    return {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": obj.get("kind")},
        "operation": "CREATE",
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]},
        "object": obj,
        **fields,
    }


def gatekeeper_key(review: dict[str, Any], pol: Any, **extra: Any) -> str:
    return json.dumps({"review": review, "policy": pol, **extra})


def provider_request(keys: list[str]) -> bytes:
    return json.dumps(
        {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest", "request": {"keys": keys}}
    ).encode()


def signed_configmap(name: str, **data: str) -> dict[str, Any]:
    return sign(configmap(name, "team-a", **(data or {"key": "value"})))[0]


def metric_samples(server: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, _, body = server.get("/metrics")
    assert status == 200
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


# --- Gatekeeper -------------------------------------------------------------------


def test_mixed_gatekeeper_batch_gets_one_correct_item_per_key(provider_server: Server) -> None:
    ok = signed_configmap("mixed-ok")
    tampered = copy.deepcopy(signed_configmap("mixed-tampered"))
    tampered["data"]["key"] = "changed"
    unsigned = configmap("mixed-unsigned", "team-a")
    accented = signed_configmap("mixed-accented", greeting="héllo wörld")
    # Keys echo byte for byte: this one is indented, unescaped UTF-8, fields in another order.
    accented_key = json.dumps({"policy": policy(), "review": admission(accented)}, indent=1, ensure_ascii=False)
    keys = [
        gatekeeper_key(admission(ok), policy()),
        gatekeeper_key(admission(tampered), policy()),
        gatekeeper_key(admission(unsigned), policy()),
        "{this is not JSON",
        gatekeeper_key(admission(ok), policy(ignoreFeilds=[])),
        accented_key,
    ]
    status, headers, body = provider_server.post(GATEKEEPER, provider_request(keys))
    assert status == 200
    assert headers["content-type"] == "application/json"
    answer = json.loads(body)
    assert answer["apiVersion"] == "externaldata.gatekeeper.sh/v1beta1"
    assert answer["kind"] == "ProviderResponse"
    assert answer["response"]["idempotent"] is True
    assert answer["response"]["systemError"] == ""
    items = answer["response"]["items"]
    assert [item["key"] for item in items] == keys

    verified, changed, not_signed, not_json, bad_policy, accented_item = items
    assert verified["value"]["allowed"] is True and verified["value"]["reason"] == "verified"
    assert verified["value"]["signers"] == [make_key_fingerprint()]
    assert changed["value"]["allowed"] is False and changed["value"]["reason"] == "content-mismatch"
    assert changed["value"]["diff"] == [{"key": "data.key", "values": {"before": "value", "after": "changed"}}]
    assert not_signed["value"]["allowed"] is False and not_signed["value"]["reason"] == "unsigned"
    assert "value" not in not_json and not_json["error"].startswith("request-invalid: the key is not valid JSON")
    assert "value" not in bad_policy and bad_policy["error"].startswith("policy-invalid: ")
    assert "ignoreFeilds" in bad_policy["error"] and "ignoreFields" in bad_policy["error"]
    assert accented_item["value"]["reason"] == "verified"


def make_key_fingerprint() -> str:
    from provider.keys.pem import load_public_keys

    return load_public_keys(public_key_pem(make_key()))[0].fingerprint


def test_gatekeeper_audit_review_without_user_or_operation_is_verified(provider_server: Server) -> None:
    obj = signed_configmap("audited")
    review = {
        "object": obj,
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "name": "audited",
        "namespace": "team-a",
    }
    answer = provider_server.post_json(GATEKEEPER, json.loads(provider_request([gatekeeper_key(review, policy())])))
    (item,) = answer["response"]["items"]
    assert item["value"]["reason"] == "verified"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"[]", "request-invalid: the ProviderRequest is a JSON list"),
        (b'{"apiVersion": "v1", "kind": "ProviderRequest", "request": {"keys": []}}', "request-invalid: apiVersion"),
        (b'{"kind": "ProviderResponse", "request": {"keys": []}}', "request-invalid: kind"),
        (b'{"request": {"keys": [1]}}', "request-invalid: request.keys[0] is a int"),
        (b"\xff\xfe", "request-invalid: the ProviderRequest is not valid UTF-8"),
    ],
    ids=["not-an-object", "wrong-api-version", "wrong-kind", "key-not-a-string", "not-utf8"],
)
def test_unusable_provider_request_is_a_system_error_with_http_200(
    provider_server: Server, body: bytes, expected: str
) -> None:
    status, _, data = provider_server.post(GATEKEEPER, body)
    assert status == 200
    answer = json.loads(data)
    assert answer["response"]["items"] == []
    assert answer["response"]["systemError"].startswith(expected)


def test_connection_is_kept_alive_across_requests(provider_server: Server) -> None:
    conn = provider_server.connection()
    try:
        sockets = []
        for _ in range(3):
            conn.request("GET", "/readyz")
            response = conn.getresponse()
            response.read()
            assert response.status == 200
            sockets.append(conn.sock)
        assert sockets[0] is sockets[1] is sockets[2]
        assert isinstance(conn.sock, ssl.SSLSocket) and conn.sock.version() == "TLSv1.3"
    finally:
        conn.close()


# --- Kyverno ----------------------------------------------------------------------


def test_kyverno_body_without_content_type_gets_allowed_and_message(provider_server: Server) -> None:
    obj = signed_configmap("kyverno-ok")
    body = json.dumps({"request": admission(obj), "policy": policy()}).encode()
    conn = provider_server.connection()
    try:
        conn.putrequest("POST", KYVERNO_ROUTE, skip_accept_encoding=True)
        conn.putheader("Content-Length", str(len(body)))  # and no Content-Type, as Kyverno sends it
        conn.endheaders(body)
        response = conn.getresponse()
        answer = json.loads(response.read())
    finally:
        conn.close()
    assert response.status == 200
    assert answer["allowed"] is True and answer["verified"] is True and answer["reason"] == "verified"
    assert "ConfigMap team-a/kyverno-ok" in answer["message"]
    assert set(answer) == {"allowed", "verified", "reason", "message", "signers", "diff"}


def test_kyverno_upstream_admission_requests_verify_and_fail_as_upstream_does(provider_server: Server) -> None:
    key1 = (KYVERNO / "keys" / "key1.pub").read_text()
    signed = json.loads((KYVERNO / "manifests" / "cm-signed-admissionrequest.json").read_text())
    tampered = json.loads((KYVERNO / "manifests" / "cm-tampered-admissionrequest.json").read_text())
    ok = provider_server.post_json(KYVERNO_ROUTE, {"request": signed, "policy": {"keys": [key1]}})
    bad = provider_server.post_json(KYVERNO_ROUTE, {"request": tampered, "policy": {"keys": [key1]}})
    assert ok["allowed"] is True and ok["reason"] == "verified"
    assert bad["allowed"] is False and bad["reason"] == "content-mismatch"
    assert bad["diff"] == [{"key": "data.key3", "values": {"before": None, "after": "val3"}}]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "request-invalid"),
        (b'{"request": {"object": {}}, "policy": {"keys": []}}', "policy-invalid"),
        (b'{"request": {"object": {}}, "policy": {}, "check": "no-such-check"}', "request-invalid"),
        (b'{"request": {"object": {}}, "policy": {}, "extra": 1}', "request-invalid"),
    ],
    ids=["not-json", "policy-without-keys", "unknown-check", "unknown-field"],
)
def test_kyverno_errors_are_denials_with_http_200(provider_server: Server, body: bytes, reason: str) -> None:
    status, _, data = provider_server.post(KYVERNO_ROUTE, body)
    answer = json.loads(data)
    assert status == 200
    assert answer["allowed"] is False and answer["reason"] == reason and answer["message"]
    assert "statusCode" not in answer


# --- admission semantics ----------------------------------------------------------


def test_dry_run_requests_are_allowed_on_both_routes(provider_server: Server) -> None:
    unsigned = configmap("dry-run-object", "team-a")
    review = admission(unsigned, dryRun=True)
    kyverno = provider_server.post_json(KYVERNO_ROUTE, {"request": review, "policy": policy()})
    gatekeeper = provider_server.post_json(GATEKEEPER, json.loads(provider_request([gatekeeper_key(review, policy())])))
    assert kyverno["allowed"] is True and kyverno["reason"] == "dry-run-request"
    (item,) = gatekeeper["response"]["items"]
    assert item["value"]["allowed"] is True and item["value"]["reason"] == "dry-run-request"
    # The same object without dryRun is denied: the allow came from dryRun alone.
    denied = provider_server.post_json(KYVERNO_ROUTE, {"request": admission(unsigned), "policy": policy()})
    assert denied["allowed"] is False and denied["reason"] == "unsigned"


def test_dry_run_policy_without_a_cluster_is_denied_as_dry_run_failed(provider_server: Server) -> None:
    obj = copy.deepcopy(signed_configmap("needs-dry-run"))
    obj["data"]["key"] = "defaulted by the cluster?"
    answer = provider_server.post_json(
        KYVERNO_ROUTE, {"request": admission(obj), "policy": policy(dryRun={"enabled": True})}
    )
    assert answer["allowed"] is False and answer["reason"] == "dry-run-failed"
    assert "no cluster is configured" in answer["message"]


# --- authentication and TLS -------------------------------------------------------


@pytest.mark.parametrize("path", [GATEKEEPER, KYVERNO_ROUTE, "/metrics"])
def test_no_client_certificate_is_refused_without_detail(provider_server: Server, path: str) -> None:
    method = "GET" if path == "/metrics" else "POST"
    status, _, data = provider_server.request(method, path, b"{}" if method == "POST" else None, client_cert=False)
    assert status == 401
    assert json.loads(data) == {"error": "unauthorized"}


def test_probes_need_no_client_certificate(provider_server: Server) -> None:
    for path in ("/healthz", "/readyz"):
        status, _, _ = provider_server.request("GET", path, client_cert=False)
        assert status == 200


def test_client_certificate_from_another_ca_fails_the_handshake(provider_server: Server, tmp_path: Any) -> None:
    stranger = make_dev_pki(tmp_path / "stranger")
    context = provider_server.ssl_context(client_cert=False)
    context.load_cert_chain(str(stranger.client_cert), str(stranger.client_key))
    conn = http.client.HTTPSConnection("127.0.0.1", provider_server.port, context=context, timeout=10)
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
        conn.request("POST", KYVERNO_ROUTE, body=b"{}")
        conn.getresponse().read()
    conn.close()


def test_tls_1_2_clients_get_forward_secret_aead_and_others_get_1_3(provider_server: Server) -> None:
    # (Older versions are refused by the server's minimum_version, see tests/unit/service/test_serve.py;
    # this machine's OpenSSL cannot even offer them, so only the server's own setting can be tested.)
    context = provider_server.ssl_context()
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    conn = http.client.HTTPSConnection("127.0.0.1", provider_server.port, context=context, timeout=10)
    try:
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
        assert isinstance(conn.sock, ssl.SSLSocket)
        assert conn.sock.version() == "TLSv1.2"
        cipher = conn.sock.cipher()
        assert cipher is not None and cipher[0].startswith("ECDHE-") and ("GCM" in cipher[0] or "CHACHA20" in cipher[0])
    finally:
        conn.close()


def test_server_refuses_to_start_without_a_certificate() -> None:
    done = subprocess.run([*command(), "serve", "--port", "0"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "HTTPS only" in done.stderr


# --- limits and deadlines ---------------------------------------------------------

#: A server with small limits. Its deadline is generous: these tests are about sizes, and the
#: body must arrive within the deadline too (the worker's body deadline is the request's).
TIGHT = {
    "MANIFEST_PROVIDER_MAX_BODY_BYTES": str(512 * 1024),
    "MANIFEST_PROVIDER_MAX_KEYS": "100",
    "MANIFEST_PROVIDER_DEADLINE_SECONDS": "20",
}


@pytest.fixture(scope="module")
def tight_server() -> Iterator[Server]:
    with running_server(env=TIGHT) as server:
        yield server


#: A deadline the request's body meets on a busy machine (about 1 MB over loopback TLS, read within
#: it) and the work cannot: each of 100 objects is checked against 32 P-521 keys, signed by the
#: last, in one verify thread -- seconds on an idle machine, many more on a busy one.
DEADLINE_SECONDS = "0.5"
DEADLINE_KEYS = 32


def _chunks(data: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
@pytest.mark.parametrize("path", [GATEKEEPER, KYVERNO_ROUTE])
def test_oversized_body_gets_413(tight_server: Server, path: str, framing: str) -> None:
    body = b'{"request": {"keys": ["' + b"x" * (512 * 1024) + b'"]}}'
    conn = tight_server.connection()
    try:
        if framing == "chunked":
            conn.request("POST", path, body=_chunks(body), encode_chunked=True)
        else:
            conn.request("POST", path, body=body)
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    assert response.status == 413
    answer = json.loads(data)
    if path == GATEKEEPER:
        assert answer["response"]["systemError"].startswith("request-invalid: request body larger than 524288 bytes")
    else:
        assert answer["allowed"] is False and answer["reason"] == "request-invalid"


#: Request heads over a limit: ours (64 KiB in all, provider/service/worker.py) or one of gunicorn's,
#: which its parser applies to a head under ours (gunicorn/http/message.py: a request line of 4094
#: bytes, 100 header fields, 8190 bytes each). Before, gunicorn's own refusals were its HTML pages
#: (414 "Request Line is too large (5036 > 4094)", 431 "limit request headers fields size").
OVERSIZED_HEADS = {
    "over-our-64-kib": b"".join(b"X-%d: %s\r\n" % (i, b"a" * 1000) for i in range(70)),
    "request-line-over-4094": None,  # the path is long, not the fields
    "one-field-over-8190": b"X-Big: " + b"a" * 9000 + b"\r\n",
    "101-fields": b"".join(b"X-%d: 1\r\n" % i for i in range(101)),
}
TOO_LARGE_TEXT = (
    b"request head is too large: at most 65536 bytes, a request line of at most 4094 bytes, "
    b"and at most 100 header fields of at most 8190 bytes each"
)


@pytest.mark.parametrize("fields", OVERSIZED_HEADS.values(), ids=OVERSIZED_HEADS.keys())
def test_a_head_over_any_limit_gets_one_answer_whoever_trips(provider_server: Server, fields: bytes | None) -> None:
    target = GATEKEEPER.encode() + (b"?" + b"a" * 5000 if fields is None else b"")
    head = b"POST " + target + b" HTTP/1.1\r\nHost: localhost\r\n" + (fields or b"") + b"Content-Length: 0\r\n\r\n"
    before = metric_samples(provider_server)
    context = provider_server.ssl_context(client_cert=True)
    raw = socket.create_connection(("127.0.0.1", provider_server.port), timeout=30)
    with context.wrap_socket(raw, server_hostname="localhost") as conn:
        conn.sendall(head)
        answer = b""
        while part := conn.recv(65536):  # the server closes the connection after the answer
            answer += part
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert rest.endswith(b"\r\n\r\n" + TOO_LARGE_TEXT)
    assert b"Content-Type: text/plain" in rest
    closed = ("manifest_provider_connections_closed_total", (("reason", "head-too-large"),))
    assert metric_samples(provider_server).get(closed, 0.0) - before.get(closed, 0.0) == 1


def test_too_many_keys_is_a_system_error(tight_server: Server) -> None:
    answer = tight_server.post_json(GATEKEEPER, json.loads(provider_request(["{}"] * 101)))
    assert answer["response"]["items"] == []
    assert answer["response"]["systemError"] == "request-invalid: 101 keys in one request; at most 100 are allowed"


def test_deadline_gives_a_system_error_and_the_work_still_fills_the_cache() -> None:
    signers = [make_key("ecdsa-p521", 200 + i) for i in range(DEADLINE_KEYS)]
    pol = {"keys": [public_key_pem(k) for k in signers]}
    objects = [sign(configmap(f"deadline-{i}", "team-a", key="value"), key=signers[-1])[0] for i in range(100)]
    body = json.loads(provider_request([gatekeeper_key(admission(obj), pol) for obj in objects]))
    env = {"MANIFEST_PROVIDER_DEADLINE_SECONDS": DEADLINE_SECONDS, "MANIFEST_PROVIDER_VERIFY_THREADS": "1"}
    with running_server(env=env) as server:
        answer = server.post_json(GATEKEEPER, body)
        assert answer["response"]["items"] == []
        assert answer["response"]["systemError"].startswith("deadline-exceeded: deadline passed: ")
        # Gatekeeper does not cache a systemError and asks again; each time more keys are cached
        # verdicts, until every one is (a few retries on an idle machine, dozens on a busy one).
        for _ in range(1000):
            time.sleep(0.1)
            again = server.post_json(GATEKEEPER, body)["response"]
            if again["systemError"] == "":
                break
    assert [item["value"]["reason"] for item in again["items"]] == ["verified"] * 100


# --- metrics and logs -------------------------------------------------------------


def test_metrics_count_decisions_by_reason_and_class_and_cache_hits(provider_server: Server) -> None:
    key = gatekeeper_key(admission(signed_configmap(f"metrics-{uuid.uuid4().hex[:8]}")), policy())
    before = metric_samples(provider_server)
    for _ in range(3):  # one verification, then two cache hits (whichever worker answers, the sums add up)
        provider_server.post(GATEKEEPER, provider_request([key]))
    after = metric_samples(provider_server)

    def delta(name: str, **labels: str) -> float:
        sample = (name, tuple(sorted(labels.items())))
        return after.get(sample, 0.0) - before.get(sample, 0.0)

    decided = delta(
        "manifest_provider_decisions_total",
        route=GATEKEEPER,
        check="manifest",
        reason="verified",
        **{"class": "valid-signature"},
    )
    hits = delta("manifest_provider_cache_lookups_total", result="hit")
    misses = delta("manifest_provider_cache_lookups_total", result="miss")
    assert decided == 3
    assert hits + misses == 3 and misses >= 1  # two workers: each may miss once
    assert delta("manifest_provider_requests_total", route=GATEKEEPER, code="200") == 3
    assert delta("manifest_provider_request_duration_seconds_count", route=GATEKEEPER) == 3


def test_logs_are_json_lines_with_the_decision_and_never_tokens_or_objects(provider_server: Server) -> None:
    secret_value = f"do-not-log-{uuid.uuid4().hex}"
    token = f"token-{uuid.uuid4().hex}"
    obj = signed_configmap(f"logged-{uuid.uuid4().hex[:8]}", key=secret_value)
    status, _, _ = provider_server.post(
        KYVERNO_ROUTE,
        json.dumps({"request": admission(obj), "policy": policy()}).encode(),
        {"Authorization": f"Bearer {token}"},
    )
    assert status == 200
    name = obj["metadata"]["name"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        decisions = [r for r in provider_server.log_records() if r.get("object", {}).get("name") == name]
        if decisions:
            break
        time.sleep(0.05)
    (record,) = decisions
    assert record["decision"] == "allow" and record["reason"] == "verified" and record["route"] == "kyverno"
    assert record["object"] == {"kind": "ConfigMap", "namespace": "team-a", "name": name}
    assert record["latency_ms"] >= 0 and record["caller"] == "cert:manifest-provider-dev-client"
    text = provider_server.log_text()
    assert secret_value not in text and token not in text and "Authorization" not in text


# --- plain HTTP for experiments ---------------------------------------------------


@pytest.mark.slow
def test_unsafe_http_serves_plain_http_and_warns_on_every_request(tmp_path: Any) -> None:
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    log_path = tmp_path / "server.log"
    # No metrics port: the default 8888 may be taken by another server on the machine, and
    # this test is about the API port.
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [*command(), "serve", "--unsafe-http", "--bind", f"fd://{listener.fileno()}", "--workers", "1",
             "--no-metrics-port"],
            stdout=log, stderr=subprocess.STDOUT, pass_fds=(listener.fileno(),),
        )  # fmt: skip
    listener.close()

    def app_warnings() -> list[str]:
        lines = log_path.read_text().splitlines()
        return [line for line in lines if "plain HTTP (--unsafe-http)" in line and '"provider.app"' in line]

    try:
        # Started as running_server waits (START_TIMEOUT): a busy machine takes many seconds to import.
        started = time.monotonic()
        while True:
            assert process.poll() is None, log_path.read_text()[-2000:]
            assert time.monotonic() - started < START_TIMEOUT, log_path.read_text()[-2000:]
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.05)
            finally:
                conn.close()
        for _ in range(3):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", "/readyz")
            assert conn.getresponse().status == 200
            conn.close()
        # The app warns before it answers; the line is in the log by the time the answer is read.
        assert len(app_warnings()) >= 4  # the first probe and three requests
    finally:
        process.terminate()
        process.wait(15)


# --- bodies that cannot be read whole ---------------------------------------------

#: Bytes that must never reach the log: they are the caller's, and unparsed.
BODY_MARKER = b"raw-body-marker-7f3a"


def _raw_exchange(server: Server, request: bytes, *, close_after: bool) -> bytes:
    """Send ``request`` on a new TLS connection (half-closing it after, like a client that went away); the answer."""
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    with server.ssl_context().wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(request)
        if close_after:
            socket.socket.shutdown(tls, socket.SHUT_WR)  # gone mid-body (a TCP FIN; the TLS session stays readable)
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := tls.recv(65536):
                answer += chunk
    return answer


@pytest.mark.parametrize(
    ("framing", "close_after"),
    [
        ("bad-chunk-size", False),
        ("chunk-without-terminator", False),
        ("truncated-chunked", True),
        ("truncated-content-length", True),
    ],
    ids=["bad-chunk-size", "chunk-without-terminator", "disconnect-mid-chunked", "disconnect-mid-body"],
)
@pytest.mark.parametrize("path", [GATEKEEPER, KYVERNO_ROUTE])
def test_a_body_that_cannot_be_read_whole_is_a_400_request_invalid_logged_without_its_bytes(
    provider_server: Server, path: str, framing: str, close_after: bool
) -> None:
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n".encode()
    part = b'{"request": {"keys": ["' + BODY_MARKER
    bodies = {
        "bad-chunk-size": b"Transfer-Encoding: chunked\r\n\r\n"
        + b"zz"
        + BODY_MARKER
        + b"\r\n"
        + part
        + b"\r\n0\r\n\r\n",
        "chunk-without-terminator": b"Transfer-Encoding: chunked\r\n\r\n"
        + f"{len(part):x}".encode()
        + b"\r\n"
        + part
        + b"XX"
        + b"0\r\n\r\n",
        "truncated-chunked": b"Transfer-Encoding: chunked\r\n\r\n" + b"1000\r\n" + part,
        "truncated-content-length": b"Content-Length: 4096\r\n\r\n" + part,
    }
    offset = len(provider_server.log_text())
    answer = _raw_exchange(provider_server, head + bodies[framing], close_after=close_after)
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 400"), answer[:300]
    body = json.loads(rest.split(b"\r\n\r\n", 1)[1])
    if path == GATEKEEPER:
        assert body["response"]["items"] == [] and body["response"]["systemError"].startswith(
            "request-invalid: the request body"
        )
    else:
        assert (
            body["allowed"] is False
            and body["reason"] == "request-invalid"
            and body["message"].startswith("the request body")
        )
    assert b"connection: close" in rest.lower()
    time.sleep(0.2)  # the worker's log line lands after the answer
    log = provider_server.log_text()[offset:]
    assert BODY_MARKER.decode() not in log
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert any(
        r.get("message") == "request body unreadable" and r.get("reason") == "request-invalid" for r in records
    ), log[-2000:]
    assert not [r for r in records if r.get("level") == "error"], log[-2000:]
