"""provider.neighbours.bootstrap: cluster-info JWS signatures, each way to break one, the policy, token Secrets.

Every signature here is computed from RFC 7515 itself (``jws`` in
``tests/support/bootstrap.py``: base64url without padding, HMAC-SHA256 over
``header '.' payload``, payload detached), never with the code under test; two
known answers come from cluster-bootstrap's own tests (token id ``joshua``).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provider.errors import PolicyError, RequestError
from provider.neighbours.bootstrap import (
    BootstrapToken,
    ClusterInfoPolicy,
    InlineTokenSource,
    evaluate_cluster_info,
    verify_signatures,
)
from provider.result import REASONS, Result
from provider.review import Review
from tests.support.bootstrap import (
    BROKEN,
    CA_PIN,
    GOOD,
    KUBECONFIG,
    NOW,
    OTHER_ID,
    OTHER_PIN,
    OTHER_SECRET,
    SIG_KEY,
    TOKEN_ID,
    TOKEN_SECRET,
    b64u,
    cluster_info,
    jws,
    kubeconfig,
    make_ca,
    secret,
)


def token(token_id: str = TOKEN_ID, secret: str = TOKEN_SECRET, **fields: Any) -> BootstrapToken:
    return BootstrapToken(token_id, secret, **fields)


SOURCE = InlineTokenSource([token(), token(OTHER_ID, OTHER_SECRET)])


def evaluate(obj: dict[str, Any], policy: dict[str, Any] | None = None, source: Any = SOURCE, **review: Any) -> Result:
    rv = Review(object=obj, **review) if review else Review.for_object(obj)
    result = evaluate_cluster_info(rv, ClusterInfoPolicy.from_dict(policy or {}), source, now=NOW)
    assert result.reason in REASONS
    return result


# --- known answers --------------------------------------------------------------------

#: cluster-bootstrap token/jws/jws_test.go: (content, id, secret) -> detached JWS.
UPSTREAM = [
    ("Hello from the other side. I must have called a thousand times.", "joshua", "my voice is my passcode",
     "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8"),
    ("", "joshua", "my voice is my passcode",
     "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..7Ui1ALizW4jXphVUB7xUqC9vLYLL9RZeOFfVLoB7Tgk"),
]  # fmt: skip


@pytest.mark.parametrize(("content", "token_id", "secret", "value"), UPSTREAM, ids=["content", "empty-content"])
def test_upstream_vectors_verify(content: str, token_id: str, secret: str, value: str) -> None:
    assert jws(content, token_id, secret) == value  # the test's own RFC 7515 agrees with Kubernetes
    source = InlineTokenSource([token(token_id, secret)])
    result = evaluate(cluster_info({"kubeconfig": content, f"jws-kubeconfig-{token_id}": value}), source=source)
    assert (result.allowed, result.verified, result.reason) == (True, True, "verified")
    assert result.signers == ({"bootstrapToken": token_id},)


def test_the_mac_key_is_the_token_secret_not_the_whole_token() -> None:
    # Some documentation says "the full token as the shared secret"; the signer keys HMAC with the secret alone.
    whole = jws(KUBECONFIG, TOKEN_ID, f"{TOKEN_ID}.{TOKEN_SECRET}")
    result = evaluate(cluster_info({"kubeconfig": KUBECONFIG, f"jws-kubeconfig-{TOKEN_ID}": whole}))
    assert result.reason == "signature-invalid"


# --- allowed ---------------------------------------------------------------------------


def test_valid_signature_is_verified() -> None:
    result = evaluate(cluster_info())
    assert (result.allowed, result.verified, result.reason) == (True, True, "verified")
    assert TOKEN_ID in result.message
    assert result.to_dict()["signers"] == [{"bootstrapToken": TOKEN_ID}]


def test_every_signature_is_checked_and_named() -> None:
    data = {"kubeconfig": KUBECONFIG, f"jws-kubeconfig-{TOKEN_ID}": jws(KUBECONFIG, TOKEN_ID, TOKEN_SECRET),
            f"jws-kubeconfig-{OTHER_ID}": jws(KUBECONFIG, OTHER_ID, OTHER_SECRET)}  # fmt: skip
    result = evaluate(cluster_info(data))
    assert result.verified
    assert set(map(json.dumps, result.signers)) == {json.dumps({"bootstrapToken": i}) for i in (TOKEN_ID, OTHER_ID)}


def test_no_signature_is_allowed_unless_required() -> None:
    unsigned = cluster_info({"kubeconfig": KUBECONFIG})
    result = evaluate(unsigned)
    assert (result.allowed, result.verified, result.reason) == (True, False, "no-signatures")
    required = evaluate(unsigned, {"requireSignature": True})
    assert (required.allowed, required.reason) == (False, "unsigned")


def test_token_that_expires_later_is_fine() -> None:
    source = InlineTokenSource([token(expiration=NOW + dt.timedelta(seconds=1))])
    assert evaluate(cluster_info(), source=source).verified


@pytest.mark.parametrize(
    "obj",
    [
        cluster_info(name="other"),
        cluster_info(namespace="default"),
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cluster-info", "namespace": "kube-public"}},
    ],
    ids=["other-name", "other-namespace", "other-kind"],
)
def test_other_objects_are_out_of_scope(obj: dict[str, Any]) -> None:
    result = evaluate(obj)
    assert (result.allowed, result.reason) == (True, "out-of-scope")


def test_delete_is_out_of_scope() -> None:
    assert evaluate(
        cluster_info({"kubeconfig": "x", "jws-kubeconfig-abcdef": "junk"}), operation="DELETE", username="u"
    ).allowed


def test_namespace_may_come_from_the_review() -> None:
    obj = cluster_info()
    del obj["metadata"]["namespace"]
    assert evaluate(obj, operation="UPDATE", username="u", namespace="kube-public").verified


# --- denied: one way each -------------------------------------------------------------


@pytest.mark.parametrize(("data", "reason"), [(d, r) for _, d, r in BROKEN], ids=[i for i, _, _ in BROKEN])
def test_broken_signature_is_denied(data: dict[str, Any], reason: str) -> None:
    result = evaluate(cluster_info(data))
    assert (result.allowed, result.verified, result.reason) == (False, False, reason), result.message
    assert result.message.startswith("ConfigMap kube-public/cluster-info")


def test_members_reordered_would_still_be_a_valid_rfc7515_jws() -> None:
    # The MAC is right for the header as written; only kubeadm's byte-for-byte comparison refuses it.
    value = jws(KUBECONFIG, TOKEN_ID, TOKEN_SECRET, header=b'{"kid":"abcdef","alg":"HS256"}')
    header_b64, mac_b64 = value.split("..")
    expected = hmac.new(
        TOKEN_SECRET.encode(), f"{header_b64}.{b64u(KUBECONFIG.encode())}".encode(), hashlib.sha256
    ).digest()
    assert b64u(expected) == mac_b64
    assert "byte for byte" in evaluate(cluster_info({"kubeconfig": KUBECONFIG, SIG_KEY: value})).message


@pytest.mark.parametrize(
    ("bad_token", "reason", "says"),
    [
        (token(expiration=NOW - dt.timedelta(seconds=1)), "token-expired", "expired at 2026-01-15T11:59:59"),
        (token(expiration=NOW), "token-expired", "expired at"),
        (BootstrapToken.from_secret({"type": "bootstrap.kubernetes.io/token", "metadata": {"name": "bootstrap-token-abcdef"},
                                     "stringData": {"token-id": TOKEN_ID, "token-secret": TOKEN_SECRET, "expiration": "tomorrow",
                                                    "usage-bootstrap-signing": "true"}}, TOKEN_ID),
         "token-expired", "not an RFC 3339 time"),
        (token(signing=False), "token-not-for-signing", "usage-bootstrap-signing"),
    ],
    ids=["expired", "expires-now", "unparseable-expiration", "no-signing-usage"],
)  # fmt: skip
def test_token_state_is_honoured(bad_token: BootstrapToken | None, reason: str, says: str) -> None:
    assert bad_token is not None
    result = evaluate(cluster_info(), source=InlineTokenSource([bad_token]))
    assert (result.allowed, result.reason) == (False, reason)
    assert says in result.message


def test_unknown_and_bad_signatures_are_all_reported() -> None:
    data = {"kubeconfig": KUBECONFIG, SIG_KEY: GOOD,
            "jws-kubeconfig-zzzzzz": jws(KUBECONFIG, "zzzzzz", TOKEN_SECRET),
            f"jws-kubeconfig-{OTHER_ID}": jws(KUBECONFIG + "x", OTHER_ID, OTHER_SECRET)}  # fmt: skip
    result = evaluate(cluster_info(data))
    assert not result.allowed
    assert result.reason == "signature-invalid"  # keys in order: 07401b first
    assert "2 of 3 signatures refused" in result.message
    assert "jws-kubeconfig-zzzzzz: [token-unknown]" in result.message
    assert f"jws-kubeconfig-{OTHER_ID}: [signature-invalid]" in result.message


def test_policy_token_ids_restrict_who_may_sign() -> None:
    result = evaluate(cluster_info(), {"tokenIds": [OTHER_ID]})
    assert (result.allowed, result.reason) == (False, "token-unknown")
    assert "tokenIds" in result.message
    assert evaluate(cluster_info(), {"tokenIds": [TOKEN_ID]}).verified


def test_findings_per_key() -> None:
    findings = verify_signatures(cluster_info(), ClusterInfoPolicy(), SOURCE, now=NOW)
    assert [(f.key, f.token_id, f.reason, f.verified) for f in findings] == [(SIG_KEY, TOKEN_ID, "verified", True)]


# --- CA pins ---------------------------------------------------------------------------


def test_pinned_ca_is_checked() -> None:
    assert evaluate(cluster_info(), {"caCertHashes": [CA_PIN]}).verified
    assert evaluate(cluster_info(), {"caCertHashes": [OTHER_PIN, CA_PIN.upper().replace("SHA256", "sha256")]}).verified
    result = evaluate(cluster_info(), {"caCertHashes": [OTHER_PIN]})
    assert (result.allowed, result.reason) == (False, "ca-pin-mismatch")
    assert CA_PIN in result.message


def test_pins_apply_to_unsigned_cluster_info_too() -> None:
    evil_config = kubeconfig(make_ca("evil")[0])
    result = evaluate(cluster_info({"kubeconfig": evil_config}), {"caCertHashes": [CA_PIN]})
    assert (result.allowed, result.reason) == (False, "ca-pin-mismatch")
    assert evaluate(cluster_info({"kubeconfig": KUBECONFIG}), {"caCertHashes": [CA_PIN]}).reason == "no-signatures"


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ("apiVersion: v1\nkind: Config\nclusters: []\n", "ca-pin-mismatch"),
        ("apiVersion: v1\nclusters:\n- cluster:\n    server: https://x\n  name: a\n", "ca-pin-mismatch"),
        (
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: '%%%'\n  name: a\n",
            "cluster-info-invalid",
        ),
        (
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: aGVsbG8=\n  name: a\n",
            "cluster-info-invalid",
        ),
        ("[not, a, kubeconfig]\n", "cluster-info-invalid"),
        ("a: [unclosed\n", "cluster-info-invalid"),
        ("clusters:\n- just-a-string\n", "cluster-info-invalid"),
    ],
    ids=[
        "no-clusters",
        "no-ca-data",
        "ca-not-base64",
        "ca-not-pem",
        "not-a-mapping",
        "not-yaml",
        "cluster-not-a-mapping",
    ],
)
def test_pins_against_odd_kubeconfigs(config: str, reason: str) -> None:
    data = {"kubeconfig": config, SIG_KEY: jws(config, TOKEN_ID, TOKEN_SECRET)}
    result = evaluate(cluster_info(data), {"caCertHashes": [CA_PIN]})
    assert (result.allowed, result.reason) == (False, reason), result.message


# --- the policy ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ({"tokenId": [TOKEN_ID]}, "unknown field"),
        ({"check": "cluster-info"}, "unknown field"),
        ({"tokenIds": []}, "empty list"),
        ({"tokenIds": ["ABCDEF"]}, "not a token id"),
        ({"tokenIds": TOKEN_ID}, "list of strings"),
        ({"caCertHashes": ["abc"]}, "sha256:<64 hex digits>"),
        ({"caCertHashes": [CA_PIN.replace("sha256:", "sha1:")]}, "sha256:<64 hex digits>"),
        ({"requireSignature": "yes"}, "true or false"),
        (["tokenIds"], "mapping"),
    ],
    ids=[
        "typo",
        "check-inside",
        "empty-token-ids",
        "bad-token-id",
        "token-ids-not-list",
        "bad-pin",
        "sha1-pin",
        "require-not-bool",
        "not-a-mapping",
    ],
)
def test_policy_is_strict(policy: Any, says: str) -> None:
    with pytest.raises(PolicyError, match=says):
        ClusterInfoPolicy.from_dict(policy)


def test_a_whole_token_in_token_ids_is_refused_without_quoting_its_secret() -> None:
    """The message reaches the person whose write was denied: it must not carry the secret."""
    with pytest.raises(PolicyError, match="never a secret") as caught:
        ClusterInfoPolicy.from_dict({"tokenIds": [f"{TOKEN_ID}.{TOKEN_SECRET}"]})
    assert TOKEN_SECRET[:4] not in caught.value.message and TOKEN_ID not in caught.value.message


def test_policy_defaults() -> None:
    assert ClusterInfoPolicy.from_dict(None) == ClusterInfoPolicy.from_dict({}) == ClusterInfoPolicy()
    parsed = ClusterInfoPolicy.from_dict(
        {"tokenIds": [TOKEN_ID], "caCertHashes": [CA_PIN.upper().replace("SHA256", "sha256")], "requireSignature": True}
    )
    assert parsed.token_ids == frozenset({TOKEN_ID})
    assert parsed.ca_cert_hashes == frozenset({CA_PIN.removeprefix("sha256:")})


# --- tokens ----------------------------------------------------------------------------


def test_token_text() -> None:
    parsed = BootstrapToken.parse(f"{TOKEN_ID}.{TOKEN_SECRET}")
    assert (parsed.token_id, parsed.secret, parsed.expiration, parsed.signing) == (TOKEN_ID, TOKEN_SECRET, None, True)
    assert TOKEN_SECRET not in repr(parsed)
    for bad in (
        "abcdef:0123456789abcdef",
        "abcdef.0123456789abcde",
        "ABCDEF.0123456789abcdef",
        "abcdef.0123456789abcdef.x",
    ):
        with pytest.raises(PolicyError):
            BootstrapToken.parse(bad)


@pytest.mark.parametrize(
    ("expiration", "expected"),
    [
        ("2017-03-10T03:22:11Z", dt.datetime(2017, 3, 10, 3, 22, 11, tzinfo=dt.UTC)),
        ("2030-01-01T00:00:00+02:00", dt.datetime(2029, 12, 31, 22, 0, tzinfo=dt.UTC)),
        ("2030-01-01T00:00:00.5Z", dt.datetime(2030, 1, 1, 0, 0, 0, 500000, tzinfo=dt.UTC)),
    ],
    ids=["utc", "offset", "fraction"],
)
def test_secret_expiration(expiration: str, expected: dt.datetime) -> None:
    parsed = BootstrapToken.from_secret(secret(expiration=expiration), TOKEN_ID)
    assert parsed is not None
    assert parsed.expiration == expected
    assert parsed.origin == "Secret kube-system/bootstrap-token-abcdef"


@pytest.mark.parametrize(
    "expiration",
    ["2030-01-01", "2030-01-01 00:00:00Z", "2030-13-01T00:00:00Z", "soon"],
    ids=["date", "space", "month-13", "word"],
)
def test_unparseable_expiration_is_already_expired(expiration: str) -> None:
    parsed = BootstrapToken.from_secret(secret(expiration=expiration), TOKEN_ID)
    assert parsed is not None
    assert parsed.expired(dt.datetime(1, 1, 2, tzinfo=dt.UTC))


@pytest.mark.parametrize(
    ("change", "usable"),
    [
        ({}, True),
        ({"type": "Opaque"}, False),
        ({"metadata": {"name": "bootstrap-token-zzzzzz"}}, False),
        (
            {
                "data": {
                    "token-id": base64.b64encode(b"zzzzzz").decode(),
                    "token-secret": base64.b64encode(b"x").decode(),
                }
            },
            False,
        ),
        ({"data": {"token-id": base64.b64encode(TOKEN_ID.encode()).decode()}}, False),
        ({"data": {"token-id": "%%%", "token-secret": "%%%"}}, False),
        ({"data": None, "stringData": {"token-id": TOKEN_ID, "token-secret": TOKEN_SECRET}}, True),
    ],
    ids=["good", "wrong-type", "name-mismatch", "id-mismatch", "no-secret", "not-base64", "string-data"],
)
def test_which_secrets_hold_a_token(change: dict[str, Any], usable: bool) -> None:
    parsed = BootstrapToken.from_secret({**secret(), **change}, TOKEN_ID)
    assert (parsed is not None) == usable


def test_signing_usage_must_be_exactly_true() -> None:
    for value, signing in (("true", True), ("True", False), ("1", False), ("", False)):
        parsed = BootstrapToken.from_secret(secret(**{"usage-bootstrap-signing": value}), TOKEN_ID)
        assert parsed is not None and parsed.signing is signing


def test_review_without_object_is_a_request_error() -> None:
    with pytest.raises(RequestError):
        evaluate_cluster_info(Review(object=None, operation="CREATE"), ClusterInfoPolicy(), SOURCE)


def test_unscoped_refuses_other_kinds_and_verifies_any_configmap() -> None:
    other = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}
    result = evaluate_cluster_info(Review.for_object(other), ClusterInfoPolicy(), SOURCE, now=NOW, scoped=False)
    assert (result.allowed, result.reason) == (False, "cluster-info-invalid")
    renamed = evaluate_cluster_info(
        Review.for_object(cluster_info(name="backup")), ClusterInfoPolicy(), SOURCE, now=NOW, scoped=False
    )
    assert renamed.verified


# --- hostile input ---------------------------------------------------------------------------

_B64URL_TEXT = st.from_regex(r"[A-Za-z0-9_\-]{0,60}", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(value=st.one_of(
    st.text(max_size=300),
    st.builds(lambda a, b, c: f"{a}.{b}.{c}", _B64URL_TEXT, _B64URL_TEXT, _B64URL_TEXT),
    st.builds(lambda h, m: f"{b64u(h)}..{b64u(m)}", st.binary(max_size=80), st.binary(min_size=32, max_size=32)),
    st.builds(lambda h, m: f"{b64u(json.dumps(h).encode())}..{b64u(m)}",
              st.dictionaries(st.sampled_from(["alg", "kid", "typ", "crit", "b64"]), st.one_of(st.text(max_size=8), st.booleans(), st.none())),
              st.binary(min_size=32, max_size=32)),
), config=st.text(max_size=200))  # fmt: skip
def test_arbitrary_signatures_are_denied_never_crash(value: str, config: str) -> None:
    result = evaluate(cluster_info({"kubeconfig": config, SIG_KEY: value}))
    assert (result.allowed, result.verified) == (False, False)
    assert result.reason in ("jws-malformed", "jws-header-invalid", "signature-invalid")


def test_kubeconfig_that_is_not_unicode_text() -> None:
    # JSON can carry a lone surrogate ("\ud800"); it has no UTF-8 form, so nothing could have signed it.
    (obj,) = [json.loads('{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info", "namespace": "kube-public"},'
                        ' "data": {"kubeconfig": "\\ud800", "jws-kubeconfig-abcdef": "x..y"}}')]  # fmt: skip
    assert evaluate(obj).reason == "cluster-info-invalid"


def test_dry_run_requests_are_judged_too() -> None:
    tampered = cluster_info({"kubeconfig": KUBECONFIG + "# x\n", SIG_KEY: GOOD})
    assert evaluate(tampered, operation="UPDATE", username="admin", dry_run=True).reason == "signature-invalid"
