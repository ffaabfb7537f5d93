"""Sign manifests in the k8s-manifest-sigstore format.

What ``kubectl sigstore sign`` writes, and therefore what ``kubectl sigstore
verify-resource`` and Kyverno's ``validate.manifests`` accept:

* the payload ``P`` is the whole input -- every document of every file -- as a
  plain YAML stream with sorted keys (``--tarball=no``, upstream's default
  since v0.5.0), or a tar.gz of the input files (``--tarball=yes``);
* every output document carries the same ``message`` = base64(gzip(P)) and
  ``signature`` = base64(raw signature over P);
* ``append_signature`` adds ``signature_N`` over the *existing* message bytes,
  so earlier signatures stay valid (several signers, key rotation);
* ``sign_each`` signs every document in a message of its own (what
  ``sign --per-object`` and a large rendered stream need);
* ``sign_stream`` (``sign``'s default) signs the stream in one message but
  each *sensitive* object in a message of its own.

**A message is copied onto every object it signs**, so whoever may read one
of them reads all of them: a Secret signed together with a ConfigMap puts
its data into the ConfigMap's annotation (``kustomize build | sign`` of a
``secretGenerator``). A message may hold a sensitive object only alone
(:func:`refuse_shared_secrets`; :func:`message_payload` and
:func:`append_signature` call it, so every path that writes a shared message
does): a ``Secret`` of any group (and a ``List`` holding one), and the kinds
a caller adds (``sign --sensitive-kind``). A SealedSecret or ExternalSecret
holds no plaintext and is not one.

Nothing is returned that the API server would refuse: the message is copied
onto every object it signs, and an object whose annotations would pass
Kubernetes' total annotation size is a :class:`~provider.errors.RequestError`
that names it and says how to sign instead.
"""

from __future__ import annotations

import base64
import copy
import re
from typing import Any

import yaml

from ..errors import RequestError
from ..keys.pem import PrivateKeyTypes, sign_bytes
from ..limits import DEFAULT_LIMITS, KIB, Limits
from ..objects import ObjectIdentity
from ..parsing import KubectlSafeDumper
from .envelope import DEFAULT_DOMAIN, decode_message, encode_message, make_tarball, message_key, set_key

#: kubernetes/apimachinery pkg/api/validation/objectmeta.go, TotalAnnotationSizeLimitB: the API server
#: refuses an object whose annotations' keys and values together exceed 256 KiB (bytes, summed over all).
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * KIB


def dump_yaml(documents: list[Any]) -> str:
    """YAML as upstream's Go marshaller writes it: block style, sorted keys, and
    strings quoted wherever kubectl would read them as another type (``y``, ``0o17``)."""
    return yaml.dump_all(
        documents,
        Dumper=KubectlSafeDumper,
        sort_keys=True,
        default_flow_style=False,
        allow_unicode=True,
        width=2**31 - 1,
    )


def _envelope_keys(domain: str) -> re.Pattern[str]:
    return re.compile(re.escape(domain) + r"/(?:message|resourceBundleRef|(?:signature|certificate|bundle)(?:_\d+)?)\Z")


def _annotations(doc: dict[str, Any]) -> dict[str, Any]:
    meta = doc.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise RequestError("a document's metadata is not a mapping")
    annotations = meta.get("annotations")
    if annotations is None:
        annotations = meta["annotations"] = {}
    if not isinstance(annotations, dict):
        raise RequestError("a document's metadata.annotations is not a mapping")
    return annotations


def strip_envelope(documents: list[dict[str, Any]], domain: str = DEFAULT_DOMAIN) -> list[dict[str, Any]]:
    """Copies of ``documents`` without signature annotations (re-signing replaces them)."""
    pattern = _envelope_keys(domain)
    clean = []
    for original in documents:
        doc = copy.deepcopy(original)
        meta = doc.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("annotations"), dict):
            kept = {k: v for k, v in meta["annotations"].items() if not pattern.match(k)}
            if kept:
                meta["annotations"] = kept
            else:
                del meta["annotations"]
        clean.append(doc)
    return clean


#: Kinds whose objects hold secret values in plain text (base64 is no protection).
SENSITIVE_KINDS = frozenset({"Secret"})


class SharedSecret(RequestError):
    """A message would hold a sensitive object together with other objects, and be copied onto each of them."""


def is_sensitive(doc: Any, kinds: frozenset[str] = SENSITIVE_KINDS) -> bool:
    """Whether ``doc`` is a sensitive object: its kind is one of ``kinds`` (in any group), or it is a
    ``List``-like object (``kind: ...List`` with ``items``, as ``kubectl get -o yaml`` writes) holding one."""
    pending = [doc]
    while pending:
        item = pending.pop()
        if not isinstance(item, dict):
            continue
        kind = item.get("kind")
        if kind in kinds:
            return True
        if isinstance(kind, str) and kind.endswith("List") and isinstance(item.get("items"), list):
            pending.extend(item["items"])
    return False


def refuse_shared_secrets(
    documents: list[dict[str, Any]], kinds: frozenset[str] = SENSITIVE_KINDS, *, how: str = ""
) -> None:
    """Refuse a message over ``documents`` when it would hold a sensitive object together with another object."""
    if len(documents) < 2:
        return
    for doc in documents:
        if is_sensitive(doc, kinds):
            others = len(documents) - 1
            raise SharedSecret(
                f"{ObjectIdentity.of(doc).describe()} would be signed in one message with {others} other "
                f"object{'s' if others != 1 else ''}: the message is copied onto every object it signs, so its "
                f"data would be readable by anyone who may read any of them. Sign it in a message of its own"
                f"{how}"
            )


class AnnotationsTooLarge(RequestError):
    """A signed object would carry more annotation bytes than the API server accepts."""


def annotations_size(doc: dict[str, Any]) -> int:
    """The bytes the API server counts against :data:`TOTAL_ANNOTATION_SIZE_LIMIT`: every key and value, UTF-8."""
    meta = doc.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict):
        return 0
    return sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())


def refuse_oversized(documents: list[dict[str, Any]], domain: str = DEFAULT_DOMAIN) -> None:
    """Refuse signed ``documents`` if any would carry more annotation bytes than the API server accepts.

    The message holds every document it signs and is copied onto each of them,
    so signing N objects together costs each object N objects' worth of
    annotation: the remedy is fewer objects per message, or one per object.
    """
    for doc in documents:
        size = annotations_size(doc)
        if size <= TOTAL_ANNOTATION_SIZE_LIMIT:
            continue
        message = str(_annotations(doc).get(message_key(domain), ""))
        others = len(documents) - 1
        together = f", signed together with {others} other object{'s' if others != 1 else ''}," if others else ""
        raise AnnotationsTooLarge(
            f"{ObjectIdentity.of(doc).describe()}{together} would carry {size} bytes of annotations (its message "
            f"alone is {len(message)} bytes); the API server refuses more than {TOTAL_ANNOTATION_SIZE_LIMIT} "
            "(apimachinery TotalAnnotationSizeLimitB). Sign fewer objects per message, or each object in a "
            "message of its own"
        )


def message_payload(
    documents: list[dict[str, Any]],
    *,
    domain: str = DEFAULT_DOMAIN,
    tarball_files: list[tuple[str, bytes]] | None = None,
    sensitive_kinds: frozenset[str] = SENSITIVE_KINDS,
) -> tuple[list[dict[str, Any]], bytes]:
    """Copies of ``documents`` without signature annotations, and the payload ``P`` that signs them.

    Raises :class:`SharedSecret` when the payload would hold a sensitive object beside another one.
    """
    if not documents:
        raise RequestError("nothing to sign: the input holds no Kubernetes objects")
    refuse_shared_secrets(documents, sensitive_kinds)
    clean = strip_envelope(documents, domain)
    payload = make_tarball(tarball_files) if tarball_files is not None else dump_yaml(clean).encode()
    return clean, payload


def with_bundle_ref(
    documents: list[dict[str, Any]], reference: str, domain: str = DEFAULT_DOMAIN
) -> list[dict[str, Any]]:
    """``documents`` annotated with ``D/resourceBundleRef`` and nothing else of the envelope (``sign -i``):
    the message lives in the bundle image, the signature on the image (``provider/signatures/sources.py``)."""
    for doc in documents:
        _annotations(doc)[f"{domain}/resourceBundleRef"] = reference
    return documents


def sign_documents(
    documents: list[dict[str, Any]],
    key: PrivateKeyTypes,
    *,
    domain: str = DEFAULT_DOMAIN,
    tarball_files: list[tuple[str, bytes]] | None = None,
    sensitive_kinds: frozenset[str] = SENSITIVE_KINDS,
) -> list[dict[str, Any]]:
    """Signed copies of ``documents``, all carrying one message over all of them.

    With ``tarball_files`` the payload is a tar.gz of those files (their bytes
    as given) instead of a YAML stream of the documents. A sensitive object
    among others is refused (:class:`SharedSecret`); :func:`sign_stream` signs it apart.
    """
    clean, payload = message_payload(
        documents, domain=domain, tarball_files=tarball_files, sensitive_kinds=sensitive_kinds
    )
    message = encode_message(payload)
    signature = base64.b64encode(sign_bytes(key, payload)).decode()
    for doc in clean:
        annotations = _annotations(doc)
        annotations[message_key(domain)] = message
        annotations[set_key(domain, "signature", 0)] = signature
    refuse_oversized(clean, domain)
    return clean


def sign_each(
    documents: list[dict[str, Any]], key: PrivateKeyTypes, *, domain: str = DEFAULT_DOMAIN
) -> list[dict[str, Any]]:
    """Signed copies of ``documents``, each in a message of its own (its payload is that one document)."""
    if not documents:
        raise RequestError("nothing to sign: the input holds no Kubernetes objects")
    return [signed for doc in documents for signed in sign_documents([doc], key, domain=domain)]


def sign_stream(
    documents: list[dict[str, Any]],
    key: PrivateKeyTypes,
    *,
    domain: str = DEFAULT_DOMAIN,
    sensitive_kinds: frozenset[str] = SENSITIVE_KINDS,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Signed copies of ``documents`` in their order -- one message over the others, each sensitive object
    in a message of its own -- and the sensitive objects that were signed apart."""
    if not documents:
        raise RequestError("nothing to sign: the input holds no Kubernetes objects")
    apart = [doc for doc in documents if is_sensitive(doc, sensitive_kinds)]
    if not apart or len(documents) == 1:
        return sign_documents(documents, key, domain=domain, sensitive_kinds=sensitive_kinds), []
    shared = [doc for doc in documents if not is_sensitive(doc, sensitive_kinds)]
    together = iter(sign_documents(shared, key, domain=domain) if shared else [])
    signed = []
    for doc in documents:
        if is_sensitive(doc, sensitive_kinds):
            signed.extend(sign_documents([doc], key, domain=domain))
        else:
            signed.append(next(together))
    return signed, apart


def append_signature(
    documents: list[dict[str, Any]],
    key: PrivateKeyTypes,
    *,
    domain: str = DEFAULT_DOMAIN,
    limits: Limits = DEFAULT_LIMITS,
    sensitive_kinds: frozenset[str] = SENSITIVE_KINDS,
) -> list[dict[str, Any]]:
    """Add ``signature_N`` over the documents' existing message, keeping earlier signatures valid.

    A message that already holds a sensitive object beside others is refused: signing it again would
    endorse, and republish, a message that copies the Secret onto every object."""
    if not documents:
        raise RequestError("nothing to sign: the input holds no Kubernetes objects")
    documents = copy.deepcopy(documents)
    messages = {_annotations(doc).get(message_key(domain)) for doc in documents}
    if None in messages:
        raise RequestError(
            f"--append-signature needs signed input, but a document has no {message_key(domain)} annotation"
        )
    if len(messages) != 1:
        raise RequestError(
            "--append-signature needs every document to carry the same message; sign them together first"
        )
    (message,) = messages
    decoded = decode_message(message, limits)
    refuse_shared_secrets(
        decoded.documents(limits),
        sensitive_kinds,
        how=": sign the objects again rather than adding a signature to this message (sign puts each Secret "
        "in a message of its own)",
    )
    payload = decoded.data
    signature = base64.b64encode(sign_bytes(key, payload)).decode()
    for doc in documents:
        annotations = _annotations(doc)
        index = 0
        while set_key(domain, "signature", index) in annotations:
            index += 1
        annotations[set_key(domain, "signature", index)] = signature
    refuse_oversized(documents, domain)
    return documents
