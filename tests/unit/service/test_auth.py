"""Authentication: client certificates on a real TLS socket, bearer tokens through a real TokenReview.

Tokens are reviewed by the service's own TokenReview client against a small
endpoint served here (:mod:`tests.support.tokenreview`, answering as an audience-aware API
server does); client certificates are read from a real TLS connection over a
socket pair. Who may call once authenticated is in ``test_callers.py``.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from provider.errors import ConfigError
from provider.service.app import create_app
from provider.service.auth import MAX_TOKEN_BYTES, Authenticator, TokenStatus, parse_callers, peer_der, token_expiry
from provider.service.clientcerts import ClientCertificates
from provider.service.devcerts import CLIENT_NAME, make_dev_pki
from provider.service.serve import tls_context
from tests.support.tokenreview import AUDIENCE, KYVERNO_GROUPS, KYVERNO_USER, Identity, TokenReviewApi

GOOD = "good-token"


@pytest.fixture
def api() -> Iterator[TokenReviewApi]:
    with TokenReviewApi(tokens={GOOD: Identity([AUDIENCE]), "api-server-only": Identity([])}) as server:
        yield server


@pytest.fixture
def client(api: TokenReviewApi, tmp_path: Path) -> FlaskClient:
    app = create_app(
        {
            "TESTING": True,
            "LOG_LEVEL": "warning",
            "TOKEN_AUDIENCE": AUDIENCE,
            "KUBECONFIG": str(api.kubeconfig(tmp_path / "kc")),
        }
    )
    return app.test_client()


def post(client: FlaskClient, token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return client.post("/v1/kyverno/verify", data=b'{"request": {}}', headers=headers)


def test_a_token_the_api_server_accepts_for_the_audience_is_let_through_and_remembered(
    client: FlaskClient, api: TokenReviewApi
) -> None:
    for _ in range(3):
        response = post(client, GOOD)
        assert response.status_code == 200 and response.get_json()["reason"] == "policy-invalid"
    assert len(api.reviews) == 1
    assert api.reviews[0]["spec"] == {"token": GOOD, "audiences": [AUDIENCE]}


@pytest.mark.parametrize(
    ("header", "status"),
    [
        (None, 401),
        ("Basic dXNlcjpwYXNz", 401),
        ("Bearer ", 401),
        ("Bearer wrong-token", 403),
        ("Bearer api-server-only", 403),
        ("bearer " + "x" * (MAX_TOKEN_BYTES + 1), 403),
    ],
    ids=["no-header", "basic", "empty-token", "unknown-token", "token-for-another-audience", "oversized-token"],
)
def test_refusals_carry_no_detail(client: FlaskClient, header: str | None, status: int) -> None:
    response = client.post("/v1/gatekeeper/verify", data=b"{}", headers={"Authorization": header} if header else {})
    assert response.status_code == status
    assert response.get_json() == {"error": "unauthorized" if status == 401 else "forbidden"}
    assert response.headers.get("WWW-Authenticate") == ("Bearer" if status == 401 else None)


def test_a_refused_token_is_remembered_briefly(client: FlaskClient, api: TokenReviewApi) -> None:
    assert post(client, "wrong-token").status_code == 403
    assert post(client, "wrong-token").status_code == 403
    assert len(api.reviews) == 1


def test_an_api_server_that_fails_the_review_gives_503_with_the_reason(
    client: FlaskClient, api: TokenReviewApi
) -> None:
    api.status = 500
    response = post(client, GOOD)
    assert response.status_code == 503 and response.get_json() == {
        "error": "unavailable",
        "reason": "token-review-failed",
    }


def test_probes_need_no_token(client: FlaskClient) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/metrics").status_code == 401


def _jwt(claims: dict[str, Any]) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


def test_an_accepted_token_is_trusted_no_longer_than_its_expiry(api: TokenReviewApi, tmp_path: Path) -> None:
    token = _jwt({"exp": time.time() + 0.3, "aud": [AUDIENCE]})
    api.tokens[token] = Identity([AUDIENCE])
    app = create_app(
        {
            "TESTING": True,
            "LOG_LEVEL": "warning",
            "TOKEN_AUDIENCE": AUDIENCE,
            "KUBECONFIG": str(api.kubeconfig(tmp_path / "kc")),
        }
    )
    client = app.test_client()
    assert post(client, token).status_code == 200
    assert post(client, token).status_code == 200
    assert len(api.reviews) == 1
    time.sleep(0.4)
    post(client, token)
    assert len(api.reviews) == 2


@pytest.mark.parametrize(
    ("token", "expiry"),
    [
        (_jwt({"exp": 1700000000}), 1700000000.0),
        (_jwt({"exp": "soon"}), None),
        (_jwt({"exp": True}), None),
        ("a.b", None),
        ("a.!!!.c", None),
        (_jwt({}), None),
    ],
    ids=["exp", "exp-not-a-number", "exp-bool", "two-parts", "bad-base64", "no-exp"],
)
def test_token_expiry(token: str, expiry: float | None) -> None:
    assert token_expiry(token) == expiry


def test_token_audience_needs_a_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="no cluster is configured to review tokens"):
        create_app({"TOKEN_AUDIENCE": AUDIENCE})


class FixedReviewer:
    """Accepts :data:`GOOD` as Kyverno's admission controller; everything else is refused."""

    def __init__(self) -> None:
        self.calls = 0

    def review(self, token: str, audience: str, deadline: float) -> TokenStatus:
        self.calls += 1
        return TokenStatus(token == GOOD, KYVERNO_USER, tuple(KYVERNO_GROUPS))


def test_a_given_token_reviewer_is_used_without_a_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    reviewer = FixedReviewer()
    client = create_app(
        {"TESTING": True, "LOG_LEVEL": "warning", "TOKEN_AUDIENCE": AUDIENCE, "TOKEN_REVIEWER": reviewer}
    ).test_client()
    assert post(client, GOOD).status_code == 200 and post(client, "bad").status_code == 403
    assert reviewer.calls == 2


def test_with_a_client_ca_and_an_audience_either_credential_suffices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    config = {
        "TESTING": True,
        "LOG_LEVEL": "warning",
        "CLIENT_CA": "/ca.crt",
        "TOKEN_AUDIENCE": AUDIENCE,
        "TOKEN_REVIEWER": FixedReviewer(),
    }
    client = create_app(config).test_client()  # the test client has no TLS socket, so no certificate
    assert post(client).status_code == 401
    assert post(client, GOOD).status_code == 200


CALLERS = parse_callers([f"cert:{CLIENT_NAME}", f"token:{KYVERNO_USER}"])


def test_without_client_ca_or_audience_nobody_is_authenticated() -> None:
    auth = Authenticator(client_certificates=None, audience=None, callers=CALLERS)
    assert not auth.enabled and auth.authenticate({}, None).allowed


def test_with_a_client_ca_a_request_without_a_verified_certificate_is_refused(tmp_path: Path) -> None:
    auth = Authenticator(
        client_certificates=ClientCertificates(str(tmp_path / "ca.crt")), audience=None, callers=CALLERS
    )
    assert auth.authenticate({}, None) == auth.authenticate({}, f"Bearer {GOOD}")  # tokens are not configured
    assert (auth.authenticate({}, None).status, auth.authenticate({}, None).reason) == (401, "no-credentials")


# --- client certificates on a real TLS connection ---------------------------------


def _tls_pair(tmp_path: Path, present: str | None) -> tuple[ssl.SSLSocket, ssl.SSLSocket, Path]:
    """A server and a client socket after a real handshake; the client presents ``present``'s client certificate."""
    ours = make_dev_pki(tmp_path / "ours")
    server_context = tls_context(str(ours.server_cert), str(ours.server_key), str(ours.ca_cert))
    client_context = ssl.create_default_context(cafile=str(ours.ca_cert))
    if present is not None:
        pki = ours if present == "ours" else make_dev_pki(tmp_path / present)
        client_context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    a, b = socket.socketpair()
    server = server_context.wrap_socket(a, server_side=True, do_handshake_on_connect=False)
    client = client_context.wrap_socket(b, server_hostname="localhost", do_handshake_on_connect=False)
    errors: list[BaseException] = []

    def handshake() -> None:
        try:
            server.do_handshake()
        except (ssl.SSLError, OSError) as exc:
            errors.append(exc)

    thread = threading.Thread(target=handshake)
    thread.start()
    try:
        client.do_handshake()
        client.sendall(b"x")  # TLS 1.3 verifies the client certificate after the client's handshake ends
    except (ssl.SSLError, OSError) as exc:
        errors.append(exc)
    thread.join()
    if errors:
        server.close()
        client.close()
        raise errors[0]
    return server, client, ours.ca_cert


def test_a_certificate_from_the_client_ca_authenticates(tmp_path: Path) -> None:
    server, client, ca = _tls_pair(tmp_path, "ours")
    try:
        assert peer_der({"gunicorn.socket": server}) is not None
        auth = Authenticator(client_certificates=ClientCertificates(str(ca)), audience=None, callers=CALLERS)
        decision = auth.authenticate({"gunicorn.socket": server}, None)
        assert decision.allowed and decision.identity == f"cert:{CLIENT_NAME}"
        assert server.version() == "TLSv1.3"
    finally:
        server.close()
        client.close()


def test_a_connection_without_a_certificate_is_accepted_by_tls_and_refused_by_the_app(tmp_path: Path) -> None:
    server, client, ca = _tls_pair(tmp_path, None)
    try:
        assert peer_der({"gunicorn.socket": server}) is None
        auth = Authenticator(client_certificates=ClientCertificates(str(ca)), audience=None, callers=CALLERS)
        assert auth.authenticate({"gunicorn.socket": server}, None).status == 401
    finally:
        server.close()
        client.close()


def test_a_certificate_from_another_ca_fails_the_handshake(tmp_path: Path) -> None:
    with pytest.raises(ssl.SSLError):
        _tls_pair(tmp_path, "stranger")
