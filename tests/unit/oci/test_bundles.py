"""OCI resource bundles against a real registry: signed with ``sign --image``, fetched, verified, and failed.

The registry is Debian's ``docker-registry`` (the CNCF distribution registry)
on loopback; the layouts checked are k8s-manifest-sigstore's bundle image
(``pkg/k8smanifest/sign.go``) and cosign's signature image
(``pkg/oci/static/signature.go``, ``pkg/oci/remote/remote.go``).
"""

from __future__ import annotations

import base64
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provider.bounds import LOCAL
from provider.limits import Limits
from provider.oci.bundles import OciBundleSource
from provider.oci.registry import RegistryClient
from provider.policy.schema import Policy
from provider.result import Result
from provider.review import Review
from provider.signatures.signing import dump_yaml
from provider.signatures.sources import Reference, Sources
from provider.verifier import decide
from tests.support.bundles import KEY, OBJECT, sign_image
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap
from tests.support.registry import (
    Misbehaving,
    Registry,
    answer_with_101_header_fields,
    answer_with_a_70_kib_header_line,
    deep_manifest,
    deep_token_answer,
    free_port,
    huge_layer,
    manifest_declaring_5000_digits_of_length,
    manifest_with_a_5000_digit_number,
    oversized_manifest,
    server_error,
    stall,
    trickle,
)

OTHER = make_key("ecdsa-p256", 41)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    running = Registry(tmp_path_factory.mktemp("registry"))
    yield running
    running.stop()


def policy(registry_host: str, **extra: Any) -> dict[str, Any]:
    return {"keys": [public_key_pem(KEY)], "resourceBundleRef": {"repositories": [f"{registry_host}/bundles"], **extra}}


def verdict(obj: dict[str, Any], raw_policy: dict[str, Any], source: Any = None) -> Result:
    sources = Sources(bundles=source if source is not None else OciBundleSource())
    return decide(Review.for_object(obj), Policy.from_dict(raw_policy, bounds=LOCAL), sources=sources)


def get_json(url: str, accept: str = "application/vnd.oci.image.manifest.v1+json") -> Any:
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=5) as answer:
        return json.loads(answer.read())


@pytest.mark.parametrize("tarball", [False, True], ids=["yaml-message", "tarball-message"])
def test_a_bundle_signed_into_the_registry_verifies(registry: Registry, tmp_path: Path, tarball: bool) -> None:
    ref = f"{registry.host}/bundles/app:{'tar' if tarball else 'yaml'}"
    signed = sign_image(tmp_path, ref, tarball=tarball)
    annotations = signed["metadata"]["annotations"]
    assert annotations == {"cosign.sigstore.dev/resourceBundleRef": ref}  # no message, no signature on the object
    result = verdict(signed, policy(registry.host))
    assert (result.reason, result.allowed) == ("verified", True), result.message
    signed["data"]["mode"] = "debug"
    assert verdict(signed, policy(registry.host)).reason == "content-mismatch"


def test_the_pushed_images_have_kubectl_sigstore_and_cosign_layouts(registry: Registry, tmp_path: Path) -> None:
    ref = f"{registry.host}/bundles/layout:v1"
    sign_image(tmp_path, ref)
    base = f"http://{registry.host}/v2/bundles/layout"
    manifest = get_json(f"{base}/manifests/v1")
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == "text/plain"  # http.DetectContentType of a YAML message
    accept = {"Accept": "application/vnd.oci.image.manifest.v1+json"}
    request = urllib.request.Request(f"{base}/manifests/v1", headers=accept)
    with urllib.request.urlopen(request, timeout=5) as raw:
        digest = raw.headers["Docker-Content-Digest"]
    signature_manifest = get_json(f"{base}/manifests/sha256-{digest.removeprefix('sha256:')}.sig")
    (sig_layer,) = signature_manifest["layers"]
    assert sig_layer["mediaType"] == "application/vnd.dev.cosign.simplesigning.v1+json"
    payload = get_json(f"{base}/blobs/{sig_layer['digest']}", accept="*/*")
    assert payload == {
        "critical": {
            "identity": {"docker-reference": f"{registry.host}/bundles/layout"},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature",
        },
        "optional": None,
    }
    assert base64.b64decode(sig_layer["annotations"]["dev.cosignproject.cosign/signature"])


def test_signing_twice_appends_a_second_signature_as_cosign_does(registry: Registry, tmp_path: Path) -> None:
    ref = f"{registry.host}/bundles/twice:v1"
    signed = sign_image(tmp_path, ref)
    sign_image(tmp_path, ref, key=OTHER)
    both = {"keys": [public_key_pem(KEY), public_key_pem(OTHER)], "keyOperation": "MustAll",
            "resourceBundleRef": {"repositories": [f"{registry.host}/bundles"]}}  # fmt: skip
    result = verdict(signed, both)
    assert (result.reason, len(result.signers)) == ("verified", 2), result.message


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("other-key", "signature-invalid"),
        ("outside-allow-list", "bundle-not-allowed"),
        ("prefix-is-not-a-path-boundary", "bundle-not-allowed"),
        ("bundles-not-enabled", "unsigned"),
        ("tag-moved-to-an-unsigned-image", "unsigned"),
        ("malformed-reference", "bundle-not-allowed"),
    ],
    ids=lambda v: v,
)
def test_bundles_that_must_not_verify(registry: Registry, tmp_path: Path, case: str, expected: str) -> None:
    ref = f"{registry.host}/bundles/deny-{case}:v1"
    raw_policy = policy(registry.host)
    if case == "other-key":
        signed = sign_image(tmp_path, ref, key=OTHER)
    elif case == "outside-allow-list":
        signed = sign_image(tmp_path, f"{registry.host}/elsewhere/app:v1")
    elif case == "prefix-is-not-a-path-boundary":
        signed = sign_image(tmp_path, f"{registry.host}/bundles-evil/app:v1")
    elif case == "bundles-not-enabled":
        signed = sign_image(tmp_path, ref)
        del raw_policy["resourceBundleRef"]
    elif case == "tag-moved-to-an-unsigned-image":
        signed = sign_image(tmp_path, ref)
        from provider.oci.bundles import push_bundle

        push_bundle(RegistryClient(), Reference.parse(ref), dump_yaml([configmap("app", mode="evil")]).encode())
    else:
        signed = sign_image(tmp_path, ref)
        signed["metadata"]["annotations"]["cosign.sigstore.dev/resourceBundleRef"] = f"{registry.host}/bundles/A:v1"
    result = verdict(signed, raw_policy)
    assert (result.allowed, result.reason) == (False, expected), result.message


def test_a_digest_reference_is_served_from_the_cache_without_the_registry(registry: Registry, tmp_path: Path) -> None:
    ref = f"{registry.host}/bundles/cached:v1"
    signed = sign_image(tmp_path, ref)
    source = OciBundleSource()
    first = source.fetch(Reference.parse(ref), time.monotonic() + 5, Limits())
    pinned = {**signed, "metadata": {**signed["metadata"], "annotations": {
        "cosign.sigstore.dev/resourceBundleRef": f"{registry.host}/bundles/cached@{first.digest}"}}}  # fmt: skip
    assert verdict(pinned, policy(registry.host), source).reason == "verified"
    # The same digest again, within the signatures' TTL: not one request.

    class NoRequests(RegistryClient):
        def request(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"a request was made: {args}")

    source.client = NoRequests()
    assert verdict(pinned, policy(registry.host), source).reason == "verified"
    # A tag is resolved every time (it may move): one manifest request, then the cache.
    assert first.digest.startswith("sha256:")


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        (stall, "bundle-unavailable"),
        (trickle, "bundle-unavailable"),
        (oversized_manifest, "bundle-invalid"),
        (huge_layer, "bundle-invalid"),
        (server_error, "bundle-unavailable"),
    ],
    ids=["stalls", "trickles", "manifest-over-the-limit", "layer-over-the-limit", "answers-503"],
)
def test_a_misbehaving_registry_is_a_denial_in_bounded_time(behaviour: Any, expected: str) -> None:
    server = Misbehaving(behaviour)
    try:
        obj = {**OBJECT, "metadata": {**OBJECT["metadata"], "annotations": {
            "cosign.sigstore.dev/resourceBundleRef": f"{server.host}/bundles/app:v1"}}}  # fmt: skip
        started = time.monotonic()
        result = verdict(obj, policy(server.host, timeoutSeconds=0.5))
        took = time.monotonic() - started
    finally:
        server.stop()
    assert (result.allowed, result.reason) == (False, expected), result.message
    assert took < 1.5, f"{took:.2f} s"  # the policy's 0.5 s plus a margin
    assert result.used_cluster == (expected == "bundle-unavailable")  # never cached


@pytest.mark.parametrize(
    ("behaviour", "says"),
    [
        (deep_manifest, "is nested deeper than 100 levels"),
        (manifest_with_a_5000_digit_number, "(5000 digits) is not finite as a float64"),
        (deep_token_answer, "token service answer is nested deeper than 100 levels"),
        (answer_with_101_header_fields, "with a head over http.client's limits (100 header fields"),
        (answer_with_a_70_kib_header_line, "with a head over http.client's limits (100 header fields"),
        (manifest_declaring_5000_digits_of_length, "answered 9999"),
    ],
    ids=[
        "manifest-30000-deep",
        "manifest-5000-digit-number",
        "token-answer-30000-deep",
        "101-header-fields",
        "70-kib-header-line",
        "content-length-of-5000-digits",
    ],
)
def test_hostile_answers_from_a_registry_are_bundle_invalid_in_our_words(behaviour: Any, says: str) -> None:
    """The registry is whoever the reference names. Limits of json (its recursion), int() (4300
    digits) and http.client (100 header fields, 64 KiB lines) tripped before any check of ours:
    RecursionError escaped decide(), the others were 'could not be asked' (bundle-unavailable)."""
    server = Misbehaving(behaviour)
    try:
        obj = {**OBJECT, "metadata": {**OBJECT["metadata"], "annotations": {
            "cosign.sigstore.dev/resourceBundleRef": f"{server.host}/bundles/app:v1"}}}  # fmt: skip
        result = verdict(obj, policy(server.host))
    finally:
        server.stop()
    assert (result.allowed, result.reason) == (False, "bundle-invalid"), result.message
    assert says in result.message


def test_a_registry_that_refuses_connections_is_a_denial_at_once() -> None:
    host = f"127.0.0.1:{free_port()}"  # nothing listens there
    obj = {**OBJECT, "metadata": {**OBJECT["metadata"], "annotations": {
        "cosign.sigstore.dev/resourceBundleRef": f"{host}/bundles/app:v1"}}}  # fmt: skip
    started = time.monotonic()
    result = verdict(obj, policy(host))
    assert (result.reason, time.monotonic() - started < 1.0) == ("bundle-unavailable", True), result.message


def test_without_a_registry_client_a_bundle_is_a_denial(registry: Registry, tmp_path: Path) -> None:
    signed = sign_image(tmp_path, f"{registry.host}/bundles/noclient:v1")
    result = decide(Review.for_object(signed), Policy.from_dict(policy(registry.host), bounds=LOCAL))
    assert (result.reason, result.allowed) == ("bundle-unavailable", False)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("registry.example.com/team/app:v1", True),
        ("registry.example.com:5000/team/app@sha256:" + "a" * 64, True),
        ("nginx", True),
        ("registry.example.com/Team/app:v1", False),
        ("registry.example.com/team/app:v1@sha1:" + "a" * 40, False),
        ("registry.example.com/team//app", False),
        (" registry.example.com/app", False),
        ("registry.example.com/team/../app", False),
    ],
    ids=["tag", "port-and-digest", "docker-hub-short", "upper-case", "sha1", "empty-component", "space", "dot-dot"],
)
def test_references_are_parsed_strictly(text: str, ok: bool) -> None:
    from provider.errors import VerificationFailure

    if ok:
        Reference.parse(text)
    else:
        with pytest.raises(VerificationFailure):
            Reference.parse(text)


class _Scripted(RegistryClient):
    """A client whose wire answers are scripted: the scheme rules are what is under test, not the network."""

    def __init__(self, answers: list[Any], plain: bool) -> None:
        super().__init__()
        self.answers, self.plain, self.asked = answers, plain, []  # type: ignore[var-annotated]

    def _scheme(self, registry: str) -> str:
        return "http" if self.plain else "https"

    def _once(self, method: str, url: str, headers: dict[str, str], body: bytes | None, **_: Any) -> Any:
        self.asked.append(url)
        return self.answers.pop(0)


def _redirect(location: str) -> Any:
    from provider.oci.registry import Answer

    return Answer(302, {"location": location}, b"")


def _challenge(realm: str) -> Any:
    from provider.oci.registry import Answer

    return Answer(401, {"www-authenticate": f'Bearer realm="{realm}",service="reg"'}, b"")


@pytest.mark.parametrize(
    ("plain", "answer", "allowed"),
    [
        (False, _redirect("http://127.0.0.1:8888/metrics"), False),
        (False, _challenge("http://127.0.0.1:8443/token"), False),
        (False, _redirect("http://blobs.example/x"), False),
        (True, _redirect("http://127.0.0.1:5000/v2/x/blobs/y"), True),
        (True, _redirect("http://blobs.example/x"), False),
        (False, _redirect("https://blobs.example/x"), True),
    ],
    ids=[
        "https-registry-redirects-to-loopback-http",
        "https-registry-names-a-loopback-http-token-realm",
        "https-registry-redirects-to-plain-http",
        "local-http-registry-redirects-on-loopback",
        "local-http-registry-redirects-off-loopback",
        "https-redirect-to-https",
    ],
)
def test_plain_http_is_followed_only_from_a_plain_http_registry_and_only_on_loopback(
    plain: bool, answer: Any, allowed: bool
) -> None:
    """An allow-listed HTTPS registry must not point the service at its own loopback ports (a metrics or API port)."""
    from provider.oci.registry import Answer, RegistryError

    client = _Scripted([answer, Answer(200, {}, b"{}")], plain)
    try:
        result = client.request("GET", "registry.example", "/v2/x/manifests/v1", scope="s", deadline=1e18, max_bytes=99)
    except RegistryError as error:
        assert not allowed, error
        assert "not an HTTPS URL" in str(error)
        assert len(client.asked) == 1  # nothing sent to the target
    else:
        assert allowed, client.asked
        assert result.status == 200 and len(client.asked) == 2
