"""Attack class 6 (docs/security.md): secret values never leave the Secret.

A tampered Secret used to be denied with a message
and a diff quoting both the signed and the admitted ``data`` values; Gatekeeper audit writes
messages into the Constraint's status and Kyverno into PolicyReports, which people read who
may not read Secrets. The path is named, the values never are -- nor those of paths a
policy marks ``sensitiveFields``.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from provider import Policy, PolicyError, Review, decide
from provider.compare.diff import REDACTED
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign

KEY = make_key("ecdsa-p256", 11)
POLICY = Policy.from_dict({"keys": [public_key_pem(KEY)]})
D = "cosign.sigstore.dev"

# --- 6. sensitive values ----------------------------------------------------------------

SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "db", "namespace": "shop"},
    "type": "Opaque",
    "data": {"password": base64.b64encode(b"signed-secret-value").decode()},
    "stringData": {"token": "signed-token-value"},
}
ADMITTED_PASSWORD = base64.b64encode(b"attacker-secret-value").decode()


def _values_absent(result: Any, *values: str) -> None:
    text = json.dumps(result.to_dict()) + result.message
    for value in values:
        assert value not in text, f"{value!r} leaked"


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda s: s["data"].__setitem__("password", ADMITTED_PASSWORD), "data.password"),
        (lambda s: s["data"].__setitem__("extra", ADMITTED_PASSWORD), "data.extra"),
        (lambda s: s["data"].pop("password"), "data.password"),
        (lambda s: s["stringData"].__setitem__("token", "attacker-token-value"), "stringData.token"),
        (lambda s: s.__setitem__("data", "not-a-map-" + ADMITTED_PASSWORD), "data"),
    ],
    ids=["changed", "added", "removed", "stringData", "replaced-by-a-scalar"],
)
def test_a_tampered_secret_names_the_path_never_the_values(change: Any, path: str) -> None:
    (signed,) = sign(SECRET, KEY)
    tampered = copy.deepcopy(signed)
    change(tampered)
    result = decide(Review.for_object(tampered), POLICY)
    assert (result.allowed, result.reason) == (False, "content-mismatch")
    assert path in result.message
    assert all(item.redacted for item in result.diff)
    assert {v for item in result.diff for v in (item.before, item.after)} <= {REDACTED, None}
    _values_absent(result, SECRET["data"]["password"], ADMITTED_PASSWORD, "signed-token-value", "attacker-token-value")


def test_a_secret_elsewhere_in_the_object_is_still_shown() -> None:
    """Only the values are hidden: a changed label of a Secret is quoted as usual."""
    (signed,) = sign({**SECRET, "metadata": {**SECRET["metadata"], "labels": {"tier": "db"}}}, KEY)
    tampered = copy.deepcopy(signed)
    tampered["metadata"]["labels"]["tier"] = "web"
    result = decide(Review.for_object(tampered), POLICY)
    assert "'db'" in result.message and "'web'" in result.message


def test_a_configmap_key_named_data_is_not_a_secret() -> None:
    (signed,) = sign(configmap(password="visible"), KEY)
    tampered = copy.deepcopy(signed)
    tampered["data"]["password"] = "changed"
    assert "'changed'" in decide(Review.for_object(tampered), POLICY).message


def test_a_policy_marks_more_paths_sensitive() -> None:
    policy = Policy.from_dict(
        {
            "keys": [public_key_pem(KEY)],
            "sensitiveFields": [{"objects": [{"kind": "ConfigMap"}], "fields": ["data.password"]}],
        }
    )
    (signed,) = sign(configmap(password="hunter2", mode="a"), KEY)
    tampered = copy.deepcopy(signed)
    tampered["data"]["password"] = "correct-horse"
    tampered["data"]["mode"] = "b"
    result = decide(Review.for_object(tampered), policy)
    _values_absent(result, "hunter2", "correct-horse")
    assert [item.key for item in result.diff] == ["data.mode", "data.password"]
    assert [item.redacted for item in result.diff] == [False, True]


def test_sensitive_fields_are_checked_like_ignore_fields() -> None:
    with pytest.raises(PolicyError, match="sensitiveFields"):
        Policy.from_dict({"keys": [public_key_pem(KEY)], "sensitiveFields": [{"fields": []}]})
