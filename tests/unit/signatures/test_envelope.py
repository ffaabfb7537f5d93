"""The annotation envelope: every form upstream writes, and the hostile ones it never should."""

from __future__ import annotations

import base64
import gzip
import io
import tarfile
import time
import zlib

import pytest

from provider.errors import MalformedMessage, Unsigned
from provider.limits import Limits
from provider.signatures.envelope import (
    decode_message,
    encode_message,
    gunzip_bounded,
    make_tarball,
    read_envelope,
)
from tests.support.data import KYVERNO, UPSTREAM, load_yaml

D = "cosign.sigstore.dev"
SIG = base64.b64encode(b"\x30" * 70).decode()


def annotations_of(path: str) -> dict[str, str]:
    return load_yaml(UPSTREAM / path)[0]["metadata"]["annotations"]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def tar_with(*members: tarfile.TarInfo, data: dict[str, bytes] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for info in members:
            payload = (data or {}).get(info.name)
            if payload is not None:
                info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload) if payload is not None else None)
    return gzip.compress(buffer.getvalue())


def member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


@pytest.mark.parametrize(
    ("fixture", "fmt", "names"),
    [
        ("manifests/cm-tarball-key-signed.yaml", "tarball", ["sample-cm-signed"]),
        ("manifests/cm-plain-2keys-multi-signed.yaml", "yaml", ["sample-cm"]),
        ("manifests/deploy-live-object-needs-dryrun.yaml", "tarball", ["sample-deployment"]),
    ],
    ids=["tarball", "plain-yaml", "tarball-deployment"],
)
def test_upstream_messages_decode(fixture: str, fmt: str, names: list[str]) -> None:
    env = read_envelope(annotations_of(fixture))
    assert env.payload.format == fmt
    assert [d["metadata"]["name"] for d in env.payload.documents()] == names


def test_tarball_member_names_are_absolute_temp_paths_and_never_touch_disk(tmp_path: object) -> None:
    env = read_envelope(annotations_of("manifests/cm-tarball-key-signed.yaml"))
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(env.payload.data))) as inner:
        assert inner.getnames()[0].startswith("/var/folders/")
    assert env.payload.documents()[0]["kind"] == "ConfigMap"


def test_signature_sets_with_certificates_and_bundles() -> None:
    env = read_envelope(annotations_of("manifests/cm-plain-keyless-multi-signed.yaml"))
    assert [s.name for s in env.sets] == ["signature", "signature_1"]
    assert all(s.certificate and s.certificate.startswith(b"-----BEGIN CERTIFICATE-----") for s in env.sets)
    assert all(s.bundle and s.bundle.startswith(b"{") for s in env.sets)


def test_numbering_stops_at_the_first_gap_and_says_so() -> None:
    env = read_envelope(
        annotations_of("../k8s-manifest-sigstore/derived/cm-plain-2keys-multi-signed.numbering-gap.yaml")
    )
    assert [s.name for s in env.sets] == ["signature"]
    assert env.unread == ("signature_2",)


def test_plain_base64_message_is_accepted_as_upstream_does() -> None:
    payload = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
    decoded = decode_message(b64(payload))
    assert decoded.format == "plain-base64"
    assert decoded.data == payload


def test_line_breaks_in_base64_are_skipped_like_go() -> None:
    text = encode_message(b"kind: ConfigMap\n")
    assert decode_message(text[:10] + "\n" + text[10:] + "\r\n").data == b"kind: ConfigMap\n"


def test_multi_member_gzip_is_read_whole() -> None:
    assert gunzip_bounded(gzip.compress(b"ab") + gzip.compress(b"cd"), 100, "x") == b"abcd"


def test_unsigned_and_half_signed() -> None:
    with pytest.raises(Unsigned, match="no signature"):
        read_envelope({})
    with pytest.raises(Unsigned, match="no signature"):
        read_envelope(None)
    with pytest.raises(Unsigned, match="message but no signature"):
        read_envelope({f"{D}/message": encode_message(b"a: 1")})
    with pytest.raises(Unsigned, match="a signature but no message"):
        read_envelope({f"{D}/signature": SIG})


def test_other_domain() -> None:
    ann = {"example.com/message": encode_message(b"kind: X\n"), "example.com/signature": SIG}
    assert read_envelope(ann, "example.com").sets[0].signature == b"\x30" * 70
    with pytest.raises(Unsigned):
        read_envelope(ann)


def bomb(size: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"\0" * (1 << 20)
    out = bytearray()
    for _ in range(size >> 20):
        out += compressor.compress(chunk)
    return bytes(out + compressor.flush())


HOSTILE: list[tuple[str, dict[str, object], str]] = [
    ("gzip-bomb", {"message": b64(bomb(1 << 27))}, "inflates to more than"),
    ("truncated-gzip", {"message": b64(gzip.compress(b"kind: X\n" * 100)[:-12])}, "truncated|not a valid gzip"),
    ("corrupt-gzip", {"message": b64(b"\x1f\x8b\x08\x00" + b"\xff" * 40)}, "not a valid gzip"),
    ("trailing-garbage", {"message": b64(gzip.compress(b"kind: X\n") + b"junk")}, "trailing data"),
    ("invalid-base64", {"message": "not*base64!"}, "not valid base64"),
    ("truncated-base64", {"message": encode_message(b"kind: X\n")[:-3]}, "not valid base64"),
    ("message-not-a-string", {"message": 42}, "not a string"),
    ("oversized-message", {"message": "A" * 400_000}, "longer than"),
    (
        "signature-not-base64",
        {"message": encode_message(b"kind: X\n"), "signature": "%%%"},
        "signature annotation is not valid base64",
    ),
    ("oversized-signature", {"message": encode_message(b"kind: X\n"), "signature": "A" * 4000}, "longer than"),
    (
        "certificate-bomb",
        {"message": encode_message(b"kind: X\n"), "certificate": b64(bomb(1 << 24))},
        "inflates to more than",
    ),
]


@pytest.mark.parametrize(("name", "fields", "fragment"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_envelopes_are_malformed_quickly(name: str, fields: dict[str, object], fragment: str) -> None:
    annotations: dict[str, object] = {f"{D}/signature": SIG}
    annotations.update({f"{D}/{k}": v for k, v in fields.items()})
    started = time.process_time()  # CPU time: the work, whatever else the machine runs
    with pytest.raises(MalformedMessage, match=fragment):
        read_envelope(annotations).payload.documents()
    assert time.process_time() - started < 2.0


def test_thousands_of_signatures_are_refused() -> None:
    annotations = {f"{D}/message": encode_message(b"kind: X\n"), f"{D}/signature": SIG}
    annotations.update({f"{D}/signature_{i}": SIG for i in range(1, 5000)})
    with pytest.raises(MalformedMessage, match="5000 signature annotations"):
        read_envelope(annotations)


TAR_CASES = [
    ("symlink", [member("/tmp/x.yaml", tarfile.SYMTYPE, "/etc/passwd")], "is a link"),
    ("hardlink", [member("a.yaml", tarfile.LNKTYPE, "b.yaml")], "is a link"),
    ("device", [member("dev.yaml", tarfile.CHRTYPE)], "device"),
    ("fifo", [member("fifo.yaml", tarfile.FIFOTYPE)], "device"),
    ("no-yaml-members", [member("README.md")], "no .yaml or .yml"),
]


@pytest.mark.parametrize(("name", "members", "fragment"), TAR_CASES, ids=[c[0] for c in TAR_CASES])
def test_odd_tar_members_are_refused(name: str, members: list[tarfile.TarInfo], fragment: str) -> None:
    data = {"README.md": b"hi"}
    message = encode_message(tar_with(*members, data=data))
    with pytest.raises(MalformedMessage, match=fragment):
        decode_message(message).documents()


def test_tar_skips_directories_and_other_files_and_reads_absolute_names() -> None:
    yaml_doc = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"
    members = [member("/abs/dir", tarfile.DIRTYPE), member("/abs/dir/notes.txt"), member("/abs/dir/../../etc/a.yml")]
    message = encode_message(
        tar_with(*members, data={"/abs/dir/notes.txt": b"x", "/abs/dir/../../etc/a.yml": yaml_doc})
    )
    assert [d["metadata"]["name"] for d in decode_message(message).documents()] == ["a"]


def test_tar_bomb_member_count() -> None:
    members = [member(f"m{i}.txt") for i in range(20)]
    message = encode_message(tar_with(*members, data={f"m{i}.txt": b"" for i in range(20)}))
    with pytest.raises(MalformedMessage, match="more than 10 members"):
        decode_message(message).documents(Limits(max_tar_members=10))


def test_tar_that_is_not_a_tar() -> None:
    with pytest.raises(MalformedMessage, match="not a valid tar"):
        decode_message(encode_message(gzip.compress(b"not a tar at all" * 40))).documents()


def test_documents_must_be_objects() -> None:
    with pytest.raises(MalformedMessage, match="not a Kubernetes object"):
        decode_message(encode_message(b"- a\n- b\n")).documents()


def test_make_tarball_round_trips() -> None:
    data = make_tarball(
        [("a.yaml", b"kind: A\nmetadata: {name: a}\n"), ("sub/b.yml", b"kind: B\nmetadata: {name: b}\n")]
    )
    payload = decode_message(encode_message(data))
    assert payload.format == "tarball"
    assert [d["kind"] for d in payload.documents()] == ["A", "B"]


def test_kyverno_fixtures_decode() -> None:
    paths = sorted(KYVERNO.glob("manifests/*.yaml"))
    assert len(paths) >= 6, paths  # the Kyverno interop manifests (its README)
    decoded = 0
    for path in paths:
        ann = load_yaml(path)[0]["metadata"].get("annotations") or {}
        if f"{D}/message" in ann:
            assert read_envelope(ann).payload.documents()
            decoded += 1
    assert decoded >= 5  # every one but the unsigned Service
