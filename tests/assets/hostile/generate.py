"""The hostile-input corpus: every file, how it is built, and what each entry point must answer.

Run from the repository root to (re)write the corpus and its index::

    python tests/assets/hostile/generate.py           # write every small file and index.yaml
    python tests/assets/hostile/generate.py --check   # exit 1 if a committed file differs

Everything is deterministic: the signing keys are Ed25519 keys derived from
fixed seeds (Ed25519 signatures are deterministic), gzip streams carry mtime 0,
tar members carry fixed metadata. So the committed files are exactly this
script's output and :mod:`tests.unit.test_hostile_corpus` checks that they are.

**Small files, large effects.** A bomb is committed only when its file is small
(a gzip bomb of 16 MiB is 22 KB of base64; a tarball bomb of 256 MiB, doubly
compressed, is 2 KB). Inputs that are large by nature -- a body over the
service's 16 MiB limit, 250 000 keys, 100 000 nesting levels -- are *recipes*:
:data:`ENTRIES` marks them ``recipe=True``, nothing is committed, and the tests
build them with :func:`build` into a temporary directory before driving them.

Each entry says what the file *is* (``as``), which decides the entry points it
goes through (:data:`ENTRY_POINTS`), and the ``reason`` every entry point must
answer with (``cli`` overrides it for the command line when the CLI reads the
file differently, e.g. a JSON body that is valid YAML of no use).
"""

from __future__ import annotations

import argparse
import base64
import copy
import gzip
import hashlib
import io
import json
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa, x25519  # noqa: E402

from provider.signatures.signing import dump_yaml  # noqa: E402

DOMAIN = "cosign.sigstore.dev"
MESSAGE = f"{DOMAIN}/message"
SIGNATURE = f"{DOMAIN}/signature"

#: What a file is, and the entry points that read that kind of input.
#:
#: ``object``  an admitted Kubernetes object: ``decide()``; ``verify -f``; review.object of a
#:             Gatekeeper key; request.object of a Kyverno body.
#: ``review``  an AdmissionRequest: ``Review.from_admission`` + ``decide()``; ``verify -f`` of an
#:             AdmissionReview around it; the Gatekeeper key's review; the Kyverno body's request.
#: ``policy``  a policy document: ``Policy.from_dict``; ``verify --config``; the policy of a key and a body.
#: ``key``     a public-key file: ``Policy.from_dict({"keys": [text]})``; ``verify -k``; a policy's keys.
#: ``body``    raw bytes: the wire readers; ``verify -f``; the Gatekeeper body, one Gatekeeper key
#:             (the text), the Kyverno body.
ENTRY_POINTS: dict[str, tuple[str, ...]] = {
    "object": ("library:decide", "cli:verify -f", "gatekeeper:review.object", "kyverno:request.object"),
    "review": (
        "library:Review.from_admission+decide",
        "cli:verify -f (AdmissionReview)",
        "gatekeeper:review",
        "kyverno:request",
    ),
    "policy": ("library:Policy.from_dict", "cli:verify --config", "gatekeeper:policy", "kyverno:policy"),
    "key": ("library:Policy.from_dict(keys)", "cli:verify -k", "gatekeeper:policy.keys", "kyverno:policy.keys"),
    "body": ("library:wire readers", "cli:verify -f", "gatekeeper:body+key", "kyverno:body"),
}


# --- deterministic keys -------------------------------------------------------------


def _seed(label: str) -> bytes:
    return hashlib.sha256(f"manifest-provider hostile corpus: {label}".encode()).digest()


TRUSTED = ed25519.Ed25519PrivateKey.from_private_bytes(_seed("trusted"))
UNTRUSTED = ed25519.Ed25519PrivateKey.from_private_bytes(_seed("untrusted"))


def _spki_pem(key: Any) -> bytes:
    return bytes(key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


TRUSTED_PEM = _spki_pem(TRUSTED.public_key())

#: A DSA-2048 public key (SPKI), generated once with ``cryptography`` (``dsa.generate_private_key(2048)``): DSA
#: cannot be derived from a seed, and only the public half is needed.
DSA_PUBLIC_PEM = b"""-----BEGIN PUBLIC KEY-----
MIIDSDCCAjoGByqGSM44BAEwggItAoIBAQDNgPkBgqHlnkFAT4puwHUJG1GNQGHS
Wnc50ioW08tD5jCqmP4p0Q/RIo4QpFxkDCqLfqLvxOKebijFubZFf5GsErmYHbBD
I52seUSUeFqrgBjUr0lYOxQhoQ5VGuBY8WhXIsr3h9cB9cJ6FcY4qPkBTkx2kSzl
6s0K4pAdHGgY2wlh71xiXefgEjRQtQrpVDXpi303uZgcK+kxo3UTAByZZCBPW93b
CSS1rBp6D+9sXGjsiT+LbXjJrWgYDS91LqdNkQ4A68uZIAbmHlIMf8s+gA8q+zhP
LJinL4QYwDBJBKDPQCbRKMoKKYUGLqFhmq3AlnyuWHb/TL516cFgB/dRAiEA3r7+
7lu2JHe8W4TAYOl3tGY+8/waUoj3q/2Xo/LTSlsCggEBAKVXsbdqAZBaS8sUiR2x
OP7ltglOTHuyHyl90VrG1qz8JgTJQusOZ7cgU3RFvzJr9GNK3q5i9J6Axs1krfho
m0De7sV27Q+7ckt4YfG9XaOagACZcScKS2xJQWcHFFQVT+3/QXGNM4Ddd5WUawWG
sM99sMAAn3qbG/ekQJHBoVXuWf55DjWFe4t7Fu/9g9/FU8qdsL0HTnBogeDpHEPb
ApZY1Ibm/S7yl7R6vqczzOM0+bZB5+JqExXNEeKvWFeUx/K8vacfLgd/Q7IP2PGY
1ehR02T1n7ujI+7Fax9sMpWlCrl7agvBon/0DaSGfH3ywfDDIc/jb3YAntoAKrlq
xAwDggEGAAKCAQEAl8BPSdcYhdXw93Y5W+ojTMS7KI7lXqoJqn5xNX3eOhWPLdHr
aqoaCDpOISB4U22r+SiWVQxkL243q2nvs2oIj+CtyB8Ijds2mhnIFj3K3VqXb9FW
Hls/fyOP8smZSWPaUsnh61sPp5bgGggQfZmn51uav/5omowJAs02cJhXIxj8SyjC
GUjLPYrZt174f5vrgkiJTT6WNn2oyw1oRFAH85ZsyFwHzF8kV92sZFDTonI0ek9j
BllJEcyqkSeeiOTEu9gtPlWJPMv7OUAKB/+vU0jRuimCKQXvXDsWjpYre28jfxcb
Ivycj2owKH86/QtuZjG/aFJG/QQNDnY7Y/Kh7g==
-----END PUBLIC KEY-----
"""


def _ed25519_pem(label: str) -> bytes:
    return _spki_pem(ed25519.Ed25519PrivateKey.from_private_bytes(_seed(label)).public_key())


# --- building blocks ----------------------------------------------------------------

BASE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "target", "namespace": "corpus"},
    "data": {"mode": "production"},
}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def yaml_of(*docs: Any) -> bytes:
    return dump_yaml(list(docs)).encode()


def json_of(value: Any) -> bytes:
    return json.dumps(value, indent=1, sort_keys=True).encode() + b"\n"


def base(**changes: Any) -> dict[str, Any]:
    obj = copy.deepcopy(BASE)
    obj.update(changes)
    return obj


def with_annotations(obj: dict[str, Any], annotations: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["annotations"] = annotations
    return obj


def signed(
    payload: bytes, obj: dict[str, Any] | None = None, *, key: Any = TRUSTED, message: bytes | None = None
) -> dict[str, Any]:
    """``obj`` (the base ConfigMap) carrying a message over ``payload`` and ``key``'s signature over it."""
    return with_annotations(
        obj or BASE, {MESSAGE: b64(gz(payload) if message is None else message), SIGNATURE: b64(key.sign(payload))}
    )


def signed_object(payload: bytes, obj: dict[str, Any] | None = None, **kwargs: Any) -> bytes:
    return yaml_of(signed(payload, obj, **kwargs))


def honest(obj: dict[str, Any] | None = None) -> dict[str, Any]:
    """``obj`` signed as ``manifest-provider sign`` would sign it (the control case)."""
    return signed(yaml_of(obj or BASE), obj)


def tar(*members: tuple[tarfile.TarInfo, bytes | None], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """A tar.gz of ``members`` with fixed metadata (``tarfile`` defaults: mtime 0, uid 0)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return gz(buffer.getvalue())


def member(
    name: str, kind: bytes = tarfile.REGTYPE, data: bytes | None = None, **fields: Any
) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = 0o644
    info.size = len(data) if data is not None else 0
    for field_name, value in fields.items():
        setattr(info, field_name, value)
    return info, data


def signed_tarball(*members: tuple[tarfile.TarInfo, bytes | None], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """The base ConfigMap whose (trusted, valid) signature covers a tarball of ``members``."""
    return signed_object(tar(*members, fmt=fmt))


def sparse_member(name: str, real_size: int) -> tuple[tarfile.TarInfo, bytes]:
    """A GNU sparse 1.0 member (PAX headers): one byte of data, a claimed size of ``real_size`` zeros."""
    sparse_map = b"1\n0\n1\n".ljust(512, b"\0")  # one region: offset 0, one byte
    info = tarfile.TarInfo(name)
    info.size = len(sparse_map) + 512
    info.pax_headers = {
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": name,
        "GNU.sparse.realsize": str(real_size),
    }
    return info, sparse_map + b"a".ljust(512, b"\0")


def alias_bomb(levels: int = 9, width: int = 9) -> bytes:
    """The "billion laughs": 9 levels of 9 aliases each expand to 9**9 (387 million) strings."""
    lines = ["apiVersion: v1", "kind: ConfigMap", "metadata: {name: target, namespace: corpus}", "bomb:"]
    lines.append('  l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]')
    for level in range(1, levels):
        refs = ",".join(f"*l{level - 1}" for _ in range(width))
        lines.append(f"  l{level}: &l{level} [{refs}]")
    return ("\n".join(lines) + "\n").encode()


def nested(depth: int, opening: str = "[", closing: str = "]") -> bytes:
    return (opening * depth + closing * depth).encode()


def provider_request(keys: Any, **fields: Any) -> bytes:
    request = {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest", "request": {"keys": keys}}
    request.update(fields)
    return json_of(request)


def admission_request(**changes: Any) -> dict[str, Any]:
    """An AdmissionRequest for the honestly signed base ConfigMap, with ``changes`` applied."""
    request: dict[str, Any] = {
        "uid": "00000000-0000-0000-0000-00000000c0de",
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "operation": "CREATE",
        "namespace": "corpus",
        "name": "target",
        "userInfo": {"username": "mallory@example.com", "groups": ["system:authenticated"]},
        "object": honest(),
        "dryRun": False,
    }
    for name, value in changes.items():
        if value is _DROP:
            request.pop(name, None)
        else:
            request[name] = value
    return request


_DROP = object()


def review(**changes: Any) -> bytes:
    return json_of(admission_request(**changes))


def policy_yaml(value: Any) -> bytes:
    return dump_yaml([value]).encode()


def trusted_policy(**extra: Any) -> bytes:
    return policy_yaml({"keys": [TRUSTED_PEM.decode()], **extra})


def pem_text(label: str, body: bytes) -> bytes:
    """One PEM block: ``body`` in base64 lines of 64 between BEGIN and END lines."""
    text = b64(body)
    lines = "\n".join(text[i : i + 64] for i in range(0, len(text), 64))
    return f"-----BEGIN {label}-----\n{lines}\n-----END {label}-----\n".encode()


# --- the corpus ---------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str  # one of ENTRY_POINTS
    reason: str  # what every entry point answers (a verdict reason, request-invalid, policy-invalid)
    what: str  # what is wrong with it, for people
    build: Callable[[], bytes]
    says: str = ""  # a fragment the library's message must contain
    cli: str | None = None  # the command line's answer when it differs: a reason, or "usage" (exit 2)
    recipe: bool = False  # large by nature: built by the tests, never committed


CM_DOC = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: target, namespace: corpus}\n"

ENTRIES: list[Entry] = [
    # -- controls: what a good object gets (not hostile; they prove the harness sees an allow) --
    Entry(
        "control-honestly-signed-configmap.yaml",
        "object",
        "verified",
        "nothing: signed as `manifest-provider sign` does",
        lambda: yaml_of(honest()),
    ),
    # -- the envelope: message and signature annotations --
    Entry(
        "object-unsigned.yaml",
        "object",
        "unsigned",
        "no signature annotations at all",
        lambda: yaml_of(BASE),
        "annotation cosign.sigstore.dev/message is missing",
    ),
    Entry(
        "object-message-without-signature.yaml",
        "object",
        "unsigned",
        "a message but no signature",
        lambda: yaml_of(with_annotations(BASE, {MESSAGE: b64(gz(yaml_of(BASE)))})),
        "no signature",
    ),
    Entry(
        "object-signature-without-message.yaml",
        "object",
        "unsigned",
        "a signature but no message",
        lambda: yaml_of(with_annotations(BASE, {SIGNATURE: b64(TRUSTED.sign(yaml_of(BASE)))})),
        "a signature but no message",
    ),
    Entry(
        "object-signature-numbering-starts-at-1.yaml",
        "object",
        "unsigned",
        "signature_1 and signature_2 but no signature: numbering stops at the first gap",
        lambda: yaml_of(
            with_annotations(
                BASE,
                {
                    MESSAGE: b64(gz(yaml_of(BASE))),
                    f"{SIGNATURE}_1": b64(TRUSTED.sign(yaml_of(BASE))),
                    f"{SIGNATURE}_2": "AA==",
                },
            )
        ),
        "numbering starts at",
    ),
    Entry(
        "object-message-invalid-base64.yaml",
        "object",
        "malformed-message",
        "the message is not base64",
        lambda: yaml_of(with_annotations(BASE, {MESSAGE: "H4sI!!!not*base64", SIGNATURE: "AA=="})),
        "not valid base64",
    ),
    Entry(
        "object-message-base64url-alphabet.yaml",
        "object",
        "malformed-message",
        "the message uses the URL-safe alphabet (- and _), which Go's StdEncoding refuses",
        lambda: yaml_of(
            with_annotations(
                BASE,
                {MESSAGE: b64(gz(yaml_of(BASE)) + b"\xfb\xff").replace("+", "-").replace("/", "_"), SIGNATURE: "AA=="},
            )
        ),
        "not valid base64",
    ),
    Entry(
        "object-message-truncated-gzip.yaml",
        "object",
        "malformed-message",
        "the gzip stream stops half way",
        lambda: yaml_of(with_annotations(BASE, {MESSAGE: b64(gz(yaml_of(BASE) * 20)[:60]), SIGNATURE: "AA=="})),
        "truncated gzip",
    ),
    Entry(
        "object-message-gzip-trailing-garbage.yaml",
        "object",
        "malformed-message",
        "bytes after the gzip stream that are not another gzip member",
        lambda: yaml_of(
            with_annotations(BASE, {MESSAGE: b64(gz(yaml_of(BASE)) + b"trailing garbage"), SIGNATURE: "AA=="})
        ),
        "trailing data",
    ),
    Entry(
        "object-message-gzip-corrupt-deflate.yaml",
        "object",
        "malformed-message",
        "a gzip header followed by an invalid deflate stream",
        lambda: yaml_of(with_annotations(BASE, {MESSAGE: b64(gz(b"x" * 100)[:10] + b"\xff" * 40), SIGNATURE: "AA=="})),
        "not a valid gzip stream",
    ),
    Entry(
        "object-message-gzip-bomb-16mib.yaml",
        "object",
        "malformed-message",
        "the message inflates to 16 MiB of zeros (limit 4 MiB); refused after inflating at most the limit",
        lambda: yaml_of(with_annotations(BASE, {MESSAGE: b64(gz(bytes(16 * 2**20))), SIGNATURE: "AA=="})),
        "inflates to more than",
    ),
    Entry(
        "object-message-over-256kib.yaml",
        "object",
        "malformed-message",
        "a message annotation longer than Kubernetes allows for all annotations together",
        lambda: yaml_of(with_annotations(BASE, {MESSAGE: "A" * (400 * 1024), SIGNATURE: "AA=="})),
        "longer than",
        recipe=True,
    ),
    Entry(
        "object-message-is-a-number.yaml",
        "object",
        "malformed-message",
        "the message annotation is a number, not a string",
        lambda: yaml_of(with_annotations(BASE, {MESSAGE: 12345, SIGNATURE: "AA=="})),
        "not a string",
    ),
    Entry(
        "object-signature-is-a-list.yaml",
        "object",
        "malformed-message",
        "the signature annotation is a list",
        lambda: yaml_of(with_annotations(BASE, {MESSAGE: b64(gz(yaml_of(BASE))), SIGNATURE: ["AA=="]})),
        "not a string",
    ),
    Entry(
        "object-annotations-is-a-list.yaml",
        "object",
        "malformed-message",
        "metadata.annotations is a list",
        lambda: yaml_of(with_annotations(BASE, [MESSAGE, SIGNATURE])),
        "not a mapping",
    ),  # type: ignore[arg-type]
    Entry(
        "object-metadata-is-a-string.yaml",
        "object",
        "malformed-message",
        "metadata is a string",
        lambda: yaml_of(base(metadata="target")),
        "metadata is not a mapping",
    ),
    Entry(
        "object-2000-signature-annotations.yaml",
        "object",
        "malformed-message",
        "thousands of signature annotations (at most 64 are read)",
        lambda: yaml_of(
            with_annotations(
                BASE,
                {
                    MESSAGE: b64(gz(yaml_of(BASE))),
                    SIGNATURE: "AA==",
                    **{f"{SIGNATURE}_{i}": "AA==" for i in range(1, 2000)},
                },
            )
        ),
        "2000 signature annotations",
    ),
    Entry(
        "object-signature-invalid-base64.yaml",
        "object",
        "malformed-message",
        "the signature is not base64",
        lambda: yaml_of(with_annotations(BASE, {MESSAGE: b64(gz(yaml_of(BASE))), SIGNATURE: "%%%"})),
        "not valid base64",
    ),
    Entry(
        "object-signature-over-2kib.yaml",
        "object",
        "malformed-message",
        "a 3000-byte signature (limit 2048)",
        lambda: yaml_of(with_annotations(BASE, {MESSAGE: b64(gz(yaml_of(BASE))), SIGNATURE: b64(bytes(3000))})),
        "longer than the 2048-byte limit",
    ),
    Entry(
        "object-signature-empty.yaml",
        "object",
        "signature-invalid",
        "an empty signature",
        lambda: yaml_of(with_annotations(BASE, {MESSAGE: b64(gz(yaml_of(BASE))), SIGNATURE: ""})),
        "verifies none",
    ),
    Entry(
        "object-signature-63-bytes.yaml",
        "object",
        "signature-invalid",
        "an Ed25519 signature one byte short",
        lambda: yaml_of(
            with_annotations(BASE, {MESSAGE: b64(gz(yaml_of(BASE))), SIGNATURE: b64(TRUSTED.sign(yaml_of(BASE))[:63])})
        ),
        "verifies none",
    ),
    Entry(
        "object-signature-65-bytes.yaml",
        "object",
        "signature-invalid",
        "an Ed25519 signature with one byte too many",
        lambda: yaml_of(
            with_annotations(
                BASE, {MESSAGE: b64(gz(yaml_of(BASE))), SIGNATURE: b64(TRUSTED.sign(yaml_of(BASE)) + b"\0")}
            )
        ),
        "verifies none",
    ),
    Entry(
        "object-signature-ecdsa-der-for-ed25519-key.yaml",
        "object",
        "signature-invalid",
        "an ASN.1 DER ECDSA signature where the key is Ed25519",
        lambda: yaml_of(
            with_annotations(
                BASE,
                {
                    MESSAGE: b64(gz(yaml_of(BASE))),
                    SIGNATURE: b64(bytes.fromhex("3044022001" + "00" * 31 + "022001" + "00" * 31)),
                },
            )
        ),
        "verifies none",
    ),
    Entry(
        "object-signature-by-untrusted-key.yaml",
        "object",
        "signature-invalid",
        "a valid signature by a key the policy does not trust",
        lambda: signed_object(yaml_of(BASE), key=UNTRUSTED),
        "verifies none",
    ),
    Entry(
        "object-signature-over-other-bytes.yaml",
        "object",
        "signature-invalid",
        "the trusted key's signature over a different payload",
        lambda: yaml_of(
            with_annotations(
                BASE,
                {MESSAGE: b64(gz(yaml_of(BASE))), SIGNATURE: b64(TRUSTED.sign(yaml_of(base(data={"mode": "debug"}))))},
            )
        ),
        "verifies none",
    ),
    Entry(
        "object-certificate-gzip-bomb.yaml",
        "object",
        "malformed-message",
        "the certificate annotation inflates past its 64 KiB limit",
        lambda: yaml_of(
            with_annotations(
                honest(), {**honest()["metadata"]["annotations"], f"{DOMAIN}/certificate": b64(gz(bytes(2**20)))}
            )
        ),
        "inflates to more than",
    ),
    Entry(
        "object-bundle-invalid-base64.yaml",
        "object",
        "malformed-message",
        "the bundle annotation is not base64",
        lambda: yaml_of(
            with_annotations(honest(), {**honest()["metadata"]["annotations"], f"{DOMAIN}/bundle": "{not base64}"})
        ),
        "not valid base64",
    ),
    # -- identity and content: a good signature on the wrong thing --
    Entry(
        "object-tampered-data.yaml",
        "object",
        "content-mismatch",
        "signed with data.mode production, admitted with debug",
        lambda: yaml_of(with_annotations(base(data={"mode": "debug"}), honest()["metadata"]["annotations"])),
        "data.mode differs",
    ),
    Entry(
        "object-signed-for-another-name.yaml",
        "object",
        "no-matching-manifest",
        "the message signs ConfigMap corpus/other, not corpus/target",
        lambda: signed_object(yaml_of(base(metadata={"name": "other", "namespace": "corpus"}))),
        "never verifies another",
    ),
    Entry(
        "object-signed-for-another-namespace.yaml",
        "object",
        "no-matching-manifest",
        "the message signs the object in another namespace",
        lambda: signed_object(yaml_of(base(metadata={"name": "target", "namespace": "elsewhere"}))),
        "not ConfigMap corpus/target",
    ),
    Entry(
        "object-signed-for-another-kind.yaml",
        "object",
        "no-matching-manifest",
        "the message signs a Secret of the same name",
        lambda: signed_object(yaml_of(base(kind="Secret"))),
        "holds no ConfigMap",
    ),
    Entry(
        "object-kind-is-a-number.yaml",
        "object",
        "no-matching-manifest",
        "kind is 42 (no signed document has that kind)",
        lambda: yaml_of(with_annotations(base(kind=42), honest()["metadata"]["annotations"])),
        "not signed for",
    ),
    Entry(
        "object-name-is-a-list.yaml",
        "object",
        "no-matching-manifest",
        "metadata.name is a list",
        lambda: yaml_of(
            with_annotations(
                base(metadata={"name": ["target"], "namespace": "corpus"}), honest()["metadata"]["annotations"]
            )
        ),
        "never verifies another",
    ),
    # -- the signed payload: only parsed after a trusted signature, still bounded --
    Entry(
        "object-signed-payload-alias-bomb.yaml",
        "object",
        "malformed-message",
        "the signed YAML is a billion-laughs alias bomb",
        lambda: signed_object(alias_bomb()),
        "nodes (aliases counted expanded)",
    ),
    # Two depths, one answer: libyaml 0.2.6 refuses the 10 000-deep line itself, before our check
    # sees its first level (provider/parsing.py maps its refusal); the 200-deep one is below
    # libyaml's 1000 levels, so our own check refuses it whatever libyaml is installed.
    Entry(
        "object-signed-payload-nested-10000-deep.yaml",
        "object",
        "malformed-message",
        "the signed YAML nests 10 000 flow sequences",
        lambda: signed_object(CM_DOC.encode() + b"data: " + nested(10_000) + b"\n"),
        "nested deeper than 100 levels",
    ),
    Entry(
        "object-signed-payload-nested-200-deep.yaml",
        "object",
        "malformed-message",
        "the signed YAML nests 200 flow sequences",
        lambda: signed_object(CM_DOC.encode() + b"data: " + nested(200) + b"\n"),
        "nested deeper than 100 levels",
    ),
    Entry(
        "object-signed-payload-duplicate-keys.yaml",
        "object",
        "malformed-message",
        "the signed YAML repeats data.mode with another value",
        lambda: signed_object(CM_DOC.encode() + b"data:\n  mode: production\n  mode: debug\n"),
        "duplicate key",
    ),
    Entry(
        "object-signed-payload-nan.yaml",
        "object",
        "malformed-message",
        "the signed YAML holds .nan",
        lambda: signed_object(CM_DOC.encode() + b"data: {mode: .nan}\n"),
        "not finite",
    ),
    Entry(
        "object-signed-payload-not-utf8.yaml",
        "object",
        "malformed-message",
        "the signed YAML is Latin-1",
        lambda: signed_object(CM_DOC.encode() + "data: {mode: caf\u00e9}\n".encode("latin-1")),
        "not valid UTF-8",
    ),
    Entry(
        "object-signed-payload-python-tag.yaml",
        "object",
        "malformed-message",
        "the signed YAML asks for a Python object (!!python/object/apply)",
        lambda: signed_object(CM_DOC.encode() + b'data: !!python/object/apply:os.system ["touch /tmp/pwned"]\n'),
        "is not supported",
    ),
    Entry(
        "object-signed-payload-scalar-document.yaml",
        "object",
        "malformed-message",
        "the signed YAML is a bare string",
        lambda: signed_object(b'"just a string"\n'),
        "not a Kubernetes object",
    ),
    Entry(
        "object-signed-payload-1001-documents.yaml",
        "object",
        "malformed-message",
        "the signed YAML holds 1001 documents (limit 1000)",
        lambda: signed_object(b"".join(b"---\n{a: %d}\n" % i for i in range(1001))),
        "more than 1000 documents",
    ),
    Entry(
        "object-signed-payload-two-documents-for-this-object.yaml",
        "object",
        "malformed-message",
        "the signed YAML holds two documents for ConfigMap corpus/target",
        lambda: signed_object(yaml_of(BASE, base(data={"mode": "debug"}))),
        "ambiguous",
    ),
    Entry(
        "object-signed-payload-invalid-yaml.yaml",
        "object",
        "malformed-message",
        "the signed bytes are not YAML",
        lambda: signed_object(b"{unclosed: [flow\n"),
        "not valid YAML",
    ),
    # -- tarball messages --
    Entry(
        "object-signed-tarball-bomb-256mib.yaml",
        "object",
        "malformed-message",
        "the signed tarball inflates to 256 MiB (limit 4 MiB); doubly compressed, 2 KB here",
        lambda: signed_object(gz(bytes(256 * 2**20))),
        "inflates to more than",
    ),
    Entry(
        "object-signed-tar-symlink-member.yaml",
        "object",
        "malformed-message",
        "a tar member that is a symbolic link to /etc/passwd",
        lambda: signed_tarball(member("evil.yaml", tarfile.SYMTYPE, linkname="/etc/passwd")),
        "is a link",
    ),
    Entry(
        "object-signed-tar-hardlink-member.yaml",
        "object",
        "malformed-message",
        "a tar member that is a hard link",
        lambda: signed_tarball(
            member("a.yaml", data=yaml_of(BASE)), member("b.yaml", tarfile.LNKTYPE, linkname="a.yaml")
        ),
        "is a link",
    ),
    Entry(
        "object-signed-tar-fifo-member.yaml",
        "object",
        "malformed-message",
        "a tar member that is a FIFO",
        lambda: signed_tarball(member("pipe.yaml", tarfile.FIFOTYPE)),
        "special file",
    ),
    Entry(
        "object-signed-tar-device-member.yaml",
        "object",
        "malformed-message",
        "a tar member that is a character device (/dev/zero's numbers)",
        lambda: signed_tarball(member("zero.yaml", tarfile.CHRTYPE, devmajor=1, devminor=5)),
        "special file",
    ),
    Entry(
        "object-signed-tar-sparse-member-claiming-1tb.yaml",
        "object",
        "malformed-message",
        "a GNU sparse member: 1 byte of data claiming a size of 1 TB of zeros",
        lambda: signed_tarball(sparse_member("sparse.yaml", 10**12)),
        "sparse",
    ),
    Entry(
        "object-signed-tar-member-size-beyond-data.yaml",
        "object",
        "malformed-message",
        "a member header claiming 1 GiB with no data behind it",
        lambda: signed_tarball(member("big.yaml", size=2**30)),
        "claims 1073741824 bytes",
    ),
    Entry(
        "object-signed-tar-2000-members.yaml",
        "object",
        "malformed-message",
        "2000 empty members (at most 512 are read)",
        lambda: signed_tarball(*(member(f"m{i}.txt") for i in range(2000)), fmt=tarfile.USTAR_FORMAT),
        "more than 512 members",
    ),
    Entry(
        "object-signed-tar-not-a-tar.yaml",
        "object",
        "malformed-message",
        "a gzip stream that holds no tar archive",
        lambda: signed_object(gz(b"this is not a tar archive" * 40)),
        "not a valid tar archive",
    ),
    Entry(
        "object-signed-tar-without-yaml-members.yaml",
        "object",
        "malformed-message",
        "a tarball with only a README",
        lambda: signed_tarball(member("README.md", data=b"# nothing here\n")),
        "no .yaml or .yml file",
    ),
    Entry(
        "object-signed-tar-traversal-member-names.yaml",
        "object",
        "verified",
        "members named /etc/cron.d/x.yaml and ../../x.yaml: names are labels, never paths, so it verifies and writes nothing",
        lambda: signed_tarball(
            member("/etc/cron.d/x.yaml", data=yaml_of(BASE)), member("../../escape.yaml", data=b"kind: Other\n")
        ),
    ),
    # -- reviews: the AdmissionRequest with wrong types --
    Entry(
        "review-object-is-a-list.json",
        "review",
        "request-invalid",
        "request.object is a list",
        lambda: review(object=[honest()]),
        "expected an object",
    ),
    Entry(
        "review-oldobject-is-a-string.json",
        "review",
        "request-invalid",
        "request.oldObject is a string",
        lambda: review(oldObject="{}"),
        "expected an object",
    ),
    Entry(
        "review-userinfo-is-a-string.json",
        "review",
        "request-invalid",
        "request.userInfo is a string",
        lambda: review(userInfo="mallory"),
        "userInfo: expected an object",
    ),
    Entry(
        "review-groups-is-a-string.json",
        "review",
        "request-invalid",
        "userInfo.groups is a string, not a list",
        lambda: review(userInfo={"username": "mallory", "groups": "system:masters"}),
        "expected a list of strings",
    ),
    Entry(
        "review-groups-holds-a-number.json",
        "review",
        "request-invalid",
        "userInfo.groups holds a number",
        lambda: review(userInfo={"username": "mallory", "groups": ["system:authenticated", 0]}),
        "expected a list of strings",
    ),
    Entry(
        "review-username-is-an-object.json",
        "review",
        "request-invalid",
        "userInfo.username is an object",
        lambda: review(userInfo={"username": {"name": "system:kube-controller-manager"}}),
        "expected a string",
    ),
    Entry(
        "review-dryrun-is-a-string.json",
        "review",
        "request-invalid",
        'dryRun is the string "true" (a truthy string must not skip verification)',
        lambda: review(dryRun="true"),
        "expected true or false",
    ),
    Entry(
        "review-operation-is-a-number.json",
        "review",
        "request-invalid",
        "operation is 1",
        lambda: review(operation=1),
        "expected a string",
    ),
    Entry(
        "review-operation-unknown-verb.json",
        "review",
        "request-invalid",
        "operation PATCH (not an admission operation)",
        lambda: review(operation="PATCH"),
        "is not CREATE",
    ),
    Entry(
        "review-namespace-is-a-list.json",
        "review",
        "request-invalid",
        "namespace is a list",
        lambda: review(namespace=["corpus"]),
        "expected a string",
    ),
    Entry(
        "review-object-name-lone-surrogate.json",
        "review",
        "no-matching-manifest",
        "the object's name is a lone UTF-16 surrogate (JSON carries it, UTF-8 cannot)",
        lambda: review(
            object=with_annotations(
                base(metadata={"name": "\ud800", "namespace": "corpus"}), honest()["metadata"]["annotations"]
            )
        ),
        "never verifies another",
        cli="usage",
    ),
    Entry(
        "review-without-object.json",
        "review",
        "request-invalid",
        "a CREATE with no object",
        lambda: review(object=_DROP),
        "no object to verify",
    ),
    # -- policies --
    Entry(
        "policy-keys-is-a-string.yaml",
        "policy",
        "policy-invalid",
        "keys is one PEM string, not a list",
        lambda: policy_yaml({"keys": TRUSTED_PEM.decode()}),
        "expected a list",
    ),
    Entry(
        "policy-keys-empty.yaml",
        "policy",
        "policy-invalid",
        "an empty key list (would accept nothing, or anything)",
        lambda: policy_yaml({"keys": []}),
        "no keys or signers",
    ),
    Entry(
        "policy-key-item-is-a-number.yaml",
        "policy",
        "policy-invalid",
        "keys[0] is a number",
        lambda: policy_yaml({"keys": [42]}),
        "expected a string",
    ),
    Entry(
        "policy-unknown-field-typo.yaml",
        "policy",
        "policy-invalid",
        "ignoreFeilds: a typo must not silently weaken the policy",
        lambda: trusted_policy(ignoreFeilds=[{"fields": ["data"]}]),
        "did you mean 'ignoreFields'",
    ),
    Entry(
        "policy-threshold-is-a-string.yaml",
        "policy",
        "policy-invalid",
        'threshold is "1"',
        lambda: trusted_policy(threshold="1"),
        "whole number",
    ),
    Entry(
        "policy-threshold-is-true.yaml",
        "policy",
        "policy-invalid",
        "threshold is true (a bool is an int in Python)",
        lambda: trusted_policy(threshold=True),
        "whole number",
    ),
    Entry(
        "policy-threshold-is-a-float.yaml",
        "policy",
        "policy-invalid",
        "threshold is 1.5",
        lambda: trusted_policy(threshold=1.5),
        "whole number",
    ),
    Entry(
        "policy-threshold-above-key-count.yaml",
        "policy",
        "policy-invalid",
        "threshold 2 with one key: it could never be met",
        lambda: trusted_policy(threshold=2),
        "could never be met",
    ),
    Entry(
        "policy-threshold-with-mustall.yaml",
        "policy",
        "policy-invalid",
        "keyOperation MustAll and a threshold",
        lambda: trusted_policy(threshold=1, keyOperation="MustAll"),
        "not both",
    ),
    Entry(
        "policy-keyoperation-unknown.yaml",
        "policy",
        "policy-invalid",
        "keyOperation AnyOf",
        lambda: trusted_policy(keyOperation="AnyOf"),
        "is not one of",
    ),
    Entry(
        "policy-keyoperation-is-a-list.yaml",
        "policy",
        "policy-invalid",
        "keyOperation is a list",
        lambda: trusted_policy(keyOperation=["MustAll"]),
        "is not one of",
    ),
    Entry(
        "policy-ignorefields-is-a-mapping.yaml",
        "policy",
        "policy-invalid",
        "ignoreFields is a mapping",
        lambda: trusted_policy(ignoreFields={"fields": ["data"]}),
        "expected a list",
    ),
    Entry(
        "policy-ignorefield-pattern-empty-segment.yaml",
        "policy",
        "policy-invalid",
        "an ignore pattern with an empty segment",
        lambda: trusted_policy(ignoreFields=[{"fields": ["data..mode"]}]),
        "empty segment",
    ),
    Entry(
        "policy-ignorefield-index-5000-digits.yaml",
        "policy",
        "policy-invalid",
        "an ignore pattern whose list index has 5 000 digits (past Python's own int() limit of 4 300)",
        lambda: trusted_policy(ignoreFields=[{"fields": ["data.items[" + "9" * 5000 + "]"]}]),
        "digits; no list is that long",
    ),
    Entry(
        "policy-ignorefield-pattern-is-a-number.yaml",
        "policy",
        "policy-invalid",
        "an ignore pattern that is a number",
        lambda: trusted_policy(ignoreFields=[{"fields": [7]}]),
        "expected a string",
    ),
    Entry(
        "policy-skipusers-matches-everyone.yaml",
        "policy",
        "policy-invalid",
        "skipUsers with users: ['*']",
        lambda: trusted_policy(skipUsers=[{"users": ["*"]}]),
        "matches every user",
    ),
    Entry(
        "policy-skipobjects-item-is-a-string.yaml",
        "policy",
        "policy-invalid",
        "skipObjects holds a string",
        lambda: trusted_policy(skipObjects=["ConfigMap"]),
        "expected an object reference",
    ),
    Entry(
        "policy-dryrun-enabled-is-a-string.yaml",
        "policy",
        "policy-invalid",
        'dryRun.enabled is "yes"',
        lambda: trusted_policy(dryRun={"enabled": "yes"}),
        "expected true or false",
    ),
    Entry(
        "policy-defaults-unknown-profile.yaml",
        "policy",
        "policy-invalid",
        "defaults names a profile that does not exist",
        lambda: trusted_policy(defaults=["everything"]),
        "unknown profile",
    ),
    Entry(
        "policy-annotation-domain-not-dns.yaml",
        "policy",
        "policy-invalid",
        "annotationDomain with a slash",
        lambda: trusted_policy(annotationDomain="evil/../x"),
        "not a DNS subdomain",
    ),
    Entry(
        "policy-unsafe-flag-is-a-string.yaml",
        "policy",
        "policy-invalid",
        'unsafeUnanchoredIgnoreFields is "false"',
        lambda: trusted_policy(unsafeUnanchoredIgnoreFields="false"),
        "expected true or false",
    ),
    Entry(
        "policy-signer-regexp-invalid.yaml",
        "policy",
        "policy-invalid",
        "a signer whose subjectRegExp does not compile",
        lambda: policy_yaml({"signers": [{"subjectRegExp": "(unclosed", "roots": "x"}]}),
        "not a valid regular expression",
    ),
    Entry(
        "policy-signer-without-subject.yaml",
        "policy",
        "policy-invalid",
        "a signer with only an issuer (would accept anyone)",
        lambda: policy_yaml({"signers": [{"issuer": "https://accounts.google.com"}]}),
        "subject or subjectRegExp is required",
    ),
    Entry(
        "policy-trustedroot-is-a-string.yaml",
        "policy",
        "policy-invalid",
        "a keyless signer with a trustedRoot that is a string",
        lambda: policy_yaml({"signers": ["jane@example.com"], "trustedRoot": "not a trusted root"}),
        "trusted",
    ),
    Entry(
        "policy-65-keys.yaml",
        "policy",
        "policy-invalid",
        "65 distinct keys (at most 64 keys and signers)",
        lambda: policy_yaml({"keys": [_ed25519_pem(f"many-{i}").decode() for i in range(65)]}),
        "at most 64",
    ),
    Entry(
        "policy-same-key-twice.yaml",
        "policy",
        "policy-invalid",
        "the trusted key listed twice (would count twice for MustAll)",
        lambda: policy_yaml({"keys": [TRUSTED_PEM.decode(), TRUSTED_PEM.decode()]}),
        "listed twice",
    ),
    Entry(
        "policy-duplicate-yaml-keys.yaml",
        "policy",
        "policy-invalid",
        "the policy file repeats the keys field",
        lambda: b"keys: []\nkeys:\n  - |\n" + b"".join(b"    " + line + b"\n" for line in TRUSTED_PEM.splitlines()),
        "duplicate key",
        cli="usage",
    ),
    Entry(
        "policy-alias-bomb.yaml",
        "policy",
        "policy-invalid",
        "the policy file is a billion-laughs alias bomb",
        lambda: alias_bomb().replace(b"bomb:", b"skipObjects:"),
        "nodes",
        cli="usage",
    ),
    Entry(
        "policy-key-pem-with-lone-surrogate.json",
        "policy",
        "policy-invalid",
        "a PEM key holding a lone UTF-16 surrogate (JSON carries it, UTF-8 cannot)",
        lambda: b'{"keys": ["-----BEGIN PUBLIC KEY-----\\n\\ud800\\n-----END PUBLIC KEY-----\\n"]}\n',
        "could not be read",
        cli="usage",
    ),
    Entry(
        "policy-is-a-list.yaml",
        "policy",
        "policy-invalid",
        "the policy is a list of keys",
        lambda: policy_yaml([TRUSTED_PEM.decode()]),
        "expected",
    ),
    # -- keys --
    Entry(
        "key-rsa-1024-weak.pem",
        "key",
        "policy-invalid",
        "an RSA key of 1024 bits",
        lambda: _spki_pem(
            rsa.RSAPublicNumbers(65537, int.from_bytes(_seed("rsa-1024") * 4, "big") | (1 << 1023) | 1).public_key()
        ),
        "too weak",
    ),
    # OpenSSL's own RSA limits (include/openssl/rsa.h): refused at load with our reason, never
    # left to OpenSSL, which would call every honest signature by such a key invalid.
    Entry(
        "key-rsa-4096-exponent-of-89-bits.pem",
        "key",
        "policy-invalid",
        "an RSA-4096 key with exponent 2^89 - 1: FIPS 186-5 allows it, OpenSSL verifies with no such key",
        lambda: _spki_pem(
            rsa.RSAPublicNumbers(
                2**89 - 1, int.from_bytes(_seed("rsa-4096-e89") * 16, "big") | (1 << 4095) | 1
            ).public_key()
        ),
        "89-bit public exponent; OpenSSL",
    ),
    Entry(
        "key-rsa-16400-bits.pem",
        "key",
        "policy-invalid",
        "an RSA key of 16 400 bits, over the 16 384 OpenSSL verifies with",
        lambda: _spki_pem(
            rsa.RSAPublicNumbers(
                65537, int.from_bytes((_seed("rsa-16400") * 65)[:2050], "big") | (1 << 16399) | 1
            ).public_key()
        ),
        "larger than OpenSSL verifies with",
    ),
    Entry("key-dsa-unsupported.pem", "key", "policy-invalid", "a DSA key", lambda: DSA_PUBLIC_PEM, "not supported"),
    Entry(
        "key-ecdsa-secp256k1-unsupported-curve.pem",
        "key",
        "policy-invalid",
        "an ECDSA key on secp256k1 (not a curve sigstore signs with)",
        lambda: _spki_pem(
            ec.derive_private_key(int.from_bytes(_seed("k1"), "big") % (2**255), ec.SECP256K1()).public_key()
        ),
        "not supported",
    ),
    Entry(
        "key-ed448-unsupported.pem",
        "key",
        "policy-invalid",
        "an Ed448 key",
        lambda: _spki_pem(ed448.Ed448PrivateKey.from_private_bytes(_seed("ed448") + _seed("ed448b")[:25]).public_key()),
        "not supported",
    ),
    Entry(
        "key-x25519-not-a-signing-key.pem",
        "key",
        "policy-invalid",
        "an X25519 key-agreement key",
        lambda: _spki_pem(x25519.X25519PrivateKey.from_private_bytes(_seed("x25519")).public_key()),
        "not supported",
    ),
    Entry(
        "key-private-key-instead-of-public.pem",
        "key",
        "policy-invalid",
        "the trusted key's private half",
        lambda: UNTRUSTED.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        "private key",
    ),
    Entry(
        "key-pem-body-invalid-base64.pem",
        "key",
        "policy-invalid",
        "PEM armour around text that is not base64",
        lambda: b"-----BEGIN PUBLIC KEY-----\nthis is not base64 at all!\n-----END PUBLIC KEY-----\n",
        "could not be read",
    ),
    Entry(
        "key-pem-body-garbage-der.pem",
        "key",
        "policy-invalid",
        "PEM armour around base64 of bytes that are not DER",
        lambda: pem_text("PUBLIC KEY", bytes(range(256))),
        "could not be read",
    ),
    Entry(
        "key-pem-labels-do-not-match.pem",
        "key",
        "policy-invalid",
        "BEGIN PUBLIC KEY ... END RSA PUBLIC KEY",
        lambda: TRUSTED_PEM.replace(b"END PUBLIC KEY", b"END RSA PUBLIC KEY"),
        "no PEM block",
    ),
    Entry(
        "key-certificate-garbage.pem",
        "key",
        "policy-invalid",
        "a CERTIFICATE block holding junk",
        lambda: pem_text("CERTIFICATE", b"\x30\x82\x01\x00" + bytes(40)),
        "could not be read",
    ),
    Entry(
        "key-unknown-pem-label.pem",
        "key",
        "policy-invalid",
        "a PEM block labelled OPENSSH PUBLIC KEY",
        lambda: pem_text("OPENSSH PUBLIC KEY", b"ssh-ed25519 AAAA"),
        "not a public key",
    ),
    Entry(
        "key-base64-without-pem-armour.txt",
        "key",
        "policy-invalid",
        "the key's base64 without BEGIN/END lines",
        lambda: b64(TRUSTED_PEM).encode() + b"\n",
        "base64-wrapped",
    ),
    Entry(
        "key-jwk-json-instead-of-pem.json",
        "key",
        "policy-invalid",
        "a JWK (valid JSON of the wrong shape for a key)",
        lambda: json_of(
            {
                "kty": "OKP",
                "crv": "Ed25519",
                "x": base64.urlsafe_b64encode(TRUSTED.public_key().public_bytes_raw()).decode().rstrip("="),
            }
        ),
        "no PEM block",
    ),
    Entry("key-empty.pem", "key", "policy-invalid", "an empty key file", lambda: b"", "the key is empty"),
    Entry(
        "key-200-copies-of-one-key.pem",
        "key",
        "policy-invalid",
        "the trusted key 200 times in one file (at most 64 keys)",
        lambda: TRUSTED_PEM * 200,
        "more than 64 PEM blocks",
    ),
    Entry(
        "key-100000-begin-lines-without-end.pem",
        "key",
        "policy-invalid",
        "100 000 BEGIN lines and no END line: 2.6 MB that a backtracking PEM scan takes hours over",
        lambda: b"-----BEGIN PUBLIC KEY-----\n" * 100_000,
        "more than 64 PEM blocks",
        recipe=True,
    ),
    # -- raw bodies and files --
    Entry(
        "body-json-truncated.json",
        "body",
        "request-invalid",
        "JSON that stops in the middle",
        lambda: provider_request(["{}"])[:40],
        "not valid JSON",
        cli="usage",
    ),
    Entry(
        "body-json-trailing-comma.json",
        "body",
        "request-invalid",
        "a trailing comma",
        lambda: b'{"request": {"keys": ["{}",]},}\n',
        "not valid JSON",
        cli="unsigned",
    ),
    Entry(
        "body-json-duplicate-keys.json",
        "body",
        "request-invalid",
        "request repeated: which one would the engine read?",
        lambda: b'{"request": {"keys": []}, "request": {"keys": ["{}"]}}\n',
        "duplicate key",
        cli="usage",
    ),
    Entry(
        "body-json-nan.json",
        "body",
        "request-invalid",
        "NaN, which JSON does not have",
        lambda: b'{"request": {"object": {"data": {"x": NaN}}}, "policy": {"keys": []}}\n',
        "not valid JSON",
        cli="unsigned",
    ),
    Entry(
        "body-json-infinity.json",
        "body",
        "request-invalid",
        "-Infinity",
        lambda: b'{"request": {"object": {"data": {"x": -Infinity}}}, "policy": {"keys": []}}\n',
        "not valid JSON",
        cli="unsigned",
    ),
    Entry(
        "body-json-1e999-overflows.json",
        "body",
        "request-invalid",
        "a number that overflows a double to infinity",
        lambda: b'{"request": {"object": {"data": {"x": 1e999}}}, "policy": {"keys": []}}\n',
        "not finite",
        cli="unsigned",
    ),
    Entry(
        "body-json-integer-5000-digits.json",
        "body",
        "request-invalid",
        "an integer of 5 000 digits: beyond float64, and past Python's own int() limit of 4 300 digits",
        lambda: b'{"request": {"object": {"data": {"x": 1' + b"0" * 4999 + b'}}}, "policy": {"keys": []}}\n',
        "is not finite as a float64",
        cli="unsigned",
    ),
    Entry(
        "body-json-nested-10000-deep.json",
        "body",
        "request-invalid",
        "10 000 nested arrays",
        lambda: nested(10_000),
        "nested deeper than",
        cli="usage",
    ),
    Entry(
        "body-json-nested-100000-deep.json",
        "body",
        "request-invalid",
        "100 000 nested objects",
        lambda: b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        "nested deeper than",
        cli="usage",
        recipe=True,
    ),
    Entry(
        "body-json-250000-keys.json",
        "body",
        "request-invalid",
        "one object with 250 000 keys (over the 200 000 node limit)",
        lambda: b'{"request": {"object": {"data": {' + b",".join(b'"k%06d":0' % i for i in range(250_000)) + b"}}}}",
        "more than 200000 nodes",
        cli="usage",
        recipe=True,
    ),
    Entry(
        "body-over-16mib.json",
        "body",
        "request-invalid",
        "a 17 MiB body (the service's limit is 16 MiB: 413)",
        lambda: b'"' + b"A" * (17 * 2**20) + b'"',
        "not an object",
        cli="usage",
        recipe=True,
    ),
    Entry(
        "body-json-lone-surrogates.json",
        "body",
        "request-invalid",
        "field names and values with lone UTF-16 surrogates (valid JSON, not encodable as UTF-8)",
        lambda: b'{"\\ud800": {"name": "\\udc80"}}\n',
        "unknown field",
        cli="usage",
    ),
    Entry(
        "body-key-review-is-a-string.json",
        "body",
        "request-invalid",
        "a key whose review is a string (valid JSON of the wrong shape)",
        lambda: json_of({"review": "the object"}),
        "review: expected an object",
        cli="unsigned",
    ),
    Entry(
        "body-not-utf8.json",
        "body",
        "request-invalid",
        "Latin-1 bytes",
        lambda: '{"request": {"name": "caf\u00e9"}}\n'.encode("latin-1"),
        "not valid UTF-8",
        cli="usage",
    ),
    Entry(
        "body-utf16-with-bom.json",
        "body",
        "request-invalid",
        "UTF-16 with a byte-order mark",
        lambda: '{"request": {}}'.encode("utf-16"),
        "not valid UTF-8",
        cli="usage",
    ),
    Entry(
        "body-nul-bytes.bin", "body", "request-invalid", "NUL bytes", lambda: bytes(64), "not valid JSON", cli="usage"
    ),
    Entry("body-empty.json", "body", "request-invalid", "nothing at all", lambda: b"", "not valid JSON", cli="usage"),
    Entry(
        "body-json-array.json",
        "body",
        "request-invalid",
        "valid JSON of the wrong shape: an array",
        lambda: b"[1, 2, 3]\n",
        "not an object",
        cli="request-invalid",
    ),
    Entry(
        "body-json-string.json",
        "body",
        "request-invalid",
        "valid JSON of the wrong shape: a string",
        lambda: b'"ProviderRequest"\n',
        "not an object",
        cli="request-invalid",
    ),
    Entry(
        "body-json-null.json",
        "body",
        "request-invalid",
        "valid JSON of the wrong shape: null",
        lambda: b"null\n",
        "not an object",
        cli="usage",
    ),
    Entry(
        "body-yaml-alias-bomb.yaml",
        "body",
        "request-invalid",
        "a billion-laughs YAML document",
        alias_bomb,
        "not valid JSON",
        cli="usage",
    ),
    Entry(
        "body-yaml-duplicate-keys.yaml",
        "body",
        "request-invalid",
        "YAML that repeats data.mode",
        lambda: CM_DOC.encode() + b"data:\n  mode: a\n  mode: b\n",
        "not valid JSON",
        cli="usage",
    ),
    Entry(
        "body-yaml-python-tag.yaml",
        "body",
        "request-invalid",
        "YAML asking for a Python object",
        lambda: b'!!python/object/apply:os.system ["touch /tmp/pwned"]\n',
        "not valid JSON",
        cli="usage",
    ),
    Entry(
        "body-yaml-unclosed-flow.yaml",
        "body",
        "request-invalid",
        "a flow mapping never closed",
        lambda: b"{apiVersion: v1, kind: [ConfigMap\n",
        "not valid JSON",
        cli="usage",
    ),
    Entry(
        "body-yaml-tab-indentation.yaml",
        "body",
        "request-invalid",
        "tabs used for indentation",
        lambda: b"metadata:\n\tname: x\n",
        "not valid JSON",
        cli="usage",
    ),
    Entry(
        "body-provider-request-keys-not-a-list.json",
        "body",
        "request-invalid",
        "request.keys is a string",
        lambda: provider_request("{}"),
        "not a list of strings",
        cli="unsigned",
    ),
    Entry(
        "body-provider-request-key-is-an-object.json",
        "body",
        "request-invalid",
        "a key that is an object, not a JSON string",
        lambda: provider_request([{"review": {}}]),
        "not a string",
        cli="unsigned",
    ),
    Entry(
        "body-provider-request-wrong-kind.json",
        "body",
        "request-invalid",
        "kind ProviderResponse",
        lambda: provider_request([], kind="ProviderResponse"),
        "is not ProviderRequest",
        cli="unsigned",
    ),
    Entry(
        "body-provider-request-129-keys.json",
        "body",
        "request-invalid",
        "129 keys (at most 128 per request)",
        lambda: provider_request(['{"review": {}}'] * 129),
        "at most 128",
        cli="unsigned",
    ),
    Entry(
        "body-key-is-json-array.json",
        "body",
        "request-invalid",
        "a key that is valid JSON of the wrong shape: an array of a review",
        lambda: json_of([{"review": {}}]),
        "not an object",
        cli="request-invalid",
    ),
]


def entries() -> list[Entry]:
    return list(ENTRIES)


def by_name() -> dict[str, Entry]:
    return {entry.name: entry for entry in ENTRIES}


def build(entry: Entry, directory: Path) -> Path:
    """Write ``entry``'s file into ``directory`` (recipes included) and return its path."""
    path = directory / entry.name
    path.write_bytes(entry.build())
    return path


def index_yaml() -> bytes:
    """``index.yaml``: the corpus manifest the tests drive, generated from :data:`ENTRIES`."""
    header = (
        "# The hostile-input corpus: generated by generate.py from its ENTRIES table -- edit that, then run it.\n"
        "# For each file: what it is (as), the entry points that read it, the reason every entry point must\n"
        "# answer with, a fragment of the library's message (says), the command line's answer where it\n"
        "# differs (cli: a reason, or 'usage' for exit code 2), and whether it is a recipe (built by the\n"
        "# tests, not committed, because it is large by nature).\n"
    )
    doc = {
        "trustedKey": "trusted.pub",
        "entryPoints": {kind: list(points) for kind, points in ENTRY_POINTS.items()},
        "files": [
            {
                "name": e.name,
                "as": e.kind,
                "what": e.what,
                "reason": e.reason,
                **({"says": e.says} if e.says else {}),
                **({"cli": e.cli} if e.cli else {}),
                **({"recipe": True} if e.recipe else {}),
            }
            for e in ENTRIES
        ],
    }
    return header.encode() + dump_yaml([doc]).encode()


def outputs() -> dict[str, bytes]:
    """Every committed file by name: the corpus (recipes excluded), the trusted key and the index."""
    files = {e.name: e.build() for e in ENTRIES if not e.recipe}
    files["trusted.pub"] = TRUSTED_PEM
    files["index.yaml"] = index_yaml()
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    args = parser.parse_args()
    names = [e.name for e in ENTRIES]
    if len(set(names)) != len(names):
        raise SystemExit("duplicate names in ENTRIES")
    stale = []
    for name, data in outputs().items():
        path = HERE / name
        if args.check:
            if not path.exists() or path.read_bytes() != data:
                stale.append(name)
        else:
            path.write_bytes(data)
    if stale:
        print("differs from generate.py's output: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
