"""The k8s-manifest-sigstore annotation envelope, read and written within limits.

Byte-level reference: ``docs/format.md``. In short, under a domain ``D``
(default ``cosign.sigstore.dev``):

``D/message``
    base64( gzip( P ) ). The bytes left after base64-decoding and gunzipping
    *once* are the payload ``P`` -- the bytes every signature covers. A message
    that is not gzip is taken as ``P`` unchanged (upstream passes non-gzip
    input through its gunzip step). ``P`` is either a YAML stream or, when it is
    itself gzip, a tar archive whose regular ``.yaml``/``.yml`` members are YAML
    streams (``kubectl sigstore sign --tarball=yes``).
``D/signature``, ``D/signature_1``, ``D/signature_2``, ...
    base64 of a raw signature over ``P``. Reading stops at the first missing
    number, as upstream does.
``D/certificate[_N]``, ``D/bundle[_N]``
    base64( gzip( PEM ) ) and base64( gzip( RekorBundle JSON ) ) for the
    signature set with the same number (keyless signing).

Nothing is ever extracted to disk: tar member names are attacker-chosen paths.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import re
import tarfile
import zlib
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import MalformedMessage, Unsigned
from ..limits import DEFAULT_LIMITS, Limits
from ..parsing import load_yaml_stream

DEFAULT_DOMAIN = "cosign.sigstore.dev"
GZIP_MAGIC = b"\x1f\x8b"
TAR_YAML_SUFFIXES = (".yaml", ".yml")

PayloadFormat = Literal["yaml", "tarball", "plain-base64"]


def message_key(domain: str) -> str:
    return f"{domain}/message"


def set_key(domain: str, what: str, index: int) -> str:
    """``D/signature`` for index 0, ``D/signature_N`` after that (same for certificate, bundle)."""
    return f"{domain}/{what}" if index == 0 else f"{domain}/{what}_{index}"


def gunzip_bounded(data: bytes, limit: int, what: str) -> bytes:
    """Inflate every gzip member of ``data``, refusing (without finishing) past ``limit`` bytes."""
    out = bytearray()
    rest = data
    while rest:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += inflater.decompress(rest, limit + 1 - len(out))
            if len(out) > limit:
                raise MalformedMessage(f"{what} inflates to more than {limit} bytes; refused")
            if not inflater.eof:
                # max_length reached exactly, or the stream is truncated.
                if inflater.unconsumed_tail:
                    raise MalformedMessage(f"{what} inflates to more than {limit} bytes; refused")
                raise MalformedMessage(f"{what} is a truncated gzip stream")
        except zlib.error as exc:
            raise MalformedMessage(f"{what} is not a valid gzip stream ({exc})") from exc
        rest = inflater.unused_data
        if rest and not rest.startswith(GZIP_MAGIC):
            raise MalformedMessage(f"{what} has {len(rest)} bytes of trailing data after the gzip stream")
    return bytes(out)


def decode_base64(text: Any, what: str, max_decoded: int) -> bytes:
    """Standard base64 as Go's ``base64.StdEncoding`` reads it (line breaks skipped)."""
    if not isinstance(text, str):
        raise MalformedMessage(f"{what} annotation is not a string")
    compact = text.replace("\r", "").replace("\n", "")
    if len(compact) > (max_decoded * 4) // 3 + 4:
        raise MalformedMessage(f"{what} annotation is longer than the {max_decoded}-byte limit")
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedMessage(f"{what} annotation is not valid base64 ({exc})") from exc


@dataclass(frozen=True)
class Payload:
    """The signed bytes ``P`` and how they were packed."""

    data: bytes
    format: PayloadFormat

    def documents(self, limits: Limits = DEFAULT_LIMITS) -> list[dict[str, Any]]:
        """The Kubernetes objects the payload holds, in order."""
        if self.format == "tarball":
            texts = _tar_yaml_members(
                gunzip_bounded(self.data, limits.max_payload_bytes, "tarball in the message"), limits
            )
        else:
            texts = [("message", self.data)]
        documents: list[dict[str, Any]] = []
        for name, text in texts:
            for doc in load_yaml_stream(text, limits=limits, error=MalformedMessage, what=f"YAML in {name}"):
                if not isinstance(doc, dict):
                    raise MalformedMessage(f"a document in {name} is a {type(doc).__name__}, not a Kubernetes object")
                documents.append(doc)
                if len(documents) > limits.max_documents:
                    raise MalformedMessage(f"the message holds more than {limits.max_documents} documents")
        return documents


def _tar_yaml_members(tar_bytes: bytes, limits: Limits) -> list[tuple[str, bytes]]:
    members: list[tuple[str, bytes]] = []
    # Bytes the YAML members may hold together: a member's declared size is
    # checked before it is read, because a sparse member (GNU/PAX) declares a
    # size its few data bytes never hold -- tarfile would fill it with zeros.
    budget = limits.max_payload_bytes
    try:
        with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as archive:
            for count, member in enumerate(archive, start=1):
                if count > limits.max_tar_members:
                    raise MalformedMessage(f"the tarball holds more than {limits.max_tar_members} members")
                label = f"tar member {member.name[:80]!r}"
                if member.isdir():
                    continue
                if member.issym() or member.islnk():
                    raise MalformedMessage(f"{label} is a link; links in a signed tarball are refused")
                if not member.isfile():
                    raise MalformedMessage(f"{label} is a device, FIFO or other special file; refused")
                if member.issparse():
                    raise MalformedMessage(f"{label} is a sparse file (it claims {member.size} bytes); refused")
                if not member.name.lower().endswith(TAR_YAML_SUFFIXES):
                    continue
                if member.size > budget:
                    raise MalformedMessage(
                        f"{label} claims {member.size} bytes; the YAML files of a tarball may hold "
                        f"{limits.max_payload_bytes} bytes together"
                    )
                handle = archive.extractfile(member)
                if handle is None:  # pragma: no cover - isfile() members always have data
                    raise MalformedMessage(f"{label} has no data")
                data = handle.read(budget)
                budget -= len(data)
                members.append((label, data))
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise MalformedMessage(f"the tarball in the message is not a valid tar archive ({exc})") from exc
    if not members:
        raise MalformedMessage("the tarball in the message holds no .yaml or .yml file")
    return members


def decode_message(text: Any, limits: Limits = DEFAULT_LIMITS) -> Payload:
    """base64 -> gunzip once -> P; P is a YAML stream or a tar.gz of YAML files."""
    raw = decode_base64(text, "message", limits.max_message_bytes)
    if raw.startswith(GZIP_MAGIC):
        data = gunzip_bounded(raw, limits.max_payload_bytes, "message")
        fmt: PayloadFormat = "tarball" if data.startswith(GZIP_MAGIC) else "yaml"
    else:
        data, fmt = raw, "plain-base64"
    return Payload(data, fmt)


@dataclass(frozen=True)
class SignatureSet:
    """One ``signature[_N]`` annotation with its optional certificate and bundle."""

    index: int
    signature: bytes
    certificate: bytes | None = None  # PEM, after gunzip
    bundle: bytes | None = None  # RekorBundle JSON, after gunzip
    #: The bytes this set's signature covers, when they are not the envelope's payload:
    #: a cosign image signature signs its own simple-signing payload (provider/signatures/sources.py).
    data: bytes | None = None

    @property
    def name(self) -> str:
        return "signature" if self.index == 0 else f"signature_{self.index}"


@dataclass(frozen=True)
class Envelope:
    """Everything the signature annotations of one object say."""

    domain: str
    payload: Payload
    sets: tuple[SignatureSet, ...]
    #: Human note on signature annotations that were present but not read
    #: (a gap in the numbering), empty when there are none.
    unread: tuple[str, ...] = field(default=())
    #: The annotation names this envelope was read from: the message and, for
    #: each signature set read, its signature, certificate and bundle. Exactly
    #: these are left out of the comparison (:func:`without_envelope`);
    #: anything else under the domain -- a signature past the first gap, an
    #: unknown name -- is compared like any other annotation.
    annotations: frozenset[str] = field(default=frozenset())

    def signed_bytes(self, sig_set: SignatureSet) -> bytes:
        """The bytes ``sig_set``'s signature covers: its own, or the payload."""
        return sig_set.data if sig_set.data is not None else self.payload.data


def _optional_blob(annotations: dict[str, Any], key: str, what: str, limits: Limits) -> bytes | None:
    if key not in annotations:
        return None
    raw = decode_base64(annotations[key], what, limits.max_certificate_bytes)
    if raw.startswith(GZIP_MAGIC):
        return gunzip_bounded(raw, limits.max_certificate_bytes, what)
    return raw


def read_envelope(annotations: Any, domain: str = DEFAULT_DOMAIN, limits: Limits = DEFAULT_LIMITS) -> Envelope:
    """Read the envelope from an object's annotations; raise if absent or malformed."""
    if annotations is None:
        annotations = {}
    if not isinstance(annotations, dict):
        raise MalformedMessage("metadata.annotations is not a mapping")
    msg_key = message_key(domain)
    signature_re = re.compile(re.escape(f"{domain}/signature") + r"(?:_(\d+))?\Z")
    numbered = [k for k in annotations if isinstance(k, str) and signature_re.match(k)]
    if msg_key not in annotations:
        what = "a signature but no message" if numbered else "no signature"
        raise Unsigned(f"the object carries {what} (annotation {msg_key} is missing)")
    if not numbered:
        raise Unsigned(f"the object carries a message but no signature (annotation {domain}/signature is missing)")
    if len(numbered) > limits.max_signatures:
        raise MalformedMessage(
            f"the object carries {len(numbered)} signature annotations; at most {limits.max_signatures} are read"
        )
    payload = decode_message(annotations[msg_key], limits)
    sets: list[SignatureSet] = []
    read = [msg_key]
    index = 0
    while (sig_key := set_key(domain, "signature", index)) in annotations:
        what = sig_key.rsplit("/", 1)[-1]
        signature = decode_base64(annotations[sig_key], what, limits.max_signature_bytes)
        certificate = _optional_blob(
            annotations, set_key(domain, "certificate", index), what.replace("signature", "certificate"), limits
        )
        bundle = _optional_blob(
            annotations, set_key(domain, "bundle", index), what.replace("signature", "bundle"), limits
        )
        sets.append(SignatureSet(index, signature, certificate, bundle))
        read.append(sig_key)
        read.extend(
            k for k in (set_key(domain, "certificate", index), set_key(domain, "bundle", index)) if k in annotations
        )
        index += 1
    unread = tuple(
        sorted(
            k.rsplit("/", 1)[-1] for k in numbered if k not in {set_key(domain, "signature", i) for i in range(index)}
        )
    )
    if not sets:
        raise Unsigned(
            f"the object carries no readable signature: {', '.join(unread)} present, but numbering starts at "
            f"{domain}/signature and stops at the first gap"
        )
    return Envelope(domain, payload, tuple(sets), unread, frozenset(read))


def without_envelope(obj: dict[str, Any], read: frozenset[str] | set[str]) -> dict[str, Any]:
    """A shallow copy of ``obj`` without what never belongs to the signed content.

    The annotations the envelope was read from (``read``, :attr:`Envelope.annotations`)
    cannot be part of what they sign; ``metadata.namespace`` was already checked
    as part of the object's identity. Nothing else is taken out: an annotation
    named like an envelope entry that was never read is content.
    """
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return obj
    meta = dict(meta)
    meta.pop("namespace", None)
    annotations = meta.get("annotations")
    if isinstance(annotations, dict) and read:
        meta["annotations"] = {k: v for k, v in annotations.items() if k not in read}
    return {**obj, "metadata": meta}


# --- writing ----------------------------------------------------------------------


def gzip_bytes(data: bytes) -> bytes:
    """Deterministic gzip (mtime 0), so signing the same input twice gives the same message."""
    return gzip.compress(data, mtime=0)


def encode_message(payload: bytes) -> str:
    return base64.b64encode(gzip_bytes(payload)).decode()


def make_tarball(files: list[tuple[str, bytes]]) -> bytes:
    """A tar.gz of regular files, as ``--tarball=yes`` writes it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    return gzip_bytes(buffer.getvalue())
