"""Upstream's keyless fixtures, signed by the real Fulcio and logged in the real Rekor, verified offline.

Identities and expectations come from ``expected.json`` of the interop data;
the trust comes from its ``trust/`` root (and, separately, from the root this
package ships). The certificates expired in 2021-2022: only their validity
at the Rekor integratedTime counts.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from cryptography import x509

from provider import Bounds, Policy, Review, decide
from provider.keys.pem import fingerprint_of
from provider.signatures.envelope import read_envelope
from tests.support.data import UPSTREAM, load_yaml

TRUST = str(UPSTREAM / "trust" / "sigstore-public-good-trusted_root.json")
#: An operator who lets policies name the interop root file (MANIFEST_PROVIDER_TRUSTED_ROOT_FILES).
BOUNDS = Bounds(trusted_root_files=(TRUST,))
EXPECTED = json.loads((UPSTREAM / "expected.json").read_text())
KEYLESS = [(case, sig) for case in EXPECTED["cases"] for sig in case.get("signatures", []) if sig.get("keyless")]
KEYLESS_CASES = list({id(case): case for case, _ in KEYLESS}.values())


def obj_of(case: dict[str, Any]) -> dict[str, Any]:
    (obj,) = load_yaml(UPSTREAM / case["file"])
    return dict(obj)


def run(obj: dict[str, Any], signer: Any, root: Any = TRUST, now: datetime | None = None, **fields: Any) -> Any:
    policy = Policy.from_dict(
        {"signers": [signer], **({"trustedRoot": root} if root is not None else {}), **fields}, bounds=BOUNDS
    )
    return decide(Review.for_object(obj), policy, now=now)


def certificate_key(obj: dict[str, Any], index: int) -> str:
    """The fingerprint of the key in the fixture's ``certificate[_index]``: the signer, as a verdict counts it."""
    (sig_set,) = [s for s in read_envelope(obj["metadata"]["annotations"]).sets if s.index == index]
    assert sig_set.certificate is not None
    return fingerprint_of(x509.load_pem_x509_certificate(sig_set.certificate).public_key())  # type: ignore[arg-type]


def identity(sig: dict[str, Any]) -> dict[str, str]:
    return {"subject": sig["san_email"], **({"issuer": sig["oidc_issuer"]} if sig.get("oidc_issuer") else {})}


def test_the_fixtures_hold_keyless_signatures() -> None:
    assert len(KEYLESS) == 4
    assert {sig["san_email"] for _, sig in KEYLESS} == {
        "hkitahar@redhat.com",
        "hirokuni.kitahara1@ibm.com",
        "hirokuni.kitahara1@gmail.com",
    }


@pytest.mark.parametrize("root", [TRUST, None], ids=["interop-trust-root", "shipped-public-good-root"])
@pytest.mark.parametrize(("case", "sig"), KEYLESS, ids=[f"{c['file'].split('/')[-1]}#{s['index']}" for c, s in KEYLESS])
def test_listed_identity_verifies_offline(case: dict[str, Any], sig: dict[str, Any], root: Any) -> None:
    obj = obj_of(case)
    result = run(obj, identity(sig), root)
    issuer = sig.get("oidc_issuer") or "CN=sigstore,O=sigstore.dev"  # the 2021 certificate carries no OIDC issuer
    assert result.signers == (
        {"subject": sig["san_email"], "issuer": issuer, "key": certificate_key(obj, sig["index"])},
    ), result.message
    if case["verify_resource"]["verified"]:
        assert result.reason == "verified"
    else:  # signed by that identity, then modified: the signature holds, the content does not
        assert result.reason == "content-mismatch"
        assert [d.key for d in result.diff] == [d["key"] for d in case["verify_resource"]["diff"]]


@pytest.mark.parametrize("case", KEYLESS_CASES, ids=[c["file"].split("/")[-1] for c in KEYLESS_CASES])
@pytest.mark.parametrize(
    "other",
    [
        "someone@example.com",
        "test-signer@example.com",
        {"subjectRegExp": "hirokuni"},  # a partial match is no match
        {"subject": "hkitahar@redhat.com", "issuer": "https://github.com/login/oauth"},
        {"subject": "hirokuni.kitahara1@ibm.com", "issuer": "https://accounts.google.com"},
        {"subject": "hirokuni.kitahara1@gmail.com", "issuer": "https://accounts.google.com"},
    ],
    ids=[
        "stranger",
        "upstream-e2e-signer",
        "partial-regexp",
        "redhat-with-github-issuer",
        "ibm-with-google-issuer",
        "gmail-with-any-oidc-issuer",
    ],
)
def test_any_other_identity_fails(case: dict[str, Any], other: Any) -> None:
    result = run(obj_of(case), other)
    assert (result.allowed, result.reason, result.signers) == (False, "identity-mismatch", ()), result.message


def test_upstream_e2e_signer_config_fails() -> None:
    """``configs/e2e-config-sample-1-signers.yaml`` (upstream's bare-string form) rejects the gmail signature."""
    (config,) = load_yaml(UPSTREAM / "configs" / "e2e-config-sample-1-signers.yaml")
    (obj,) = load_yaml(UPSTREAM / "manifests" / "cm-tarball-keyless-signed.yaml")
    policy = Policy.from_dict({**config, "trustedRoot": TRUST}, bounds=BOUNDS)
    result = decide(Review.for_object(obj), policy)
    assert (result.allowed, result.reason) == (False, "identity-mismatch")
    assert "test-signer@example.com" in result.message


def test_modified_fixture_verifies_with_upstream_ignore_config() -> None:
    (config,) = load_yaml(UPSTREAM / "configs" / "e2e-config-sample-2-ignorefields.yaml")
    (obj,) = load_yaml(UPSTREAM / "manifests" / "cm-tarball-keyless-modified-after-signing.yaml")
    policy = Policy.from_dict(
        {**config, "signers": ["hirokuni.kitahara1@gmail.com"], "trustedRoot": TRUST}, bounds=BOUNDS
    )
    assert decide(Review.for_object(obj), policy).reason == "verified"


def test_verification_time_does_not_matter() -> None:
    """Checked at integratedTime, not now: the same verdict today and after every CA has expired."""
    (obj,) = load_yaml(UPSTREAM / "manifests" / "cm-plain-keyless-multi-signed.yaml")
    for now in (datetime(2022, 6, 18, tzinfo=UTC), datetime(2040, 1, 1, tzinfo=UTC)):
        assert run(obj, "hkitahar@redhat.com", now=now).reason == "verified"


def test_both_keyless_signers_with_must_all() -> None:
    (obj,) = load_yaml(UPSTREAM / "manifests" / "cm-plain-keyless-multi-signed.yaml")
    policy = Policy.from_dict(
        {
            "signers": ["hkitahar@redhat.com", "hirokuni.kitahara1@ibm.com"],
            "keyOperation": "MustAll",
            "trustedRoot": TRUST,
        },
        bounds=BOUNDS,
    )
    result = decide(Review.for_object(obj), policy)
    assert result.reason == "verified"
    assert [s["subject"] for s in result.signers] == ["hkitahar@redhat.com", "hirokuni.kitahara1@ibm.com"]  # type: ignore[index]
