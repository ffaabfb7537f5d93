"""A TokenReview ends by its deadline, body included; a late answer is a 503 and is never used.

The kubernetes client's ``_request_timeout`` bounds each socket read: an API
server that sends its headers 1.2 s late and its body another 1.2 s later was
answered after 2.4 s and the answer used; a body trickled a byte at a time
took as long as the trickle. :class:`provider.kube.tokenreview.KubeTokenReviewer`
is driven here against a slow TokenReview endpoint on loopback (plain HTTP,
HTTPS, and a server that never answers the TLS handshake), through the real
kubeconfig loading of the ``kubernetes`` package.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from provider.errors import TransientError
from provider.kube.tokenreview import KubeTokenReviewer, TokenStatus, kube_configuration, status_from_answer
from provider.service.app import create_app
from provider.service.devcerts import make_dev_pki
from tests.support.resolver import StuckResolver
from tests.support.tokenreview import AUDIENCE, KYVERNO_GROUPS, KYVERNO_USER, Identity, StalledTls, TokenReviewApi

TOKEN = "kyverno-token"
#: The deadline the tests give a review, and how far past it an answer may come (scheduling on a busy machine).
DEADLINE = 0.8
SLACK = 0.4


@pytest.fixture
def api() -> Iterator[TokenReviewApi]:
    with TokenReviewApi(tokens={TOKEN: Identity([AUDIENCE])}) as server:
        yield server


def reviewer(api_url_kubeconfig: Path) -> KubeTokenReviewer:
    return KubeTokenReviewer(kube_configuration(str(api_url_kubeconfig)))


def test_a_prompt_review_is_read_whole(api: TokenReviewApi, tmp_path: Path) -> None:
    status = reviewer(api.kubeconfig(tmp_path / "kc")).review(TOKEN, AUDIENCE, time.monotonic() + DEADLINE)
    assert status == TokenStatus(True, KYVERNO_USER, tuple(KYVERNO_GROUPS))
    (review,) = api.reviews
    assert review["kind"] == "TokenReview" and review["spec"] == {"token": TOKEN, "audiences": [AUDIENCE]}


def test_a_reviews_connection_sends_without_waiting_for_acknowledgements(api: TokenReviewApi, tmp_path: Path) -> None:
    """Head and body go out in two writes; with Nagle's algorithm on, the body waited 40 ms for the server's ACK."""
    import socket

    sock = reviewer(api.kubeconfig(tmp_path / "kc"))._connect(time.monotonic() + DEADLINE)
    try:
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        sock.close()


def test_a_review_over_tls_trusts_the_clusters_ca(tmp_path: Path) -> None:
    pki = make_dev_pki(tmp_path / "pki")
    with TokenReviewApi(tokens={TOKEN: Identity([AUDIENCE])}, tls=pki) as api:
        assert api.url.startswith("https://")
        status = reviewer(api.kubeconfig(tmp_path / "kc")).review(TOKEN, AUDIENCE, time.monotonic() + DEADLINE)
        assert status.authenticated
        stranger = make_dev_pki(tmp_path / "stranger")
        with pytest.raises(TransientError) as refused:
            reviewer(api.kubeconfig(tmp_path / "kc2", ca=stranger.ca_cert)).review(
                TOKEN, AUDIENCE, time.monotonic() + DEADLINE
            )
        assert refused.value.reason == "token-review-failed" and "SSL" in refused.value.message


@pytest.mark.parametrize(
    ("fault", "value"),
    [("late_headers", 1.2), ("late_body", 1.2), ("trickle", 0.05)],
    ids=["headers-late", "body-late", "body-trickled"],
)
def test_a_slow_answer_ends_at_the_deadline_and_is_not_used(
    api: TokenReviewApi, tmp_path: Path, fault: str, value: float
) -> None:
    setattr(api, fault, value)
    review = reviewer(api.kubeconfig(tmp_path / "kc"))
    start = time.monotonic()
    with pytest.raises(TransientError) as late:
        review.review(TOKEN, AUDIENCE, start + DEADLINE)
    elapsed = time.monotonic() - start
    assert late.value.reason == "token-review-timeout"
    assert DEADLINE - 0.05 <= elapsed < DEADLINE + SLACK
    assert TOKEN not in late.value.message


def test_a_stalled_tls_handshake_ends_at_the_deadline(tmp_path: Path) -> None:
    pki = make_dev_pki(tmp_path / "pki")
    with StalledTls() as stalled, TokenReviewApi() as api:
        review = reviewer(api.kubeconfig(tmp_path / "kc", server=stalled.url, ca=pki.ca_cert))
        start = time.monotonic()
        with pytest.raises(TransientError) as late:
            review.review(TOKEN, AUDIENCE, start + DEADLINE)
        assert late.value.reason == "token-review-timeout"
        assert time.monotonic() - start < DEADLINE + SLACK


def test_through_the_app_a_slow_review_is_a_503_and_the_next_request_asks_again(
    api: TokenReviewApi, tmp_path: Path
) -> None:
    """The service gives a review half the request's deadline; a late "yes" is neither used nor remembered."""
    client = create_app({"TESTING": True, "LOG_LEVEL": "error", "TOKEN_AUDIENCE": AUDIENCE, "DEADLINE_SECONDS": 1,
                         "KUBECONFIG": str(api.kubeconfig(tmp_path / "kc"))}).test_client()  # fmt: skip
    headers = {"Authorization": f"Bearer {TOKEN}"}
    api.late_body = 1.0
    start = time.monotonic()
    response = client.post("/v1/kyverno/verify", data=b"{}", headers=headers)
    assert response.status_code == 503 and response.get_json() == {
        "error": "unavailable",
        "reason": "token-review-timeout",
    }
    assert time.monotonic() - start < 0.5 + SLACK
    api.late_body = 0.0
    assert client.post("/v1/kyverno/verify", data=b"{}", headers=headers).status_code == 200
    assert len(api.reviews) == 2


@pytest.mark.parametrize(
    ("status", "error"),
    [(500, "HTTP 500"), (403, "HTTP 403"), (401, "HTTP 401")],
    ids=["server-error", "rbac-missing", "the-services-own-token-refused"],
)
def test_an_error_status_is_a_failure_that_names_it(
    api: TokenReviewApi, tmp_path: Path, status: int, error: str
) -> None:
    api.status = status
    with pytest.raises(TransientError) as failed:
        reviewer(api.kubeconfig(tmp_path / "kc")).review(TOKEN, AUDIENCE, time.monotonic() + DEADLINE)
    assert failed.value.reason == "token-review-failed" and error in failed.value.message


def test_a_refused_connection_is_a_failure(tmp_path: Path) -> None:
    with TokenReviewApi() as api:
        kubeconfig = api.kubeconfig(tmp_path / "kc")
    with pytest.raises(TransientError) as failed:
        reviewer(kubeconfig).review(TOKEN, AUDIENCE, time.monotonic() + DEADLINE)
    assert failed.value.reason == "token-review-failed" and "ConnectionRefusedError" in failed.value.message


@pytest.mark.parametrize(
    "answer",
    [
        {"status": {"authenticated": "true", "user": {"username": "u"}, "audiences": [AUDIENCE]}},
        {"status": {"authenticated": True, "user": {"username": "u"}, "audiences": []}},
        {"status": {"authenticated": True, "user": {"username": "u"}}},
        {"status": {"authenticated": True, "user": {"username": ""}, "audiences": [AUDIENCE]}},
        {
            "status": {
                "authenticated": True,
                "user": {"username": "u", "groups": "system:masters"},
                "audiences": [AUDIENCE],
            }
        },
        {"status": {"authenticated": True, "user": {"username": "u", "groups": [1]}, "audiences": [AUDIENCE]}},
        {"status": None},
        [],
    ],
    ids=[
        "authenticated-a-string",
        "no-audience",
        "audiences-missing",
        "empty-username",
        "groups-a-string",
        "groups-not-strings",
        "status-null",
        "not-an-object",
    ],
)
def test_anything_but_a_clear_yes_for_the_audience_is_a_no(answer: object) -> None:
    assert status_from_answer(answer, AUDIENCE) == TokenStatus(False)


def test_an_api_server_name_that_never_resolves_is_a_timeout_by_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes.client import Configuration

    configuration = Configuration()
    configuration.host = "https://api.stuck.example:6443"
    resolver = StuckResolver()
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    try:
        with pytest.raises(TransientError) as caught:
            KubeTokenReviewer(configuration).review("a-token", AUDIENCE, time.monotonic() + 1.0)
        returned_while_stuck = not resolver.gave_up.is_set()
    finally:
        resolver.release()
    assert (resolver.asked, returned_while_stuck) == (["api.stuck.example"], True)
    assert caught.value.reason == "token-review-timeout"
