"""Fuzz targets: the envelope decoder, the key parser and the request parser.

Each target takes bytes and either returns or raises one of the errors its
contract allows (:data:`ALLOWED`); anything else -- a ``KeyError``, a
``MemoryError``, a ``UnicodeEncodeError``, a hang -- is a bug. The first byte of an
input picks what the rest is fed to, so one target covers several readers and
the fuzzer can move an input between them:

``envelope``
    0: a message the harness base64-encodes (the fuzzer works on gzip, tar and YAML,
    not on base64 syntax), read with :func:`read_envelope` and parsed as if a trusted
    key had signed it; 1: the annotations' text as sent; 2: raw tar bytes (the harness
    gzips them); 3: a YAML payload.
``keys``
    0: a key text for :func:`load_public_keys`; 1: the same in a policy; 2 and 3: DER
    bytes in PUBLIC KEY and CERTIFICATE armour (the fuzzer works on ASN.1).
``wire``
    0: a Gatekeeper ProviderRequest; 1: one Gatekeeper key, then its check (policy,
    review, ``decide``); 2: a Kyverno body, then its check; 3: an AdmissionRequest.

Bytes that are not UTF-8 become text with lone surrogates (``surrogateescape``),
which JSON can carry and UTF-8 cannot.

Seeds come from the hostile-input corpus (:func:`seeds`) and from ``corpus/<target>/``,
where every crash or hang the fuzzer found is kept once fixed.
"""

from __future__ import annotations

import base64
import binascii
import gzip
from collections.abc import Callable, Iterator
from pathlib import Path

from provider.errors import (
    DataError,
    KeyLoadError,
    MalformedMessage,
    PolicyError,
    ProviderError,
    RequestError,
    Unsigned,
)
from provider.keys.pem import load_public_keys
from provider.limits import Limits
from provider.parsing import load_json
from provider.policy.schema import Policy
from provider.review import Review
from provider.service.checks import CheckContext, run_check
from provider.service.wire import gatekeeper, kyverno
from provider.signatures.envelope import Payload, gunzip_bounded, read_envelope

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"

#: Smaller limits than the defaults: the same code paths, less time per input.
LIMITS = Limits(max_payload_bytes=256 * 1024, max_nodes=20_000, max_documents=100, max_tar_members=64)
D = "cosign.sigstore.dev"
CONTEXT = CheckContext(limits=LIMITS)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def envelope(data: bytes) -> None:
    if not data:
        return
    mode, rest = data[0] % 4, data[1:]
    try:
        if mode == 0:
            read_envelope(
                {f"{D}/message": base64.b64encode(rest).decode(), f"{D}/signature": "AA=="}, limits=LIMITS
            ).payload.documents(LIMITS)
        elif mode == 1:
            text = _text(rest)
            head, _, tail = text.partition("\n")
            read_envelope(
                {f"{D}/message": head, f"{D}/signature": tail, f"{D}/certificate": tail[:40]}, limits=LIMITS
            ).payload.documents(LIMITS)
        elif mode == 2:
            Payload(gzip.compress(rest, mtime=0), "tarball").documents(LIMITS)
        else:
            Payload(rest, "yaml").documents(LIMITS)
    except (MalformedMessage, Unsigned):
        pass


def keys(data: bytes) -> None:
    if not data:
        return
    mode, rest = data[0] % 4, data[1:]
    try:
        if mode == 0:
            load_public_keys(_text(rest))
        elif mode == 1:
            Policy.from_dict({"keys": [_text(rest)]}, limits=LIMITS)
        else:
            label = "PUBLIC KEY" if mode == 2 else "CERTIFICATE"
            load_public_keys(f"-----BEGIN {label}-----\n{base64.encodebytes(rest).decode()}-----END {label}-----\n")
    except (KeyLoadError, PolicyError):
        pass


def wire(data: bytes) -> None:
    if not data:
        return
    mode, rest = data[0] % 4, data[1:]
    try:
        if mode == 0:
            gatekeeper.read_request(rest, LIMITS)
        elif mode == 1:
            question = gatekeeper.read_key(_text(rest), LIMITS)
            run_check(question.check, question.review, question.policy, CONTEXT)
        elif mode == 2:
            question, _ = kyverno.read_body(rest, LIMITS)
            run_check(question.check, question.review, question.policy, CONTEXT)
        else:
            Review.from_admission(load_json(rest, limits=LIMITS, error=RequestError))
    except ProviderError:  # an unusable request or policy, or no cluster to ask: answers, not bugs
        pass


TARGETS: dict[str, Callable[[bytes], None]] = {"envelope": envelope, "keys": keys, "wire": wire}


def seeds(target: str) -> Iterator[bytes]:
    """Starting inputs from the hostile-input corpus, framed for ``target``."""
    from tests.assets.hostile import corpus

    for item in corpus.load():
        if item.recipe:
            continue
        data = item.data()
        if target == "envelope" and item.kind == "object":
            try:
                message = base64.b64decode(
                    corpus.object_of(item)["metadata"]["annotations"][f"{D}/message"], validate=True
                )
            except (TypeError, KeyError, binascii.Error, DataError):
                continue
            yield b"\x00" + message
            try:  # bounded: some seeds are gzip bombs
                inner = gunzip_bounded(message, 1 << 20, "seed")
                yield b"\x03" + inner
                yield b"\x02" + gunzip_bounded(inner, 1 << 20, "seed")
            except MalformedMessage:
                continue
        elif target == "keys" and item.kind == "key":
            yield b"\x00" + data
            yield b"\x01" + data
        elif target == "wire" and item.kind in ("body", "review"):
            yield b"\x00" + data
            yield b"\x02" + data
            yield b"\x03" + data
        elif target == "wire" and item.kind in ("object", "policy"):
            yield b"\x01" + corpus.gatekeeper_key(item).encode("utf-8", "surrogatepass")
