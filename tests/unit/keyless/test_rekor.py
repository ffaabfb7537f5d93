"""The RekorBundle reader: every malformed or misleading bundle is ``tlog-entry-invalid``, in bounded work."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from provider.errors import VerificationFailure
from provider.keyless.rekor import canonical_payload, check_bundle
from provider.keyless.trust import load_trusted_root
from provider.keys.pem import sign_bytes
from tests.support.keyless import World, pem

WORLD = World()
ROOT = load_trusted_root(WORLD.trusted_root())
PAYLOAD = b"apiVersion: v1\nkind: ConfigMap\n"
KEY, CERT = WORLD.leaf()
SIGNATURE = sign_bytes(KEY, PAYLOAD)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def honest_entry(**spec: Any) -> dict[str, Any]:
    base = {
        "data": {"hash": {"algorithm": "sha256", "value": hashlib.sha256(PAYLOAD).hexdigest()}},
        "signature": {"content": b64(SIGNATURE), "publicKey": {"content": b64(pem(CERT))}},
    }
    return {"apiVersion": "0.0.1", "kind": "hashedrekord", "spec": {**base, **spec}}


def bundle(**options: Any) -> bytes:
    return WORLD.bundle(PAYLOAD, SIGNATURE, CERT, **options)


def reshape(change: Any) -> bytes:
    data = json.loads(bundle())
    change(data)
    return json.dumps(data).encode()


def check(raw: bytes) -> Any:
    return check_bundle(raw, ROOT, PAYLOAD, SIGNATURE, CERT)


def test_honest_bundle_gives_the_logged_time() -> None:
    entry = check(bundle())
    assert (entry.kind, entry.log_index, entry.log_url) == ("hashedrekord", 4242, "https://rekor.test.example")
    assert entry.integrated_time.isoformat() == "2026-03-01T12:00:00+00:00"


def test_rekord_may_log_the_content_itself() -> None:
    entry = honest_entry(
        data={"content": b64(PAYLOAD)},
        signature={"format": "x509", "content": b64(SIGNATURE), "publicKey": {"content": b64(pem(CERT))}},
    )
    entry["kind"] = "rekord"
    assert check(bundle(entry=entry)).kind == "rekord"


def test_canonical_payload_is_rfc8785() -> None:
    """Sorted keys, no whitespace: the bytes Rekor signs (checked against the rfc8785 package sigstore uses)."""
    import rfc8785

    fields: dict[str, Any] = {"body": "eyJ9", "integratedTime": 1655452519, "logID": "c0" * 32, "logIndex": 2690357}
    assert canonical_payload("eyJ9", 1655452519, "c0" * 32, 2690357) == rfc8785.dumps(fields)


def pkcs_public_key() -> str:
    return b64(
        KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


MALFORMED = [
    ("not-json", lambda: b"{nope", "not valid JSON"),
    ("json-array", lambda: b"[]", "not a JSON object"),
    ("duplicate-key", lambda: b'{"Payload": {}, "Payload": {}}', "duplicate key"),
    ("deeply-nested", lambda: b'{"a":' * 200 + b"1" + b"}" * 200, "nested deeper"),
    (
        "unknown-top-field",
        lambda: reshape(lambda d: d.update(rekorBundle=1)),
        "expected SignedEntryTimestamp and Payload",
    ),
    ("missing-payload", lambda: reshape(lambda d: d.pop("Payload")), "expected SignedEntryTimestamp and Payload"),
    ("unknown-payload-field", lambda: reshape(lambda d: d["Payload"].update(inclusionProof={})), "expected body"),
    ("payload-not-object", lambda: reshape(lambda d: d.update(Payload="x")), "not a JSON object"),
    ("time-as-string", lambda: reshape(lambda d: d["Payload"].update(integratedTime="1700000000")), "integratedTime"),
    ("time-as-float", lambda: reshape(lambda d: d["Payload"].update(integratedTime=1.7e9)), "integratedTime"),
    ("time-as-bool", lambda: reshape(lambda d: d["Payload"].update(integratedTime=True)), "integratedTime"),
    ("time-negative", lambda: reshape(lambda d: d["Payload"].update(integratedTime=-1)), "integratedTime"),
    ("time-beyond-2-53", lambda: reshape(lambda d: d["Payload"].update(integratedTime=2**53)), "integratedTime"),
    ("index-huge", lambda: reshape(lambda d: d["Payload"].update(logIndex=10**30)), "logIndex"),
    (
        "log-id-uppercase",
        lambda: reshape(lambda d: d["Payload"].update(logID=d["Payload"]["logID"].upper())),
        "lowercase hex",
    ),
    ("log-id-short", lambda: reshape(lambda d: d["Payload"].update(logID="c0d2")), "lowercase hex"),
    ("set-not-base64", lambda: reshape(lambda d: d.update(SignedEntryTimestamp="%%%")), "not valid base64"),
    ("body-not-base64", lambda: reshape(lambda d: d["Payload"].update(body="not base64!")), "not valid base64"),
    ("set-missing-signature", lambda: reshape(lambda d: d.update(SignedEntryTimestamp="")), "does not verify"),
    ("body-not-json", lambda: bundle(entry=b"\x00\x01"), "not valid"),
    ("body-json-list", lambda: bundle(entry=[1]), "not a JSON object"),
    ("kind-intoto", lambda: bundle(entry={**honest_entry(), "kind": "intoto"}), "not hashedrekord/rekord"),
    ("api-version-0.0.2", lambda: bundle(entry={**honest_entry(), "apiVersion": "0.0.2"}), "not hashedrekord/rekord"),
    ("no-spec", lambda: bundle(entry={"apiVersion": "0.0.1", "kind": "hashedrekord"}), "spec is not a JSON object"),
    (
        "hash-sha512",
        lambda: bundle(
            entry=honest_entry(data={"hash": {"algorithm": "sha512", "value": hashlib.sha512(PAYLOAD).hexdigest()}})
        ),
        "not a sha256 digest",
    ),
    (
        "hash-not-hex",
        lambda: bundle(entry=honest_entry(data={"hash": {"algorithm": "sha256", "value": "z" * 64}})),
        "not a sha256 digest",
    ),
    ("no-hash-no-content", lambda: bundle(entry=honest_entry(data={})), "neither the hash nor the content"),
    (
        "content-of-other-data",
        lambda: bundle(entry=honest_entry(data={"content": b64(b"other")})),
        "neither the hash nor the content",
    ),
    (
        "signature-missing",
        lambda: bundle(entry=honest_entry(signature={"publicKey": {"content": b64(pem(CERT))}})),
        "not a base64 string",
    ),
    (
        "public-key-not-certificate",
        lambda: bundle(
            entry=honest_entry(signature={"content": b64(SIGNATURE), "publicKey": {"content": pkcs_public_key()}})
        ),
        "a public key, not a certificate",
    ),
    (
        "rekord-pgp-format",
        lambda: bundle(
            kind="rekord",
            entry={
                **honest_entry(
                    signature={"format": "pgp", "content": b64(SIGNATURE), "publicKey": {"content": b64(pem(CERT))}}
                ),
                "kind": "rekord",
            },
        ),
        "format pgp",
    ),
]


@pytest.mark.parametrize(("make", "message"), [(m, msg) for _, m, msg in MALFORMED], ids=[i for i, _, _ in MALFORMED])
def test_malformed_bundle_is_tlog_entry_invalid(make: Any, message: str) -> None:
    with pytest.raises(VerificationFailure, match=message) as failure:
        check(make())
    assert failure.value.reason == "tlog-entry-invalid"
