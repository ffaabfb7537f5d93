"""provider.neighbours.csr: kubelet-serving CSRs generated with ``cryptography``, each rule broken one at a time."""

from __future__ import annotations

import base64
import socket
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provider.errors import PolicyError, RequestError, TransientError
from provider.limits import Limits
from provider.neighbours.csr import (
    MAX_EXPIRATION_SECONDS,
    CsrPolicy,
    evaluate_csr,
    parse_request,
    system_resolver,
    valid_host_name,
)
from provider.result import REASONS, Result
from provider.review import Review
from provider.service.checks import CheckContext, check_kubelet_serving_csr
from tests.support.csr import (
    BROKEN,
    NODE,
    RSA_KEY,
    SERVING,
    SERVING_RSA,
    USER,
    b64,
    csr,
    localhost_csr,
    pem_request,
)


def evaluate(
    obj: dict[str, Any], policy: dict[str, Any] | None = None, *, resolver: Any = None, **review: Any
) -> Result:
    rv = Review(object=obj, **review) if review else Review.for_object(obj)
    result = evaluate_csr(rv, CsrPolicy.from_dict(policy or {}), resolver=resolver)
    assert result.reason in REASONS
    return result


# --- compliant ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "policy"),
    [
        (csr(), {}),
        (csr(pem_request(key=RSA_KEY), usages=SERVING_RSA), {}),
        (csr(pem_request(dns=())), {}),
        (csr(pem_request(ips=())), {}),
        (csr(pem_request(dns=(NODE,))), {}),
        (csr(pem_request(dns=("WORKER-1.Example.com",))), {}),
        (csr(expiration=MAX_EXPIRATION_SECONDS), {}),
        (csr(expiration=86400), {"maxExpirationSeconds": 86400}),
        (csr(pem_request(dns=(f"{NODE}.example.com", f"{NODE}.internal"))), {"allowedDnsNames": 2}),
        (csr(pem_request(dns=("api.example.com",))), {"bypassHostnameCheck": True}),
        (csr(), {"providerRegex": r"^worker-\d+\.example\.com$", "providerIpPrefixes": ["10.0.0.0/24", "fc00::/7"]}),
        (csr(pem_request(ips=("fd00::5",))), {"providerIpPrefixes": "10.0.0.0/24,fc00::/7"}),
        (csr(pem_request(ips=("::ffff:10.0.0.5",))), {"providerIpPrefixes": ["10.0.0.0/24"]}),
        (csr(usages=[*SERVING, "server auth"]), {}),
    ],
    ids=["ecdsa", "rsa-key-encipherment", "ip-only", "dns-only", "bare-node-name", "dns-case", "max-expiration",
         "policy-expiration", "two-dns-allowed", "bypass-hostname", "regex-and-prefixes", "ipv6", "ipv4-mapped", "duplicate-usage"],
)  # fmt: skip
def test_compliant_requests_pass(obj: dict[str, Any], policy: dict[str, Any]) -> None:
    result = evaluate(obj, policy)
    assert (result.allowed, result.verified, result.reason) == (True, True, "verified"), result.message
    assert result.used_cluster is False
    assert result.message == "CertificateSigningRequest csr-x7k2p passes every kubelet-serving check"


# --- one rule broken at a time -------------------------------------------------------------


@pytest.mark.parametrize(("obj", "policy", "reason"), [(o, p, r) for _, o, p, r in BROKEN], ids=[i for i, *_ in BROKEN])
def test_each_broken_rule_has_its_reason(obj: dict[str, Any], policy: dict[str, Any], reason: str) -> None:
    result = evaluate(obj, policy)
    assert (result.allowed, result.verified, result.reason) == (False, False, reason), result.message
    assert result.message.startswith("CertificateSigningRequest csr-x7k2p breaks 1 rule: "), result.message


def test_requester_must_be_the_username_on_create() -> None:
    result = evaluate(csr(), operation="CREATE", username="system:node:worker-2")
    assert (result.allowed, result.reason) == (False, "csr-requester-mismatch")
    assert evaluate(csr(), operation="CREATE", username=USER).verified
    # an approval or label change is made by someone else; the spec is immutable then
    assert evaluate(csr(), operation="UPDATE", username="system:serviceaccount:kube-system:approver").verified


def test_every_broken_rule_is_listed_first_one_is_the_reason() -> None:
    obj = csr(
        pem_request(cn="system:node:worker-2", orgs=(), dns=("a.example.com", "b.example.com")),
        expiration=MAX_EXPIRATION_SECONDS + 1,
    )
    result = evaluate(obj)
    assert result.reason == "csr-common-name-mismatch"
    for reason in (
        "csr-common-name-mismatch",
        "csr-organization-invalid",
        "csr-expiration-too-long",
        "csr-too-many-dns-names",
        "csr-dns-name-not-prefixed",
    ):
        assert f"[{reason}]" in result.message
    assert "breaks 6 rules" in result.message


def test_many_names_are_bounded() -> None:
    names = tuple(f"{NODE}-{i}.example.com" for i in range(1500))
    start = time.process_time()  # CPU time: the work, whatever else the machine runs
    result = evaluate(csr(pem_request(dns=names)), {"providerRegex": r"^(a+)+$"})
    assert time.process_time() - start < 2.0
    assert result.reason == "csr-too-many-dns-names"
    assert "1500 DNS SANs" in result.message
    assert "and " in result.message  # the list of violations is cut short


# --- scope -------------------------------------------------------------------------------


def test_other_signers_and_kinds_are_out_of_scope() -> None:
    client = evaluate(
        csr(usages=["digital signature", "client auth"], signer="kubernetes.io/kube-apiserver-client-kubelet")
    )
    assert (client.allowed, client.reason) == (True, "out-of-scope")
    pod = evaluate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
    assert (pod.allowed, pod.reason) == (True, "out-of-scope")
    deleted = evaluate(csr(pem_request(orgs=())), operation="DELETE", username="admin")
    assert (deleted.allowed, deleted.reason) == (True, "out-of-scope")


def test_unscoped_refuses_other_kinds() -> None:
    result = evaluate_csr(Review.for_object({"apiVersion": "v1", "kind": "ConfigMap"}), CsrPolicy(), scoped=False)
    assert (result.allowed, result.reason) == (False, "csr-malformed")
    with pytest.raises(RequestError):
        evaluate_csr(Review(object=None, operation="CREATE"), CsrPolicy())


def test_no_spec() -> None:
    obj = csr()
    obj["spec"] = {"signerName": "kubernetes.io/kubelet-serving"}
    assert evaluate(obj).reason == "csr-malformed"


# --- DNS resolution ------------------------------------------------------------------------


def test_resolution_with_the_system_resolver() -> None:
    ok = evaluate(localhost_csr(), {"resolveDnsNames": True})
    assert (ok.allowed, ok.reason, ok.used_cluster) == (True, "verified", True)
    assert "(names resolved)" in ok.message
    stray = evaluate(localhost_csr(("127.0.0.1", "10.0.0.5")), {"resolveDnsNames": True})
    assert (stray.allowed, stray.reason) == (False, "csr-ip-not-resolved")
    outside = evaluate(localhost_csr(()), {"resolveDnsNames": True, "providerIpPrefixes": ["10.0.0.0/8"]})
    assert (outside.allowed, outside.reason) == (False, "csr-resolved-ip-not-allowed")


def test_resolution_is_off_by_default() -> None:
    asked: list[str] = []

    def resolver(name: str, timeout: float) -> tuple[str, ...]:
        asked.append(name)
        return ()

    assert evaluate(csr(), resolver=resolver).verified
    assert asked == []
    result = evaluate(csr(), {"resolveDnsNames": True}, resolver=resolver)
    assert (result.reason, asked) == ("csr-dns-unresolvable", [f"{NODE}.example.com"])


def test_resolution_shares_one_deadline() -> None:
    def slow(name: str, timeout: float) -> tuple[str, ...]:
        time.sleep(0.15)
        return ("10.0.0.5",)

    names = (f"{NODE}.example.com", f"{NODE}.internal", f"{NODE}.lan")
    with pytest.raises(TransientError, match=r"longer than 0\.2 s"):
        evaluate(
            csr(pem_request(dns=names)),
            {"resolveDnsNames": True, "dnsTimeoutSeconds": 0.2, "allowedDnsNames": 3},
            resolver=slow,
        )


def test_system_resolver_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    real = socket.getaddrinfo

    def hanging(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("flags", 0) & socket.AI_NUMERICHOST:  # is it an address? answered at once
            return real(*args, **kwargs)
        release.wait(5)
        raise OSError("gave up")

    monkeypatch.setattr("socket.getaddrinfo", hanging)
    start = time.perf_counter()
    try:
        with pytest.raises(TransientError, match=r"did not finish within 0\.20 s"):
            system_resolver("worker-1.example.com", 0.2)
    finally:
        release.set()
    assert time.perf_counter() - start < 1.0


def test_system_resolver_answers() -> None:
    assert "127.0.0.1" in system_resolver("localhost", 1.0)
    try:
        answer = system_resolver("name-that-does-not-exist.invalid", 1.0)  # RFC 6761: never resolves
    except TransientError:
        pytest.skip("this host's DNS gives no answer within 1 s")
    assert answer == ()


# --- the policy ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ({"providerRegexp": "x"}, "unknown field"),
        ({"bypassDnsResolution": True}, "unknown field"),
        ({"providerRegex": "(unclosed"}, "not a valid regular expression"),
        ({"providerRegex": ""}, "1 to 1024"),
        ({"providerIpPrefixes": ["10.0.0.0/33"]}, "not an IP prefix"),
        ({"providerIpPrefixes": []}, "1 to 256"),
        ({"providerIpPrefixes": [10]}, "1 to 256"),
        ({"maxExpirationSeconds": MAX_EXPIRATION_SECONDS + 1}, "from 0 to"),
        ({"maxExpirationSeconds": -1}, "from 0 to"),
        ({"maxExpirationSeconds": True}, "whole number"),
        ({"allowedDnsNames": "1"}, "whole number"),
        ({"bypassHostnameCheck": "true"}, "true or false"),
        ({"resolveDnsNames": 1}, "true or false"),
        ({"dnsTimeoutSeconds": 5}, "at most 2"),
        ({"dnsTimeoutSeconds": 0}, "above 0"),
        ("providerRegex", "mapping"),
    ],
    ids=["typo", "upstream-flag-name", "bad-regex", "empty-regex", "bad-prefix", "no-prefixes", "prefix-not-string",
         "expiration-over-max", "expiration-negative", "expiration-bool", "dns-count-string", "bypass-string",
         "resolve-int", "timeout-high", "timeout-zero", "not-a-mapping"],
)  # fmt: skip
def test_policy_is_strict(policy: Any, says: str) -> None:
    with pytest.raises(PolicyError, match=says):
        CsrPolicy.from_dict(policy)


def test_policy_defaults_follow_the_approver() -> None:
    parsed = CsrPolicy.from_dict(None)
    assert parsed == CsrPolicy()
    assert (parsed.max_expiration_seconds, parsed.allowed_dns_names, parsed.resolve_dns_names) == (
        367 * 86400,
        1,
        False,
    )
    assert parsed.provider_regex is None and parsed.ip_prefixes is None


def test_check_entry_point() -> None:
    context = CheckContext()
    result = check_kubelet_serving_csr(Review.for_object(csr()), {"providerRegex": r"^worker-\d+\."}, context)
    assert result.verified
    with pytest.raises(PolicyError):
        check_kubelet_serving_csr(Review.for_object(csr()), {"nope": 1}, context)
    tight = CheckContext(limits=Limits(max_csr_bytes=64))
    assert check_kubelet_serving_csr(Review.for_object(csr()), {}, tight).reason == "csr-malformed"


def test_parse_request_reads_what_the_checks_use() -> None:
    parsed = parse_request(b64(pem_request(dns=("a.example.com",), ips=("10.0.0.5", "::ffff:10.0.0.6"))))
    assert parsed.common_names == (USER,)
    assert parsed.organizations == ("system:nodes",)
    assert parsed.dns_names == ("a.example.com",)
    assert [str(i) for i in parsed.ip_addresses] == ["10.0.0.5", "10.0.0.6"]
    small = Limits(max_csr_bytes=64)
    with pytest.raises(Exception, match="larger than 64 bytes"):
        parse_request(b64(pem_request()), small)


@pytest.mark.parametrize(
    ("name", "valid"),
    [("worker-1", True), ("a.b.c", True), ("1.2.3.4", True), ("-a.b", False), ("a-.b", False), ("a." * 127 + "b", False),
     ("ä.example.com", False), ("a.", False), ("", False), ("x" * 64 + ".com", False)],
)  # fmt: skip
def test_host_names(name: str, valid: bool) -> None:
    assert valid_host_name(name) is valid


# --- hostile input -----------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=600), wrap=st.booleans())
def test_arbitrary_requests_are_malformed_never_a_crash(data: bytes, wrap: bool) -> None:
    payload = (
        b"-----BEGIN CERTIFICATE REQUEST-----\n" + base64.encodebytes(data) + b"-----END CERTIFICATE REQUEST-----\n"
        if wrap
        else data
    )
    result = evaluate(csr(payload))
    assert (result.allowed, result.reason) == (False, "csr-malformed")


@settings(max_examples=100, deadline=None)
@given(spec=st.dictionaries(st.sampled_from(["request", "username", "usages", "expirationSeconds", "signerName"]),
                            st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20), st.lists(st.text(max_size=5), max_size=3))))  # fmt: skip
def test_arbitrary_specs_never_crash(spec: dict[str, Any]) -> None:
    obj = csr()
    obj["spec"].update(spec)
    result = evaluate(obj)
    assert result.reason in REASONS
    if obj["spec"].get("signerName") == "kubernetes.io/kubelet-serving" and result.allowed:
        assert result.reason == "verified"


def test_dry_run_requests_are_judged_too() -> None:
    result = evaluate(csr(pem_request(orgs=("system:masters",))), operation="CREATE", username=USER, dry_run=True)
    assert (result.allowed, result.reason) == (False, "csr-organization-invalid")
