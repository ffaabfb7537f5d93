"""Attack classes 6 and 7 (docs/security.md).

6. **Secret values never leave the Secret.** A tampered Secret used to be denied with a message
   and a diff quoting both the signed and the admitted ``data`` values; Gatekeeper audit writes
   messages into the Constraint's status and Kyverno into PolicyReports, which people read who
   may not read Secrets. The path is named, the values never are -- nor those of paths a
   policy marks ``sensitiveFields``.
7. **Only the envelope that was read is ignored.** Annotations named like envelope entries but
   never read (``signature_9`` past the first gap, ``bundle_7``, unknown names under the domain)
   used to be masked from the comparison, so a verified object could carry anything there.
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

# --- 7. the envelope ------------------------------------------------------------------


@pytest.mark.parametrize(
    "annotation",
    [
        f"{D}/signature_9",
        f"{D}/signature_2",
        f"{D}/bundle_7",
        f"{D}/certificate_3",
        f"{D}/resourceBundleRef",
        f"{D}/anything",
        f"{D}/message_1",
    ],
)
def test_an_envelope_like_annotation_that_was_not_read_is_content(annotation: str) -> None:
    (signed,) = sign(configmap(mode="production"), KEY)
    assert decide(Review.for_object(signed), POLICY).verified
    smuggled = copy.deepcopy(signed)
    smuggled["metadata"]["annotations"][annotation] = "rm -rf / # anything at all"
    result = decide(Review.for_object(smuggled), POLICY)
    assert (result.allowed, result.reason) == (False, "content-mismatch")
    assert [item.key for item in result.diff] == [f"metadata.annotations.{annotation}"]


def test_the_annotations_that_were_read_are_masked() -> None:
    """Two signature sets (0 and 1) read: both are out of the comparison, and so is the message."""
    other = make_key("ecdsa-p256", 12)
    (first,) = sign(configmap(), KEY)
    (second,) = sign(configmap(), other)
    both = copy.deepcopy(first)
    both["metadata"]["annotations"][f"{D}/signature_1"] = second["metadata"]["annotations"][f"{D}/signature"]
    policy = Policy.from_dict({"keys": [public_key_pem(KEY), public_key_pem(other)], "keyOperation": "MustAll"})
    assert decide(Review.for_object(both), policy).verified


def test_an_unread_signature_is_content_even_when_it_is_valid() -> None:
    """``signature_2`` after a gap is never read -- so it is compared, and the object it rides on is not verified."""
    (signed,) = sign(configmap(), KEY)
    gap = copy.deepcopy(signed)
    gap["metadata"]["annotations"][f"{D}/signature_2"] = signed["metadata"]["annotations"][f"{D}/signature"]
    result = decide(Review.for_object(gap), POLICY)
    assert result.reason == "content-mismatch"
    assert "signature_2" in result.message


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
