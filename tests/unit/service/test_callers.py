"""Who may call once authenticated, and what strangers can cost: callers, refusals, the token caches, the review rate.

Tokens go through the service's own TokenReview client to :mod:`tests.support.tokenreview`
(a real HTTP exchange, answered as an audience-aware API server does); the
junk-token tests drive :class:`provider.service.auth.Authenticator` directly with a
counting reviewer, because 16 384 requests through Flask would only make them slow.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from provider.errors import ConfigError
from provider.service import metrics
from provider.service.app import create_app
from provider.service.auth import (
    ACCEPTED_ENTRIES,
    REFUSED_ENTRIES,
    Authenticator,
    RateLimit,
    TokenStatus,
    parse_callers,
)
from provider.service.config import GATEKEEPER_CALLER, KYVERNO_CALLER, REPEATS, RepeatLimiter, load_config
from tests.support.tokenreview import AUDIENCE, KYVERNO_GROUPS, KYVERNO_USER, Identity, TokenReviewApi

KYVERNO = "kyverno-token"
EVIL = "evil-token"
BODY = b'{"request": {}}'


@pytest.fixture(autouse=True)
def fresh_repeat_window() -> None:
    """Tests here count log lines: start each with the process's repeat limiter's memory empty."""
    REPEATS._seen.clear()


# --- the caller list ------------------------------------------------------------------


def test_the_default_callers_are_exactly_the_shipped_engines() -> None:
    config = load_config({}, {})
    assert config.callers == (GATEKEEPER_CALLER, KYVERNO_CALLER)
    assert GATEKEEPER_CALLER == "cert:gatekeeper-webhook-service.gatekeeper-system.svc"
    assert KYVERNO_CALLER == "token:system:serviceaccount:kyverno:kyverno-admission-controller"
    assert config.metrics_callers is None  # /metrics: the same callers unless told otherwise


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cert:a.example", ({"a.example"}, set())),
        ("token:system:serviceaccount:ns:sa,cert:b", ({"b"}, {"system:serviceaccount:ns:sa"})),
        (" token:alice@example.com , cert:c ", ({"c"}, {"alice@example.com"})),
    ],
    ids=["one-certificate", "token-and-certificate", "blanks-around-elements"],
)
def test_callers_parse_from_the_environment(text: str, expected: tuple[set[str], set[str]]) -> None:
    callers = parse_callers(load_config({}, {"MANIFEST_PROVIDER_CALLERS": text}).callers)
    assert (set(callers.certificates), set(callers.tokens)) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cert:a,", "empty element"),
        (",", "empty element"),
        ("", "empty element"),
        ("cert:*", "exact names"),
        ("token:system:serviceaccount:kyverno:*", "exact names"),
        ("cert:", "without blanks"),
        ("cert:a b", "without blanks"),
        ("gatekeeper-webhook-service.gatekeeper-system.svc", "expected cert:"),
        ("user:alice", "expected cert:"),
        ("token:system:serviceaccount:kyverno", "system:serviceaccount:<namespace>:<name>"),
        ("token:system:serviceaccount::sa", "system:serviceaccount:<namespace>:<name>"),
        ("token:system:serviceaccount:a:b:c", "system:serviceaccount:<namespace>:<name>"),
    ],
    ids=[
        "trailing-comma",
        "comma-only",
        "empty",
        "wildcard-name",
        "wildcard-account",
        "no-name",
        "blank-in-name",
        "no-kind",
        "unknown-kind",
        "account-without-name",
        "account-without-namespace",
        "account-with-three-parts",
    ],
)
def test_a_caller_list_that_could_widen_or_mean_nothing_is_a_config_error(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config({}, {"MANIFEST_PROVIDER_CALLERS": text})


def test_an_empty_metrics_callers_setting_means_the_callers_and_a_bad_one_is_refused() -> None:
    assert load_config({}, {"MANIFEST_PROVIDER_METRICS_CALLERS": ""}).metrics_callers is None
    with pytest.raises(ConfigError, match="MANIFEST_PROVIDER_METRICS_CALLERS"):
        load_config({}, {"MANIFEST_PROVIDER_METRICS_CALLERS": "cert:a,,cert:b"})
    assert load_config({"CALLERS": ["cert:x"]}, {}).callers == ("cert:x",)  # a list given in code


# --- tokens: authorization ------------------------------------------------------------


@pytest.fixture
def api() -> Iterator[TokenReviewApi]:
    tokens = {
        KYVERNO: Identity([AUDIENCE]),
        # The attacker: any pod's service account can mint a token for the audience.
        EVIL: Identity([AUDIENCE], "system:serviceaccount:evil-ns:default", ["system:serviceaccounts", "system:serviceaccounts:evil-ns"]),
        # Kyverno's name without the service accounts' groups: not a service account token.
        "named-like-kyverno": Identity([AUDIENCE], KYVERNO_USER, ["system:authenticated"]),
        # Kyverno's name with another namespace's group.
        "wrong-namespace-group": Identity([AUDIENCE], KYVERNO_USER, ["system:serviceaccounts", "system:serviceaccounts:evil-ns"]),
        "reports-token": Identity([AUDIENCE], "system:serviceaccount:kyverno:kyverno-reports-controller",
                                       ["system:serviceaccounts", "system:serviceaccounts:kyverno"]),
    }  # fmt: skip
    with TokenReviewApi(tokens=tokens) as server:
        yield server


def app_client(api: TokenReviewApi, tmp_path: Path, **settings: Any) -> FlaskClient:
    config = {
        "TESTING": True,
        "LOG_LEVEL": "info",
        "TOKEN_AUDIENCE": AUDIENCE,
        "KUBECONFIG": str(api.kubeconfig(tmp_path / "kc")),
        **settings,
    }
    return create_app(config).test_client()


def refusal_count(reason: str) -> float:
    value = metrics.AUTH_REFUSALS.labels(reason)._value.get()
    return float(value)


@pytest.mark.parametrize(
    ("token", "status"),
    [(KYVERNO, 200), (EVIL, 403), ("named-like-kyverno", 403), ("wrong-namespace-group", 403), ("reports-token", 403)],
    ids=[
        "kyverno-admission-controller",
        "another-namespaces-service-account",
        "kyverno-name-without-groups",
        "kyverno-name-with-another-namespace-group",
        "another-kyverno-component",
    ],
)
def test_only_the_configured_service_account_may_call(api: TokenReviewApi, tmp_path: Path, token: str, status: int,
                                                      capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    client = app_client(api, tmp_path)
    before = refusal_count("caller-not-allowed")
    for path in ("/v1/kyverno/verify", "/v1/gatekeeper/verify"):
        assert client.post(path, data=BODY, headers={"Authorization": f"Bearer {token}"}).status_code == status
    assert client.get("/metrics", headers={"Authorization": f"Bearer {token}"}).status_code == status
    if status == 403:
        assert refusal_count("caller-not-allowed") == before + 3
        log = capsys.readouterr().err
        assert '"caller refused"' in log and token not in log  # the log names the caller, never the credential


def test_a_refusal_is_one_log_line_with_the_route_reason_and_caller(
    api: TokenReviewApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = app_client(api, tmp_path)
    capsys.readouterr()
    assert client.post("/v1/kyverno/verify", data=BODY, headers={"Authorization": f"Bearer {EVIL}"}).status_code == 403
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    refused = [r for r in lines if r["message"] == "caller refused"]
    assert len(refused) == 1
    (line,) = refused
    assert (line["level"], line["route"], line["status"], line["reason"]) == (
        "warning",
        "/v1/kyverno/verify",
        403,
        "caller-not-allowed",
    )
    assert line["caller"] == "token:system:serviceaccount:evil-ns:default"
    assert EVIL not in json.dumps(lines)


def test_metrics_has_its_own_callers(api: TokenReviewApi, tmp_path: Path) -> None:
    client = app_client(api, tmp_path, METRICS_CALLERS="token:system:serviceaccount:kyverno:kyverno-reports-controller")
    kyverno, scraper = {"Authorization": f"Bearer {KYVERNO}"}, {"Authorization": "Bearer reports-token"}
    assert client.post("/v1/kyverno/verify", data=BODY, headers=kyverno).status_code == 200
    assert client.get("/metrics", headers=kyverno).status_code == 403
    assert client.get("/metrics", headers=scraper).status_code == 200
    assert client.post("/v1/kyverno/verify", data=BODY, headers=scraper).status_code == 403


def test_a_review_failure_is_logged_once_with_its_reason_and_counted(
    api: TokenReviewApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = app_client(api, tmp_path)
    api.status = 403  # the service account lacks RBAC for tokenreviews
    before = refusal_count("token-review-failed")
    capsys.readouterr()
    response = client.post("/v1/kyverno/verify", data=BODY, headers={"Authorization": f"Bearer {KYVERNO}"})
    assert response.status_code == 503 and response.get_json() == {
        "error": "unavailable",
        "reason": "token-review-failed",
    }
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    (line,) = [r for r in lines if r["message"] == "caller refused"]
    assert line["reason"] == "token-review-failed" and "HTTP 403" in line["detail"] and KYVERNO not in json.dumps(lines)
    assert refusal_count("token-review-failed") == before + 1


# --- tokens: what strangers cost ----------------------------------------------------------


class CountingReviewer:
    """Accepts :data:`KYVERNO` as Kyverno's admission controller and refuses everything else, counting reviews by token."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def review(self, token: str, audience: str, deadline: float) -> TokenStatus:
        self.calls[token] = self.calls.get(token, 0) + 1
        return TokenStatus(token == KYVERNO, KYVERNO_USER, tuple(KYVERNO_GROUPS))


def authenticator(reviewer: CountingReviewer, clock: list[float], rate: float = 5.0) -> Authenticator:
    auth = Authenticator(client_certificates=None, audience=AUDIENCE, callers=parse_callers([KYVERNO_CALLER]),
                         reviewer=lambda: reviewer, reviews_per_second=rate)  # fmt: skip
    auth.reviews = RateLimit(rate, 2 * rate, clock=lambda: clock[0])
    return auth


def test_four_times_the_cache_size_of_junk_tokens_leaves_the_accepted_token_served_from_cache() -> None:
    reviewer, clock = CountingReviewer(), [0.0]
    auth = authenticator(reviewer, clock)
    bearer = {"Authorization": f"Bearer {KYVERNO}"}
    assert auth.authenticate({}, bearer["Authorization"]).allowed
    statuses: dict[int, int] = {}
    junk = 4 * ACCEPTED_ENTRIES
    for i in range(junk):
        clock[0] += 0.01  # 100 junk requests a second, for 164 s
        decision = auth.authenticate({}, f"Bearer junk-{i}")
        statuses[decision.status] = statuses.get(decision.status, 0) + 1
        assert decision.status in (403, 503)
    assert auth.authenticate({}, bearer["Authorization"]).allowed
    assert reviewer.calls[KYVERNO] == 1  # served from its cache, never evicted by junk
    reviews = sum(n for token, n in reviewer.calls.items() if token != KYVERNO)
    assert reviews <= 10 + 5 * clock[0] + 1  # the burst plus 5 a second: not one review per junk token
    assert statuses[503] == junk - reviews and statuses[403] == reviews


def test_refused_tokens_live_in_their_own_small_cache() -> None:
    reviewer, clock = CountingReviewer(), [0.0]
    auth = authenticator(reviewer, clock, rate=1e6)
    assert auth.authenticate({}, "Bearer wrong").status == 403
    assert auth.authenticate({}, "Bearer wrong").status == 403
    assert reviewer.calls["wrong"] == 1
    for i in range(REFUSED_ENTRIES + 1):
        auth.authenticate({}, f"Bearer junk-{i}")
    assert auth.authenticate({}, "Bearer wrong").status == 403
    assert reviewer.calls["wrong"] == 2  # pushed out of the refused cache, which is all junk can do


def test_past_the_review_rate_a_new_token_gets_a_clear_503(api: TokenReviewApi, tmp_path: Path) -> None:
    client = app_client(api, tmp_path, TOKEN_REVIEWS_PER_SECOND=0.5)  # a burst of one
    assert client.post("/v1/kyverno/verify", data=BODY, headers={"Authorization": "Bearer junk-1"}).status_code == 403
    response = client.post("/v1/kyverno/verify", data=BODY, headers={"Authorization": "Bearer junk-2"})
    assert response.status_code == 503 and response.get_json() == {
        "error": "unavailable",
        "reason": "token-review-rate-limited",
    }
    assert response.headers["Retry-After"] == "1"
    assert len(api.reviews) == 1


def test_the_rate_limit_refills_at_its_rate() -> None:
    clock = [0.0]
    limit = RateLimit(2.0, 4.0, clock=lambda: clock[0])
    assert [limit.take() for _ in range(5)] == [True] * 4 + [False]
    clock[0] += 0.5
    assert [limit.take() for _ in range(2)] == [True, False]
    clock[0] += 100
    assert sum(limit.take() for _ in range(10)) == 4  # never more than the burst


# --- repeated warnings --------------------------------------------------------------------


def record(message: str, level: int = logging.WARNING, **extra: Any) -> logging.LogRecord:
    rec = logging.LogRecord("provider.test", level, __file__, 1, message, None, None)
    rec.__dict__.update(extra)
    return rec


def test_identical_warnings_are_rate_limited_and_the_next_line_counts_what_was_dropped() -> None:
    clock = [0.0]
    limiter = RepeatLimiter(burst=3, window=60.0, clock=lambda: clock[0])
    passed = [limiter.filter(record("TLS handshake refused", reason="handshake-failed")) for _ in range(10)]
    assert passed == [True] * 3 + [False] * 7
    assert limiter.filter(record("TLS handshake refused", reason="other"))  # different content: its own line
    assert limiter.filter(record("internal error", logging.ERROR))  # errors are never dropped
    assert all(limiter.filter(record("decision", logging.INFO)) for _ in range(10))
    clock[0] += 61
    again = record("TLS handshake refused", reason="handshake-failed")
    assert limiter.filter(again) and again.suppressed == 7


def test_the_repeat_table_is_bounded() -> None:
    limiter = RepeatLimiter(burst=1, keys=100)
    for i in range(1000):
        limiter.filter(record(f"line {i}"))
    assert len(limiter._seen) == 100


def test_many_refusals_log_a_few_lines(api: TokenReviewApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    client = app_client(api, tmp_path)
    capsys.readouterr()
    for _ in range(50):
        assert client.post("/v1/kyverno/verify", data=BODY).status_code == 401
    lines = [line for line in capsys.readouterr().err.splitlines() if '"caller refused"' in line]
    assert 1 <= len(lines) <= 5
