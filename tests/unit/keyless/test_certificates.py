"""Keyless certificate paths come from the trusted root, one certificate authority at a time.

The trusted root here holds two Fulcio-like authorities under **one** root R, as a
private sigstore deployment has after rotating its intermediate:

* CA-A = [intermediate A, R], ``validFor`` 2020 .. end of 2025 (retired);
* CA-B = [intermediate B, R], ``validFor`` from 2026 (current).

Both intermediates are still valid X.509 certificates: only the TrustedRoot's
windows retire A. A certificate logged in 2026 and issued by intermediate A is
refused whether or not the signer appends intermediate A (or R, or both) to the
``certificate`` annotation: the path is built from CA-B's chain, the one
authority valid at the logged time, and nothing the signer sends is path
material (sigstore-go, pkg/root/certificate_authority.go, does the same).
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from provider import Policy, Review, decide
from provider.keyless.trust import load_trusted_root
from tests.support.keyless import CA, GOOGLE, SIGNED_AT, World, issue_leaf, make_ca
from tests.support.manifests import configmap

WORLD = World()  # its log key logs everything here; its own CA is not in the root below
ROOT = make_ca("rotated-root")
INTERMEDIATE_A = make_ca("fulcio-intermediate-a", ROOT, path_length=0)
INTERMEDIATE_B = make_ca("fulcio-intermediate-b", ROOT, path_length=0)
UNLISTED = make_ca("fulcio-intermediate-unlisted", ROOT, path_length=0)  # R issued it; no authority lists it
RETIRED = {"start": "2020-01-01T00:00:00Z", "end": "2025-12-31T23:59:59Z"}
CURRENT = {"start": "2026-01-01T00:00:00Z"}
LOGGED_2024 = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)


def _der(ca: CA) -> dict[str, str]:
    return {"rawBytes": base64.b64encode(ca.cert.public_bytes(serialization.Encoding.DER)).decode()}


def _authority(name: str, intermediate: CA, valid_for: dict[str, str]) -> dict[str, Any]:
    return {
        "subject": {"organization": "test.example", "commonName": name},
        "uri": f"https://{name}.test.example",
        "certChain": {"certificates": [_der(intermediate), _der(ROOT)]},
        "validFor": valid_for,
    }


def rotated_root() -> dict[str, Any]:
    document = WORLD.trusted_root()
    document["certificateAuthorities"] = [
        _authority("ca-a", INTERMEDIATE_A, RETIRED),
        _authority("ca-b", INTERMEDIATE_B, CURRENT),
    ]
    return document


POLICY = Policy.from_dict(
    {"signers": [{"subject": "jane@example.com", "issuer": GOOGLE}], "trustedRoot": rotated_root()}
)


def signed(issuer: CA, *, sent: tuple[CA, ...] = (), logged: datetime = SIGNED_AT) -> dict[str, Any]:
    """jane's keyless signature: a ten-minute certificate from ``issuer``, logged at ``logged``, ``sent`` appended."""
    key, cert = issue_leaf(issuer, not_before=logged - timedelta(minutes=1))
    return WORLD.sign(configmap(), key=key, cert=cert, chain=tuple(ca.cert for ca in sent), integrated_time=logged)


def test_the_root_holds_two_authorities_under_one_root() -> None:
    root = load_trusted_root(rotated_root())
    assert [ca.label for ca in root.authorities] == ["https://ca-a.test.example", "https://ca-b.test.example"]
    assert {a.subject for ca in root.authorities for a in ca.anchors} == {ROOT.cert.subject}
    assert [ca.label for ca in root.authorities_at(SIGNED_AT)] == ["https://ca-b.test.example"]
    # intermediate A itself has not expired: only the TrustedRoot retires it
    assert INTERMEDIATE_A.cert.not_valid_after_utc > SIGNED_AT


ACCEPTED = [
    ("current-ca-now", lambda: signed(INTERMEDIATE_B)),
    ("current-ca-with-its-intermediate-sent", lambda: signed(INTERMEDIATE_B, sent=(INTERMEDIATE_B, ROOT))),
    ("current-ca-with-noise-sent", lambda: signed(INTERMEDIATE_B, sent=(INTERMEDIATE_A,))),
    ("retired-ca-while-it-was-current", lambda: signed(INTERMEDIATE_A, logged=LOGGED_2024)),
]


@pytest.mark.parametrize("make", [m for _, m in ACCEPTED], ids=[i for i, _ in ACCEPTED])
def test_paths_through_the_authority_valid_at_the_logged_time_verify(make: Any) -> None:
    result = decide(Review.for_object(make()), POLICY, now=SIGNED_AT + timedelta(days=30))
    assert result.reason == "verified", result.message


REFUSED = [
    # Reported: denied alone, verified once the signer appended intermediate A.
    ("retired-ca-alone", lambda: signed(INTERMEDIATE_A)),
    ("retired-ca-with-its-intermediate-sent", lambda: signed(INTERMEDIATE_A, sent=(INTERMEDIATE_A,))),
    ("retired-ca-with-its-whole-chain-sent", lambda: signed(INTERMEDIATE_A, sent=(INTERMEDIATE_A, ROOT))),
    # The same hole the other way round: an authority not yet valid, brought in early.
    (
        "current-ca-before-its-window-with-its-intermediate-sent",
        lambda: signed(INTERMEDIATE_B, sent=(INTERMEDIATE_B,), logged=LOGGED_2024),
    ),
    # An intermediate the shared root issued that no authority lists.
    ("unlisted-intermediate-sent", lambda: signed(UNLISTED, sent=(UNLISTED,))),
]


@pytest.mark.parametrize("make", [m for _, m in REFUSED], ids=[i for i, _ in REFUSED])
def test_intermediates_the_signer_sends_are_never_path_material(make: Any) -> None:
    result = decide(Review.for_object(make()), POLICY, now=SIGNED_AT + timedelta(days=30))
    assert (result.allowed, result.reason) == (False, "certificate-untrusted"), result.message
    assert "does not chain to a certificate authority of the trusted root valid at" in result.message


def test_the_denial_says_sent_certificates_are_not_used() -> None:
    result = decide(Review.for_object(signed(INTERMEDIATE_A, sent=(INTERMEDIATE_A, ROOT))), POLICY, now=SIGNED_AT)
    assert "(https://ca-b.test.example); the 2 certificate(s) sent after it are never used" in result.message
