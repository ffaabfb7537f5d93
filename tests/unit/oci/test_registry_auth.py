"""Registry credentials for bundles, against Debian's docker-registry with htpasswd authentication.

Where credentials come from: a pull Secret the policy names (read from the fake
API server, within MANIFEST_PROVIDER_PULL_SECRET_NAMESPACES) or the operator's
Docker config file (MANIFEST_PROVIDER_REGISTRY_AUTH_FILE); where they go: the
registry their ``auths`` key names, and nowhere else (provider/oci/auth.py).
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from provider.bounds import Bounds
from provider.errors import PolicyError
from provider.kube.keysecrets import KubeKeySecretReader
from provider.oci.auth import MAX_CONFIG_BYTES, AuthFile, parse_docker_config, registry_of
from provider.oci.bundles import OciBundleSource
from provider.oci.registry import RegistryClient
from provider.policy.schema import Policy
from provider.result import Result
from provider.review import Review
from provider.signatures.sources import Sources
from provider.verifier import decide
from tests.support.bundles import sign_image
from tests.support.fakeapi import FakeApiServer, runner_for
from tests.support.keys import make_key, public_key_pem
from tests.support.registry import Misbehaving, Registry

KEY = make_key("ecdsa-p256", 40)
USER, PASSWORD = "puller", "s3cret-pull"
BOUNDS = Bounds(pull_secret_namespaces=("registry-auth",), bundle_repositories=None)


def docker_config(registry: str, user: str = USER, password: str = PASSWORD) -> str:
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    return json.dumps({"auths": {registry: {"auth": auth}}})


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    running = Registry(tmp_path_factory.mktemp("registry"), users={USER: PASSWORD})
    yield running
    running.stop()


@pytest.fixture(scope="module")
def signed(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A bundle pushed with ``sign --image`` through the user's Docker config (DOCKER_CONFIG), as docker pushes."""
    directory = tmp_path_factory.mktemp("docker")
    (directory / "config.json").write_text(docker_config(f"http://{registry.host}"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DOCKER_CONFIG", str(directory))
        return sign_image(tmp_path_factory.mktemp("sign"), f"{registry.host}/bundles/app:v1")


def verdict(obj: dict[str, Any], policy: dict[str, Any], sources: Sources) -> Result:
    return decide(Review.for_object(obj), Policy.from_dict(policy, bounds=BOUNDS), sources=sources)


def bundle_policy(registry: Registry, **extra: Any) -> dict[str, Any]:
    return {"keys": [public_key_pem(KEY)],
            "resourceBundleRef": {"repositories": [f"{registry.host}/bundles"], **extra}}  # fmt: skip


def test_anonymous_fetches_are_refused_by_the_registry(registry: Registry, signed: dict[str, Any]) -> None:
    result = verdict(signed, bundle_policy(registry), Sources(bundles=OciBundleSource()))
    assert (result.allowed, result.reason) == (False, "bundle-unavailable"), result.message
    assert "401" in result.message


def test_a_pull_secret_the_policy_names_opens_the_registry(
    registry: Registry, signed: dict[str, Any], fake: FakeApiServer, tmp_path: Path
) -> None:
    fake.namespaces.add("registry-auth")
    encoded = base64.b64encode(docker_config(registry.host).encode()).decode()
    fake.add({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
              "metadata": {"name": "bundles-pull", "namespace": "registry-auth"},
              "data": {".dockerconfigjson": encoded}})  # fmt: skip
    fake.granted_names["secrets"] = {("registry-auth", "bundles-pull")}
    keys = KubeKeySecretReader(lambda: runner_for(fake, tmp_path))
    source = OciBundleSource()
    policy = bundle_policy(registry, pullSecrets=[{"namespace": "registry-auth", "name": "bundles-pull"}])
    result = verdict(signed, policy, Sources(bundles=source, keys=keys))
    assert result.reason == "verified", result.message
    # What was fetched with the tenant's credentials is not served to a fetch without them from the cache.
    anonymous = verdict(signed, bundle_policy(registry), Sources(bundles=source))
    assert (anonymous.allowed, anonymous.reason) == (False, "bundle-unavailable"), anonymous.message


def test_the_operators_auth_file_is_read_again_when_it_changes(
    registry: Registry, signed: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "config.json"
    path.write_text(docker_config(registry.host, password="wrong"))
    source = OciBundleSource(auth_file=AuthFile(str(path)))
    assert verdict(signed, bundle_policy(registry), Sources(bundles=source)).reason == "bundle-unavailable"
    path.write_text(docker_config(registry.host) + "\n")  # a mounted Secret replaced: new size, new inode time
    assert verdict(signed, bundle_policy(registry), Sources(bundles=source)).reason == "verified"


def test_the_operators_auth_file_is_read_only_if_a_regular_file_within_its_bound(tmp_path: Path) -> None:
    """MANIFEST_PROVIDER_REGISTRY_AUTH_FILE is the operator's, but what sits at the path may change under it.

    A FIFO there (or a device) is never opened -- opening a FIFO without a writer blocks the fetching
    thread for ever -- and gives no credentials, as a missing file does (the fetch goes anonymous, the
    registry decides); a file over MAX_CONFIG_BYTES is refused before it is read, naming neither its
    content nor a credential.
    """
    path = tmp_path / "config.json"
    assert AuthFile(str(path)).credentials() == {}  # missing: anonymous
    os.mkfifo(path)
    found: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: found.append(AuthFile(str(path)).credentials()), daemon=True)
    reader.start()
    reader.join(60)  # far beyond a stat() call: a thread still here is blocked opening the FIFO
    assert not reader.is_alive(), "the auth file reader blocked on a FIFO"
    assert found == [{}]
    path.unlink()
    path.write_text(docker_config("r.example", password="pw-secret") + " " * MAX_CONFIG_BYTES)
    with pytest.raises(PolicyError) as refused:
        AuthFile(str(path)).credentials()
    assert refused.value.message == f"the registry auth file {path}: larger than {MAX_CONFIG_BYTES} bytes"
    with pytest.raises(PolicyError, match="larger than"):  # a pull Secret's value: the same bound
        parse_docker_config(path.read_text(), "pull")


def test_a_credential_for_another_registry_is_not_sent(
    registry: Registry, signed: dict[str, Any], tmp_path: Path
) -> None:
    other_port = int(registry.host.rsplit(":", 1)[1]) + 1
    path = tmp_path / "config.json"
    path.write_text(docker_config(f"127.0.0.1:{other_port}"))  # same host, another port: another registry
    source = OciBundleSource(auth_file=AuthFile(str(path)))
    assert verdict(signed, bundle_policy(registry), Sources(bundles=source)).reason == "bundle-unavailable"


def test_a_pull_secret_outside_the_operators_namespaces_is_refused_unread(registry: Registry) -> None:
    policy = bundle_policy(registry, pullSecrets=[{"namespace": "kube-system", "name": "anything"}])
    with pytest.raises(PolicyError, match="MANIFEST_PROVIDER_PULL_SECRET_NAMESPACES"):
        Policy.from_dict(policy, bounds=BOUNDS)


def test_credentials_never_follow_a_redirect_to_another_host() -> None:
    """A registry that takes Basic credentials, then redirects the blob to another host: no Authorization there."""
    seen: list[str | None] = []
    lock = threading.Lock()

    def elsewhere(handler: BaseHTTPRequestHandler) -> None:
        with lock:
            seen.append(handler.headers.get("Authorization"))
        handler.send_response(404)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    target = Misbehaving(elsewhere)

    def registry(handler: BaseHTTPRequestHandler) -> None:
        if handler.headers.get("Authorization") is None:
            handler.send_response(401)
            handler.send_header("WWW-Authenticate", 'Basic realm="r"')
        else:
            handler.send_response(307)
            handler.send_header("Location", f"http://{target.host}/elsewhere")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    origin = Misbehaving(registry)
    try:
        client = RegistryClient(credentials=lambda host: (USER, PASSWORD) if host == origin.host else None)
        answer = client.request("GET", origin.host, "/v2/x/blobs/sha256:" + "0" * 64, scope="repository:x:pull",
                                deadline=__import__("time").monotonic() + 5, max_bytes=1024)  # fmt: skip
        assert answer.status == 404
    finally:
        origin.stop()
        target.stop()
    assert seen == [None]  # the redirect target was asked, without the registry's credentials


@pytest.mark.parametrize(
    ("key", "registry"),
    [("https://index.docker.io/v1/", "index.docker.io"), ("docker.io", "index.docker.io"),
     ("http://127.0.0.1:5000", "127.0.0.1:5000"), ("registry.example.com/some/path", "registry.example.com"),
     ("HTTPS://Registry.Example.com:443/v2/", "registry.example.com:443"), ("*.example.com", "*.example.com")],
    ids=["hub-url", "hub-alias", "scheme-and-port", "path-dropped", "case", "wildcard-literal"],
)  # fmt: skip
def test_auths_keys_are_read_as_the_docker_cli_reads_them(key: str, registry: str) -> None:
    assert registry_of(key) == registry


def test_two_credentials_for_one_registry_are_ambiguous_and_nothing_is_quoted() -> None:
    text = json.dumps({"auths": {"https://r.example": {"auth": base64.b64encode(b"a:pw-first").decode()},
                                 "r.example": {"auth": base64.b64encode(b"b:pw-second").decode()}}})  # fmt: skip
    with pytest.raises(PolicyError) as refused:
        parse_docker_config(text, "pull")
    assert "pw-" not in refused.value.message
    legacy = json.dumps({"r.example": {"auth": base64.b64encode(b"a:pw").decode(), "email": "a@example.com"}})
    assert parse_docker_config(legacy, "dockercfg")["r.example"].pair() == ("a", "pw")  # .dockercfg's form


def test_the_token_flow_takes_basic_credentials_at_the_realm_and_keeps_tokens_per_credential() -> None:
    """The Docker token protocol: a Bearer challenge, Basic credentials at the realm, the token at the registry.

    A token obtained with credentials is not reused by a request made without them (or with others)."""
    import time

    at_realm: list[str | None] = []
    at_registry: list[str | None] = []

    def behaviour(handler: BaseHTTPRequestHandler) -> None:
        auth = handler.headers.get("Authorization")
        if handler.path.startswith("/token"):
            at_realm.append(auth)
            token = "tok-" + ("user" if auth else "anonymous")
            body = json.dumps({"token": token, "expires_in": 300}).encode()
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
            return
        at_registry.append(auth)
        if auth is None:
            handler.send_response(401)
            handler.send_header("WWW-Authenticate",
                                f'Bearer realm="http://{handler.headers["Host"]}/token",service="reg"')  # fmt: skip
        else:
            handler.send_response(404 if auth == "Bearer tok-anonymous" else 200)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    server = Misbehaving(behaviour)
    try:
        client = RegistryClient()
        creds = lambda host: (USER, PASSWORD)  # noqa: E731
        ask = dict(scope="repository:x:pull", max_bytes=1024)
        assert client.request("GET", server.host, "/v2/x/manifests/a", deadline=time.monotonic() + 5,
                              credentials=creds, **ask).status == 200  # type: ignore[arg-type]  # fmt: skip
        assert client.request("GET", server.host, "/v2/x/manifests/a", deadline=time.monotonic() + 5,
                              **ask).status == 404  # type: ignore[arg-type]  # fmt: skip
    finally:
        server.stop()
    basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert at_realm == [basic, None]  # the second, anonymous request got a token of its own
    assert at_registry == [None, "Bearer tok-user", None, "Bearer tok-anonymous"]
