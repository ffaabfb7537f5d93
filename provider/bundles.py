"""Signatures kept outside the object: OCI resource bundles and signature ConfigMaps.

**Resource bundles** (``kubectl sigstore sign -i IMAGE``; ``docs/format.md``,
"Resource bundles"). The object carries only ``D/resourceBundleRef`` (D the
annotation domain), an image reference. The image
(``sigstore/k8s-manifest-sigstore`` ``pkg/k8smanifest/sign.go``
``uploadFileToRegistry``, cosign ``pkg/cosign/remote/index.go`` ``UploadFile``)
is an OCI image manifest with one layer: the message payload ``P`` itself
(a YAML stream, or with ``--tarball=yes`` a tar.gz of YAML files), media type
what Go's ``http.DetectContentType`` says of it (``text/plain``,
``application/x-gzip``). The image is signed as cosign signs images: a
manifest at tag ``sha256-<hex>.sig`` in the same repository whose layers are
simple-signing payloads naming the image's manifest digest, each with its
signature in the ``dev.cosignproject.cosign/signature`` annotation.

Reading one (the verifier's step 1 for such an object):

1. the reference is parsed strictly (:class:`Reference`) and must lie under
   one of the policy's ``resourceBundleRef.repositories``: the object chooses
   its own reference, so without the list an attacker chooses the bundle;
2. the :class:`BundleSource` (an adapter: :mod:`provider.oci`) resolves it to
   a manifest digest *once* and fetches everything by that digest, within
   its deadline and the limits (:class:`FetchedBundle`);
3. :func:`bundle_envelope` turns what was fetched into an
   :class:`~provider.envelope.Envelope`: each signature layer is a signature
   set over its *own* payload bytes (``SignatureSet.data``), and only
   payloads of type ``cosign container image signature`` naming exactly this
   digest count. The policy's keys and signers then decide as for any
   envelope, and the layer is the payload the object is compared with.

Binding: the signature covers the payload; the payload names the manifest
digest; the manifest names the layer digest; every blob fetched is checked
against its digest before it is used. The payload's ``docker-reference`` is
not compared with where the image was fetched from, as cosign does not
(``sigstore/sigstore`` ``pkg/signature/payload/payload.go``): a copied image
keeps its signatures; the allow-list decides where images may come from.

**Signature ConfigMaps** (``kubectl sigstore sign -o k8s://ConfigMap/NS/NAME``,
``pkg/k8smanifest/sign.go`` ``generateSignatureConfigMap``): the policy's
``signatureResourceRef`` names a ConfigMap whose ``data`` holds ``message``,
``signature`` and optionally ``certificate`` and ``bundle`` -- the annotation
values, under their base names (``verify.go`` ``getSignatureSets``). A
:class:`ConfigMapReader` (:mod:`provider.kube.configmaps`) reads it.

Nothing here does I/O; the two ports are implemented by adapters.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from .envelope import (
    GZIP_MAGIC,
    Envelope,
    Payload,
    SignatureSet,
    decode_base64,
    decode_message,
)
from .errors import DataError, PolicyError, Unsigned, VerificationFailure
from .limits import DEFAULT_LIMITS, Limits
from .parsing import load_json
from .schema import check_fields, read_list, read_str

#: ``D/resourceBundleRef`` (``pkg/k8smanifest/option.go`` ``defaultResourceBundleRefAnnotationBaseName``).
BUNDLE_REF_NAME = "resourceBundleRef"
#: cosign ``pkg/types/media.go`` ``SimpleSigningMediaType``: the layer type of a signature manifest.
SIMPLE_SIGNING_MEDIA_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"
#: sigstore ``pkg/signature/payload/payload.go`` ``CosignSignatureType``.
COSIGN_SIGNATURE_TYPE = "cosign container image signature"
#: cosign ``pkg/oci/static/signature.go``: the annotations of a signature layer.
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
CERTIFICATE_ANNOTATION = "dev.sigstore.cosign/certificate"
CHAIN_ANNOTATION = "dev.sigstore.cosign/chain"
BUNDLE_ANNOTATION = "dev.sigstore.cosign/bundle"
#: cosign ``pkg/oci/remote/remote.go`` ``normalize``: ``sha256:<hex>`` -> ``sha256-<hex>.sig``.
SIGNATURE_TAG_SUFFIX = ".sig"
#: The in-cluster reference prefix (``pkg/util/kubeutil`` ``InClusterObjectPrefix``) and the kinds
#: ``GetConfigMapFromK8sObjectRef`` accepts.
IN_CLUSTER_PREFIX = "k8s://"
CONFIGMAP_KINDS = ("ConfigMap", "configmaps", "cm")
#: The default registry of a reference without one (go-containerregistry ``name.DefaultRegistry``).
DEFAULT_REGISTRY = "index.docker.io"
#: Seconds a bundle fetch may take, unless the policy asks for less (``Limits.bundle_timeout`` bounds both).
DEFAULT_TIMEOUT = 1.0

# Reference grammar (distribution/reference ``regexp.go``), without the parts it allows and we refuse:
# no uppercase in a path, digests sha256 only, at most 255 characters in the name.
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:]+\])"
_REGISTRY = re.compile(_HOST + r"(?::[0-9]{1,5})?\Z")
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*\Z")
_TAG = re.compile(r"[\w][\w.-]{0,127}\Z", re.ASCII)  # Go's \w is [0-9A-Za-z_]; Python's takes any letter
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")
MAX_NAME = 255


@dataclass(frozen=True)
class Reference:
    """An image reference, normalised: ``registry/repository`` and a tag and/or a digest."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}"

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text

    def with_digest(self, digest: str) -> Reference:
        return Reference(self.registry, self.repository, self.tag, digest)

    @classmethod
    def parse(cls, text: Any, what: str = "the resource bundle reference") -> Reference:
        """Parse strictly; :class:`VerificationFailure` ``bundle-not-allowed`` for anything else."""

        def refuse(why: str) -> VerificationFailure:
            shown = text[:120] if isinstance(text, str) else type(text).__name__
            return VerificationFailure(f"{what} {shown!r} {why}", reason="bundle-not-allowed")

        if not isinstance(text, str) or not text or len(text) > MAX_NAME + 80 or text != text.strip():
            raise refuse("is not an image reference")
        rest, digest = text, None
        if "@" in rest:
            rest, _, digest = rest.partition("@")
            if not _DIGEST.match(digest):
                raise refuse("has a digest that is not sha256:<64 hex digits>")
        tag = None
        slash = rest.rfind("/")
        colon = rest.rfind(":")
        if colon > slash:
            rest, tag = rest[:colon], rest[colon + 1 :]
            if not _TAG.match(tag):
                raise refuse("has an invalid tag")
        parts = rest.split("/")
        first = parts[0]
        if len(parts) > 1 and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
            registry, path = first, parts[1:]
        else:
            registry, path = DEFAULT_REGISTRY, parts
        if registry in ("docker.io", "registry-1.docker.io"):
            registry = DEFAULT_REGISTRY
        if registry == DEFAULT_REGISTRY and len(path) == 1:
            path = ["library", *path]
        if not _REGISTRY.match(registry):
            raise refuse("names an invalid registry")
        if not path or not all(_COMPONENT.match(p) for p in path):
            raise refuse("has an invalid repository path (lower-case components separated by '/')")
        repository = "/".join(path)
        if len(registry) + 1 + len(repository) > MAX_NAME:
            raise refuse(f"is longer than {MAX_NAME} characters")
        if tag is None and digest is None:
            tag = "latest"
        return cls(registry.lower(), repository, tag, digest)


def _registry_host(text: str) -> str | None:
    """The registry ``text`` names when it stands alone as a reference's first component, else ``None``."""
    if "." in text or ":" in text or text == "localhost" or text.startswith("["):
        lowered = text.lower()
        return DEFAULT_REGISTRY if lowered in ("docker.io", "registry-1.docker.io") else lowered
    return None


@dataclass(frozen=True)
class BundleOptions:
    """The policy's ``resourceBundleRef``: where bundles may come from, and how long a fetch may take."""

    repositories: tuple[str, ...]
    timeout: float = DEFAULT_TIMEOUT

    @classmethod
    def from_dict(cls, data: Any, where: str) -> BundleOptions:
        data = check_fields(data, where, ("repositories", "timeoutSeconds"))
        repositories = []
        for i, item in enumerate(read_list(data.get("repositories"), f"{where}.repositories")):
            spot = f"{where}.repositories[{i}]"
            text = read_str(item, spot).rstrip("/")
            try:
                # A prefix is a registry, or a registry and the first components of a repository path.
                parsed = Reference.parse(text + "/x" if "/" not in text else text, f"{spot}:")
            except VerificationFailure as exc:
                raise PolicyError(exc.message) from exc
            if parsed.digest or (parsed.tag not in (None, "latest")) or text.endswith(":latest"):
                raise PolicyError(f"{spot}: a repository prefix has no tag or digest")
            if "/" not in text and parsed.registry != _registry_host(text):
                # "myorg" would parse as Docker Hub's "library/myorg"; as a prefix it would have become all of
                # Docker Hub, where anyone can push. A prefix without "/" must name a registry host itself.
                raise PolicyError(
                    f"{spot}: {text[:80]!r} is not a registry host (no '.', ':' or localhost); for a repository "
                    f"on Docker Hub write {DEFAULT_REGISTRY}/{text[:80]}"
                )
            repositories.append(parsed.registry if "/" not in text else parsed.name)
        if not repositories:
            raise PolicyError(
                f"{where}.repositories: list the registries or repositories bundles may come from; the object names "
                "its own bundle, so without a list anyone could choose it"
            )
        timeout = data.get("timeoutSeconds", DEFAULT_TIMEOUT)
        if type(timeout) not in (int, float) or not 0 < timeout <= 30:
            raise PolicyError(f"{where}.timeoutSeconds: expected a number of seconds in (0, 30]")
        return cls(tuple(repositories), float(timeout))

    def allows(self, reference: Reference) -> bool:
        """Whether the reference's repository is one listed, or lies under one, at a ``/`` boundary."""
        name = reference.name
        return any(name == prefix or name.startswith(prefix + "/") for prefix in self.repositories)


@dataclass(frozen=True)
class ImageSignature:
    """One layer of a ``.sig`` manifest: a simple-signing payload and what its annotations say of it."""

    payload: bytes
    signature: str  # base64, as annotated
    certificate: bytes | None = None  # PEM: the certificate, then its chain
    bundle: bytes | None = None  # RekorBundle JSON


@dataclass(frozen=True)
class FetchedBundle:
    """What a :class:`BundleSource` fetched for one reference: every blob checked against its digest."""

    reference: Reference  # with the digest it resolved to
    digest: str
    layer: bytes
    layer_media_type: str
    signatures: tuple[ImageSignature, ...] = ()
    #: Signature layers left out, and why (wrong media type, too many): for the verdict's message.
    skipped: tuple[str, ...] = field(default=())


class BundleSource(Protocol):
    """Fetches a resource bundle and its cosign signatures.

    Returns only what was complete by ``deadline`` (a :func:`time.monotonic`
    instant) and within ``limits``; raises :class:`VerificationFailure`
    ``bundle-unavailable`` (the registry could not be asked, refused, or did
    not answer in time) or ``bundle-invalid`` (it answered with something
    that is not a bundle within the limits), by the deadline plus a bounded
    margin. Resolves a tag to a digest once and fetches the rest by digest.
    """

    def fetch(self, reference: Reference, deadline: float, limits: Limits) -> FetchedBundle: ...


class ConfigMapReader(Protocol):
    """Reads a ConfigMap's ``data``; ``None`` when it does not exist.

    Raises :class:`~provider.errors.TransientError` when the cluster could not
    be asked by ``deadline`` (a :func:`time.monotonic` instant).
    """

    def read_data(self, namespace: str, name: str, deadline: float) -> dict[str, str] | None: ...


@dataclass(frozen=True)
class Sources:
    """Where signatures kept outside the object are fetched from; ``None``: not configured."""

    bundles: BundleSource | None = None
    configmaps: ConfigMapReader | None = None


def bundle_envelope(fetched: FetchedBundle, domain: str, limits: Limits = DEFAULT_LIMITS) -> Envelope:
    """The envelope a fetched bundle stands for (module docstring, step 3)."""
    layer = fetched.layer
    if len(layer) > limits.max_payload_bytes:
        raise VerificationFailure(
            f"the bundle's layer holds {len(layer)} bytes; at most {limits.max_payload_bytes} are read",
            reason="bundle-invalid",
        )
    payload = Payload(layer, "tarball" if layer.startswith(GZIP_MAGIC) else "yaml")
    sets: list[SignatureSet] = []
    skipped = list(fetched.skipped)
    for index, image_signature in enumerate(fetched.signatures):
        why = _payload_mismatch(image_signature.payload, fetched.digest, limits)
        if why:
            skipped.append(f"signature layer {index}: {why}")
            continue
        signature = decode_base64(image_signature.signature, f"signature layer {index}", limits.max_signature_bytes)
        sets.append(
            SignatureSet(
                len(sets), signature, image_signature.certificate, image_signature.bundle, image_signature.payload
            )
        )
    annotations = frozenset({f"{domain}/{BUNDLE_REF_NAME}"})
    if not sets:
        detail = f" ({'; '.join(skipped[:3])})" if skipped else ""
        raise Unsigned(
            f"the resource bundle {fetched.reference} carries no cosign signature for its digest{detail}",
        )
    return Envelope(domain, payload, tuple(sets), tuple(skipped), annotations)


def _payload_mismatch(payload: bytes, digest: str, limits: Limits) -> str:
    """Why a simple-signing payload does not sign ``digest`` ('' when it does)."""
    if len(payload) > limits.max_certificate_bytes:
        return f"a payload over {limits.max_certificate_bytes} bytes"
    try:
        data = load_json(payload, what="the payload")  # from the registry: hostile input, parsed within limits
    except DataError as exc:
        return exc.message
    critical = data.get("critical") if isinstance(data, dict) else None
    if not isinstance(critical, dict):
        return "the payload has no critical section"
    if critical.get("type") != COSIGN_SIGNATURE_TYPE:
        return f"the payload's type is not {COSIGN_SIGNATURE_TYPE!r}"
    image = critical.get("image")
    signed = image.get("docker-manifest-digest") if isinstance(image, dict) else None
    if signed != digest:
        return f"it signs {str(signed)[:80]}, not {digest}"
    return ""


def simple_signing_payload(reference: Reference, digest: str) -> bytes:
    """The payload cosign signs for an image (``payload.Cosign.MarshalJSON``: Go's field order, no spaces)."""
    return json.dumps(
        {
            "critical": {
                "identity": {"docker-reference": reference.name},
                "image": {"docker-manifest-digest": digest},
                "type": COSIGN_SIGNATURE_TYPE,
            },
            "optional": None,
        },
        separators=(",", ":"),
    ).encode()


def signature_tag(digest: str) -> str:
    """``sha256:<hex>`` -> ``sha256-<hex>.sig`` (cosign ``normalize``)."""
    algorithm, _, hexdigest = digest.partition(":")
    return f"{algorithm}-{hexdigest}{SIGNATURE_TAG_SUFFIX}"


# --- signature ConfigMaps ---------------------------------------------------------


@dataclass(frozen=True)
class ConfigMapRef:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{IN_CLUSTER_PREFIX}ConfigMap/{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, text: Any, where: str) -> ConfigMapRef:
        """``k8s://ConfigMap/NAMESPACE/NAME`` (``kubeutil.ParseObjectRefInClusterWithKind``; a namespace required)."""
        value = read_str(text, where)
        parts = value.removeprefix(IN_CLUSTER_PREFIX).split("/") if value.startswith(IN_CLUSTER_PREFIX) else []
        label = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
        subdomain = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")
        if len(parts) != 3 or parts[0] not in CONFIGMAP_KINDS:
            raise PolicyError(f"{where}: expected k8s://ConfigMap/NAMESPACE/NAME, got {value[:80]!r}")
        if not label.match(parts[1]) or not subdomain.match(parts[2]):
            raise PolicyError(f"{where}: {value[:80]!r} names an invalid namespace or ConfigMap name")
        return cls(parts[1], parts[2])


def configmap_envelope(
    data: dict[str, Any], ref: ConfigMapRef, domain: str, limits: Limits = DEFAULT_LIMITS
) -> Envelope:
    """The envelope a signature ConfigMap's ``data`` holds: one signature set (upstream reads no ``signature_N``)."""
    if "message" not in data or "signature" not in data:
        missing = "message" if "message" not in data else "signature"
        raise Unsigned(f"the signature ConfigMap {ref} has no {missing!r} entry")
    payload = decode_message(data["message"], limits)
    signature = decode_base64(data["signature"], f"{ref} signature", limits.max_signature_bytes)

    def blob(key: str) -> bytes | None:
        if not data.get(key):
            return None
        from .envelope import gunzip_bounded

        raw = decode_base64(data[key], f"{ref} {key}", limits.max_certificate_bytes)
        return gunzip_bounded(raw, limits.max_certificate_bytes, f"{ref} {key}") if raw.startswith(GZIP_MAGIC) else raw

    sets = (SignatureSet(0, signature, blob("certificate"), blob("bundle")),)
    return Envelope(domain, payload, sets, (), frozenset())


__all__ = [
    "BundleOptions",
    "BundleSource",
    "ConfigMapReader",
    "ConfigMapRef",
    "FetchedBundle",
    "ImageSignature",
    "Reference",
    "Sources",
    "bundle_envelope",
    "configmap_envelope",
    "signature_tag",
    "simple_signing_payload",
]
