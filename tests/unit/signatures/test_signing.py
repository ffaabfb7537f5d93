"""Signing writes what upstream writes, and what our verifier (and upstream's) accepts."""

from __future__ import annotations

import base64
import gzip

import pytest

from provider import Policy, Review, decide
from provider.errors import RequestError
from provider.signatures.envelope import read_envelope
from provider.signatures.signing import (
    TOTAL_ANNOTATION_SIZE_LIMIT,
    AnnotationsTooLarge,
    annotations_size,
    append_signature,
    dump_yaml,
    sign_documents,
    sign_each,
    strip_envelope,
)
from tests.support.data import KYVERNO, UPSTREAM, load_yaml
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap

D = "cosign.sigstore.dev"


@pytest.mark.parametrize(
    "fixture",
    [
        UPSTREAM / "manifests" / "cm-plain-2keys-multi-signed.yaml",
        KYVERNO / "manifests" / "svc-two-signatures.yaml",
        KYVERNO / "manifests" / "secret-signed-docs.yaml",
    ],
    ids=["upstream-configmap", "kyverno-service", "kyverno-docs-secret"],
)
def test_plain_payload_is_byte_identical_to_upstreams(fixture: object) -> None:
    """For the same document, our message payload is exactly the one kubectl sigstore wrote."""
    (doc,) = load_yaml(fixture)  # type: ignore[arg-type]
    upstream_payload = gzip.decompress(base64.b64decode(doc["metadata"]["annotations"][f"{D}/message"]))
    (signed,) = sign_documents(strip_envelope([doc]), make_key())
    ours = read_envelope(signed["metadata"]["annotations"]).payload.data
    assert ours == upstream_payload


def test_every_document_carries_the_same_message() -> None:
    docs = sign_documents([configmap("a"), configmap("b")], make_key())
    messages = {d["metadata"]["annotations"][f"{D}/message"] for d in docs}
    assert len(messages) == 1
    payload = read_envelope(docs[0]["metadata"]["annotations"]).payload
    assert [d["metadata"]["name"] for d in payload.documents()] == ["a", "b"]


def test_signing_is_deterministic_for_the_message() -> None:
    a = sign_documents([configmap()], make_key())[0]["metadata"]["annotations"][f"{D}/message"]
    b = sign_documents([configmap()], make_key())[0]["metadata"]["annotations"][f"{D}/message"]
    assert a == b


def test_resigning_replaces_the_old_envelope() -> None:
    key, other = make_key(), make_key("ed25519")
    once = sign_documents([configmap()], key)
    twice = sign_documents(append_signature(once, other), key)
    annotations = twice[0]["metadata"]["annotations"]
    assert sorted(annotations) == [f"{D}/message", f"{D}/signature"]
    payload = read_envelope(annotations).payload.documents()[0]
    assert "annotations" not in payload["metadata"]  # the signed content never contains signatures


def test_append_keeps_earlier_signatures_valid() -> None:
    first, second, third = make_key(), make_key("rsa"), make_key("ecdsa-p384")
    docs = append_signature(append_signature(sign_documents([configmap()], first), second), third)
    annotations = docs[0]["metadata"]["annotations"]
    assert {f"{D}/signature", f"{D}/signature_1", f"{D}/signature_2"} <= set(annotations)
    policy = Policy.from_dict({"keys": [public_key_pem(k) for k in (first, second, third)], "keyOperation": "MustAll"})
    assert decide(Review.for_object(docs[0]), policy).reason == "verified"


def test_append_needs_one_shared_message() -> None:
    with pytest.raises(RequestError, match="needs signed input"):
        append_signature([configmap()], make_key())
    a = sign_documents([configmap("a")], make_key())
    b = sign_documents([configmap("b")], make_key())
    with pytest.raises(RequestError, match="same message"):
        append_signature(a + b, make_key())


def test_tarball_payload() -> None:
    files = [("cm.yaml", dump_yaml([configmap()]).encode())]
    (doc,) = sign_documents([configmap()], make_key(), tarball_files=files)
    env = read_envelope(doc["metadata"]["annotations"])
    assert env.payload.format == "tarball"
    assert decide(Review.for_object(doc), Policy.from_dict({"keys": [public_key_pem(make_key())]})).reason == "verified"


def test_nothing_to_sign() -> None:
    with pytest.raises(RequestError, match="nothing to sign"):
        sign_documents([], make_key())


def test_dump_yaml_keeps_long_values_on_one_line() -> None:
    text = dump_yaml([{"a": "x" * 500}])
    assert text.count("\n") == 1


# --- what the API server accepts: 256 KiB of annotations per object ---------------------------------


def padded(size: int, key: str = "pad") -> dict[str, object]:
    """A ConfigMap whose own annotations hold ``size`` bytes (keys and values, UTF-8) before it is signed."""
    doc = configmap("big")
    doc["metadata"]["annotations"] = {key: "x" * (size - len(key.encode()))}
    return doc


def envelope_bytes(doc: dict[str, object]) -> int:
    """What signing ``doc`` alone adds to its annotations (the message holds the pad too)."""
    (signed,) = sign_documents([doc], make_key())
    return annotations_size(signed) - annotations_size(doc)


def test_an_object_at_the_limit_is_signed_and_one_byte_more_is_refused() -> None:
    """kubernetes/apimachinery pkg/api/validation/objectmeta.go refuses a total above TotalAnnotationSizeLimitB."""
    # The message compresses the pad to a few hundred bytes, so its size barely moves with it.
    guess = TOTAL_ANNOTATION_SIZE_LIMIT - envelope_bytes(padded(TOTAL_ANNOTATION_SIZE_LIMIT - 2000))
    for size in range(guess - 8, guess + 8):
        doc = padded(size)
        total = size + envelope_bytes(doc)
        if total == TOTAL_ANNOTATION_SIZE_LIMIT:
            (signed,) = sign_documents([doc], make_key())
            assert annotations_size(signed) == TOTAL_ANNOTATION_SIZE_LIMIT
            break
    else:
        pytest.fail("no pad lands exactly on the limit")
    over = padded(size + 1)
    with pytest.raises(AnnotationsTooLarge, match=r"ConfigMap ns/big would carry 262145 bytes"):
        sign_documents([over], make_key())


def test_annotation_bytes_are_counted_in_utf8() -> None:
    assert annotations_size({"metadata": {"annotations": {"k": "é" * 10}}}) == 1 + 20
    assert annotations_size({"metadata": {}}) == 0


def test_appending_a_signature_past_the_limit_is_refused() -> None:
    """A second signature (``signature_1``, about 125 bytes with its key) does not fit 60 bytes of room."""
    size = TOTAL_ANNOTATION_SIZE_LIMIT - 60 - envelope_bytes(padded(TOTAL_ANNOTATION_SIZE_LIMIT - 2000))
    (signed,) = sign_documents([padded(size)], make_key())
    room = TOTAL_ANNOTATION_SIZE_LIMIT - annotations_size(signed)
    assert 40 < room < 80, room
    with pytest.raises(AnnotationsTooLarge, match="each object in a message of its own"):
        append_signature([signed], make_key("ecdsa-p256", 1))


def test_many_objects_in_one_message_are_refused_and_signed_one_by_one() -> None:
    """Each object carries the message over all of them: it is the count that breaks the limit."""
    docs = [configmap(f"cm-{i}", big="".join(f"{i * 7919 + j:x}" for j in range(2000))) for i in range(60)]
    with pytest.raises(AnnotationsTooLarge, match="signed together with 59 other objects"):
        sign_documents(docs, make_key())
    each = sign_each(docs, make_key())
    policy = Policy.from_dict({"keys": [public_key_pem(make_key())]})
    assert len(each) == 60 and len({d["metadata"]["annotations"][f"{D}/message"] for d in each}) == 60
    for doc in each:
        assert annotations_size(doc) < TOTAL_ANNOTATION_SIZE_LIMIT
        assert decide(Review.for_object(doc), policy).verified
