"""Policy entries that match everything: a skipObjects entry or a field pattern of wildcards alone is refused.

From an attack pass without any signing key (docs/security.md): each test is named by the attack; a table
row's id names the input.
"""

from __future__ import annotations

from typing import Any

import pytest

from provider import Policy
from provider.errors import PolicyError
from tests.support.keys import public_key_pem
from tests.support.one_key import KEY

# --- resourceBundleRef: the object chooses its reference, the allow-list must not be wider than written ---------


@pytest.mark.parametrize(
    "entry",
    [{}, {"kind": "*"}, {"name": "*", "namespace": "*"}, {"kind": "ConfigMap,*"}, {"group": "*", "version": "*"}],
    ids=["empty-entry", "any-kind", "any-name-any-namespace", "an-alternative-is-any", "any-group-any-version"],
)
def test_a_skip_objects_entry_never_matches_every_object(entry: dict[str, str]) -> None:
    # skipUsers refuses an entry that matches everyone; skipObjects took {} (a template that rendered
    # nothing, a stray "- {}") and skipped every object: verification off for the whole cluster.
    with pytest.raises(PolicyError, match="matches every object"):
        Policy.from_dict({"keys": [public_key_pem(KEY)], "skipObjects": [{"kind": "Secret"}, entry]})


@pytest.mark.parametrize(
    "entry",
    [{"namespace": "kube-system"}, {"subresource": "status"}, {"kind": "ConfigMap", "name": "kube-root-ca.crt"}],
    ids=["a-namespace", "a-subresource", "one-object"],
)
def test_a_skip_objects_entry_that_narrows_anything_is_kept(entry: dict[str, str]) -> None:
    policy = Policy.from_dict({"keys": [public_key_pem(KEY)], "skipObjects": [entry]})
    assert len(policy.skip_objects) == 1


@pytest.mark.parametrize(
    "pattern", ["*", "**", "*.*", " * ", "*[]"], ids=["star", "double-star", "star-star", "padded", "star-list"]
)
@pytest.mark.parametrize("where", ["ignoreFields", "skipUsers"])
def test_a_field_pattern_of_wildcards_alone_is_refused_where_it_lets_changes_through(pattern: str, where: str) -> None:
    # fields: ["*"] covered every field of the object: an ignore rule that verified nothing but the identity,
    # an exemption that let its user change anything -- where the author meant one field.
    rule: dict[str, Any] = {"fields": [pattern]}
    if where == "skipUsers":
        rule = {**rule, "users": ["ci-bot"], "operations": ["UPDATE"]}
    with pytest.raises(PolicyError, match="wildcards alone"):
        Policy.from_dict({"keys": [public_key_pem(KEY)], where: [rule]})


@pytest.mark.parametrize(
    ("pattern", "outcome"),
    [
        ("spec.\u00b2", "key"),  # superscript two: isdigit() says yes, int() says no -- a ValueError escaped
        ("spec.\u0663", "key"),  # Arabic-Indic three: read as index 3, so it matched spec.3 / spec[3]
        ("spec[\u0663]", "refused"),
        ("spec.3", "num"),
        ("spec[3]", "index"),
    ],
    ids=["superscript-digit", "arabic-digit-segment", "arabic-digit-index", "ascii-segment", "ascii-index"],
)
def test_a_field_pattern_reads_only_ascii_digits_as_a_position(pattern: str, outcome: str) -> None:
    raw = {"keys": [public_key_pem(KEY)], "ignoreFields": [{"fields": [pattern]}]}
    if outcome == "refused":
        with pytest.raises(PolicyError, match="malformed bracket"):
            Policy.from_dict(raw)
        return
    (rule,) = Policy.from_dict(raw).ignore_fields
    assert rule.segments[0][-1][0] == outcome


def test_a_sensitive_field_pattern_may_name_every_field() -> None:
    # Hiding every value of a kind only makes verdicts say less: it lets no change through.
    policy = Policy.from_dict(
        {"keys": [public_key_pem(KEY)], "sensitiveFields": [{"objects": [{"kind": "Widget"}], "fields": ["*"]}]}
    )
    assert len(policy.sensitive_fields) == 1
