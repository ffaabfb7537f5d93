"""The policy schema: complete validation, because a typo must never weaken a policy."""

from __future__ import annotations

from typing import Any

import pytest

from provider.errors import PolicyError
from provider.limits import Limits
from provider.objects import ObjectIdentity
from provider.policy.schema import PROFILES, Policy, load_profile
from tests.support.data import UPSTREAM, load_yaml
from tests.support.keys import make_key, public_key_pem

KEY = public_key_pem(make_key())
KEY2 = public_key_pem(make_key("ecdsa-p256", 1))


def policy(**fields: Any) -> Policy:
    return Policy.from_dict({"keys": [KEY], **fields})


def test_defaults() -> None:
    p = policy()
    assert p.key_operation == "AtLeastOne"
    assert p.required_count == 1
    assert p.annotation_domain == "cosign.sigstore.dev"
    assert p.defaults == ("k8s-manifest-sigstore", "common")
    assert not p.dry_run.enabled


def test_key_forms_and_counts() -> None:
    p = Policy.from_dict(
        {
            "keys": [KEY + KEY2, {"publicKey": public_key_pem(make_key("ed25519")), "name": "team-b"}],
            "keyOperation": "MustAll",
        }
    )
    assert len(p.keys) == 3
    assert p.keys[2].name == "team-b"
    assert p.required_count == 3
    assert Policy.from_dict({"keys": [KEY, KEY2], "threshold": 2}).required_count == 2


def test_null_optionals_mean_absent() -> None:
    assert policy(threshold=None, ignoreFields=None, dryRun=None).threshold is None


BAD = [
    ("no-keys", {"keys": []}, "no keys or signers"),
    ("keys-missing", {}, "no keys or signers"),
    ("unknown-field", {"keys": [KEY], "ignoreFeilds": []}, "did you mean 'ignoreFields'"),
    ("unknown-nested", {"keys": [KEY], "ignoreFields": [{"fields": ["a"], "object": []}]}, "did you mean 'objects'"),
    ("bad-operation", {"keys": [KEY], "keyOperation": "mustall"}, "is not one of AtLeastOne, MustAll"),
    ("threshold-zero", {"keys": [KEY], "threshold": 0}, "at least 1"),
    ("threshold-bool", {"keys": [KEY], "threshold": True}, "whole number"),
    ("threshold-too-high", {"keys": [KEY], "threshold": 2}, "could never be met"),
    ("threshold-and-mustall", {"keys": [KEY, KEY2], "threshold": 1, "keyOperation": "MustAll"}, "not both"),
    ("duplicate-key", {"keys": [KEY, KEY]}, "listed twice"),
    ("bad-key", {"keys": ["nope"]}, r"keys\[0\]: no PEM block"),
    ("key-not-string", {"keys": [3]}, "expected a string"),
    ("keys-not-list", {"keys": KEY}, "expected a list"),
    ("bad-domain", {"keys": [KEY], "annotationDomain": "Not A Domain"}, "DNS subdomain"),
    ("unknown-profile", {"keys": [KEY], "defaults": ["comon"]}, "unknown profile"),
    (
        "empty-fields",
        {"keys": [KEY], "ignoreFields": [{"objects": [{"kind": "X"}], "fields": []}]},
        "at least one field",
    ),
    ("bad-field-pattern", {"keys": [KEY], "ignoreFields": [{"fields": ["a..b"]}]}, "empty segment"),
    ("skip-user-without-users", {"keys": [KEY], "skipUsers": [{"objects": [{"kind": "Pod"}]}]}, "would skip everyone"),
    ("skip-user-wildcard", {"keys": [KEY], "skipUsers": [{"users": ["*"]}]}, "matches every user"),
    ("dryrun-enabled-string", {"keys": [KEY], "dryRun": {"enabled": "yes"}}, "true or false"),
    ("signer-without-identity", {"signers": [{"issuer": "https://x"}]}, "subject or subjectRegExp is required"),
    ("signer-bad-regexp", {"signers": [{"subjectRegExp": "("}]}, "not a valid regular expression"),
    ("signer-both", {"signers": [{"subject": "a", "subjectRegExp": "a"}]}, "not both"),
    ("not-a-mapping", ["keys"], "expected a mapping"),
    ("unsafe-not-bool", {"keys": [KEY], "unsafeUnanchoredIgnoreFields": "true"}, "true or false"),
]


@pytest.mark.parametrize(("name", "data", "fragment"), BAD, ids=[b[0] for b in BAD])
def test_invalid_policies(name: str, data: Any, fragment: str) -> None:
    with pytest.raises(PolicyError, match=fragment) as info:
        Policy.from_dict(data)
    assert info.value.reason == "policy-invalid"


def test_too_many_keys() -> None:
    from provider.limits import Limits

    with pytest.raises(PolicyError, match="at most 1"):
        Policy.from_dict({"keys": [KEY, KEY2]}, limits=Limits(max_keys=1))


def test_upstream_configs_parse() -> None:
    paths = sorted((UPSTREAM / "configs").glob("*.yaml"))
    assert len(paths) >= 4, paths  # the interop data's verification configs
    for path in paths:
        (data,) = load_yaml(path)
        data.setdefault("keys", [KEY])
        Policy.from_dict(data)


def test_signer_string_form_is_upstreams() -> None:
    p = Policy.from_dict({"signers": ["test-signer@example.com"]})
    assert p.signers[0].subject == "test-signer@example.com"
    assert p.signers[0].issuer is None


@pytest.mark.parametrize("name", PROFILES)
def test_builtin_profiles_load(name: str) -> None:
    profile = load_profile(name)
    assert profile.description


def test_ignore_set_depends_on_the_object_and_is_cached() -> None:
    p = policy(ignoreFields=[{"objects": [{"kind": "ConfigMap", "name": "a"}], "fields": ["data.x"]}])
    a = ObjectIdentity("", "v1", "ConfigMap", "a", "ns")
    b = ObjectIdentity("", "v1", "ConfigMap", "b", "ns")
    assert p.ignore_set_for(a).ignores(("data", "x"))
    assert not p.ignore_set_for(b).ignores(("data", "x"))
    assert p.ignore_set_for(a) is p.ignore_set_for(a)
    sa = ObjectIdentity("", "v1", "ServiceAccount", "s", "ns")
    assert p.ignore_set_for(sa).ignores(("secrets", 0, "name"))  # the upstream default list
    assert not policy(defaults=[]).ignore_set_for(sa).ignores(("secrets", 0, "name"))
    # A Service's allocations are no ignore pattern (it could not pin a value): provider/compare/allocations.py.
    assert not p.ignore_set_for(ObjectIdentity("", "v1", "Service", "s", "ns")).ignores(("spec", "clusterIP"))


def test_ignore_fields_without_objects_apply_to_everything() -> None:
    p = policy(ignoreFields=[{"fields": ["data.x"]}])
    assert p.ignore_set_for(ObjectIdentity("apps", "v1", "Deployment", "d", "ns")).ignores(("data", "x"))


@pytest.mark.parametrize(
    "field",
    [
        lambda n: {"ignoreFields": [{"fields": [f"spec.m.z{i}*" for i in range(n)]}]},
        lambda n: {"sensitiveFields": [{"fields": [f"spec.m.z{i}*" for i in range(n // 2)]}],
                   "ignoreFields": [{"fields": [f"spec.m.y{i}*" for i in range(n - n // 2)]}]},
        lambda n: {"skipUsers": [{"users": ["alice"], "fields": [f"spec.m.z{i}"]} for i in range(n)]},
    ],
    ids=["ignoreFields", "ignoreFields and sensitiveFields", "skipUsers fields"],
)  # fmt: skip
def test_a_policy_names_at_most_max_field_patterns_field_patterns(field: Any) -> None:
    """Every field pattern is tried at every position of every object it may apply to, and a ``skipUsers`` entry's
    fields diff the whole object: a policy of a thousand ``spec.m.z{i}*`` (366 KB, well within a request) held a
    verifying thread for seconds on a 20 000-key map, a 16 MiB body for hours. The count is bounded, and a policy
    over it is invalid, saying how many it holds and how many are read."""
    limits = Limits(max_field_patterns=8)
    keys = {"keys": [public_key_pem(make_key())]}
    Policy.from_dict({**keys, **field(8)}, limits=limits)
    with pytest.raises(PolicyError) as caught:
        Policy.from_dict({**keys, **field(9)}, limits=limits)
    assert "9 field patterns" in caught.value.message and "at most 8" in caught.value.message
    assert Limits().max_field_patterns == 128


def test_a_policy_names_at_most_max_field_rules_skip_users_entries_with_fields() -> None:
    """Each ``skipUsers`` entry with ``fields`` that matches the requester diffs the whole object with its old
    version: 128 of them (one field each, within the pattern bound) made one UPDATE cost 128 diffs."""
    keys = {"keys": [public_key_pem(make_key())]}

    def entries(n: int) -> dict[str, Any]:
        return {"skipUsers": [{"users": ["alice"], "fields": [f"spec.m.z{i}"]} for i in range(n)]}

    Policy.from_dict({**keys, **entries(16)})
    with pytest.raises(PolicyError) as caught:
        Policy.from_dict({**keys, **entries(17)})
    assert "17 entries with fields" in caught.value.message and "at most 16" in caught.value.message
    assert caught.value.message.startswith("policy.skipUsers")
