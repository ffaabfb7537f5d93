"""Attack classes 11-17 (docs/security.md): a policy is data, and its author cannot make the verifier read or wait.

The policy arrives with each request, and a namespaced Kyverno ``Policy`` is a
namespace admin's, sent with Kyverno's own token: the service cannot tell it
from the operator's. Each section below is one attack class a policy author
(or the registry a policy points at) could use, named by what it did before,
with other inputs than the examples that found it. Every test here failed on
the code before the fix. The real gunicorn server's side of the same classes
is ``tests/integration/test_attack_policy_is_data.py``.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import logging
import os
import socket
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from provider import Bounds, Policy, Review, decide
from provider.bounds import LOCAL, SERVICE
from provider.errors import PolicyError, TransientError
from provider.keys.pem import sign_bytes
from provider.kube.configmaps import KubeConfigMapReader
from provider.neighbours.csr import CsrPolicy
from provider.oci.bundles import OciBundleSource, _push_blob, push_signature
from provider.oci.registry import RegistryClient
from provider.result import Result
from provider.signatures.signing import dump_yaml, sign_documents
from provider.signatures.sources import Reference, Sources, simple_signing_payload
from tests.support.fakeapi import FakeApiServer, runner_for
from tests.support.keyless import World
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap
from tests.support.registry import Misbehaving, Registry

REPO = Path(__file__).resolve().parents[2]
KEY = make_key("ecdsa-p256", 250)
WORLD = World()
#: Seconds a check that must not block may take before the test calls it blocked: far beyond any honest
#: answer on a loaded machine, far below "for ever" (what it took before).
BLOCKED = 30.0


def keyless_policy(root: Any, **extra: Any) -> dict[str, Any]:
    return {"signers": ["jane@example.com"], "trustedRoot": root, **extra}


def finishes(action: Callable[[], Any]) -> Any:
    """``action()``'s value or exception, or a failure if it is still running after :data:`BLOCKED` seconds.

    A thread stuck in ``open()`` of a FIFO cannot be stopped; it is a daemon, so the test
    run still ends, and the test fails instead of hanging.
    """
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(("value", action()))
        except BaseException as exc:
            outcome.append(("error", exc))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(BLOCKED)
    assert not worker.is_alive(), f"still blocked after {BLOCKED} s"
    kind, value = outcome[0]
    if kind == "error":
        raise value
    return value


# --- trustedRoot names a file on the server: the operator decides which ----------------------------------------


@pytest.fixture
def server_files(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Paths of every kind a policy could name on the verifier's machine, one of each."""
    root_file = tmp_path / "root.json"
    root_file.write_text(json.dumps(WORLD.trusted_root()))  # a *valid* TrustedRoot: it must not be used either
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    unix = tmp_path / "unix.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(unix))
    read_end, write_end = os.pipe()  # a pipe of this process, as a worker's own are
    link = tmp_path / "link.json"
    link.symlink_to(root_file)
    try:
        yield {
            "valid-trusted-root": str(root_file),
            "missing": str(tmp_path / "missing.json"),
            "directory": str(tmp_path),
            "fifo": str(fifo),
            "own-pipe-through-proc": f"/proc/self/fd/{read_end}",
            "own-stdin-through-proc": "/proc/self/fd/0",
            "character-device": "/dev/zero",
            "unix-socket": str(unix),
            "symlink-to-a-root": str(link),
            "system-file": "/etc/hostname",
            "relative": "root.json",
        }
    finally:
        listener.close()
        os.close(read_end)
        os.close(write_end)


def test_a_path_the_operator_did_not_allow_is_refused_alike_whatever_it_names(server_files: dict[str, str]) -> None:
    """Before: any path was opened -- a FIFO or the worker's own pipe blocked the thread for ever, the
    error told a file from a directory from nothing, and a valid root file was used."""
    messages = {}
    for what, path in server_files.items():
        with pytest.raises(PolicyError) as refused:
            finishes(lambda path=path: Policy.from_dict(keyless_policy(path)))
        assert refused.value.reason == "policy-invalid"
        messages[what] = refused.value.message.replace(repr(path), "<path>")
    assert len(set(messages.values())) == 1, messages  # nothing about what the path is
    (message,) = set(messages.values())
    assert "not a trust-root file the operator allows" in message


@pytest.mark.parametrize(
    "what",
    ["fifo", "own-pipe-through-proc", "character-device", "unix-socket", "directory"],
)
def test_an_allowed_path_that_is_not_a_regular_file_is_never_opened(server_files: dict[str, str], what: str) -> None:
    """The operator lists the file (a mistake, or a file replaced later): it still must not stop a worker."""
    path = server_files[what]
    for bounds in (Bounds(trusted_root_files=(path,)), LOCAL):
        with pytest.raises(PolicyError) as refused:
            finishes(lambda bounds=bounds: Policy.from_dict(keyless_policy(path), bounds=bounds))
        assert refused.value.reason == "policy-invalid"
    assert "not a regular file" in refused.value.message  # the CLI's user (LOCAL) is told why


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_what_is_wrong_with_an_allowed_file_goes_to_the_log_not_to_the_policy(tmp_path: Path) -> None:
    """Before: missing, directory, and for a JSON file a duplicated key's name, a non-finite number or the line and
    column of a syntax error came back in the answer."""
    contents = {
        "duplicate-key": b'{"tlogs": [], "secret-key-name": 1, "secret-key-name": 2}',
        "not-finite": b'{"tlogs": [NaN]}',
        "syntax-error": b'{\n\n   "tlogs": [1,,]}',
        "not-a-root": b'{"tlogs": "s3cret"}',
    }
    paths = {name: tmp_path / f"{name}.json" for name in contents}
    for name, data in contents.items():
        paths[name].write_bytes(data)
    paths["missing"] = tmp_path / "missing.json"
    paths["directory"] = tmp_path / "dir"
    paths["directory"].mkdir()
    bounds = Bounds(trusted_root_files=tuple(str(p) for p in paths.values()))
    messages = set()
    records = _Records()
    logger = logging.getLogger("provider.trust")
    level = logger.level
    logger.setLevel(logging.WARNING)  # whatever another test left the "provider" logger's level at
    logger.addHandler(records)
    try:
        for path in paths.values():
            with pytest.raises(PolicyError) as refused:
                Policy.from_dict(keyless_policy(str(path)), bounds=bounds)
            messages.add(refused.value.message.replace(repr(str(path)), "<path>"))
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    assert len(messages) == 1, messages
    for leak in ("secret-key-name", "NaN", "line", "column", "s3cret", "No such file", "directory"):
        assert leak not in next(iter(messages))
    logged = "\n".join(records.lines)
    assert "secret-key-name" in logged and "No such file" in logged  # the operator can still see why


def test_an_allowed_regular_file_is_read_and_only_until_the_request_deadline(tmp_path: Path) -> None:
    path = tmp_path / "root.json"
    path.write_text(json.dumps(WORLD.trusted_root()))
    mounted = tmp_path / "mounted.json"  # ConfigMap and Secret volumes are symbolic links: they are followed
    mounted.symlink_to(path)
    bounds = Bounds(trusted_root_files=(str(mounted),))
    policy = Policy.from_dict(keyless_policy(str(mounted)), bounds=bounds, deadline=time.monotonic() + BLOCKED)
    inline = Policy.from_dict(keyless_policy(WORLD.trusted_root()))
    assert policy.trusted_root is not None and inline.trusted_root is not None
    assert policy.trusted_root.digest == inline.trusted_root.digest
    with pytest.raises(TransientError) as late:
        Policy.from_dict(keyless_policy(str(mounted)), bounds=bounds, deadline=time.monotonic() - 1)
    assert late.value.reason == "deadline-exceeded"


# --- signatureResourceRef names another tenant's ConfigMap ------------------------------------------------------

#: B's signature: a document signed without a namespace (so it matches an object of that name anywhere), whose
#: values are B's own.
B_SECRET_VALUE = "tenant-b-private-endpoint.internal"


@pytest.fixture
def tenant_b(fake: FakeApiServer) -> FakeApiServer:
    signed_b = configmap("app", namespace=None, endpoint=B_SECRET_VALUE)
    (signed,) = sign_documents([signed_b], KEY)
    annotations = signed["metadata"]["annotations"]
    data = {name: annotations[f"cosign.sigstore.dev/{name}"] for name in ("message", "signature")}
    fake.namespaces |= {"tenant-a", "tenant-b"}
    fake.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b-signatures", "namespace": "tenant-b"},
              "data": data})  # fmt: skip
    fake.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b-settings", "namespace": "tenant-b"},
              "data": {"colour": "blue"}})  # fmt: skip
    return fake


def configmap_verdict(
    fake: FakeApiServer,
    tmp_path: Path,
    ref: str,
    obj: dict[str, Any],
    *,
    bounds: Bounds = SERVICE,
    namespace: str | None = None,
) -> Result:
    reader = KubeConfigMapReader(lambda: runner_for(fake, tmp_path))
    policy = Policy.from_dict({"keys": [public_key_pem(KEY)], "signatureResourceRef": ref}, bounds=bounds)
    return decide(Review(object=obj, namespace=namespace), policy, sources=Sources(configmaps=reader))


def _configmap_gets(fake: FakeApiServer) -> list[str]:
    return [r.path for r in fake.requests if "/configmaps/" in r.path]


@pytest.mark.parametrize("name", ["b-signatures", "b-settings", "does-not-exist"])
def test_a_policy_gets_nothing_of_another_namespaces_configmaps(
    tenant_b: FakeApiServer, tmp_path: Path, name: str
) -> None:
    """Before: B's signed values came back in A's diff, and 'does not exist' against 'has no message entry' told
    which of B's ConfigMaps exist."""
    admitted = configmap("app", namespace="tenant-a", endpoint="attacker-guess")
    with pytest.raises(PolicyError) as refused:
        configmap_verdict(tenant_b, tmp_path, f"k8s://ConfigMap/tenant-b/{name}", admitted)
    message = refused.value.message.replace(name, "<name>")
    assert refused.value.reason == "policy-invalid"
    assert B_SECRET_VALUE not in message and "blue" not in message
    assert "namespace 'tenant-b'" in message
    assert _configmap_gets(tenant_b) == []  # the API server was never asked
    expected = (
        "signatureResourceRef: policies may not read signature ConfigMaps in namespace 'tenant-b' "
        "(k8s://ConfigMap/tenant-b/<name>); they may read the admitted object's own namespace and the namespaces "
        "the operator lists (MANIFEST_PROVIDER_SIGNATURE_NAMESPACES)"
    )
    assert message == expected


def test_the_review_cannot_borrow_a_namespace_the_object_does_not_have(tenant_b: FakeApiServer, tmp_path: Path) -> None:
    admitted = configmap("app", namespace="tenant-a")
    with pytest.raises(PolicyError):
        configmap_verdict(tenant_b, tmp_path, "k8s://ConfigMap/tenant-b/b-signatures", admitted, namespace="tenant-b")
    cluster_scoped = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}
    with pytest.raises(PolicyError):
        configmap_verdict(tenant_b, tmp_path, "k8s://ConfigMap/tenant-b/b-signatures", cluster_scoped)
    assert _configmap_gets(tenant_b) == []


def test_own_and_listed_namespaces_are_read_and_the_operator_can_take_the_own_one_away(
    tenant_b: FakeApiServer, tmp_path: Path
) -> None:
    ref = "k8s://ConfigMap/tenant-b/b-signatures"
    own = configmap("app", namespace="tenant-b", endpoint=B_SECRET_VALUE)
    assert configmap_verdict(tenant_b, tmp_path, ref, own).reason == "verified"
    listed = configmap("app", namespace="tenant-a", endpoint=B_SECRET_VALUE)
    shared = Bounds(signature_namespaces=("tenant-b",))
    assert configmap_verdict(tenant_b, tmp_path, ref, listed, bounds=shared).reason == "verified"
    with pytest.raises(PolicyError, match="only the namespaces the operator lists"):
        configmap_verdict(tenant_b, tmp_path, ref, own, bounds=Bounds(own_namespace_signatures=False))


def test_a_missing_configmap_and_one_without_a_signature_read_alike(tenant_b: FakeApiServer, tmp_path: Path) -> None:
    admitted = configmap("app", namespace="tenant-b")
    missing = configmap_verdict(tenant_b, tmp_path, "k8s://ConfigMap/tenant-b/does-not-exist", admitted)
    unsigned = configmap_verdict(tenant_b, tmp_path, "k8s://ConfigMap/tenant-b/b-settings", admitted)
    assert missing.reason == unsigned.reason == "unsigned"
    assert missing.message.replace("does-not-exist", "X") == unsigned.message.replace("b-settings", "X")


class _Recording:
    """A ConfigMap reader that records the deadline it is given (the port, not the cluster, is under test)."""

    def __init__(self) -> None:
        self.deadlines: list[float] = []

    def read_data(self, namespace: str, name: str, deadline: float) -> dict[str, str] | None:
        self.deadlines.append(deadline)
        return None


def test_the_configmap_read_ends_by_the_request_deadline() -> None:
    reader = _Recording()
    policy = Policy.from_dict({"keys": [public_key_pem(KEY)], "signatureResourceRef": "k8s://ConfigMap/ns/sigs"})
    deadline = time.monotonic() + 0.05  # well inside the dry-run timeout the read was given before
    decide(Review.for_object(configmap("app")), policy, sources=Sources(configmaps=reader), deadline=deadline)
    assert reader.deadlines and max(reader.deadlines) <= deadline


# --- dryRun.namespace sends the signed document through another tenant's admission -----------------------------


class _DryRuns:
    """A dry-run port that records where it was asked to create (the verifier's choice is under test)."""

    def __init__(self) -> None:
        self.namespaces: list[str | None] = []

    def dry_run(self, manifest: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        self.namespaces.append(namespace)
        return manifest  # what the server made of it: unchanged, so the admitted object still differs


def _dry_run_verdict(target: str, obj: dict[str, Any], bounds: Bounds = SERVICE) -> tuple[Result, list[str | None]]:
    (signed,) = sign_documents([configmap("app", namespace=None, mode="production")], KEY)
    obj["metadata"]["annotations"] = signed["metadata"]["annotations"]
    policy = Policy.from_dict(
        {"keys": [public_key_pem(KEY)], "dryRun": {"enabled": True, "namespace": target}}, bounds=bounds
    )
    runner = _DryRuns()
    return decide(Review(object=obj, namespace=obj["metadata"].get("namespace")), policy, dry_runner=runner), (
        runner.namespaces
    )


def test_a_policy_cannot_send_dry_runs_into_another_namespace() -> None:
    """Before: dryRun.namespace named any namespace, and the verdict showed what B's admission made of the document
    (B's LimitRange defaults, its injected sidecars)."""
    with pytest.raises(PolicyError, match="MANIFEST_PROVIDER_DRY_RUN_NAMESPACES") as refused:
        _dry_run_verdict("tenant-b", configmap("app", namespace="tenant-a", mode="debug"))
    assert refused.value.reason == "policy-invalid"
    own, sent = _dry_run_verdict("tenant-a", configmap("app", namespace="tenant-a", mode="debug"))
    assert sent == ["tenant-a"] and own.reason == "content-mismatch"
    listed, sent = _dry_run_verdict(
        "dry-run", configmap("app", namespace="tenant-a", mode="debug"), Bounds(dry_run_namespaces=("dry-run",))
    )
    assert sent == ["dry-run"] and listed.reason == "content-mismatch"


# --- regular expressions from policies run in linear time -------------------------------------------------------

#: Exponential for a backtracking engine against the subject below: every split of the a's is tried.
CATASTROPHIC = r"(a|a)*b@example\.com"
LONG_SUBJECT = "a" * 48 + "@example.com"

_RUN_CATASTROPHIC = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from provider import Policy, Review, decide
from tests.support.keyless import World
from tests.support.manifests import configmap
world = World()
key, cert = world.leaf(email={LONG_SUBJECT!r})
signed = world.sign(configmap("app"), key=key, cert=cert)
policy = Policy.from_dict({{"signers": [{{"subjectRegExp": {CATASTROPHIC!r}}}], "trustedRoot": world.trusted_root()}})
print(decide(Review.for_object(signed), policy).reason)
"""


def test_a_catastrophic_subject_pattern_does_not_hold_the_verifier() -> None:
    """Before: Python's re backtracked for hours; a thread cannot be stopped, so it ran in a child process."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _RUN_CATASTROPHIC],
            check=False,
            capture_output=True,
            text=True,
            timeout=BLOCKED * 2,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the subject pattern {CATASTROPHIC!r} held the verifier for {BLOCKED * 2} s")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "identity-mismatch"


#: What Python's re accepts and RE2 does not; each is policy-invalid wherever a policy carries a pattern.
PYTHON_ONLY = {
    "backreference": r"(a)\1",
    "named-backreference": r"(?P<x>a)(?P=x)",
    "lookahead": r"jane(?=@)",
    "negative-lookahead": r"(?!root)\w+",
    "lookbehind": r"(?<=@)example",
    "atomic-group": r"(?>a+)b",
    "possessive": r"a++b",
    "conditional": r"(a)?(?(1)b|c)",
    "verbose-flag": r"(?x) a b",
    "end-of-text-Z": r"a\Z",
    "huge-repetition": r"a{1001}",
}

WHERE_PATTERNS_LIVE: dict[str, Callable[[str], None]] = {
    "signers.subjectRegExp": lambda p: Policy.from_dict({"signers": [{"subjectRegExp": p}]}),
    "signers.issuerRegExp": lambda p: Policy.from_dict(
        {"signers": [{"subject": "jane@example.com", "issuerRegExp": p}]}
    ),
    "attestors.keyless.subjectRegExp": lambda p: Policy.from_dict(
        {"attestors": [{"entries": [{"keyless": {"subjectRegExp": p}}]}]}
    ),
    "unsafeUnanchoredIgnoreFields": lambda p: Policy.from_dict(
        {"keys": [public_key_pem(KEY)], "unsafeUnanchoredIgnoreFields": True, "ignoreFields": [{"fields": [p]}]}
    ),
    "csr.providerRegex": lambda p: CsrPolicy.from_dict({"providerRegex": p}),
}


@pytest.mark.parametrize("where", list(WHERE_PATTERNS_LIVE))
@pytest.mark.parametrize("feature", list(PYTHON_ONLY))
def test_patterns_re2_cannot_run_are_refused_when_the_policy_is_read(where: str, feature: str) -> None:
    with pytest.raises(PolicyError) as refused:
        WHERE_PATTERNS_LIVE[where](PYTHON_ONLY[feature])
    assert refused.value.reason == "policy-invalid"
    assert "RE2" in refused.value.message


def test_re2_patterns_mean_what_they_mean_in_go() -> None:
    """Kyverno reads subjectRegExp with Go's regexp: ASCII classes, whole-value match."""
    policy = Policy.from_dict({"signers": [{"subjectRegExp": r"\d+@example\.com"}]})
    (spec,) = policy.signers
    assert spec.subject_regexp is not None
    assert spec.subject_regexp.fullmatch("42@example.com")
    assert not spec.subject_regexp.fullmatch("٤٢@example.com")  # Arabic-Indic digits: \d in Python, not in Go
    assert not spec.subject_regexp.fullmatch("42@example.com.evil")
    assert not spec.subject_regexp.fullmatch("\ud800@example.com")  # not text: no match, never an error


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


# --- the operator's registry list bounds the policy's ----------------------------------------------------------


@pytest.mark.parametrize(
    ("operator", "policy_prefix", "allowed"),
    [
        ((), "registry.example.com/team", False),
        (("registry.example.com/team",), "registry.example.com/team/app", True),
        (("registry.example.com/team",), "registry.example.com/team", True),
        (("registry.example.com/team",), "registry.example.com", False),
        (("registry.example.com/team",), "registry.example.com/team-evil", False),
        (("registry.example.com",), "registry.example.com:5000/team", False),
        (("registry.example.com",), "kubernetes.default.svc/x", False),
        (("docker.io/myorg",), "index.docker.io/myorg/bundles", True),
    ],
    ids=["operator-lists-none", "under", "equal", "wider", "not-a-path-boundary", "other-port", "cluster-internal",
         "docker-hub-normalised"],
)  # fmt: skip
def test_a_policys_repositories_narrow_the_operators_never_widen_them(
    operator: tuple[str, ...], policy_prefix: str, allowed: bool
) -> None:
    from provider.signatures.sources import parse_repository_prefix

    bounds = Bounds(bundle_repositories=tuple(parse_repository_prefix(p, "operator", PolicyError) for p in operator))
    raw = {"keys": [public_key_pem(KEY)], "resourceBundleRef": {"repositories": [policy_prefix]}}
    if allowed:
        Policy.from_dict(raw, bounds=bounds)
    else:
        with pytest.raises(PolicyError, match="MANIFEST_PROVIDER_BUNDLE_REPOSITORIES"):
            Policy.from_dict(raw, bounds=bounds)
