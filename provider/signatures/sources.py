"""Signatures kept outside the object: OCI resource bundles and signature ConfigMaps.

**Resource bundles** (``kubectl sigstore sign -i IMAGE``; ``docs/format.md``,
"Resource bundles"). The object carries only ``D/resourceBundleRef`` (D the
annotation domain), an image reference. The image is exactly what
``kubectl sigstore sign -i`` writes, and nothing else is read as a bundle:

* ``sigstore/k8s-manifest-sigstore`` ``pkg/k8smanifest/sign.go``
  ``uploadFileToRegistry`` (v0.1.0 to v0.5.4 and main 612a7bb) writes the
  message to one file and calls cosign's ``UploadFiles`` with that one file
  and ``DefaultMediaTypeGetter``;
* cosign ``pkg/cosign/remote/index.go`` (v1.5.1 to v3.0.4, the versions those
  releases use) builds each file with ``static.NewFile(b,
  static.WithLayerMediaType(mt))``, ``mt`` being ``DefaultMediaTypeGetter``:
  Go's ``http.DetectContentType(b)`` up to its ``;`` -- ``text/plain`` for a
  YAML message, ``application/x-gzip`` for a ``--tarball=yes`` one (v1.2.0's
  ``UploadFile`` did the same by hand);
* cosign ``pkg/oci/static/file.go`` ``NewFile`` starts from ``empty.Image`` as
  ``types.OCIManifestSchema1`` (``application/vnd.oci.image.manifest.v1+json``)
  with the config media type of ``pkg/oci/static/options.go``,
  ``types.OCIConfigJSON`` (``application/vnd.oci.image.config.v1+json``), and
  appends the one static layer: the message bytes as they are (a static
  layer's compressed and uncompressed forms are the same bytes).

So a bundle is an OCI image manifest, config ``application/vnd.oci.image.config.v1+json``,
exactly one layer of media type ``text/plain`` (the bytes a YAML stream) or
``application/x-gzip`` (the bytes a gzip stream). A container image -- whose
layers are ``application/vnd.oci.image.layer.v1.tar+gzip`` or Docker's
``...rootfs.diff.tar.gzip`` -- is refused by these media types before its layer is
fetched, however its files are named and whoever signed it: a key that signs
images and bundles in one repository does not make every image a bundle
(:data:`BUNDLE_LAYER_TYPES`; :mod:`provider.oci.bundles` checks the manifest,
:func:`bundle_envelope` the layer again). The image is signed as cosign signs
images: a manifest at tag ``sha256-<hex>.sig`` in the same repository whose
layers are simple-signing payloads naming the image's manifest digest, each
with its signature in the ``dev.cosignproject.cosign/signature`` annotation.

Reading one (the verifier's step 1 for such an object):

1. the reference is parsed strictly (:class:`Reference`) and must lie under
   one of the policy's ``resourceBundleRef.repositories``: the object chooses
   its own reference, so without the list an attacker chooses the bundle;
2. the :class:`BundleSource` (an adapter: :mod:`provider.oci`) resolves it to
   a manifest digest *once* and fetches everything by that digest, within
   its deadline and the limits (:class:`FetchedBundle`);
3. :func:`bundle_envelope` turns what was fetched into an
   :class:`~provider.signatures.envelope.Envelope`: each signature layer is a signature
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
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import DataError, PolicyError, ProviderError, Unsigned, VerificationFailure
from ..limits import DEFAULT_LIMITS, Limits
from ..objects import DNS_LABEL, DNS_SUBDOMAIN
from ..parsing import load_json
from ..readers import check_fields, read_list, read_str
from .envelope import (
    GZIP_MAGIC,
    Envelope,
    Payload,
    PayloadFormat,
    SignatureSet,
    decode_base64,
    decode_message,
)

if TYPE_CHECKING:
    from ..keys.refs import KeySecretReader, SecretKeyRef

#: ``D/resourceBundleRef`` (``pkg/k8smanifest/option.go`` ``defaultResourceBundleRefAnnotationBaseName``).
BUNDLE_REF_NAME = "resourceBundleRef"
#: The manifest and config media types of a bundle image (cosign ``pkg/oci/static/file.go`` ``NewFile``,
#: ``options.go``; go-containerregistry ``types.OCIManifestSchema1``, ``types.OCIConfigJSON``).
BUNDLE_MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
BUNDLE_CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
#: The bundle layer's media type -> the message format it holds (``http.DetectContentType`` of the message).
BUNDLE_LAYER_TYPES: dict[str, PayloadFormat] = {"text/plain": "yaml", "application/x-gzip": "tarball"}
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


#: The data key of a ``kubernetes.io/dockerconfigjson`` Secret (k8s.io/api core/v1 ``DockerConfigJsonKey``).
DOCKER_CONFIG_JSON_KEY = ".dockerconfigjson"
#: The data keys a pull Secret keeps its Docker config under (k8s.io/api core/v1 types.go
#: ``DockerConfigJsonKey``, ``DockerConfigKey``): the only ones a ``pullSecrets`` entry may name.
PULL_SECRET_KEYS = (DOCKER_CONFIG_JSON_KEY, ".dockercfg")
#: Pull Secrets one policy may name: one per registry its repositories lie in, and then some.
MAX_PULL_SECRETS = 8


@dataclass(frozen=True)
class BundleOptions:
    """The policy's ``resourceBundleRef``: where bundles may come from, how long a fetch may take, and the pull
    Secrets whose credentials it uses (``provider/oci/auth.py``)."""

    repositories: tuple[str, ...]
    timeout: float = DEFAULT_TIMEOUT
    pull_secrets: tuple[SecretKeyRef, ...] = ()

    @classmethod
    def from_dict(
        cls,
        data: Any,
        where: str,
        allowed: tuple[str, ...] | None = None,
        pull_namespaces: tuple[str, ...] | None = (),
    ) -> BundleOptions:
        """The policy's ``resourceBundleRef``; ``allowed`` is the operator's list every entry must lie under,
        ``pull_namespaces`` the namespaces its ``pullSecrets`` may name.

        ``None``: not bounded (the person running the CLI wrote the policy); ``()``: none at all.
        A policy's list narrows the operator's and never widens it (:mod:`provider.bounds`).
        """
        data = check_fields(data, where, ("repositories", "timeoutSeconds", "pullSecrets"))
        listed = read_list(data.get("pullSecrets"), f"{where}.pullSecrets")
        if len(listed) > MAX_PULL_SECRETS:
            # Each is a GET of the API server on a bundle fetch: a bound on what one policy makes every request ask.
            raise PolicyError(f"{where}.pullSecrets: {len(listed)} entries; at most {MAX_PULL_SECRETS}")
        pull_secrets = tuple(
            _pull_secret(item, f"{where}.pullSecrets[{i}]", pull_namespaces) for i, item in enumerate(listed)
        )
        if len(set(pull_secrets)) != len(pull_secrets):
            raise PolicyError(f"{where}.pullSecrets: the same Secret is listed twice")
        if allowed is not None and not allowed:
            raise PolicyError(
                f"{where}: resource bundles are not allowed here: the operator lists no registry that bundles may "
                "come from (MANIFEST_PROVIDER_BUNDLE_REPOSITORIES)"
            )
        repositories = []
        for i, item in enumerate(read_list(data.get("repositories"), f"{where}.repositories")):
            spot = f"{where}.repositories[{i}]"
            prefix = parse_repository_prefix(read_str(item, spot), spot, PolicyError)
            if allowed is not None and not any(under(prefix, bound) for bound in allowed):
                raise PolicyError(
                    f"{spot}: {prefix[:120]!r} is not under a registry or repository the operator allows bundles "
                    "from (MANIFEST_PROVIDER_BUNDLE_REPOSITORIES); a policy may only narrow that list"
                )
            repositories.append(prefix)
        if not repositories:
            raise PolicyError(
                f"{where}.repositories: list the registries or repositories bundles may come from; the object names "
                "its own bundle, so without a list anyone could choose it"
            )
        timeout = data.get("timeoutSeconds", DEFAULT_TIMEOUT)
        if type(timeout) not in (int, float) or not 0 < timeout <= 30:
            raise PolicyError(f"{where}.timeoutSeconds: expected a number of seconds in (0, 30]")
        return cls(tuple(repositories), float(timeout), pull_secrets)

    def allows(self, reference: Reference) -> bool:
        """Whether the reference's repository is one listed, or lies under one, at a ``/`` boundary."""
        return any(under(reference.name, prefix) for prefix in self.repositories)


def _pull_secret(item: Any, where: str, namespaces: tuple[str, ...] | None) -> SecretKeyRef:
    """A ``pullSecrets`` entry: ``{namespace, name, key}`` (``key``: ``.dockerconfigjson``), in an allowed namespace.

    Refused on the reference alone, one message whatever the namespace holds (:mod:`provider.bounds`).
    """
    from ..keys.refs import secret_ref_from_dict

    if not isinstance(item, dict):
        raise PolicyError(f"{where}: expected {{namespace, name}} of a kubernetes.io/dockerconfigjson Secret")
    ref = secret_ref_from_dict({"key": DOCKER_CONFIG_JSON_KEY, **item}, where)
    if ref.key not in PULL_SECRET_KEYS:
        # Any other data key would have the verifier parse some other Secret value (a password, a TLS key) as a
        # Docker config, and say in the denial how far it got.
        raise PolicyError(
            f"{where}.key: {ref.key[:80]!r} is not where a pull Secret keeps its Docker config; use "
            f"{' or '.join(PULL_SECRET_KEYS)} (the data key of a kubernetes.io/dockerconfigjson or dockercfg Secret)"
        )
    if namespaces is not None and ref.namespace not in namespaces:
        raise PolicyError(
            f"{where}: policies may not read pull Secrets in namespace {ref.namespace!r}; they may read only the "
            "namespaces the operator lists (MANIFEST_PROVIDER_PULL_SECRET_NAMESPACES, none by default)"
        )
    return ref


def under(name: str, prefix: str) -> bool:
    """Whether repository ``name`` (``registry/path``) is ``prefix`` or lies under it, at a ``/`` boundary."""
    return name == prefix or name.startswith(prefix + "/")


def parse_repository_prefix(text: str, where: str, error: type[ProviderError]) -> str:
    """A repository prefix, normalised: a registry host, or a registry and the first components of a path.

    ``myorg`` would parse as Docker Hub's ``library/myorg``; as a prefix it would have become all of
    Docker Hub, where anyone can push: a prefix without ``/`` must name a registry host itself.
    """
    text = text.rstrip("/")
    try:
        parsed = Reference.parse(text + "/x" if "/" not in text else text, f"{where}:")
    except VerificationFailure as exc:
        raise error(exc.message) from None
    if parsed.digest or (parsed.tag not in (None, "latest")) or text.endswith(":latest"):
        raise error(f"{where}: a repository prefix has no tag or digest")
    if "/" not in text and parsed.registry != _registry_host(text):
        raise error(
            f"{where}: {text[:80]!r} is not a registry host (no '.', ':' or localhost); for a repository "
            f"on Docker Hub write {DEFAULT_REGISTRY}/{text[:80]}"
        )
    if "/" not in text:
        return parsed.registry
    if parsed.registry == DEFAULT_REGISTRY:
        # A reference "docker.io/nginx" is the official "library/nginx"; a *prefix* "docker.io/myorg" is the
        # organisation myorg, whose repositories are "myorg/...": the path is taken as written (its components
        # were checked by the parse above).
        given = text.split("/")
        path = given[1:] if _registry_host(given[0]) is not None else given
        return f"{DEFAULT_REGISTRY}/{'/'.join(path)}"
    return parsed.name


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
    ``pull_secrets`` are Docker config documents (a policy's pull Secrets, read by the verifier);
    one that is not a Docker config raises :class:`~provider.errors.PolicyError`.
    """

    def fetch(
        self, reference: Reference, deadline: float, limits: Limits, pull_secrets: tuple[str, ...] = ()
    ) -> FetchedBundle: ...


class ConfigMapReader(Protocol):
    """Reads a ConfigMap's ``data``; ``None`` when it does not exist.

    Raises :class:`~provider.errors.TransientError` when the cluster could not
    be asked by ``deadline`` (a :func:`time.monotonic` instant).
    """

    def read_data(self, namespace: str, name: str, deadline: float) -> dict[str, str] | None: ...


@dataclass(frozen=True)
class Sources:
    """Where signatures kept outside the object, and keys kept in Secrets, come from; ``None``: not configured."""

    bundles: BundleSource | None = None
    configmaps: ConfigMapReader | None = None
    #: Reads keys kept in Secrets (:mod:`provider.keys.refs`).
    keys: KeySecretReader | None = None


def bundle_envelope(fetched: FetchedBundle, domain: str, limits: Limits = DEFAULT_LIMITS) -> Envelope:
    """The envelope a fetched bundle stands for (module docstring, step 3)."""
    layer = fetched.layer
    if len(layer) > limits.max_payload_bytes:
        raise VerificationFailure(
            f"the bundle's layer holds {len(layer)} bytes; at most {limits.max_payload_bytes} are read",
            reason="bundle-invalid",
        )
    payload = Payload(layer, bundle_layer_format(fetched.layer_media_type, layer, str(fetched.reference)))
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


def not_a_bundle_layer(media_type: Any, reference: str) -> VerificationFailure:
    """The answer for an image whose layer is not a resource bundle's (a container image's, an artifact's)."""
    return VerificationFailure(
        f"{reference} is not a resource bundle: its layer is a {str(media_type)[:80]!r}, and kubectl sigstore "
        f"sign -i writes one layer of {' or '.join(BUNDLE_LAYER_TYPES)} (a YAML or a tarball message)",
        reason="bundle-invalid",
    )


def bundle_layer_format(media_type: str, layer: bytes, reference: str) -> PayloadFormat:
    """The message format a bundle's layer holds (``yaml`` or ``tarball``), from its media type and bytes.

    The two must agree, as ``http.DetectContentType`` made one from the other: gzip bytes under
    ``text/plain``, or other bytes under ``application/x-gzip``, are not what upstream writes.
    """
    kind = BUNDLE_LAYER_TYPES.get(media_type)
    if kind is None:
        raise not_a_bundle_layer(media_type, reference)
    if (kind == "tarball") != layer.startswith(GZIP_MAGIC):
        raise VerificationFailure(
            f"{reference}: the bundle's layer is labelled {media_type!r} but its bytes are "
            f"{'not ' if kind == 'tarball' else ''}a gzip stream",
            reason="bundle-invalid",
        )
    return kind


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
        if len(parts) != 3 or parts[0] not in CONFIGMAP_KINDS:
            raise PolicyError(f"{where}: expected k8s://ConfigMap/NAMESPACE/NAME, got {value[:80]!r}")
        if not DNS_LABEL.match(parts[1]) or not DNS_SUBDOMAIN.match(parts[2]):
            raise PolicyError(f"{where}: {value[:80]!r} names an invalid namespace or ConfigMap name")
        return cls(parts[1], parts[2])


def no_signature_configmap(ref: ConfigMapRef) -> Unsigned:
    """The one answer for a signature ConfigMap that is missing or holds no signature (no existence oracle)."""
    return Unsigned(f"the signature ConfigMap {ref} holds no signature (a 'message' and a 'signature' entry)")


def configmap_envelope(
    data: dict[str, Any], ref: ConfigMapRef, domain: str, limits: Limits = DEFAULT_LIMITS
) -> Envelope:
    """The envelope a signature ConfigMap's ``data`` holds: one signature set (upstream reads no ``signature_N``).

    A ConfigMap without ``message`` and ``signature`` is :func:`no_signature_configmap`, word for word the
    answer for one that does not exist: which of the two it was is not the policy author's to learn.
    """
    if "message" not in data or "signature" not in data:
        raise no_signature_configmap(ref)
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
    "no_signature_configmap",
    "parse_repository_prefix",
    "signature_tag",
    "simple_signing_payload",
    "under",
]
