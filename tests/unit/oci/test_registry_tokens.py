"""The registry client's token cache: objects naming ever new repositories do not grow it without bound.

From an attack pass without any signing key (docs/security.md): each test is named by the attack; a table
row's id names the input.
"""

from __future__ import annotations

import http.server
import json

from provider import Policy, Review, decide
from provider.bounds import LOCAL
from provider.oci.bundles import OciBundleSource
from provider.oci.registry import MAX_TOKENS, RegistryClient
from provider.signatures.sources import Sources
from tests.support.keys import public_key_pem
from tests.support.manifests import configmap
from tests.support.one_key import KEY
from tests.support.registry import Misbehaving

# --- resourceBundleRef: the object chooses its reference, the allow-list must not be wider than written ---------


def _token_registry() -> tuple[Misbehaving, list[int]]:
    """A registry that wants a Bearer token for every repository and has no bundle anywhere."""
    tokens_issued = [0]
    box: dict[str, str] = {}

    def behaviour(handler: http.server.BaseHTTPRequestHandler) -> None:
        if handler.path.startswith("/token"):
            tokens_issued[0] += 1
            body = json.dumps({"token": f"t{tokens_issued[0]}", "expires_in": 300}).encode()
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
        elif handler.headers.get("Authorization"):
            body = b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}'
            handler.send_response(404)
        else:
            body = b""
            handler.send_response(401)
            handler.send_header("WWW-Authenticate", f'Bearer realm="http://{box["host"]}/token",service="reg"')
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    server = Misbehaving(behaviour)
    box["host"] = server.host
    return server, tokens_issued


def test_objects_naming_ever_new_repositories_do_not_grow_the_token_cache_without_bound() -> None:
    # The token cache is keyed by scope, the scope names the repository, and the object chooses the repository
    # (anything under an allowed prefix): one request per fresh name used to keep one more token for ever.
    server, issued = _token_registry()
    client = RegistryClient()
    policy = Policy.from_dict(
        {"keys": [public_key_pem(KEY)], "resourceBundleRef": {"repositories": [f"{server.host}/bundles"]}},
        bounds=LOCAL,
    )
    sources = Sources(bundles=OciBundleSource(client))
    names = 2 * MAX_TOKENS
    try:
        for i in range(names):
            obj = configmap("app")
            obj["metadata"]["annotations"] = {"cosign.sigstore.dev/resourceBundleRef": f"{server.host}/bundles/r{i}:v1"}
            result = decide(Review.for_object(obj), policy, sources=sources)
            assert (result.allowed, result.reason) == (False, "bundle-invalid"), result.message
    finally:
        server.stop()
    assert issued[0] == names  # every fresh repository did cost a token: the cache was exercised
    assert len(client._tokens) <= MAX_TOKENS
