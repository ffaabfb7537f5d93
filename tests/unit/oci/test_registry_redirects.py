"""Attack classes 15 and 16 (docs/security.md): the registry a policy points at decides too much -- its
redirects, token realms and token lifetimes.

Every test here failed on the code before the fix. The real gunicorn server's side is
``tests/integration/test_attack_policy_is_data.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from provider import Policy, Review, decide
from provider.bounds import LOCAL
from provider.oci.bundles import OciBundleSource
from provider.oci.registry import RegistryClient
from provider.result import Result
from provider.signatures.sources import Sources
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap
from tests.support.registry import Misbehaving

KEY = make_key("ecdsa-p256", 250)


# --- the registry a policy points at decides too much -----------------------------------------------------------


def _serve(routes: dict[str, Callable[[Any], None]]) -> Misbehaving:
    """A loopback HTTP registry whose GET ``path`` answers with ``routes[path]`` (404 elsewhere)."""

    def behaviour(handler: Any) -> None:
        path = handler.path.split("?")[0]
        answer = routes.get(path)
        if answer is None:
            handler.send_response(404)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        answer(handler)

    return Misbehaving(behaviour)


def _redirect(location: str) -> Callable[[Any], None]:
    def answer(handler: Any) -> None:
        handler.send_response(302)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return answer


def _json(body: Any) -> Callable[[Any], None]:
    data = json.dumps(body).encode()

    def answer(handler: Any) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    return answer


def _bundle_object(host: str) -> dict[str, Any]:
    obj = configmap("app")
    obj["metadata"]["annotations"] = {"cosign.sigstore.dev/resourceBundleRef": f"{host}/bundles/app:v1"}
    return obj


def _bundle_verdict(host: str, client: RegistryClient | None = None) -> Result:
    policy = Policy.from_dict(
        {"keys": [public_key_pem(KEY)], "resourceBundleRef": {"repositories": [f"{host}/bundles"]}}, bounds=LOCAL
    )
    sources = Sources(bundles=OciBundleSource(client or RegistryClient()))
    return decide(Review.for_object(_bundle_object(host)), policy, sources=sources)


@pytest.mark.parametrize(
    "location",
    ["http://[::1/v2/x", "http://[fe80::1%25eth0/x", "http://127.0.0.1:99999/x", "http://127.0.0.1:port/x",
     "http://[::1]:70000/x", "//[/x", "http://[]/x"],
    ids=["unclosed-ipv6", "unclosed-scoped-ipv6", "port-99999", "port-not-a-number", "ipv6-port-70000",
         "scheme-relative-bracket", "empty-ipv6"],
)  # fmt: skip
@pytest.mark.parametrize("how", ["redirect", "token-realm"])
def test_a_broken_url_from_the_registry_is_this_objects_denial(location: str, how: str) -> None:
    """Before: ValueError out of decide() -- a traceback in the CLI, a batch-wide systemError on the Gatekeeper route."""
    manifest_path = "/v2/bundles/app/manifests/v1"
    if how == "redirect":
        registry = _serve({manifest_path: _redirect(location)})
    else:

        def challenge(handler: Any) -> None:
            handler.send_response(401)
            handler.send_header("WWW-Authenticate", f'Bearer realm="{location}",service="r"')
            handler.send_header("Content-Length", "0")
            handler.end_headers()

        registry = _serve({manifest_path: challenge})
    try:
        result = _bundle_verdict(registry.host)
    finally:
        registry.stop()
    assert not result.allowed
    assert result.reason in ("bundle-invalid", "bundle-unavailable"), result.message
    assert "Traceback" not in result.message and "ValueError" not in result.message


def test_the_registrys_token_never_reaches_another_host_however_the_redirects_chain() -> None:
    """Before: A -> B -> B sent A's bearer token to B on the second hop (compared with the previous hop)."""
    seen_by_b: list[str | None] = []
    b_routes: dict[str, Callable[[Any], None]] = {}
    other = _serve(b_routes)

    def record(then: Callable[[Any], None]) -> Callable[[Any], None]:
        def answer(handler: Any) -> None:
            seen_by_b.append(handler.headers.get("Authorization"))
            then(handler)

        return answer

    b_routes["/hop1"] = record(_redirect(f"http://{other.host}/hop2"))
    b_routes["/hop2"] = record(_redirect(f"http://{other.host}/final"))
    b_routes["/final"] = record(_json({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                                       "config": {}, "layers": []}))  # fmt: skip
    a_routes: dict[str, Callable[[Any], None]] = {}
    registry = _serve(a_routes)

    def manifests(handler: Any) -> None:
        if handler.headers.get("Authorization") == "Bearer token-of-a":
            _redirect(f"http://{other.host}/hop1")(handler)
            return
        handler.send_response(401)
        handler.send_header("WWW-Authenticate", f'Bearer realm="http://{registry.host}/token",service="a"')
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    a_routes["/v2/bundles/app/manifests/v1"] = manifests
    a_routes["/token"] = _json({"token": "token-of-a", "expires_in": 300})
    try:
        result = _bundle_verdict(registry.host)
    finally:
        registry.stop()
        other.stop()
    assert seen_by_b == [None, None, None], seen_by_b  # three hops at B, none with A's token
    assert not result.allowed


@pytest.mark.parametrize("how", ["redirect", "token-realm"])
def test_redirects_and_token_realms_go_only_to_hosts_the_operator_allows(how: str) -> None:
    """Before: an allow-listed registry could send the fetch to any host and port (here: another loopback port)."""
    asked: list[str] = []

    def elsewhere(handler: Any) -> None:
        asked.append(handler.path)
        _json({"token": "t"})(handler)

    target = _serve({"/anything": elsewhere})
    manifest_path = "/v2/bundles/app/manifests/v1"
    if how == "redirect":
        registry = _serve({manifest_path: _redirect(f"http://{target.host}/anything")})
    else:

        def challenge(handler: Any) -> None:
            handler.send_response(401)
            handler.send_header("WWW-Authenticate", f'Bearer realm="http://{target.host}/anything",service="r"')
            handler.send_header("Content-Length", "0")
            handler.end_headers()

        registry = _serve({manifest_path: challenge})
    try:
        pinned = _bundle_verdict(registry.host, RegistryClient(hosts=()))
        assert asked == [] and not pinned.allowed
        assert "MANIFEST_PROVIDER_REGISTRY_HOSTS" in pinned.message
        _bundle_verdict(registry.host, RegistryClient(hosts=(target.host,)))
        assert asked == ["/anything"] or asked[0].startswith("/anything")  # the operator's host is followed
    finally:
        registry.stop()
        target.stop()


@pytest.mark.parametrize(
    "expires", ["1" + "0" * 400, "-" + "1" * 400], ids=["400-digits", "minus-400-digits"],
)  # fmt: skip
def test_a_token_lifetime_of_any_size_is_read(expires: str) -> None:
    """Before: float() of a 400-digit expires_in raised OverflowError (an internal error for the batch)."""
    routes: dict[str, Callable[[Any], None]] = {}
    registry = _serve(routes)

    def manifests(handler: Any) -> None:
        handler.send_response(401)
        handler.send_header("WWW-Authenticate", f'Bearer realm="http://{registry.host}/token",service="a"')
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    body = f'{{"token": "t", "expires_in": {expires}}}'.encode()

    def token(handler: Any) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    routes["/v2/bundles/app/manifests/v1"] = manifests
    routes["/token"] = token
    try:
        result = _bundle_verdict(registry.host)
    finally:
        registry.stop()
    assert not result.allowed and result.reason.startswith("bundle-"), result.message
