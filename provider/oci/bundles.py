"""Resource bundles in a registry: :class:`OciBundleSource` fetches them for the verifier, :func:`push_bundle`
and :func:`push_signature` write them as ``kubectl sigstore sign -i`` and ``cosign sign`` do.

The layouts are in :mod:`provider.signatures.sources` and ``docs/format.md``. A fetch
(:meth:`OciBundleSource.fetch`), all by one deadline:

1. ``GET /v2/<name>/manifests/<tag or digest>``: the manifest, at most
   ``Limits.max_registry_manifest_bytes``. Its digest is the SHA-256 of the
   bytes received (a ``Docker-Content-Digest`` that disagrees, or a digest in
   the reference that does, is ``bundle-invalid``). This is the one request a
   tag costs: everything after is fetched by digest;
2. the layout checked by media type (:mod:`provider.signatures.sources`: an OCI
   manifest, config ``application/vnd.oci.image.config.v1+json``, exactly one
   layer of ``text/plain`` or ``application/x-gzip``) -- a container image is
   refused here, before its layer is asked for -- then the one layer, at most
   ``Limits.max_payload_bytes``, its size and SHA-256 checked against the
   manifest's descriptor;
3. ``GET /v2/<name>/manifests/sha256-<hex>.sig`` (404: no signatures), and
   each simple-signing layer (at most ``Limits.max_signatures``, each at most
   ``Limits.max_certificate_bytes``), checked likewise.

The manifest and layer are cached by digest (immutable: a digest names its
bytes); the signatures of a digest for :data:`SIGNATURES_TTL` seconds (a
signature can be added to an image later). A reference by digest whose
signatures are cached costs no request at all.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..cache import LRUCache, digest
from ..errors import PolicyError, RequestError, VerificationFailure
from ..limits import DEFAULT_LIMITS, Limits
from ..signatures.sources import (
    BUNDLE_ANNOTATION,
    BUNDLE_CONFIG_MEDIA_TYPE,
    BUNDLE_LAYER_TYPES,
    BUNDLE_MANIFEST_MEDIA_TYPE,
    CERTIFICATE_ANNOTATION,
    CHAIN_ANNOTATION,
    SIGNATURE_ANNOTATION,
    SIMPLE_SIGNING_MEDIA_TYPE,
    FetchedBundle,
    ImageSignature,
    Reference,
    not_a_bundle_layer,
    signature_tag,
)
from .auth import AuthError, AuthFile, Credential, parse_docker_config
from .registry import MANIFEST_TYPES, OCI_CONFIG, OCI_MANIFEST, Answer, RegistryClient, RegistryError, json_document

log = logging.getLogger("provider.signatures.sources")

#: Seconds the signatures fetched for a digest are reused.
SIGNATURES_TTL = 30.0
_ACCEPT = ", ".join(MANIFEST_TYPES)


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class _Image:
    digest: str
    layer: bytes
    media_type: str


def _failure(error: RegistryError, reference: Reference) -> VerificationFailure:
    if error.kind == "invalid":
        return VerificationFailure(f"the resource bundle {reference}: {error.message}", reason="bundle-invalid")
    return VerificationFailure(
        f"the resource bundle {reference} could not be fetched: {error.message}",
        reason="bundle-unavailable",
        used_cluster=True,  # the registry's state, not the object's: never cached
    )


def _bundle_layer(reference: Reference, document: dict[str, Any]) -> dict[str, Any]:
    """The one layer descriptor of a bundle image, after its layout is checked by media type (module docstring)."""
    media_type = document.get("mediaType")
    config = document.get("config")
    config_type = config.get("mediaType") if isinstance(config, dict) else None
    if media_type != BUNDLE_MANIFEST_MEDIA_TYPE or config_type != BUNDLE_CONFIG_MEDIA_TYPE:
        raise VerificationFailure(
            f"{reference} is not a resource bundle: a {str(media_type)[:60]!r} with a config of "
            f"{str(config_type)[:60]!r}, where kubectl sigstore sign -i writes a {BUNDLE_MANIFEST_MEDIA_TYPE!r} with "
            f"a config of {BUNDLE_CONFIG_MEDIA_TYPE!r}",
            reason="bundle-invalid",
        )
    layers = document["layers"]
    if len(layers) != 1:
        raise VerificationFailure(
            f"{reference} is not a resource bundle: {len(layers)} layers, where kubectl sigstore sign -i writes one "
            "(the message)",
            reason="bundle-invalid",
        )
    (descriptor,) = layers
    if descriptor.get("mediaType") not in BUNDLE_LAYER_TYPES:
        raise not_a_bundle_layer(descriptor.get("mediaType"), str(reference))
    return dict(descriptor)


class OciBundleSource:
    """:class:`provider.signatures.sources.BundleSource` over a registry (see the module docstring)."""

    def __init__(
        self, client: RegistryClient | None = None, *, cache_entries: int = 64, auth_file: AuthFile | None = None
    ) -> None:
        self.client = client or RegistryClient()
        #: The operator's Docker config (``MANIFEST_PROVIDER_REGISTRY_AUTH_FILE``), after a policy's pull Secrets.
        self.auth_file = auth_file
        self._local = threading.local()
        self._images: LRUCache[_Image] = LRUCache(cache_entries)
        self._signatures: LRUCache[tuple[tuple[ImageSignature, ...], tuple[str, ...]]] = LRUCache(
            cache_entries, ttl=SIGNATURES_TTL
        )

    def _credential(self, registry: str, pull_secrets: tuple[str, ...]) -> Credential | None:
        """The credential for ``registry``: a policy's pull Secrets first, then the operator's file (oci/auth.py)."""
        for index, text in enumerate(pull_secrets):
            found = parse_docker_config(text, f"resourceBundleRef.pullSecrets[{index}]").get(registry)
            if found is not None:
                return found
        if self.auth_file is not None:
            return self.auth_file.credentials().get(registry)
        return None

    def fetch(
        self, reference: Reference, deadline: float, limits: Limits = DEFAULT_LIMITS, pull_secrets: tuple[str, ...] = ()
    ) -> FetchedBundle:
        """The bundle, fetched with the credential for its registry (``pull_secrets``: Docker config texts).

        What was fetched with a credential is cached for that credential only: a bundle a tenant's
        pull Secret can read is never served from the cache to a fetch without it.
        """
        try:
            credential = self._credential(reference.registry, pull_secrets)
        except AuthError as exc:
            raise PolicyError(exc.message) from None
        self._local.credential = credential
        try:
            return self._fetch(reference, deadline, limits)
        finally:
            self._local.credential = None

    def _who(self) -> str:
        credential: Credential | None = getattr(self._local, "credential", None)
        return digest(*credential.pair()).hex() if credential is not None else ""

    def _fetch(self, reference: Reference, deadline: float, limits: Limits) -> FetchedBundle:
        try:
            image = self._image(reference, deadline, limits)
            key = digest(reference.name, image.digest, self._who())
            signatures = self._signatures.get(key)
            if signatures is None:
                signatures = self._fetch_signatures(reference, image.digest, deadline, limits)
                self._signatures.put(key, signatures)
        except RegistryError as error:
            raise _failure(error, reference) from None
        except (ValueError, TypeError, AttributeError, OverflowError, LookupError) as error:
            # The registry's answers are the registry's to write: whatever in them this code did not
            # foresee is this fetch's denial (logged, never cached), never an error that takes the other
            # keys of a Gatekeeper batch with it.
            log.error("an answer of the registry for %s could not be read", reference, exc_info=error)
            raise VerificationFailure(
                f"the resource bundle {reference} could not be read: the registry answered something unexpected "
                f"({type(error).__name__})",
                reason="bundle-invalid",
                used_cluster=True,
            ) from None
        return FetchedBundle(
            reference.with_digest(image.digest), image.digest, image.layer, image.media_type, *signatures
        )

    def _get(self, reference: Reference, path: str, deadline: float, max_bytes: int, accept: str = "") -> Answer:
        credential: Credential | None = getattr(self._local, "credential", None)
        return self.client.request(
            "GET",
            reference.registry,
            f"/v2/{reference.repository}{path}",
            scope=f"repository:{reference.repository}:pull",
            deadline=deadline,
            max_bytes=max_bytes,
            headers={"Accept": accept} if accept else None,
            credentials=(lambda _registry: credential.pair()) if credential is not None else None,
        )

    def _blob(self, reference: Reference, descriptor: dict[str, Any], deadline: float, max_bytes: int) -> bytes:
        blob_digest, size = descriptor.get("digest"), descriptor.get("size")
        if not isinstance(blob_digest, str) or not blob_digest.startswith("sha256:") or type(size) is not int:
            raise RegistryError("a layer descriptor has no sha256 digest or size", "invalid")
        if size > max_bytes:
            raise RegistryError(f"a layer of {size} bytes is over the {max_bytes}-byte limit", "invalid")
        answer = self._get(reference, f"/blobs/{blob_digest}", deadline, max_bytes)
        if answer.status != 200:
            raise RegistryError(f"blob {blob_digest[:19]}… answered HTTP {answer.status}",
                                "invalid" if answer.status == 404 else "unavailable")  # fmt: skip
        if len(answer.body) != size or _sha256(answer.body) != blob_digest:
            raise RegistryError(f"blob {blob_digest[:19]}… does not match its digest and size", "invalid")
        return answer.body

    def _manifest(
        self, reference: Reference, ref: str, deadline: float, limits: Limits
    ) -> tuple[str, dict[str, Any]] | None:
        answer = self._get(reference, f"/manifests/{ref}", deadline, limits.max_registry_manifest_bytes, _ACCEPT)
        if answer.status == 404:
            return None
        if answer.status != 200:
            client_error = 400 <= answer.status < 500 and answer.status not in (401, 403, 429)
            kind = "invalid" if client_error else "unavailable"
            raise RegistryError(f"manifest {ref[:80]} answered HTTP {answer.status}", kind)
        received = _sha256(answer.body)
        header = answer.headers.get("docker-content-digest")
        if header and header != received:
            raise RegistryError(f"the registry says manifest {ref[:80]} is {header[:80]}, its bytes say {received}",
                                "invalid")  # fmt: skip
        document = json_document(answer, f"manifest {ref[:80]}")
        media_type = document.get("mediaType") or answer.headers.get("content-type", "").split(";")[0]
        if document.get("schemaVersion") != 2 or media_type not in MANIFEST_TYPES:
            raise RegistryError(f"manifest {ref[:80]} is a {str(media_type)[:60]!r}, not an image manifest", "invalid")
        layers = document.get("layers")
        if not isinstance(layers, list) or not all(isinstance(x, dict) for x in layers):
            raise RegistryError(f"manifest {ref[:80]} has no list of layers", "invalid")
        return received, document

    def _image(self, reference: Reference, deadline: float, limits: Limits) -> _Image:
        if reference.digest:
            cached = self._images.get(digest(reference.name, reference.digest, self._who()))
            if cached is not None:
                return cached
        found = self._manifest(reference, reference.digest or str(reference.tag), deadline, limits)
        if found is None:
            raise RegistryError(f"{reference} does not exist", "invalid")
        manifest_digest, document = found
        if reference.digest and manifest_digest != reference.digest:
            raise RegistryError(f"the manifest's bytes are {manifest_digest}, not {reference.digest}", "invalid")
        cached = self._images.get(digest(reference.name, manifest_digest, self._who()))
        if cached is not None:
            return cached
        descriptor = _bundle_layer(reference, document)
        layer = self._blob(reference, descriptor, deadline, limits.max_payload_bytes)
        image = _Image(manifest_digest, layer, str(descriptor.get("mediaType", "")))
        self._images.put(digest(reference.name, manifest_digest, self._who()), image)
        return image

    def _fetch_signatures(
        self, reference: Reference, image_digest: str, deadline: float, limits: Limits
    ) -> tuple[tuple[ImageSignature, ...], tuple[str, ...]]:
        found = self._manifest(reference, signature_tag(image_digest), deadline, limits)
        if found is None:
            return (), ()
        _, document = found
        layers = document["layers"]
        if len(layers) > limits.max_signatures:
            raise RegistryError(f"the signature manifest has {len(layers)} layers; at most {limits.max_signatures} "
                                "are read", "invalid")  # fmt: skip
        signatures: list[ImageSignature] = []
        skipped: list[str] = []
        for index, descriptor in enumerate(layers):
            if descriptor.get("mediaType") != SIMPLE_SIGNING_MEDIA_TYPE:
                skipped.append(f"signature layer {index}: media type {str(descriptor.get('mediaType'))[:60]!r}")
                continue
            annotations = descriptor.get("annotations")
            annotations = annotations if isinstance(annotations, dict) else {}
            signature = annotations.get(SIGNATURE_ANNOTATION)
            if not isinstance(signature, str):
                skipped.append(f"signature layer {index}: no {SIGNATURE_ANNOTATION} annotation")
                continue
            payload = self._blob(reference, descriptor, deadline, limits.max_certificate_bytes)
            certificate = "".join(
                value for key in (CERTIFICATE_ANNOTATION, CHAIN_ANNOTATION)
                if isinstance(value := annotations.get(key), str)
            )  # fmt: skip
            bundle = annotations.get(BUNDLE_ANNOTATION)
            signatures.append(
                ImageSignature(
                    payload,
                    signature,
                    certificate.encode() if certificate else None,
                    bundle.encode() if isinstance(bundle, str) else None,
                )
            )
        return tuple(signatures), tuple(skipped)


# --- writing: kubectl sigstore sign -i ----------------------------------------------

#: Seconds pushing a bundle and its signature may take (a person waits at a terminal, not an admission).
PUSH_TIMEOUT = 60.0


def detect_media_type(data: bytes) -> str:
    """What Go's ``http.DetectContentType`` calls a message (cosign ``DefaultMediaTypeGetter``), for our two kinds."""
    if data.startswith(b"\x1f\x8b\x08"):
        return "application/x-gzip"
    return "text/plain"


def _config(layer_digest: str) -> bytes:
    """The config go-containerregistry writes for an empty image with one layer appended."""
    return json.dumps(
        {
            "architecture": "",
            "created": "0001-01-01T00:00:00Z",
            "history": [{"created": "0001-01-01T00:00:00Z"}],
            "os": "",
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
            "config": {},
        },
        separators=(",", ":"),
    ).encode()


def _push_blob(client: RegistryClient, reference: Reference, data: bytes, deadline: float) -> dict[str, Any]:
    blob_digest = _sha256(data)
    scope = f"repository:{reference.repository}:pull,push"
    start = client.request("POST", reference.registry, f"/v2/{reference.repository}/blobs/uploads/", scope=scope,
                           deadline=deadline, max_bytes=65536, headers={"Content-Length": "0"}, body=b"")  # fmt: skip
    location = start.headers.get("location")
    if start.status != 202 or not location:
        raise RequestError(f"{reference.registry} refused a blob upload (HTTP {start.status})")
    split = location.split("?", 1)
    path = split[0].split(reference.registry, 1)[-1] if "://" in split[0] else split[0]
    query = (split[1] + "&" if len(split) > 1 else "") + f"digest={blob_digest}"
    headers = {"Content-Type": "application/octet-stream", "Content-Length": str(len(data))}
    done = client.request("PUT", reference.registry, f"{path}?{query}", scope=scope, deadline=deadline,
                          max_bytes=65536, body=data, headers=headers)  # fmt: skip
    if done.status != 201:
        raise RequestError(f"{reference.registry} refused blob {blob_digest[:19]}… (HTTP {done.status})")
    return {"digest": blob_digest, "size": len(data)}


def _put_manifest(client: RegistryClient, reference: Reference, tag: str, manifest: bytes, deadline: float) -> str:
    answer = client.request("PUT", reference.registry, f"/v2/{reference.repository}/manifests/{tag}",
                            scope=f"repository:{reference.repository}:pull,push", deadline=deadline, max_bytes=65536,
                            body=manifest, headers={"Content-Type": OCI_MANIFEST})  # fmt: skip
    if answer.status != 201:
        raise RequestError(f"{reference.registry} refused manifest {tag} (HTTP {answer.status}): "
                           f"{answer.body[:200].decode(errors='replace')}")  # fmt: skip
    return _sha256(manifest)


def _image_manifest(config: dict[str, Any], layers: list[dict[str, Any]]) -> bytes:
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, **config},
            "layers": layers,
        },
        separators=(",", ":"),
    ).encode()


def push_bundle(client: RegistryClient, reference: Reference, message: bytes) -> str:
    """Push ``message`` as a one-layer image at ``reference`` (``uploadFileToRegistry``); its manifest digest."""
    deadline = time.monotonic() + PUSH_TIMEOUT
    try:
        layer = {**_push_blob(client, reference, message, deadline), "mediaType": detect_media_type(message)}
        config = _push_blob(client, reference, _config(layer["digest"]), deadline)
        manifest = _image_manifest(config, [{"mediaType": layer["mediaType"], "size": layer["size"],
                                             "digest": layer["digest"]}])  # fmt: skip
        return _put_manifest(client, reference, reference.tag or reference.digest or "latest", manifest, deadline)
    except RegistryError as error:
        raise RequestError(f"pushing {reference}: {error.message}") from None


def push_signature(
    client: RegistryClient, reference: Reference, image_digest: str, payload: bytes, signature: str
) -> str:
    """Add a simple-signing layer to the image's ``.sig`` manifest (a new one, or cosign's existing one)."""
    deadline = time.monotonic() + PUSH_TIMEOUT
    tag = signature_tag(image_digest)
    try:
        existing = client.request("GET", reference.registry, f"/v2/{reference.repository}/manifests/{tag}",
                                  scope=f"repository:{reference.repository}:pull,push", deadline=deadline,
                                  max_bytes=DEFAULT_LIMITS.max_registry_manifest_bytes,
                                  headers={"Accept": _ACCEPT})  # fmt: skip
        layers: list[dict[str, Any]] = []
        if existing.status == 200:
            layers = [x for x in json_document(existing, tag).get("layers", []) if isinstance(x, dict)]
        layer = {
            **_push_blob(client, reference, payload, deadline),
            "mediaType": SIMPLE_SIGNING_MEDIA_TYPE,
            "annotations": {SIGNATURE_ANNOTATION: signature},
        }
        if any(x.get("digest") == layer["digest"] and x.get("annotations") == layer["annotations"] for x in layers):
            return tag  # this very signature is there already
        layers.append({"mediaType": layer["mediaType"], "size": layer["size"], "digest": layer["digest"],
                       "annotations": layer["annotations"]})  # fmt: skip
        config = _push_blob(client, reference, _config(layers[0]["digest"]), deadline)
        _put_manifest(client, reference, tag, _image_manifest(config, layers), deadline)
        return tag
    except RegistryError as error:
        raise RequestError(f"pushing the signature of {reference}: {error.message}") from None
