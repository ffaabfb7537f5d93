"""Keys kept in Secrets, as policies name them (provider/keys/refs.py), and the operator's bound on which."""

from __future__ import annotations

from typing import Any

import pytest

from provider.bounds import LOCAL, SERVICE, Bounds
from provider.cli.convert_policy import convert_document, not_in_the_output, outputs
from provider.errors import PolicyError
from provider.keys.refs import SecretKeyRef
from provider.policy.schema import Policy
from tests.support.keys import make_key, public_key_pem

PEM = public_key_pem(make_key("ecdsa-p256", 80))
ALLOWED = Bounds(key_secret_namespaces=("keys",))
TEAM = SecretKeyRef("keys", "team")


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("k8s://keys/team", TEAM),
        ({"secretRef": {"namespace": "keys", "name": "team"}}, TEAM),
        ({"secretRef": {"namespace": "keys", "name": "team", "key": "team.pub"}, "name": "t"},
         SecretKeyRef("keys", "team", "team.pub", "t")),
    ],
    ids=["cosign-reference", "secret-ref", "secret-ref-with-key-and-name"],
)  # fmt: skip
def test_every_spelling_of_a_secret_held_key_reads_to_one_reference(entry: Any, expected: SecretKeyRef) -> None:
    policy = Policy.from_dict({"keys": [entry, PEM]}, bounds=ALLOWED)
    assert policy.secret_keys == (expected,)
    assert policy.anchor_count == 2  # counted with the inline key


def test_kyverno_keys_secret_and_a_k8s_public_keys_reference_in_attestors() -> None:
    policy = Policy.from_dict(
        {"attestors": [{"count": 2, "entries": [
            {"keys": {"secret": {"namespace": "keys", "name": "team"}}},
            {"keys": {"publicKeys": "k8s://keys/ops"}},
        ]}]},
        bounds=ALLOWED,
    )  # fmt: skip
    assert policy.secret_keys == (TEAM, SecretKeyRef("keys", "ops"))
    assert [type(leaf) for leaf in policy.anchors] == [SecretKeyRef, SecretKeyRef]


@pytest.mark.parametrize(
    "entry",
    ["k8s://keys", "k8s://keys/team/extra", "k8s://Keys/team", {"secretRef": {"name": "team"}},
     {"secretRef": {"namespace": "keys", "name": "team", "key": "a/b"}},
     {"secretRef": {"namespace": "keys", "name": "team"}, "publicKey": PEM}],
    ids=["no-name", "three-parts", "not-a-namespace", "no-namespace", "bad-data-key", "two-kinds-of-key"],
)  # fmt: skip
def test_a_malformed_reference_is_refused_when_the_policy_is_read(entry: Any) -> None:
    with pytest.raises(PolicyError):
        Policy.from_dict({"keys": [entry]}, bounds=ALLOWED)


def test_the_same_secret_twice_is_the_same_key_listed_twice() -> None:
    with pytest.raises(PolicyError, match="listed twice"):
        Policy.from_dict({"keys": ["k8s://keys/team", {"secretRef": {"namespace": "keys", "name": "team"}}]},
                         bounds=ALLOWED)  # fmt: skip


def test_the_service_lets_no_policy_name_a_key_secret_by_default_and_says_nothing_of_what_exists() -> None:
    """Default: none. The refusal is decided on the reference alone, one message for any namespace."""
    messages = []
    for namespace in ("kube-system", "team-keys", "no-such-namespace"):
        with pytest.raises(PolicyError) as refused:
            Policy.from_dict({"keys": [f"k8s://{namespace}/cosign"]}, bounds=SERVICE)
        messages.append(refused.value.message.replace(namespace, "NS"))
        assert "MANIFEST_PROVIDER_KEY_SECRET_NAMESPACES" in refused.value.message
    assert len(set(messages)) == 1
    with pytest.raises(PolicyError, match="not-listed"):  # an attestor's secret too
        Policy.from_dict({"attestors": [{"entries": [{"keys": {"secret": {"namespace": "not-listed", "name": "k"}}}]}]},
                         bounds=ALLOWED)  # fmt: skip
    assert Policy.from_dict({"keys": ["k8s://kube-system/cosign"]}, bounds=LOCAL).secret_keys  # the CLI's user


def test_convert_policy_carries_kyvernos_secret_held_keys() -> None:
    doc = {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {"rules": [{
        "name": "check", "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}]},
        "validate": {"failureAction": "Enforce", "manifests": {"attestors": [{"count": 2, "entries": [
            {"keys": {"secret": {"namespace": "keys", "name": "team"}}},
            {"keys": {"publicKeys": "k8s://keys/ops"}},
        ]}]}},
    }]}}  # fmt: skip
    conversion = convert_document(doc)
    assert conversion.lost == [] and not_in_the_output(conversion, "gatekeeper") == []
    (constraint,) = outputs(conversion, "gatekeeper")
    policy = Policy.from_dict(constraint["spec"]["parameters"], bounds=ALLOWED)
    assert policy.secret_keys == (TEAM, SecretKeyRef("keys", "ops"))
    assert policy.attestors[0].count == 2
