"""Attack classes 3 and 4 (docs/security.md).

3. **A typo never widens a policy.** An empty alternative in a name pattern
   (``name: "kube-root-ca.crt,"``, a trailing comma) used to match every object in
   ``skipObjects``, ``inScopeObjects`` and ``ignoreFields.objects`` -- upstream reads an
   empty pattern as "anything". Every pattern field now refuses it with the field's path.
4. **The name is the name.** With ``metadata.name`` empty, scope and skip rules used to
   match ``generateName``; the API server stores the object under another name.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from provider import Policy, PolicyError, Review, decide
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign

KEY = public_key_pem(make_key("ecdsa-p256", 3))

#: Pattern texts that would have matched every name, or are a typo with no meaning.
TYPOS = ["", " ", "kube-root-ca.crt,", ",kube-root-ca.crt", "a,,b", "a, ,b", "kube-**", "kube root"]

#: Every place a name pattern is read, as a policy builder taking the pattern.
PLACES = {
    "skipObjects.name": lambda p: {"skipObjects": [{"kind": "ConfigMap", "name": p}]},
    "skipObjects.namespace": lambda p: {"skipObjects": [{"namespace": p}]},
    "skipObjects.kind": lambda p: {"skipObjects": [{"kind": p}]},
    "skipObjects.group": lambda p: {"skipObjects": [{"group": p, "kind": "ConfigMap"}]},
    "skipObjects.version": lambda p: {"skipObjects": [{"version": p}]},
    "inScopeObjects.name": lambda p: {"inScopeObjects": [{"name": p}]},
    "ignoreFields.objects.name": lambda p: {"ignoreFields": [{"objects": [{"name": p}], "fields": ["data"]}]},
    "skipUsers.objects.name": lambda p: {"skipUsers": [{"users": ["alice"], "objects": [{"name": p}]}]},
    "sensitiveFields.objects.kind": lambda p: {"sensitiveFields": [{"objects": [{"kind": p}], "fields": ["data"]}]},
}


@pytest.mark.parametrize("typo", TYPOS, ids=[repr(t) for t in TYPOS])
@pytest.mark.parametrize("place", sorted(PLACES))
def test_a_pattern_typo_is_refused_with_its_path(place: str, typo: str) -> None:
    with pytest.raises(PolicyError) as caught:
        Policy.from_dict({"keys": [KEY], **PLACES[place](typo)})
    field = place.rsplit(".", 1)[-1]
    assert f".{field}" in caught.value.message, caught.value.message


@pytest.mark.parametrize("typo", ["", "alice,", ",", "  "])
@pytest.mark.parametrize("field", ["users", "groups"])
def test_skip_users_refuses_empty_alternatives(field: str, typo: str) -> None:
    with pytest.raises(PolicyError):
        Policy.from_dict({"keys": [KEY], "skipUsers": [{field: [typo]}]})


def test_the_trailing_comma_no_longer_skips_everything() -> None:
    """The reported attack: ``skipObjects: [{name: "kube-root-ca.crt,"}]`` admitted every unsigned object."""
    with pytest.raises(PolicyError, match="empty alternative"):
        Policy.from_dict({"keys": [KEY], "skipObjects": [{"kind": "ConfigMap", "name": "kube-root-ca.crt,"}]})


@pytest.mark.parametrize(
    ("pattern", "name"),
    [("*", "anything"), ("-", ""), ("a, b", "b"), ("kube-*", "kube-root-ca.crt"), ("*-ca.crt", "kube-root-ca.crt")],
)
def test_meaningful_patterns_still_work(pattern: str, name: str) -> None:
    policy = Policy.from_dict({"keys": [KEY], "skipObjects": [{"kind": "ConfigMap", "name": pattern}]})
    result = decide(Review.for_object(configmap(name)), policy)
    assert result.reason == "skipped-object"


def test_user_names_may_hold_spaces() -> None:
    Policy.from_dict({"keys": [KEY], "skipUsers": [{"users": ["Jane Doe"]}]})


# --- 4. the name is the name ---------------------------------------------------------------


def _generated(prefix: str) -> dict[str, Any]:
    obj = configmap("x")
    del obj["metadata"]["name"]
    obj["metadata"]["generateName"] = prefix
    return obj


@pytest.mark.parametrize(
    "rules",
    [
        {"skipObjects": [{"kind": "ConfigMap", "name": "kube-root-ca.crt"}]},
        {"skipObjects": [{"kind": "ConfigMap", "name": "kube-root-ca.crt*"}]},
        {"skipUsers": [{"users": ["alice"], "objects": [{"name": "kube-root-ca.crt"}]}]},
    ],
    ids=["skipObjects-exact", "skipObjects-prefix", "skipUsers-objects"],
)
def test_an_exact_name_rule_never_matches_an_object_without_a_name(rules: dict[str, Any]) -> None:
    policy = Policy.from_dict({"keys": [KEY], **rules})
    review = Review.from_admission(
        {
            "object": _generated("kube-root-ca.crt"),
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "namespace": "ns",
        }
    )
    result = decide(review, policy)
    assert (result.allowed, result.reason) == (False, "unsigned"), result.message
    assert "kube-root-ca.crt… (generateName)" in result.message


def test_in_scope_by_name_leaves_an_unnamed_object_out() -> None:
    """``inScopeObjects`` by name narrows; an unnamed object is not that name."""
    policy = Policy.from_dict({"keys": [KEY], "inScopeObjects": [{"kind": "ConfigMap", "name": "app-*"}]})
    assert decide(Review.for_object(_generated("app-")), policy).reason == "out-of-scope"


def test_a_generate_name_object_signed_as_such_still_verifies() -> None:
    (signed,) = sign(_generated("job-"), make_key("ecdsa-p256", 3))
    admitted = copy.deepcopy(signed)
    assert decide(Review.for_object(admitted), Policy.from_dict({"keys": [KEY]})).verified
