"""Attack class 14 (docs/security.md): a signed container image is not a resource bundle (a real registry).

Every test here failed on the code before the fix.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import tarfile
import time
from collections.abc import Iterator

import pytest

from provider import Bounds, Policy, Review, decide
from provider.keys.pem import sign_bytes
from provider.oci.bundles import OciBundleSource, _push_blob, push_signature
from provider.oci.registry import RegistryClient
from provider.result import Result
from provider.signatures.signing import dump_yaml
from provider.signatures.sources import Reference, Sources, simple_signing_payload
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap
from tests.support.registry import Registry

KEY = make_key("ecdsa-p256", 250)


# --- a signed container image is not a resource bundle ---------------------------------------------------------


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    running = Registry(tmp_path_factory.mktemp("registry"))
    yield running
    running.stop()


OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def _tar_gz(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def _push_image(  # noqa: PLR0917 - an image's layout, field by field
    client: RegistryClient, ref: Reference, layer: bytes, layer_type: str, manifest_type: str, config_type: str
) -> str:
    """An image of any layout at ``ref``, signed with KEY as cosign signs images: its digest."""
    deadline = time.monotonic() + 30
    blob = _push_blob(client, ref, layer, deadline)
    config = _push_blob(client, ref, json.dumps({"rootfs": {"type": "layers", "diff_ids": []}}).encode(), deadline)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": manifest_type,
        "config": {"mediaType": config_type, **config},
        "layers": [{"mediaType": layer_type, **blob}],
    }).encode()  # fmt: skip
    headers_type = manifest_type
    answer = client.request("PUT", ref.registry, f"/v2/{ref.repository}/manifests/{ref.tag}",
                            scope=f"repository:{ref.repository}:pull,push", deadline=deadline, max_bytes=65536,
                            body=manifest, headers={"Content-Type": headers_type})  # fmt: skip
    assert answer.status == 201, answer.body[:300]
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    claim = simple_signing_payload(ref, digest)
    push_signature(client, ref, digest, claim, base64.b64encode(sign_bytes(KEY, claim)).decode())
    return digest


SIGNED_YAML = dump_yaml([configmap("app", mode="production")]).encode()

#: (layer bytes, layer type, manifest type, config type): images a key that also signs bundles may sign.
NOT_BUNDLES = {
    "container-image-oci-layer": (_tar_gz({"etc/app.yaml": SIGNED_YAML}), OCI_LAYER, OCI_MANIFEST, OCI_CONFIG),
    "container-image-docker-layer": (_tar_gz({"app.yaml": SIGNED_YAML}), DOCKER_LAYER, OCI_MANIFEST, OCI_CONFIG),
    "docker-manifest": (SIGNED_YAML, "text/plain", DOCKER_MANIFEST, DOCKER_CONFIG),
    "docker-config": (SIGNED_YAML, "text/plain", OCI_MANIFEST, DOCKER_CONFIG),
    "artifact-layer": (_tar_gz({"app.yaml": SIGNED_YAML}), "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
                       OCI_MANIFEST, OCI_CONFIG),
    "gzip-bytes-labelled-text": (_tar_gz({"app.yaml": SIGNED_YAML}), "text/plain", OCI_MANIFEST, OCI_CONFIG),
    "text-bytes-labelled-gzip": (SIGNED_YAML, "application/x-gzip", OCI_MANIFEST, OCI_CONFIG),
    "text-with-parameters": (SIGNED_YAML, "text/plain; charset=utf-8", OCI_MANIFEST, OCI_CONFIG),
}  # fmt: skip


def _layout_verdict(client: RegistryClient, registry: Registry, ref: Reference) -> Result:
    obj = configmap("app", mode="production")
    obj["metadata"]["annotations"] = {"cosign.sigstore.dev/resourceBundleRef": str(ref)}
    policy = Policy.from_dict(
        {"keys": [public_key_pem(KEY)], "resourceBundleRef": {"repositories": [f"{registry.host}/bundles"]}},
        bounds=Bounds(bundle_repositories=(registry.host,)),
    )
    return decide(Review.for_object(obj), policy, sources=Sources(bundles=OciBundleSource(client)))


@pytest.mark.parametrize("case", list(NOT_BUNDLES))
def test_a_signed_image_that_is_not_a_bundle_is_not_read_as_one(registry: Registry, case: str) -> None:
    """Before: any one-layer image signed by a trusted key verified as a bundle, any .yaml in its layer read.

    The control beside each: the same key, the same object, in the layout upstream writes.
    """
    client = RegistryClient()
    honest = Reference.parse(f"{registry.host}/bundles/{case}:honest")
    _push_image(client, honest, SIGNED_YAML, "text/plain", OCI_MANIFEST, OCI_CONFIG)
    assert _layout_verdict(client, registry, honest).reason == "verified"
    other = Reference.parse(f"{registry.host}/bundles/{case}:v1")
    _push_image(client, other, *NOT_BUNDLES[case])
    result = _layout_verdict(client, registry, other)
    assert (result.allowed, result.reason) == (False, "bundle-invalid"), result.message
    assert "not a resource bundle" in result.message or "gzip" in result.message
