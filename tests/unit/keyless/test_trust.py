"""Trusted roots: the shipped public-good root, inline and file roots, and every unusable one refused."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from provider import Policy
from provider.bounds import LOCAL
from provider.errors import PolicyError
from provider.keyless.trust import DEFAULT_ROOT, load_trusted_root
from provider.limits import Limits
from tests.support.data import UPSTREAM
from tests.support.keyless import World

WORLD = World()
PUBLIC_GOOD_LOG = bytes.fromhex("c0d23d6ad406973f9559f3ba2d1ca01f84147d8ffc5b8445c224f98b9591801d")


def test_shipped_root_is_the_public_good_instance() -> None:
    root = load_trusted_root(None)
    log = root.log(PUBLIC_GOOD_LOG)
    assert log is not None and log.url == "https://rekor.sigstore.dev"
    assert {ca.label for ca in root.authorities} == {"https://fulcio.sigstore.dev"}
    anchors = {a.subject.rfc4514_string() for ca in root.authorities for a in ca.anchors}
    assert anchors == {"CN=sigstore,O=sigstore.dev"}
    shipped = Path(__file__).resolve().parents[3] / "provider" / "data" / DEFAULT_ROOT
    assert load_trusted_root(str(shipped), bounds=LOCAL) is root  # same content, same cached object


def test_inline_and_file_roots_are_one_cached_root(tmp_path: Path) -> None:
    document = WORLD.trusted_root()
    path = tmp_path / "root.json"
    path.write_text(json.dumps(document, indent=2))
    inline = load_trusted_root(document)
    assert load_trusted_root(str(path), bounds=LOCAL) is inline
    assert load_trusted_root(copy.deepcopy(document)) is inline


def test_chain_order_does_not_matter() -> None:
    a = load_trusted_root(WORLD.trusted_root())
    b = load_trusted_root(WORLD.trusted_root(root_first=True))
    assert (
        [c.subject for c in a.authorities[0].anchors]
        == [c.subject for c in b.authorities[0].anchors]
        == [WORLD.root.cert.subject]
    )
    assert [c.subject for c in b.authorities[0].intermediates] == [WORLD.intermediate.cert.subject]


def test_missing_media_type_is_version_0_1() -> None:
    """Copies of root-signing's trusted_root.json (the interop one among them) carry no mediaType."""
    assert "mediaType" not in json.loads((UPSTREAM / "trust" / "sigstore-public-good-trusted_root.json").read_text())
    document = WORLD.trusted_root()
    del document["mediaType"]
    assert load_trusted_root(document).logs[0].url == "https://rekor.test.example"


def test_unsupported_log_key_is_skipped_not_trusted() -> None:
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()
    document = WORLD.trusted_root()
    extra = copy.deepcopy(document["tlogs"][0])
    der = weak.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    extra["publicKey"] = {"rawBytes": base64.b64encode(der).decode(), "keyDetails": "PKIX_RSA_PKCS1V15_2048_SHA256"}
    extra["logId"] = {"keyId": base64.b64encode(hashlib.sha256(der).digest()).decode()}
    document["tlogs"].append(extra)
    assert len(load_trusted_root(document).logs) == 1
    document["tlogs"] = [extra]
    with pytest.raises(PolicyError, match="no usable transparency log"):
        load_trusted_root(document)


def edited(change: Any) -> dict[str, Any]:
    document = WORLD.trusted_root()
    change(document)
    return document


def cert_bytes(document: dict[str, Any], raw: str) -> None:
    document["certificateAuthorities"][0]["certChain"]["certificates"][0]["rawBytes"] = raw


BAD_ROOTS = [
    ("a-list", [], "expected a TrustedRoot JSON object"),
    ("a-number", 7, "expected a TrustedRoot JSON object"),
    ("unknown-media-type", edited(lambda d: d.update(mediaType="application/x-other")), "mediaType"),
    ("no-tlogs-field", edited(lambda d: d.pop("tlogs")), "tlogs: Field required"),
    ("unknown-field", edited(lambda d: d.update(extra=1)), "extra"),
    ("empty-tlogs", edited(lambda d: d.update(tlogs=[])), "no usable transparency log"),
    ("empty-authorities", edited(lambda d: d.update(certificateAuthorities=[])), "no certificate authorities"),
    (
        "empty-chain",
        edited(lambda d: d["certificateAuthorities"][0]["certChain"].update(certificates=[])),
        "no certificates",
    ),
    (
        "certificate-not-der",
        edited(lambda d: cert_bytes(d, base64.b64encode(b"nope").decode())),
        "not a DER certificate",
    ),
    (
        "log-key-not-der",
        edited(lambda d: d["tlogs"][0]["publicKey"].update(rawBytes="bm9wZQ==")),
        "not a DER public key",
    ),
    ("log-key-missing", edited(lambda d: d["tlogs"][0]["publicKey"].pop("rawBytes")), "rawBytes is missing"),
    (
        "bad-time",
        edited(lambda d: d["certificateAuthorities"][0].update(validFor={"start": "yesterday"})),
        "validFor.start",
    ),
    ("too-deep", {"tlogs": json.loads("[" * 150 + "]" * 150)}, "nested deeper"),
]


@pytest.mark.parametrize(("value", "message"), [(v, m) for _, v, m in BAD_ROOTS], ids=[i for i, _, _ in BAD_ROOTS])
def test_unusable_root_is_a_policy_error(value: Any, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        load_trusted_root(value)


def test_schema_errors_never_echo_the_input() -> None:
    """A path policy may point at a file no one should see; only field names come back."""
    secret = "s3cr3t-value-from-some-file"
    with pytest.raises(PolicyError) as failure:
        load_trusted_root({"tlogs": secret, "certificateAuthorities": secret})
    assert secret not in failure.value.message


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        (b"not json", "not valid JSON"),
        (b"[1]", "expected a JSON object"),
        (b" " * 2048 + b"{}", "larger than 1024 bytes"),
    ],
    ids=["missing-file", "not-json", "not-an-object", "over-the-limit"],
)
def test_unusable_root_file(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "root.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(PolicyError, match=message):
        load_trusted_root(str(path), limits=Limits(max_trusted_root_bytes=1024), bounds=LOCAL)


def test_too_many_ca_certificates(tmp_path: Path) -> None:
    document = WORLD.trusted_root()
    with pytest.raises(PolicyError, match="at most 1 are read"):
        load_trusted_root(document, limits=Limits(max_root_certificates=1))


def test_a_bad_root_fails_the_policy_not_the_object() -> None:
    """The policy author must fix it: a PolicyError, never an allow and never blamed on the object."""
    with pytest.raises(PolicyError, match="trustedRoot"):
        Policy.from_dict({"signers": ["jane@example.com"], "trustedRoot": {"tlogs": []}})
    with pytest.raises(PolicyError):
        Policy.from_dict({"signers": [{"subject": "jane@example.com", "roots": "not a PEM bundle"}]})
