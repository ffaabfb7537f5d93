"""Nested signer sets (``attestors``): every set must pass, ``count`` entries each, signers distinct.

Kyverno's shape (``validate.manifests.attestors``, ``tests/data/crds/kyverno``)
and semantics (``validate_manifest.go``: every set, ``count`` entries,
default all, a keys entry with several keys is several entries), with one
deliberate difference: a signer counts once across the whole tree.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provider.errors import PolicyError
from provider.keys.pem import PrivateKeyTypes
from provider.policy.attestors import AnchorSet, BudgetExceeded, solve
from provider.policy.schema import Policy
from provider.result import Result
from provider.review import Review
from provider.signatures.signing import append_signature, sign_documents
from provider.verifier import decide
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap

OBJECT = configmap("app", mode="production")
KEYS = [make_key("ecdsa-p256", 20 + i) for i in range(6)]


def signed_by(*keys: PrivateKeyTypes) -> dict[str, Any]:
    (doc,) = sign_documents([OBJECT], keys[0])
    for key in keys[1:]:
        (doc,) = append_signature([doc], key)
    return doc


def key_entry(*indices: int) -> dict[str, Any]:
    return {"keys": {"publicKeys": "".join(public_key_pem(KEYS[i]) for i in indices)}}


def verdict(obj: dict[str, Any], attestors: list[dict[str, Any]]) -> Result:
    return decide(Review.for_object(obj), Policy.from_dict({"attestors": attestors}))


# "(team A or team B) and security", the proposal's requirement 2, as three sets:
SETS = [
    {"name": "teams", "count": 1, "entries": [key_entry(0), key_entry(1)]},
    {"name": "security", "entries": [key_entry(2)]},
    {"name": "release", "count": 2, "entries": [key_entry(3), key_entry(4), key_entry(5)]},
]
#: For each set, signers that satisfy it, and signers that do not.
PASSING = [(0,), (2,), (3, 5)]
FAILING = [(), (), (4,)]


@pytest.mark.parametrize(
    "passing", list(itertools.product([True, False], repeat=3)), ids=lambda p: "-".join("P" if x else "F" for x in p)
)
def test_every_combination_of_passing_and_failing_sets(passing: tuple[bool, bool, bool]) -> None:
    signers = [i for ok, good, bad in zip(passing, PASSING, FAILING, strict=True) for i in (good if ok else bad)]
    if not signers:
        signers = [4]  # someone must sign for the object to carry signatures at all
    result = verdict(signed_by(*(KEYS[i] for i in signers)), SETS)
    if all(passing):
        assert (result.allowed, result.reason) == (True, "verified")
        assert len(result.signers) == 4  # one of the teams, security, two of release
        return
    assert not result.allowed
    assert result.reason in ("key-threshold-not-met", "signature-invalid")
    for index, (ok, spec) in enumerate(zip(passing, SETS, strict=True)):
        named = f"attestors[{index}] ({spec['name']})" in result.message
        assert named == (not ok), f"{passing}: {result.message}"


def test_one_signer_does_not_stand_for_two_sets() -> None:
    # The same key listed in two sets: Kyverno would count it for both; distinct signers do not.
    sets = [{"entries": [key_entry(0)]}, {"count": 1, "entries": [key_entry(0), key_entry(1)]}]
    alone = verdict(signed_by(KEYS[0]), sets)
    assert (alone.reason, "not by distinct signers" in alone.message) == ("key-threshold-not-met", True)
    assert verdict(signed_by(KEYS[0], KEYS[1]), sets).reason == "verified"


def test_a_nested_set_counts_as_one_entry() -> None:
    nested = {"attestor": {"count": 2, "entries": [key_entry(1), key_entry(2), key_entry(3)]}}
    sets = [{"count": 2, "entries": [key_entry(0), nested, key_entry(4)]}]
    assert verdict(signed_by(KEYS[0], KEYS[1], KEYS[2]), sets).reason == "verified"
    assert verdict(signed_by(KEYS[0], KEYS[4]), sets).reason == "verified"
    short = verdict(signed_by(KEYS[0], KEYS[1]), sets)
    assert short.reason == "key-threshold-not-met" and "attestors[0]" in short.message


def test_a_keys_entry_with_several_keys_is_several_entries() -> None:
    # Kyverno's ExpandStaticKeys: count defaults to all of them.
    sets = [{"entries": [key_entry(0, 1)]}]
    assert Policy.from_dict({"attestors": sets}).attestors[0].count == 2
    assert verdict(signed_by(KEYS[0]), sets).reason == "key-threshold-not-met"
    assert verdict(signed_by(KEYS[0], KEYS[1]), sets).reason == "verified"


@pytest.mark.parametrize(
    ("attestors", "message"),
    [
        ([], "empty"),
        ([{"entries": []}], "without entries"),
        ([{"count": 3, "entries": [key_entry(0)]}], "exceeds"),
        ([{"count": 0, "entries": [key_entry(0)]}], "at least 1"),
        (
            [{"entries": [{"keys": {"publicKeys": public_key_pem(KEYS[0])}, "keyless": {"subject": "a"}}]}],
            "exactly one",
        ),
        ([{"entries": [{"keys": {"kms": "gcpkms://x"}}]}], "kms"),
        ([{"entries": [{"certificates": {"cert": "x", "certChain": "y"}}]}], "certChain"),
        ([{"entries": [{"keyless": {"issuer": "https://x"}}]}], "subject"),
        (
            [
                {
                    "entries": [
                        {
                            "attestor": {
                                "entries": [
                                    {
                                        "attestor": {
                                            "entries": [
                                                {"attestor": {"entries": [{"attestor": {"entries": [key_entry(0)]}}]}}
                                            ]
                                        }
                                    }
                                ]
                            }
                        }
                    ]
                }
            ],
            "nest",
        ),
    ],
    ids=["empty", "no-entries", "count-too-big", "count-zero", "two-kinds", "kms", "cert-chain", "no-subject", "deep"],
)
def test_unusable_attestors_are_policy_errors(attestors: list[Any], message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        Policy.from_dict({"attestors": attestors})


def test_attestors_and_flat_keys_are_not_mixed() -> None:
    with pytest.raises(PolicyError, match="not both"):
        Policy.from_dict({"attestors": [{"entries": [key_entry(0)]}], "keys": [public_key_pem(KEYS[1])]})


# --- the solver against a brute-force model ----------------------------------------


class Leaf:
    def __init__(self, signers: Sequence[int]) -> None:
        self.signers = tuple(signers)


def tree(depth: int = 0) -> st.SearchStrategy[Any]:
    leaf = st.lists(st.integers(0, 3), max_size=3, unique=True).map(Leaf)
    child = leaf if depth >= 2 else st.one_of(leaf, st.deferred(lambda: tree(depth + 1)))
    return st.lists(child, min_size=1, max_size=4).flatmap(
        lambda entries: st.integers(1, len(entries)).map(lambda count: AnchorSet(count, tuple(entries), "t"))
    )


def leaves_of(node: Any) -> list[Leaf]:
    return node.leaves() if isinstance(node, AnchorSet) else [node]


def satisfied(node: Any, assigned: dict[int, int]) -> bool:
    if isinstance(node, Leaf):
        return id(node) in assigned
    return sum(satisfied(entry, assigned) for entry in node.entries) >= node.count


def brute_force(sets: list[AnchorSet]) -> bool:
    """Every assignment of leaves to one of their signers (or none), injective: does one satisfy every set?"""
    leaves = [leaf for s in sets for leaf in leaves_of(s)]
    for choice in itertools.product(*[(None, *leaf.signers) for leaf in leaves]):
        used = [c for c in choice if c is not None]
        if len(used) != len(set(used)):
            continue
        assigned = {id(leaf): c for leaf, c in zip(leaves, choice, strict=True) if c is not None}
        if all(satisfied(s, assigned) for s in sets):
            return True
    return False


@settings(max_examples=300, deadline=None)
@given(st.lists(tree(), min_size=1, max_size=3))
def test_the_solver_agrees_with_the_brute_force_model(sets: list[AnchorSet]) -> None:
    def candidates(leaf: Any) -> Sequence[Hashable]:
        return leaf.signers

    if sum(len(leaves_of(s)) for s in sets) > 9:
        return  # the model enumerates up to 4^leaves assignments
    found = solve(sets, candidates)
    assert (found is not None) == brute_force(sets)
    if found is not None:
        assert len(set(found.values())) == len(found)  # distinct signers
        leaves = {id(leaf): leaf for s in sets for leaf in leaves_of(s)}
        assert all(signer in leaves[key].signers for key, signer in found.items())
        assert all(satisfied(s, found) for s in sets)


def test_the_solver_gives_up_within_its_budget() -> None:
    # Two sets of ten of twenty entries, each met alone, over fourteen signers: every way of
    # meeting the first is tried against the second before "no"; the budget ends the search first.
    wide = AnchorSet(10, tuple(Leaf(range(14)) for _ in range(20)), "wide")
    with pytest.raises(BudgetExceeded):
        solve([wide, wide], lambda leaf: leaf.signers, budget=1000)


def test_a_set_nobody_can_meet_ends_the_search_at_once() -> None:
    wide = AnchorSet(10, tuple(Leaf(range(20)) for _ in range(20)), "wide")
    never = AnchorSet(1, (Leaf(()),), "never")
    assert solve([wide, never], lambda leaf: leaf.signers, budget=1000) is None
