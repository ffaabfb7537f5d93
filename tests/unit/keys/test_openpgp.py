"""OpenPGP signers: signatures made by the real ``gpg``, verified by Sequoia through the policy.

The signature annotation is base64 of ``gpg --detach-sign --armor`` over the
payload, as ``kubectl sigstore`` verifies it (``pkg/util/sigtypes/pgp/pgp.go``)
and Integrity Shield's ``gpg-annotation-sign.sh`` writes it.
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.errors import PolicyError
from provider.policy.schema import Policy
from provider.result import Result
from provider.review import Review
from provider.signatures.signing import dump_yaml, sign_documents
from provider.verifier import decide
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap
from tests.support.openpgp import Gpg, ago

OBJECT = configmap("app", mode="production")


@pytest.fixture(scope="module")
def gpg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gpg]:
    home = Gpg(tmp_path_factory.mktemp("gnupg"))
    yield home
    home.close()


def payload_of(*docs: dict[str, Any]) -> bytes:
    return dump_yaml(list(docs)).encode()


def pgp_signed(
    gpg: Gpg, who: str, payload: bytes, *, domain: str = "cosign.sigstore.dev", **sign: Any
) -> dict[str, Any]:
    """OBJECT carrying ``payload`` as its message and ``who``'s armored detached signature over it."""
    signature = gpg.sign(who, payload, **sign)
    obj = yaml.safe_load(payload)
    obj["metadata"]["annotations"] = {
        f"{domain}/message": base64.b64encode(gzip.compress(payload, mtime=0)).decode(),
        f"{domain}/signature": base64.b64encode(signature).decode(),
    }
    return obj


def verdict(obj: dict[str, Any], policy: dict[str, Any]) -> Result:
    return decide(Review.for_object(obj), Policy.from_dict(policy))


@pytest.fixture(scope="module")
def alice(gpg: Gpg) -> str:
    return gpg.generate("alice@example.com")


def test_a_gpg_signature_verifies_with_the_armored_certificate_and_names_its_fingerprint(gpg: Gpg, alice: str) -> None:
    obj = pgp_signed(gpg, "alice@example.com", payload_of(OBJECT))
    result = verdict(obj, {"keys": [gpg.export(alice).decode()]})
    assert (result.reason, result.allowed, result.signers) == ("verified", True, (f"openpgp:{alice}",))


def test_a_binary_keyring_is_given_as_base64_and_holds_several_certificates(gpg: Gpg, alice: str) -> None:
    bob = gpg.generate("bob@example.com")
    keyring = gpg.export(alice, armor=False) + gpg.export(bob, armor=False)
    obj = pgp_signed(gpg, "bob@example.com", payload_of(OBJECT))
    policy = Policy.from_dict({"keys": [{"openpgpKeyring": base64.b64encode(keyring).decode(), "name": "ops"}]})
    assert [k.fingerprint for k in policy.openpgp_keys] == [alice, bob]
    result = decide(Review.for_object(obj), policy)
    assert (result.reason, result.signers) == ("verified", (f"openpgp:{bob}",))


def test_a_changed_object_is_still_a_content_mismatch(gpg: Gpg, alice: str) -> None:
    obj = pgp_signed(gpg, "alice@example.com", payload_of(OBJECT))
    obj["data"]["mode"] = "debug"
    assert verdict(obj, {"keys": [gpg.export(alice).decode()]}).reason == "content-mismatch"


def test_integrity_shield_annotations_are_read_under_their_own_domain(gpg: Gpg, alice: str) -> None:
    # gpg-annotation-sign.sh: message = base64(gzip(the file)), signature = base64(gpg --detach-sign --armor file)
    text = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  namespace: ns\ndata:\n  mode: production\n"
    obj = pgp_signed(gpg, "alice@example.com", text, domain="integrityshield.io")
    result = verdict(obj, {"keys": [gpg.export(alice).decode()]})
    assert result.reason == "verified", result.message


def refusal_cases(gpg: Gpg) -> Iterator[tuple[str, bytes, dict[str, Any], str]]:
    """(id, certificate, signed object, expected reason), each made by gpg."""
    payload = payload_of(OBJECT)
    fpr = gpg.generate("revoked@example.com")
    obj = pgp_signed(gpg, fpr, payload)
    gpg.revoke(fpr)
    yield "revoked-certificate", gpg.export(fpr), obj, "openpgp-key-revoked"

    fpr = gpg.generate(
        "old@example.com", primary_usage="cert,sign", subkey_usage=None, expire="2d", faked="20200101T000000"
    )
    yield (
        "expired-certificate",
        gpg.export(fpr),
        pgp_signed(gpg, fpr, payload, faked="20200101T010000"),
        "openpgp-key-expired",
    )

    fpr = gpg.generate("subexp@example.com", faked=ago(days=10))
    sub = gpg.fingerprints(fpr)[1]
    gpg.run("--quick-set-expire", fpr, "2d", sub, faked=ago(days=10))
    obj = pgp_signed(gpg, f"{sub}!", payload, faked=ago(days=9))
    yield "expired-signing-subkey", gpg.export(fpr), obj, "openpgp-key-expired"

    fpr = gpg.generate("subrev@example.com")
    obj = pgp_signed(gpg, fpr, payload)
    gpg.revoke_subkey(fpr)
    yield "revoked-signing-subkey", gpg.export(fpr), obj, "openpgp-key-revoked"

    fpr = gpg.generate("auth@example.com", faked=ago(hours=2))
    obj = pgp_signed(gpg, fpr, payload)
    gpg.subkey_usage_to_authentication(fpr, faked=ago(hours=1))
    yield "subkey-not-for-signing", gpg.export(fpr), obj, "openpgp-key-not-for-signing"

    fpr = gpg.generate("text@example.com")
    yield "text-mode-signature", gpg.export(fpr), pgp_signed(gpg, fpr, payload, textmode=True), "signature-invalid"

    fpr = gpg.generate("tamper@example.com")
    obj = pgp_signed(gpg, fpr, payload)
    other = payload_of(configmap("app", mode="debug"))
    obj["metadata"]["annotations"]["cosign.sigstore.dev/message"] = base64.b64encode(gzip.compress(other)).decode()
    obj["data"]["mode"] = "debug"
    yield "message-changed-after-signing", gpg.export(fpr), obj, "signature-invalid"

    stranger = gpg.generate("stranger@example.com")
    yield "signed-by-another-key", gpg.export(stranger), pgp_signed(gpg, fpr, payload), "signature-invalid"


def test_keys_that_cannot_sign_now_are_refused_with_a_reason(gpg: Gpg) -> None:
    cases = list(refusal_cases(gpg))
    assert len(cases) == 8
    for case, cert, obj, reason in cases:
        result = verdict(obj, {"keys": [cert.decode()]})
        assert (result.allowed, result.reason) == (False, reason), f"{case}: {result.message}"


def test_an_openpgp_signer_counts_in_must_all_with_a_cosign_key(gpg: Gpg, alice: str) -> None:
    cosign = make_key("ecdsa-p256", 7)
    (signed,) = sign_documents([OBJECT], cosign)
    payload = base64.b64decode(signed["metadata"]["annotations"]["cosign.sigstore.dev/message"])
    armored = gpg.sign("alice@example.com", gzip.decompress(payload))
    both = {**signed, "metadata": {**signed["metadata"], "annotations": dict(signed["metadata"]["annotations"])}}
    both["metadata"]["annotations"]["cosign.sigstore.dev/signature_1"] = base64.b64encode(armored).decode()
    policy = {"keys": [public_key_pem(cosign), gpg.export(alice).decode()], "keyOperation": "MustAll"}
    result = verdict(both, policy)
    assert result.reason == "verified" and set(result.signers) >= {f"openpgp:{alice}"} and len(result.signers) == 2
    only_cosign = verdict(signed, policy)
    assert only_cosign.reason == "key-threshold-not-met", only_cosign.message


def test_a_pgp_key_never_takes_a_cosign_signature_nor_a_cosign_key_a_pgp_one(gpg: Gpg, alice: str) -> None:
    cosign = make_key("ecdsa-p256", 7)
    (cosign_signed,) = sign_documents([OBJECT], cosign)
    assert verdict(cosign_signed, {"keys": [gpg.export(alice).decode()]}).reason == "signature-invalid"
    pgp = pgp_signed(gpg, "alice@example.com", payload_of(OBJECT))
    assert verdict(pgp, {"keys": [public_key_pem(cosign)]}).reason == "signature-invalid"


@pytest.mark.parametrize(
    ("case", "entry", "message"),
    [
        ("private-key", "secret", "private key"),
        ("no-end-line", "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQ\n", "no END line"),
        (
            "garbage-block",
            "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nAAAA\n-----END PGP PUBLIC KEY BLOCK-----\n",
            "parse",
        ),
        ("keyring-not-base64", {"openpgpKeyring": "@@@"}, "not base64"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else "",
)
def test_unusable_openpgp_keys_are_policy_errors(gpg: Gpg, alice: str, case: str, entry: Any, message: str) -> None:
    if entry == "secret":
        entry = gpg.export_secret(alice).decode()
    with pytest.raises(PolicyError, match=message):
        Policy.from_dict({"keys": [entry]})


def test_pem_and_openpgp_keys_in_one_text_are_both_loaded(gpg: Gpg, alice: str) -> None:
    text = public_key_pem(make_key("ecdsa-p256", 7)) + gpg.export(alice).decode()
    policy = Policy.from_dict({"keys": [text]})
    assert (len(policy.keys), len(policy.openpgp_keys)) == (1, 1)


def test_gpg_is_installed_by_the_project(tmp_path: Path) -> None:
    # The OpenPGP tests sign with the real gpg; make install puts it there (Makefile, install target).
    Gpg(tmp_path)  # raises when the binary is missing
