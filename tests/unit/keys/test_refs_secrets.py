"""Attacks through the Secrets a policy may name: reading what is not a public key or a registry
credential, and learning a Secret's content from a denial.

Who: anyone who writes a policy -- a tenant's ``ManifestPolicy`` included -- naming a Secret
in a namespace the operator lists (``MANIFEST_PROVIDER_KEY_SECRET_NAMESPACES``,
``MANIFEST_PROVIDER_PULL_SECRET_NAMESPACES``). Such a namespace also holds other Secrets and
other data keys: a cosign key-pair Secret keeps ``cosign.key`` and ``cosign.password`` beside
``cosign.pub`` (sigstore/cosign v3.1.2 ``pkg/cosign/kubernetes/secret.go`` ``secret()``). The
denial goes back to whoever wrote the object, so it must say nothing the value decides beyond
"this is not a usable key / Docker config".
"""

from __future__ import annotations

from typing import Any

import pytest

from provider.bounds import Bounds
from provider.errors import PolicyError
from provider.keys.refs import SecretKeyRef, load_secret_key
from provider.oci.auth import parse_docker_config
from provider.policy.schema import Policy
from provider.review import Review
from provider.signatures.sources import MAX_PULL_SECRETS, Sources
from provider.verifier import decide
from tests.support.keys import make_key
from tests.support.manifests import configmap, sign

BOUNDS = Bounds(key_secret_namespaces=("keys",), pull_secret_namespaces=("keys",))
KEY = make_key("ecdsa-p256", 611)
(SIGNED,) = sign(configmap("app", "shop", mode="prod"), KEY)


@pytest.mark.parametrize("data_key", ["cosign.key", "cosign.password"])
def test_a_policy_may_not_name_the_private_half_of_a_cosign_key_pair(data_key: str) -> None:
    """Before: read, and the value parsed as a public key (the password quoted in no message, but read)."""
    for entry in ({"secretRef": {"namespace": "keys", "name": "pair", "key": data_key}},
                  {"keys": {"secret": {"namespace": "keys", "name": "pair", "key": data_key}}}):  # fmt: skip
        policy = {"keys": [entry]} if "secretRef" in entry else {"attestors": [{"entries": [entry]}]}
        with pytest.raises(PolicyError, match="private"):
            Policy.from_dict(policy, bounds=BOUNDS)


@pytest.mark.parametrize("data_key", ["cosign.pub", "password", "cosign.password", "tls.key"])
def test_a_pull_secret_is_read_under_a_docker_config_key_only(data_key: str) -> None:
    """Before: any data key of any Secret in the namespace was read and parsed as a Docker config."""
    bundle = {"repositories": ["registry.example.com/bundles"],
              "pullSecrets": [{"namespace": "keys", "name": "pull", "key": data_key}]}  # fmt: skip
    with pytest.raises(PolicyError, match=r"\.dockerconfigjson|private half"):
        Policy.from_dict({"keys": ["k8s://keys/team"], "resourceBundleRef": bundle},
                         bounds=Bounds(key_secret_namespaces=("keys",), pull_secret_namespaces=("keys",),
                                       bundle_repositories=None))  # fmt: skip
    for allowed in (".dockerconfigjson", ".dockercfg"):
        bundle["pullSecrets"] = [{"namespace": "keys", "name": "pull", "key": allowed}]
        Policy.from_dict({"keys": ["k8s://keys/team"], "resourceBundleRef": bundle},
                         bounds=Bounds(key_secret_namespaces=("keys",), pull_secret_namespaces=("keys",),
                                       bundle_repositories=None))  # fmt: skip


#: Values a Secret may hold under the key a policy names, and what a parser would say of them.
SECRET_VALUES = [
    # json's own error names where the document stops parsing: here, after the password's leading digits.
    ("digits-then-letters", "123hunter2", ("char", "column", "line 1")),
    ("json-then-garbage", '{"auths": {}} trailing-secret', ("char", "column")),
]


@pytest.mark.parametrize(("case", "value", "tells"), SECRET_VALUES, ids=[c for c, _, _ in SECRET_VALUES])
def test_a_docker_config_that_does_not_parse_is_refused_without_where(case: str, value: str, tells: Any) -> None:
    """Before: "... is not valid JSON: Extra data: line 1 column 4 (char 3)" -- how many digits the value starts with."""
    with pytest.raises(PolicyError) as refused:
        parse_docker_config(value, "resourceBundleRef.pullSecrets[0]")
    message = refused.value.message
    assert "pullSecrets[0]" in message and "JSON" in message
    for word in tells:
        assert word not in message


KEY_VALUES = [
    # The OpenPGP reader names the bits of the first byte it could not read.
    ("openpgp-garbage", "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nSGVsbG8gc2VjcmV0\n-----END PGP PUBLIC KEY BLOCK-----\n",
     ("0b", "Malformed", "ptag")),
    # cryptography's error carries its own reading of the block.
    ("pem-garbage", "-----BEGIN PUBLIC KEY-----\nSGVsbG8gc2VjcmV0\n-----END PUBLIC KEY-----\n",
     ("Unable", "cryptography.io", "Invalid")),
]  # fmt: skip


class _Reader:
    def __init__(self, value: str) -> None:
        self.value = value

    def read_key(self, namespace: str, name: str, key: str, deadline: float) -> str:
        return self.value


@pytest.mark.parametrize(("case", "value", "tells"), KEY_VALUES, ids=[c for c, _, _ in KEY_VALUES])
def test_a_key_secret_that_does_not_read_is_refused_without_the_parsers_words(
    case: str, value: str, tells: Any
) -> None:
    ref = SecretKeyRef("keys", "team", "team.pub")
    with pytest.raises(PolicyError) as refused:
        load_secret_key(ref, value, 64)
    policy = Policy.from_dict({"keys": [{"secretRef": {"namespace": "keys", "name": "team", "key": "team.pub"}}]},
                              bounds=BOUNDS)  # fmt: skip
    request = Review.from_admission({"object": SIGNED, "operation": "CREATE", "namespace": "shop",
                                     "userInfo": {"username": "mallory"}})  # fmt: skip
    with pytest.raises(PolicyError) as decided:  # the service answers it policy-invalid, with this message
        decide(request, policy, sources=Sources(keys=_Reader(value)))
    for message in (refused.value.message, decided.value.message):
        assert "k8s://keys/team" in message
        for word in tells:
            assert word not in message


def test_what_a_key_secret_holds_that_is_a_private_key_or_a_weak_key_is_still_said() -> None:
    """The categories stay: they describe what the value is, not what it says."""
    ref = SecretKeyRef("keys", "team")
    private = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
    with pytest.raises(PolicyError, match="a private key was given"):
        load_secret_key(ref, private, 64)
    with pytest.raises(PolicyError, match="no PEM block"):
        load_secret_key(ref, "hunter2", 64)


def test_a_policy_names_a_bounded_number_of_pull_secrets() -> None:
    """Before: any number, each a GET of the API server on every bundle fetch of every request."""
    bounds = Bounds(key_secret_namespaces=("keys",), pull_secret_namespaces=("keys",), bundle_repositories=None)
    for count, allowed in ((MAX_PULL_SECRETS, True), (MAX_PULL_SECRETS + 1, False), (5000, False)):
        bundle = {"repositories": ["registry.example.com/bundles"],
                  "pullSecrets": [{"namespace": "keys", "name": f"pull-{i}"} for i in range(count)]}  # fmt: skip
        policy = {"keys": ["k8s://keys/team"], "resourceBundleRef": bundle}
        if allowed:
            assert len(Policy.from_dict(policy, bounds=bounds).resource_bundle.pull_secrets) == count  # type: ignore[union-attr]
        else:
            with pytest.raises(PolicyError, match=f"at most {MAX_PULL_SECRETS}"):
                Policy.from_dict(policy, bounds=bounds)
