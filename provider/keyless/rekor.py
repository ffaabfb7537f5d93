"""The cosign ``RekorBundle`` in ``bundle[_N]``: its SET and the entry it logs, checked offline.

``kubectl sigstore sign`` (keyless) writes cosign's legacy bundle::

    {"SignedEntryTimestamp": "<base64 signature>",
     "Payload": {"body": "<base64 of the entry JSON>", "integratedTime": <unix seconds>,
                 "logIndex": <int>, "logID": "<hex SHA-256 of the log's public key>"}}

It has no Merkle inclusion proof (sigstore-python refuses such bundles), only
the Signed Entry Timestamp: the log's signature over the RFC 8785 canonical
JSON of ``Payload``. Contract of :func:`check_bundle`: return the
:class:`LoggedEntry` when

1. the bundle has exactly that shape (unknown fields are refused: the format
   is frozen, and a field we do not read must not be mistaken for one we do);
2. ``logID`` names a log of the trusted root whose key was valid at
   ``integratedTime``, and the SET verifies with *that* key (chosen by logID,
   never by trying every key);
3. the entry is a ``hashedrekord`` or ``rekord`` v0.0.1 naming sha256(P), the
   very signature bytes of the signature set, and the very certificate;

otherwise raise :class:`TlogEntryInvalid` (reason ``tlog-entry-invalid``).
Step 3 is what upstream skips: without it a valid SET for *any* entry, say
one the attacker logged for another artifact, vouches for this signature.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cryptography import x509

from ..errors import DataError, VerificationFailure
from ..limits import DEFAULT_LIMITS, Limits
from ..parsing import load_json
from ..readers import read_int, read_mapping
from .certificates import same_certificate
from .trust import TrustRoot

#: Rekor entry kinds that log a signature with its certificate (rekor pkg/types).
KINDS = ("hashedrekord", "rekord")
ENTRY_API_VERSION = "0.0.1"
#: Integers beyond 2**53 serialise differently under RFC 8785 (ES6 number
#: formatting); no real integratedTime or logIndex is near it, so they are refused.
_MAX_SAFE_INT = 2**53 - 1
_LOG_ID = re.compile(r"[0-9a-f]{64}\Z")
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}\Z")

_BUNDLE_FIELDS = frozenset({"SignedEntryTimestamp", "Payload"})
_PAYLOAD_FIELDS = frozenset({"body", "integratedTime", "logIndex", "logID"})


class TlogEntryInvalid(VerificationFailure):
    reason = "tlog-entry-invalid"


@dataclass(frozen=True)
class LoggedEntry:
    """What a verified bundle proves: this signature and certificate were logged at ``integrated_time``."""

    integrated_time: datetime
    log_index: int
    log_url: str
    kind: str


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise TlogEntryInvalid(f"{what} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise TlogEntryInvalid(f"{what} is not valid base64") from None


def _read_json(data: bytes, what: str, limits: Limits) -> Any:
    try:
        return load_json(data, limits=limits, error=TlogEntryInvalid, what=what)
    except DataError as exc:
        raise TlogEntryInvalid(exc.message) from exc


def canonical_payload(body: str, integrated_time: int, log_id: str, log_index: int) -> bytes:
    """RFC 8785 canonical JSON of the bundle payload: what the SET signs.

    For these inputs (ASCII strings, integers below 2**53) RFC 8785 is exactly
    sorted keys, no whitespace and plain decimal integers.
    """
    payload = {"body": body, "integratedTime": integrated_time, "logID": log_id, "logIndex": log_index}
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def check_bundle(
    raw: bytes,
    root: TrustRoot,
    payload: bytes,
    signature: bytes,
    leaf: x509.Certificate,
    *,
    limits: Limits = DEFAULT_LIMITS,
) -> LoggedEntry:
    """Verify a RekorBundle against the trusted root and the signature set it travels with."""
    # 1. shape
    bundle = read_mapping(_read_json(raw, "the bundle", limits), "the bundle", TlogEntryInvalid)
    if set(bundle) != _BUNDLE_FIELDS:
        raise TlogEntryInvalid(f"the bundle has fields {sorted(bundle)[:5]}, expected SignedEntryTimestamp and Payload")
    fields = read_mapping(bundle["Payload"], "the bundle's Payload", TlogEntryInvalid)
    if set(fields) != _PAYLOAD_FIELDS:
        raise TlogEntryInvalid(
            f"the bundle's Payload has fields {sorted(fields)[:6]}, expected body, integratedTime, logIndex, logID"
        )
    set_signature = _b64(bundle["SignedEntryTimestamp"], "SignedEntryTimestamp")
    body_text = fields["body"]
    body = _b64(body_text, "the logged body")
    integrated = read_int(fields["integratedTime"], "integratedTime", low=0, high=_MAX_SAFE_INT, error=TlogEntryInvalid)
    log_index = read_int(fields["logIndex"], "logIndex", low=0, high=_MAX_SAFE_INT, error=TlogEntryInvalid)
    log_id = fields["logID"]
    if not isinstance(log_id, str) or not _LOG_ID.match(log_id):
        raise TlogEntryInvalid("logID is not a lowercase hex SHA-256")

    # 2. the log, chosen by logID, and its SET
    when = datetime.fromtimestamp(integrated, UTC)
    log = root.log(bytes.fromhex(log_id))
    if log is None:
        raise TlogEntryInvalid(f"the entry was logged by log {log_id[:16]}…, which is not in the trusted root")
    if not log.window.contains(when):
        raise TlogEntryInvalid(
            f"the entry's integratedTime {when.isoformat()} is outside the validity of log {log.url} "
            f"({log.window.describe()})"
        )
    if not log.key.verifies(set_signature, canonical_payload(body_text, integrated, log_id, log_index)):
        raise TlogEntryInvalid(f"the SignedEntryTimestamp does not verify with the key of log {log.url}")

    # 3. the entry names this payload, this signature, this certificate
    entry = read_mapping(_read_json(body, "the logged entry", limits), "the logged entry", TlogEntryInvalid)
    kind = entry.get("kind")
    if kind not in KINDS or entry.get("apiVersion") != ENTRY_API_VERSION:
        raise TlogEntryInvalid(
            f"the logged entry is {str(kind)[:40]} {str(entry.get('apiVersion'))[:20]}, not hashedrekord/rekord "
            f"{ENTRY_API_VERSION}"
        )
    spec = read_mapping(entry.get("spec"), "the logged entry's spec", TlogEntryInvalid)
    _check_data(read_mapping(spec.get("data"), "the logged entry's data", TlogEntryInvalid), payload)
    logged_sig = read_mapping(spec.get("signature"), "the logged entry's signature", TlogEntryInvalid)
    if kind == "rekord" and logged_sig.get("format", "x509") != "x509":
        raise TlogEntryInvalid(f"the logged rekord signature has format {str(logged_sig.get('format'))[:20]}, not x509")
    if _b64(logged_sig.get("content"), "the logged signature") != signature:
        raise TlogEntryInvalid("the logged entry holds a different signature than this signature set")
    key_pem = _b64(
        read_mapping(logged_sig.get("publicKey"), "the logged public key", TlogEntryInvalid).get("content"),
        "the logged public key",
    )
    try:
        logged_cert = x509.load_pem_x509_certificate(key_pem)
    except ValueError:
        raise TlogEntryInvalid("the logged entry names a public key, not a certificate") from None
    if not same_certificate(logged_cert, leaf):
        raise TlogEntryInvalid("the logged entry names a different certificate than this signature set")
    return LoggedEntry(when, log_index, log.url, kind)


def _check_data(data: dict[str, Any], payload: bytes) -> None:
    digest = hashlib.sha256(payload).hexdigest()
    hashed = data.get("hash")
    if hashed is not None:
        hashed = read_mapping(hashed, "the logged hash", TlogEntryInvalid)
        value = hashed.get("value")
        if hashed.get("algorithm") != "sha256" or not isinstance(value, str) or not _SHA256_HEX.match(value):
            raise TlogEntryInvalid(
                f"the logged hash is not a sha256 digest (algorithm {str(hashed.get('algorithm'))[:20]})"
            )
        if value.lower() != digest:
            raise TlogEntryInvalid(
                f"the logged entry names sha256:{value[:16].lower()}…, not this message (sha256:{digest[:16]}…)"
            )
        return
    # rekord may log the content itself instead of its hash.
    if "content" in data and _b64(data["content"], "the logged content") == payload:
        return
    raise TlogEntryInvalid("the logged entry names neither the hash nor the content of this message")
