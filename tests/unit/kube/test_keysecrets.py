"""Keys kept in Secrets (``k8s://NS/NAME``, ``secretRef``), read through the real client from the fake API server.

The fake holds the Secrets as an API server stores them and grants the service
``get`` on the named ones only (RBAC ``resourceNames``, as
``manifests/components/key-secrets/rbac.yaml`` does); everything else is its 403.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

import pytest

from provider.bounds import Bounds
from provider.errors import PolicyError
from provider.kube.keysecrets import MAX_KEY_BYTES, KubeKeySecretReader
from provider.policy.schema import Policy
from provider.result import Result
from provider.review import Review
from provider.signatures.sources import Sources
from provider.verifier import decide
from tests.support.clock import Clock
from tests.support.fakeapi import FakeApiServer, runner_for
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign

OLD, NEW, OTHER = (make_key("ecdsa-p256", 70 + i) for i in range(3))
#: The operator lets policies name key Secrets in ``keys`` (MANIFEST_PROVIDER_KEY_SECRET_NAMESPACES).
BOUNDS = Bounds(key_secret_namespaces=("keys",))


def secret(name: str, data: dict[str, str], namespace: str = "keys") -> dict[str, Any]:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace}, "data": encoded}  # fmt: skip


def keep_key(fake: FakeApiServer, name: str, pem: str, **extra: str) -> None:
    """A Secret holding ``pem`` as ``cosign.pub``, readable by the service (its name granted)."""
    fake.namespaces.add("keys")
    fake.add(secret(name, {"cosign.pub": pem, **extra}))
    fake.granted_names.setdefault("secrets", set()).add(("keys", name))


def decide_with(reader: KubeKeySecretReader, obj: dict[str, Any], key: Any = "k8s://keys/team") -> Result:
    policy = Policy.from_dict({"keys": [key]}, bounds=BOUNDS)
    return decide(Review.for_object(obj), policy, sources=Sources(keys=reader))


@pytest.fixture
def signed_by_old() -> dict[str, Any]:
    (signed,) = sign([configmap("app", mode="production")], OLD)
    return signed


def test_a_key_in_a_secret_verifies_and_the_verdict_is_not_cacheable(
    fake: FakeApiServer, tmp_path: Path, signed_by_old: dict[str, Any]
) -> None:
    keep_key(fake, "team", public_key_pem(OLD))
    reader = KubeKeySecretReader(lambda: runner_for(fake, tmp_path))
    result = decide_with(reader, signed_by_old)
    assert (result.allowed, result.reason) == (True, "verified"), result.message
    assert result.used_cluster  # the key can rotate: never cached by the service
    for spelled in ({"secretRef": {"namespace": "keys", "name": "team"}},
                    {"secretRef": {"namespace": "keys", "name": "team", "key": "cosign.pub"}, "name": "team key"}):  # fmt: skip
        assert decide_with(reader, signed_by_old, spelled).reason == "verified"
    gets = [r for r in fake.requests if r.path == "/api/v1/namespaces/keys/secrets/team"]
    assert len(gets) == 1  # one read, reused within the time-to-live


def test_a_rotated_key_is_used_after_the_time_to_live_and_the_old_one_no_longer(
    fake: FakeApiServer, tmp_path: Path, signed_by_old: dict[str, Any]
) -> None:
    keep_key(fake, "team", public_key_pem(OLD))
    clock = Clock()
    reader = KubeKeySecretReader(lambda: runner_for(fake, tmp_path), ttl=30, clock=clock)
    assert decide_with(reader, signed_by_old).reason == "verified"
    fake.change(secret("team", {"cosign.pub": public_key_pem(NEW)}))
    clock.now += 10
    assert decide_with(reader, signed_by_old).reason == "verified"  # within the time-to-live: the value read
    clock.now += 25
    result = decide_with(reader, signed_by_old)
    assert (result.allowed, result.reason) == (False, "signature-invalid"), result.message
    (signed_by_new,) = sign([configmap("app", mode="production")], NEW)
    assert decide_with(reader, signed_by_new).reason == "verified"


def test_a_missing_a_forbidden_and_an_empty_secret_read_alike_and_deny(
    fake: FakeApiServer, tmp_path: Path, signed_by_old: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    fake.namespaces.add("keys")
    fake.add(secret("not-granted", {"cosign.pub": public_key_pem(OLD)}))  # exists, RBAC does not name it
    keep_key(fake, "no-pub", public_key_pem(OLD))
    fake.change(secret("no-pub", {"other": "x"}))
    fake.granted_names["secrets"].add(("keys", "missing"))  # granted, never created
    reader = KubeKeySecretReader(lambda: runner_for(fake, tmp_path))
    messages = []
    with caplog.at_level(logging.WARNING, logger="provider.keysecrets"):
        for name in ("not-granted", "no-pub", "missing"):
            with pytest.raises(PolicyError) as refused:
                decide_with(reader, signed_by_old, f"k8s://keys/{name}")
            messages.append(refused.value.message.replace(name, "NAME"))
    assert len(set(messages)) == 1, messages  # the answer does not tell which it was
    assert "k8s://keys/NAME" in messages[0]
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "HTTP 403" in logged and "HTTP 404" in logged and "no value under 'cosign.pub'" in logged  # the operator's


def test_a_key_value_over_its_bound_is_refused_unparsed_and_reads_like_a_missing_secret(
    fake: FakeApiServer, tmp_path: Path, signed_by_old: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Whoever can write the Secret controls its size (up to the API server's 1 MiB): a value over
    MAX_KEY_BYTES -- a real key padded, so it would otherwise load -- is not parsed, denies with the
    one message every unusable Secret gets, and is never quoted."""
    keep_key(fake, "big", public_key_pem(OLD) + "\n" * MAX_KEY_BYTES)
    keep_key(fake, "ok", public_key_pem(OLD))
    reader = KubeKeySecretReader(lambda: runner_for(fake, tmp_path))
    assert decide_with(reader, signed_by_old, "k8s://keys/ok").reason == "verified"
    with pytest.raises(PolicyError) as refused, caplog.at_level(logging.WARNING, logger="provider.keysecrets"):
        decide_with(reader, signed_by_old, "k8s://keys/big")
    fake.granted_names["secrets"].add(("keys", "absent"))
    with pytest.raises(PolicyError) as missing:
        decide_with(reader, signed_by_old, "k8s://keys/absent")
    assert refused.value.message.replace("big", "NAME") == missing.value.message.replace("absent", "NAME")
    assert "BEGIN PUBLIC KEY" not in refused.value.message + " ".join(r.getMessage() for r in caplog.records)


def test_an_api_server_that_is_down_denies_and_never_allows(
    fake: FakeApiServer, tmp_path: Path, signed_by_old: dict[str, Any]
) -> None:
    keep_key(fake, "team", public_key_pem(OLD))
    reader = KubeKeySecretReader(lambda: runner_for(fake, tmp_path), ttl=0)
    assert decide_with(reader, signed_by_old).reason == "verified"
    fake.stop()
    result = decide_with(reader, signed_by_old)
    assert (result.allowed, result.reason) == (False, "key-secret-unavailable"), result.message
    assert "k8s://keys/team" in result.message and result.used_cluster


def test_a_second_key_beside_an_inline_one_cannot_be_skipped_when_its_secret_is_unreadable(
    fake: FakeApiServer, tmp_path: Path, signed_by_old: dict[str, Any]
) -> None:
    """AtLeastOne with an inline key that verifies: the unreadable Secret still denies (never decide on half)."""
    reader = KubeKeySecretReader(lambda: runner_for(fake, tmp_path))
    policy = Policy.from_dict({"keys": [public_key_pem(OLD), "k8s://keys/gone"]}, bounds=BOUNDS)
    with pytest.raises(PolicyError, match="k8s://keys/gone"):
        decide(Review.for_object(signed_by_old), policy, sources=Sources(keys=reader))


def test_the_secret_value_passes_the_key_rules_and_is_one_key(
    fake: FakeApiServer, tmp_path: Path, signed_by_old: dict[str, Any]
) -> None:
    identity = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAAQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n-----END PUBLIC KEY-----\n"  # Ed25519, the identity point: anyone can "sign" for it
    keep_key(fake, "weak", identity)
    keep_key(fake, "two", public_key_pem(OLD) + public_key_pem(OTHER))
    reader = KubeKeySecretReader(lambda: runner_for(fake, tmp_path))
    with pytest.raises(PolicyError, match=r"k8s://keys/weak: .*(small-order|identity)"):
        decide_with(reader, signed_by_old, "k8s://keys/weak")
    with pytest.raises(PolicyError, match="holds 2 keys"):
        decide_with(reader, signed_by_old, "k8s://keys/two")


def test_a_private_key_beside_the_public_one_is_named_in_the_log_never_shown(
    fake: FakeApiServer, tmp_path: Path, signed_by_old: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """cosign generate-key-pair k8s://... writes cosign.key and cosign.password into the same Secret."""
    keep_key(fake, "pair", public_key_pem(OLD), **{"cosign.key": "PRIVATE-KEY-BYTES", "cosign.password": "hunter2"})
    reader = KubeKeySecretReader(lambda: runner_for(fake, tmp_path))
    with caplog.at_level(logging.DEBUG):
        assert decide_with(reader, signed_by_old, "k8s://keys/pair").reason == "verified"
    logged = " ".join(r.getMessage() + str(vars(r)) for r in caplog.records)
    assert "cosign.key, cosign.password" in logged
    assert "PRIVATE-KEY-BYTES" not in logged and "hunter2" not in logged
