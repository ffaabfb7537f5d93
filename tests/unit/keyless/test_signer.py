"""Keyless and certificate signers in a sigstore world of our own: what verifies, and every attack refused.

The world (tests/support/keyless.py) is a Fulcio-like CA and a Rekor-like
log key generated per test module; signatures, certificates and SETs are real.
"""

from __future__ import annotations

import base64
import copy
import gzip
import json
import socket
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from provider import Policy, Review, decide
from provider.keyless.identity import SignerSpec
from provider.keyless.signer import check_signer, clear_cache
from provider.keyless.trust import load_trusted_root
from provider.keys.pem import fingerprint_of
from provider.limits import Limits
from provider.signatures.envelope import read_envelope
from tests.support.keyless import GITHUB, GOOGLE, SIGNED_AT, D, World, issue_leaf, make_ca, pem
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign

WORLD = World()
ROGUE = World()  # another CA and log: trusted by nobody here
NOW = SIGNED_AT + timedelta(days=30)  # long after the ten-minute certificates expired


def policy(*signers: Any, root: Any = None, **fields: Any) -> Policy:
    return Policy.from_dict(
        {"signers": list(signers or ["jane@example.com"]), "trustedRoot": root or WORLD.trusted_root(), **fields}
    )


def check(obj: dict[str, Any], pol: Policy | None = None) -> Any:
    return decide(Review.for_object(obj), pol or policy(), now=NOW)


def cm() -> dict[str, Any]:
    return configmap("cm", "ns", key="value")


def anns(obj: dict[str, Any]) -> dict[str, Any]:
    annotations: dict[str, Any] = obj["metadata"]["annotations"]
    return annotations


def reblob(obj: dict[str, Any], name: str, change: Any) -> dict[str, Any]:
    """``obj`` with the gzipped JSON annotation ``name`` rewritten by ``change``."""
    obj = copy.deepcopy(obj)
    data = json.loads(gzip.decompress(base64.b64decode(anns(obj)[f"{D}/{name}"])))
    change(data)
    anns(obj)[f"{D}/{name}"] = base64.b64encode(gzip.compress(json.dumps(data).encode())).decode()
    return obj


# --- what verifies ------------------------------------------------------------------


def test_keyless_signature_verifies_and_names_the_identity_and_its_key() -> None:
    key, cert = WORLD.leaf()
    result = check(WORLD.sign(cm(), key=key, cert=cert))
    assert (result.allowed, result.verified, result.reason) == (True, True, "verified")
    assert result.signers == (
        {"subject": "jane@example.com", "issuer": GOOGLE, "key": fingerprint_of(key.public_key())},
    )
    assert "signed by jane@example.com" in result.message


@pytest.mark.parametrize(
    ("leaf", "signer", "expected"),
    [
        (
            {
                "email": None,
                "uri": "https://github.com/org/repo/.github/workflows/release.yml@refs/heads/main",
                "issuer": "https://token.actions.githubusercontent.com",
            },
            {
                "subjectRegExp": r"https://github\.com/org/repo/\.github/workflows/[^@]+@refs/heads/main",
                "issuer": "https://token.actions.githubusercontent.com",
            },
            "https://github.com/org/repo/.github/workflows/release.yml@refs/heads/main",
        ),
        (
            {"email": None, "username": "jane", "issuer": "https://oidc.example"},
            {"subject": "jane", "issuer": "https://oidc.example"},
            "jane",
        ),
        ({"issuer": None, "issuer_v1": GITHUB}, {"subject": "jane@example.com", "issuer": GITHUB}, "jane@example.com"),
        (
            {"issuer": GITHUB, "issuer_v1": GITHUB},
            {"subject": "jane@example.com", "issuerRegExp": r"https://github\.com/.*"},
            "jane@example.com",
        ),
        ({}, {"subjectRegExp": r"[a-z]+@example\.com"}, "jane@example.com"),
    ],
    ids=[
        "uri-san-regexp",
        "username-othername",
        "issuer-v1-extension",
        "issuer-both-extensions-agree",
        "subject-regexp-any-issuer",
    ],
)
def test_identity_forms(leaf: dict[str, Any], signer: dict[str, Any], expected: str) -> None:
    key, cert = WORLD.leaf(**leaf)
    result = check(WORLD.sign(cm(), key=key, cert=cert), policy(signer))
    assert result.reason == "verified", result.message
    assert result.signers[0]["subject"] == expected


def test_rekord_entries_and_root_first_chains_verify() -> None:
    """Upstream's 2021 fixtures log ``rekord`` entries; root-signing copies list the root first."""
    result = check(WORLD.sign(cm(), kind="rekord"), policy(root=WORLD.trusted_root(root_first=True)))
    assert result.reason == "verified", result.message


def test_second_signature_set_verifies_when_the_first_is_someone_else() -> None:
    key, cert = WORLD.leaf(email="bob@example.com", issuer=GITHUB)
    obj = WORLD.sign(WORLD.sign(cm()), key=key, cert=cert, index=1)
    result = check(obj, policy({"subject": "bob@example.com", "issuer": GITHUB}))
    assert result.signers == (
        {"subject": "bob@example.com", "issuer": GITHUB, "key": fingerprint_of(key.public_key())},
    )
    both = check(obj, policy("jane@example.com", "bob@example.com", keyOperation="MustAll"))
    assert both.reason == "verified" and len(both.signers) == 2


def test_keys_and_signers_count_together_for_threshold() -> None:
    key = make_key()
    (obj,) = sign(cm(), key)
    obj = WORLD.sign(obj, index=1)
    two = Policy.from_dict(
        {
            "keys": [public_key_pem(key)],
            "signers": ["jane@example.com"],
            "trustedRoot": WORLD.trusted_root(),
            "threshold": 2,
        }
    )
    assert check(obj, two).reason == "verified"
    other = Policy.from_dict(
        {
            "keys": [public_key_pem(key)],
            "signers": ["mallory@example.com"],
            "trustedRoot": WORLD.trusted_root(),
            "threshold": 2,
        }
    )
    result = check(obj, other)
    assert result.reason == "key-threshold-not-met"
    assert "mallory@example.com" in result.message


def test_verification_needs_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Air-gapped clusters: a keyless verification opens no socket."""
    obj = WORLD.sign(cm())
    clear_cache()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("keyless verification tried to use the network")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    result = check(obj)
    assert result.reason == "verified", result.message


# --- attacks ------------------------------------------------------------------------


def forged() -> dict[str, Any]:
    key, cert = WORLD.forged_leaf(email="jane@example.com")
    return WORLD.sign(cm(), key=key, cert=cert)  # the log (like the real Rekor) logs anything


def rogue_ca() -> dict[str, Any]:
    key, cert = ROGUE.leaf(email="jane@example.com")
    return WORLD.sign(cm(), key=key, cert=cert)


def expired_at_signing() -> dict[str, Any]:
    key, cert = WORLD.leaf(not_before=SIGNED_AT - timedelta(hours=1))  # expired 50 minutes before logging
    return WORLD.sign(cm(), key=key, cert=cert)


def not_yet_valid_at_signing() -> dict[str, Any]:
    key, cert = WORLD.leaf(not_before=SIGNED_AT + timedelta(minutes=5))
    return WORLD.sign(cm(), key=key, cert=cert)


def tampered_set() -> dict[str, Any]:
    return reblob(
        WORLD.sign(cm()), "bundle", lambda b: b["Payload"].update(integratedTime=b["Payload"]["integratedTime"] - 3600)
    )


def set_over_other_bytes() -> dict[str, Any]:
    return WORLD.sign(cm(), set_over={"logIndex": 1})


def set_by_rogue_log() -> dict[str, Any]:
    return WORLD.sign(cm(), log_key=ROGUE.rekor, log_id=ROGUE.log_id)


def set_by_rogue_log_claiming_our_id() -> dict[str, Any]:
    return WORLD.sign(cm(), log_key=ROGUE.rekor, log_id=WORLD.log_id)


def bundle_for_another_hash() -> dict[str, Any]:
    return WORLD.sign(cm(), logged_hash="ab" * 32)


def bundle_for_another_signature() -> dict[str, Any]:
    return WORLD.sign(cm(), logged_signature=b"\x30\x06\x02\x01\x01\x02\x01\x01")


def bundle_for_another_certificate() -> dict[str, Any]:
    _, other = WORLD.leaf(email="jane@example.com")
    return WORLD.sign(cm(), logged_cert=other)


def bundle_from_another_object() -> dict[str, Any]:
    """A perfectly valid bundle, lifted from another signed object of the same signer."""
    key, cert = WORLD.leaf()
    donor = WORLD.sign(configmap("other", "ns", key="other"), key=key, cert=cert)
    obj = WORLD.sign(cm(), key=key, cert=cert)
    anns(obj)[f"{D}/bundle"] = anns(donor)[f"{D}/bundle"]
    return obj


def no_bundle() -> dict[str, Any]:
    return WORLD.sign(cm(), bundle=False)


def wrong_issuer() -> dict[str, Any]:
    key, cert = WORLD.leaf(issuer=GITHUB)
    return WORLD.sign(cm(), key=key, cert=cert)


def conflicting_issuers() -> dict[str, Any]:
    key, cert = WORLD.leaf(issuer=GOOGLE, issuer_v1=GITHUB)
    return WORLD.sign(cm(), key=key, cert=cert)


def other_subject() -> dict[str, Any]:
    key, cert = WORLD.leaf(email="jane@example.com.evil.test")
    return WORLD.sign(cm(), key=key, cert=cert)


def not_code_signing() -> dict[str, Any]:
    key, cert = WORLD.leaf(code_signing=False)
    return WORLD.sign(cm(), key=key, cert=cert)


def signature_by_other_key() -> dict[str, Any]:
    """Certificate, bundle and log all name signature S, but S is not the certificate key's."""
    _, cert = WORLD.leaf()
    return WORLD.sign(cm(), key=ec.generate_private_key(ec.SECP256R1()), cert=cert)


def content_changed_after_signing() -> dict[str, Any]:
    obj = WORLD.sign(cm())
    obj["data"]["key"] = "changed"
    return obj


ATTACKS = [
    ("self-signed-victim-identity", forged, "certificate-untrusted"),
    ("rogue-ca", rogue_ca, "certificate-untrusted"),
    ("not-code-signing", not_code_signing, "certificate-untrusted"),
    ("expired-at-integrated-time", expired_at_signing, "certificate-expired-at-signing"),
    ("not-yet-valid-at-integrated-time", not_yet_valid_at_signing, "certificate-expired-at-signing"),
    ("tampered-set", tampered_set, "tlog-entry-invalid"),
    ("set-over-other-payload", set_over_other_bytes, "tlog-entry-invalid"),
    ("set-by-unknown-log", set_by_rogue_log, "tlog-entry-invalid"),
    ("set-by-other-key-claiming-trusted-log-id", set_by_rogue_log_claiming_our_id, "tlog-entry-invalid"),
    ("bundle-names-another-hash", bundle_for_another_hash, "tlog-entry-invalid"),
    ("bundle-names-another-signature", bundle_for_another_signature, "tlog-entry-invalid"),
    ("bundle-names-another-certificate", bundle_for_another_certificate, "tlog-entry-invalid"),
    ("bundle-from-another-object", bundle_from_another_object, "tlog-entry-invalid"),
    ("no-bundle", no_bundle, "tlog-entry-invalid"),
    ("signature-by-another-key", signature_by_other_key, "signature-invalid"),
    ("wrong-issuer", wrong_issuer, "identity-mismatch"),
    ("conflicting-issuer-extensions", conflicting_issuers, "identity-mismatch"),
    ("subject-is-only-a-prefix-match", other_subject, "identity-mismatch"),
    ("content-changed-after-signing", content_changed_after_signing, "content-mismatch"),
]


@pytest.mark.parametrize(("make", "reason"), [(m, r) for _, m, r in ATTACKS], ids=[i for i, _, _ in ATTACKS])
def test_attack_is_refused(make: Any, reason: str) -> None:
    result = check(make(), policy({"subject": "jane@example.com", "issuer": GOOGLE}))
    assert (result.allowed, result.verified) == (False, False)
    assert result.reason == reason, result.message
    if reason != "content-mismatch":
        assert result.signers == ()


def test_regexps_must_match_the_whole_value() -> None:
    obj = WORLD.sign(cm())
    assert check(obj, policy({"subjectRegExp": "jane"})).reason == "identity-mismatch"
    assert (
        check(obj, policy({"subjectRegExp": "jane@example.com", "issuerRegExp": "https://accounts"})).reason
        == "identity-mismatch"
    )
    assert (
        check(
            obj, policy({"subjectRegExp": "jane@example\\.com", "issuerRegExp": "https://accounts\\.google\\.com"})
        ).reason
        == "verified"
    )


def test_ca_outside_its_trusted_root_window_is_untrusted() -> None:
    """A CA the root retired before the signature was logged issues nothing trusted."""
    root = WORLD.trusted_root(ca_valid_for={"start": "2020-01-01T00:00:00Z", "end": "2025-12-31T23:59:59Z"})
    result = check(WORLD.sign(cm()), policy(root=root))
    assert result.reason == "certificate-untrusted"
    assert "no certificate authority" in result.message


def test_log_key_outside_its_window_is_refused() -> None:
    root = WORLD.trusted_root(log_valid_for={"start": "2027-01-01T00:00:00Z"})
    result = check(WORLD.sign(cm()), policy(root=root))
    assert result.reason == "tlog-entry-invalid"
    assert "outside the validity" in result.message


def test_key_signed_object_gives_no_keyless_signer() -> None:
    (obj,) = sign(cm(), make_key())
    result = check(obj)
    assert result.reason == "signature-invalid"
    assert "no signature carries a certificate" in result.message


def test_furthest_failure_is_reported() -> None:
    """One set from a rogue CA, one genuine set for someone else: the identity is what is wrong."""
    key, cert = WORLD.leaf(email="bob@example.com")
    obj = WORLD.sign(rogue_ca(), key=key, cert=cert, index=1)
    result = check(obj)
    assert result.reason == "identity-mismatch"
    assert "bob@example.com" in result.message


def test_failures_are_cached_and_still_fail() -> None:
    obj = forged()
    spec = SignerSpec(subject="jane@example.com")
    envelope = read_envelope(anns(obj))
    first = check_signer(spec, envelope, load_trusted_root(WORLD.trusted_root()), now=NOW)
    second = check_signer(spec, envelope, load_trusted_root(WORLD.trusted_root()), now=NOW)
    assert first == second
    assert (first.verified, first.reason) == (False, "certificate-untrusted")


# --- certificate signers: chains through the signer's own roots, no transparency log ----------


PKI_ROOT = make_ca("corp-root")
PKI_ISSUING = make_ca("corp-code-signing", PKI_ROOT, path_length=0)
PKI_TLS = make_ca("corp-tls-issuing", PKI_ROOT, path_length=0)  # same root, issues for another purpose
CORP = "CN=corp-code-signing,O=test.example"


def corp_signed(
    *, not_before: datetime | None = None, chain: bool = True, ca: Any = PKI_ISSUING, **leaf: Any
) -> dict[str, Any]:
    """Signed with a corporate certificate; like a real signer, it sends its issuing CA along (``chain``)."""
    start = not_before or datetime.now(UTC) - timedelta(days=1)
    leaf = {"email": "build@corp.example", **leaf}
    key, cert = issue_leaf(ca, not_before=start, lifetime=timedelta(days=365), issuer=None, **leaf)
    return WORLD.sign(cm(), key=key, cert=cert, chain=(ca.cert,) if chain else (), bundle=False)


def corp_policy(*roots: Any, **signer: Any) -> Policy:
    material = pem(*(ca.cert for ca in roots or (PKI_ROOT, PKI_ISSUING))).decode()
    return Policy.from_dict({"signers": [{"subject": "build@corp.example", "roots": material, **signer}]})


def named(signers: tuple[Any, ...]) -> list[tuple[str, str]]:
    return [(s["subject"], s["issuer"]) for s in signers]


def test_certificate_signer_chains_through_its_roots() -> None:
    result = decide(Review.for_object(corp_signed()), corp_policy())
    assert result.reason == "verified", result.message
    assert named(result.signers) == [("build@corp.example", CORP)]
    assert decide(Review.for_object(corp_signed()), corp_policy(issuer=CORP)).reason == "verified"
    # the issuing CA alone is an anchor; the annotation need not carry anything but the leaf
    assert decide(Review.for_object(corp_signed(chain=False)), corp_policy(PKI_ISSUING)).reason == "verified"
    assert decide(Review.for_object(corp_signed(chain=False)), corp_policy()).reason == "verified"


def test_chain_work_is_bounded() -> None:
    """At most ``max_chain_certificates`` certificates are read from an annotation, and passed on a path."""
    ca = PKI_ROOT
    levels = []
    for i in range(6):
        ca = make_ca(f"level-{i}", ca)
        levels.append(ca)
    key, cert = issue_leaf(
        ca,
        not_before=datetime.now(UTC) - timedelta(days=1),
        lifetime=timedelta(days=30),
        issuer=None,
        email="build@corp.example",
    )
    sent = tuple(level.cert for level in reversed(levels))
    too_many = WORLD.sign(cm(), key=key, cert=cert, chain=sent, bundle=False)
    result = decide(Review.for_object(too_many), corp_policy())
    assert result.reason == "certificate-untrusted"
    assert "at most 5 are read" in result.message
    leaf_only = WORLD.sign(cm(), key=key, cert=cert, bundle=False)
    longest = corp_policy(*levels[1:])  # level-1 is the anchor (its issuer is not listed); four intermediates below it
    assert decide(Review.for_object(leaf_only), longest).reason == "verified"
    too_long = corp_policy(PKI_ROOT, *levels)  # six intermediates between the leaf and the root
    assert decide(Review.for_object(leaf_only), too_long).reason == "certificate-untrusted"
    assert decide(Review.for_object(leaf_only), too_long, limits=Limits(max_chain_certificates=6)).reason == "verified"


CERT_SIGNER_FAILURES = [
    # The issuing CA only in the annotation: the root alone trusts only what it issued itself.
    ("issuing-ca-only-in-the-annotation", corp_signed, (PKI_ROOT,), {}, "certificate-untrusted"),
    # Another CA under the trusted root, sent by the signer: it lends the root nothing.
    ("sibling-ca-sent-in-the-annotation", lambda: corp_signed(ca=PKI_TLS), (), {}, "certificate-untrusted"),
    (
        "other-pki",
        lambda: corp_signed(ca=make_ca("other-issuing", make_ca("other-root"), path_length=0)),
        (),
        {},
        "certificate-untrusted",
    ),
    (
        "keyless-certificate-under-roots",
        lambda: WORLD.sign(cm()),
        (),
        {"subject": "jane@example.com"},
        "certificate-untrusted",
    ),
    (
        "expired-now",
        lambda: corp_signed(not_before=datetime.now(UTC) - timedelta(days=400)),
        (),
        {},
        "certificate-untrusted",
    ),
    ("wrong-issuing-ca", corp_signed, (), {"issuer": "CN=another-ca,O=test.example"}, "identity-mismatch"),
    ("wrong-subject", corp_signed, (), {"subject": "intern@corp.example"}, "identity-mismatch"),
]


@pytest.mark.parametrize(
    ("make", "roots", "signer", "reason"),
    [c[1:] for c in CERT_SIGNER_FAILURES],
    ids=[c[0] for c in CERT_SIGNER_FAILURES],
)
def test_certificate_signer_failures(make: Any, roots: tuple[Any, ...], signer: dict[str, Any], reason: str) -> None:
    result = decide(Review.for_object(make()), corp_policy(*roots, **signer))
    assert (result.allowed, result.reason) == (False, reason), result.message


def test_sent_intermediates_are_named_as_unused() -> None:
    """The denial says why a chain that "looks complete" is not: list the issuing CA in roots."""
    result = decide(Review.for_object(corp_signed()), corp_policy(PKI_ROOT))
    assert "1 certificate(s) sent after it are not used: list the issuing CA in the signer's roots" in result.message


def test_certificate_signer_never_reads_the_trusted_root() -> None:
    """A policy with only certificate signers works with a trusted root that would not even parse."""
    roots = pem(PKI_ROOT.cert, PKI_ISSUING.cert).decode()
    pol = Policy.from_dict(
        {"signers": [{"subject": "build@corp.example", "roots": roots}], "trustedRoot": "/nonexistent/root.json"}
    )
    assert decide(Review.for_object(corp_signed()), pol).reason == "verified"


@pytest.mark.parametrize(
    ("roots", "message"),
    [
        ("not pem", "no PEM certificate"),
        ("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "not a PEM bundle"),
        (None, "not a CA certificate"),
    ],
    ids=["not-pem", "bad-der", "leaf-as-root"],
)
def test_bad_roots_are_a_policy_error(roots: str | None, message: str) -> None:
    from provider.errors import PolicyError

    if roots is None:
        _, leaf = WORLD.leaf()
        roots = pem(leaf).decode()
    obj = corp_signed()
    with pytest.raises(PolicyError, match=message):
        decide(
            Review.for_object(obj), Policy.from_dict({"signers": [{"subject": "build@corp.example", "roots": roots}]})
        )


# --- one signer counts once -----------------------------------------------------------------


def two_names(*, corp: bool) -> tuple[dict[str, Any], Policy, Policy]:
    """One certificate naming alice twice; a threshold of two and a MustAll over two entries that each match it."""
    entries: list[dict[str, Any]] = [{"subject": "alice@example.com"}, {"subjectRegExp": ".*@example\\.com"}]
    if corp:
        obj = corp_signed(email="alice.smith@example.com", also=("alice@example.com",))
        roots = pem(PKI_ROOT.cert, PKI_ISSUING.cert).decode()
        entries = [{**entry, "roots": roots} for entry in entries]
        return (
            obj,
            Policy.from_dict({"signers": entries, "threshold": 2}),
            Policy.from_dict({"signers": entries, "keyOperation": "MustAll"}),
        )
    key, cert = WORLD.leaf(email="alice.smith@example.com", also=("alice@example.com",))
    return WORLD.sign(cm(), key=key, cert=cert), policy(*entries, threshold=2), policy(*entries, keyOperation="MustAll")


@pytest.mark.parametrize("corp", [False, True], ids=["keyless", "certificate-signer"])
def test_one_certificate_with_two_sans_is_one_signer(corp: bool) -> None:
    """Reported: two entries, one matching each SAN of one certificate, met a threshold of two."""
    obj, threshold, must_all = two_names(corp=corp)
    for pol in (threshold, must_all):
        # certificate signers are judged now (no log); keyless ones at their logged time, whatever now is
        result = decide(Review.for_object(obj), pol, now=None if corp else NOW)
        assert (result.allowed, result.reason) == (False, "key-threshold-not-met"), result.message
        assert len(result.signers) == 1
        assert "1 distinct signer" in result.message


def test_a_key_and_a_certificate_for_that_key_are_one_signer() -> None:
    """Reported: key K and a keyless identity, threshold 2, met by ONE signature made with K carrying a certificate for K."""
    k = ec.generate_private_key(ec.SECP256R1())
    _, cert = WORLD.leaf(key=k)
    obj = WORLD.sign(cm(), key=k, cert=cert)
    fields = {"keys": [public_key_pem(k)], "signers": ["jane@example.com"], "trustedRoot": WORLD.trusted_root()}
    for requirement in ({"threshold": 2}, {"keyOperation": "MustAll"}):
        result = check(obj, Policy.from_dict({**fields, **requirement}))
        assert (result.allowed, result.reason) == (False, "key-threshold-not-met"), result.message
        assert result.signers == (fingerprint_of(k.public_key()),)
    assert check(obj, Policy.from_dict(fields)).reason == "verified"  # AtLeastOne: K did sign


def test_one_person_signing_twice_is_one_signer() -> None:
    """Keyless keys are ephemeral: jane's two signatures are two keys and one signer."""
    obj = WORLD.sign(WORLD.sign(cm()), index=1)
    result = check(obj, policy("jane@example.com", {"subjectRegExp": ".*@example\\.com"}, threshold=2))
    assert (result.allowed, result.reason) == (False, "key-threshold-not-met"), result.message
    key, cert = WORLD.leaf(email="bob@example.com")
    with_bob = WORLD.sign(obj, key=key, cert=cert, index=2)
    assert (
        check(with_bob, policy("jane@example.com", {"subjectRegExp": ".*@example\\.com"}, threshold=2)).reason
        == "verified"
    )


def test_keys_certified_for_one_subject_are_one_signer() -> None:
    """Two listed keys, each certified for carol: carol alone holds both. The certificates match no entry and still count."""
    k1, k2 = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    obj = WORLD.sign(cm(), key=k1, cert=WORLD.leaf(key=k1, email="carol@example.com")[1])
    obj = WORLD.sign(obj, key=k2, cert=WORLD.leaf(key=k2, email="carol@example.com")[1], index=1)
    keys = [public_key_pem(k1), public_key_pem(k2)]
    with_a_signer_entry = Policy.from_dict(
        {"keys": keys, "signers": ["dave@example.com"], "trustedRoot": WORLD.trusted_root(), "threshold": 2}
    )
    result = check(obj, with_a_signer_entry)
    assert (result.allowed, result.reason) == (False, "key-threshold-not-met"), result.message
    # A policy of keys alone trusts no certificate authority: its certificates prove nothing, each key is a signer.
    assert check(obj, Policy.from_dict({"keys": keys, "threshold": 2})).reason == "verified"


def test_must_all_asks_for_a_different_signer_per_entry() -> None:
    """MustAll of a broad and a narrow entry: jane alone is one approval; jane and bob are two."""
    entries = ({"subjectRegExp": ".*@example\\.com"}, "jane@example.com")
    jane = WORLD.sign(cm())
    result = check(jane, policy(*entries, keyOperation="MustAll"))
    assert (result.reason, len(result.signers)) == ("key-threshold-not-met", 1), result.message
    assert "2 of the 2 keys and signers required by MustAll verified, by 1 distinct signer" in result.message
    key, cert = WORLD.leaf(email="bob@example.com")
    both = check(WORLD.sign(jane, key=key, cert=cert, index=1), policy(*entries, keyOperation="MustAll"))
    assert both.reason == "verified", both.message
    assert sorted(s["subject"] for s in both.signers) == ["bob@example.com", "jane@example.com"]  # type: ignore[index]


def test_overlapping_signer_entries_count_one_signer_once() -> None:
    """A threshold of two is never met by one person matched by two entries."""
    obj = WORLD.sign(cm())
    overlapping = policy({"subjectRegExp": ".*@example\\.com"}, "jane@example.com", threshold=2)
    result = check(obj, overlapping)
    assert result.reason == "key-threshold-not-met"
    assert named(result.signers) == [("jane@example.com", GOOGLE)]
