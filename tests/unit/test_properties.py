"""Properties of the verifier, against models written independently of it (hypothesis).

1. **Ignored fields.** Sign a random object, change it at random, verify: the verdict is
   "verified" exactly when every leaf that differs lies inside the policy's ignoreFields
   (and the identity is unchanged). The model compares flattened JSON leaves -- ``null``,
   ``{}`` and ``[]`` are no leaves, ``1 == 1.0``, ``true != 1``, ``"1" != 1`` -- and knows
   the ignored region by its paths, not through the verifier's pattern trie.
2. **keyOperation and threshold.** Random signature sets (trusted keys, an outsider, junk
   bytes, keyless identities) against random policies: ``AtLeastOne`` needs one entry,
   ``MustAll`` every entry, ``threshold: N`` N *distinct signers* among the satisfied
   entries (two entries satisfied by one identity count once, for threshold but not for
   MustAll -- ``provider/verifier.py::_check_anchors``).
"""

from __future__ import annotations

import base64
import copy
import gzip
import itertools
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from provider import Policy, Review, decide
from provider.envelope import set_key
from provider.keys import fingerprint_of, sign_bytes
from provider.signing import dump_yaml
from tests.assets.keyless.world import GOOGLE, SIGNED_AT, World, pem
from tests.support import make_key, public_key_pem, sign

D = "cosign.sigstore.dev"
ENVELOPE = (f"{D}/message", f"{D}/signature")

# --- 1. ignored fields ----------------------------------------------------------------

#: The ignored region, as paths: the policy below says the same in its own syntax.
IGNORED: tuple[tuple[str, ...], ...] = (("spec", "free"), ("metadata", "labels", "scratch"))
IGNORE_POLICY = Policy.from_dict({"keys": [public_key_pem(make_key("ed25519"))], "ignoreFields": [{"fields": ["spec.free", "metadata.labels.scratch"]}]})

# Keys never spell a field a built-in profile ignores (status, metadata.uid, ...); dotted keys
# appear only below ``spec``, where no ignore pattern can be read as a dotted key.
PLAIN_KEYS = st.text("abcxyz", min_size=1, max_size=3)
SPEC_KEYS = PLAIN_KEYS | st.sampled_from(["a.b", "free.x", "x-y", "app.kubernetes.io/name", ""])
# Floats as the API server can hand them over: encoding/json writes a whole float below 1e21 as its
# shortest digits padded with zeros, so one from 2**53 up arrives as another integer (4.058275127741359e16
# as 40582751277413590), never as itself (provider/parsing.py reads signed YAML the same way).
FLOATS = st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer() or not 2**53 <= abs(f) < 1e21)
SCALARS = st.none() | st.booleans() | st.integers(-3, 3) | FLOATS | st.text(max_size=5)


def trees(keys: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3), max_leaves=10)


OBJECTS = st.builds(
    lambda spec, free, labels: {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "ns", "labels": labels},
        "spec": {**spec, "free": free},
    },
    st.dictionaries(SPEC_KEYS, trees(SPEC_KEYS), max_size=4),
    trees(SPEC_KEYS),
    st.dictionaries(st.sampled_from(["app", "tier", "scratch"]), st.text(max_size=5), max_size=3),
)

Path = tuple[str | int, ...]


def leaves(value: Any, path: Path = ()) -> dict[Path, tuple[str, Any]]:
    """Flattened JSON leaves, typed: what the comparison is defined over."""
    if isinstance(value, dict):
        return {p: v for k, item in value.items() for p, v in leaves(item, (*path, k)).items()}
    if isinstance(value, list):
        return {p: v for i, item in enumerate(value) for p, v in leaves(item, (*path, i)).items()}
    if value is None:
        return {}
    if isinstance(value, bool):
        return {path: ("bool", value)}
    if isinstance(value, (int, float)):
        return {path: ("number", float(value))}
    return {path: ("string", value)}


def content(obj: Any) -> Any:
    """What is compared: the object without its signature annotations and namespace (part of the identity)."""
    obj = copy.deepcopy(obj)
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if isinstance(meta, dict):
        meta.pop("namespace", None)
        if isinstance(meta.get("annotations"), dict):
            for key in ENVELOPE:
                meta["annotations"].pop(key, None)
    return obj


def identity(obj: Any) -> Any:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return None
    return obj.get("apiVersion"), obj.get("kind"), meta.get("name"), meta.get("namespace")


def expected_verified(signed: dict[str, Any], admitted: Any) -> bool:
    if not isinstance(admitted, dict) or identity(admitted) != identity(signed):
        return False
    if admitted["metadata"].get("annotations", {}).get(ENVELOPE[0]) != signed["metadata"]["annotations"][ENVELOPE[0]]:
        return False
    before, after = leaves(content(signed)), leaves(content(admitted))
    differing = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    return all(any(p[: len(region)] == region for region in IGNORED) for p in differing)


def paths(value: Any, path: Path = ()) -> list[Path]:
    """Every path in ``value`` (containers and leaves), outermost first."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*path, index))
    return found


def mutable(path: Path) -> bool:
    """The signature annotations (and the containers holding them) stay as signed."""
    return path not in ((), ("metadata",), ("metadata", "annotations")) and not (len(path) >= 3 and path[:2] == ("metadata", "annotations") and path[2] in ENVELOPE)


def protected(path: Path) -> bool:
    """Containers of the signature annotations: values may be added to them, never replaced or removed."""
    return path in (("metadata",), ("metadata", "annotations"))


def container_at(obj: Any, path: Path) -> Any:
    for step in path:
        obj = obj[step]
    return obj


@st.composite
def mutations(draw: st.DrawFn, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` changed once: a value replaced, a key or element removed, or a key added.

    Where: inside the ignored region, in the content outside it (``spec``, labels,
    annotations), or anywhere at all (the identity too) -- in about equal parts.
    """
    changed = copy.deepcopy(obj)
    candidates = [p for p in paths(changed) if mutable(p)]
    inside = [p for p in candidates if any(p[: len(r)] == r for r in IGNORED)]
    outside = [p for p in candidates if (p[:1] == ("spec",) or p[:2] == ("metadata", "labels")) and p not in inside] + [("metadata", "annotations")]
    pool = draw(st.sampled_from([pool for pool in (inside, outside, candidates) if pool]))
    path = draw(st.sampled_from(pool))
    parent, last = container_at(changed, path[:-1]), path[-1]
    operation = "add" if protected(path) else draw(st.sampled_from(["replace", "remove", "add"]))
    if operation == "replace":
        parent[last] = draw(trees(SPEC_KEYS if path[:1] == ("spec",) else PLAIN_KEYS))
    elif operation == "remove":
        del parent[last]
    else:
        target = container_at(changed, path)
        if isinstance(target, dict):
            target[draw(SPEC_KEYS if path[:1] == ("spec",) else PLAIN_KEYS)] = draw(trees(PLAIN_KEYS))
        elif isinstance(target, list):
            target.insert(draw(st.integers(0, len(target))), draw(trees(PLAIN_KEYS)))
        else:
            parent[last] = draw(trees(PLAIN_KEYS))
    return changed


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), OBJECTS)
def test_a_change_is_verified_exactly_when_every_difference_is_inside_the_ignored_fields(data: st.DataObject, obj: dict[str, Any]) -> None:
    (signed,) = sign(obj, make_key("ed25519"))
    assert decide(Review.for_object(signed), IGNORE_POLICY).verified, "an unchanged signed object must verify"
    admitted = data.draw(mutations(signed))
    result = decide(Review.for_object(admitted), IGNORE_POLICY)
    assert result.verified is expected_verified(signed, admitted), result.message
    assert result.allowed is result.verified
    if not result.verified:
        assert result.reason in ("content-mismatch", "no-matching-manifest", "malformed-message"), result.reason


# --- 2. keyOperation, threshold, distinct signers ---------------------------------------

KEYS = [make_key("ed25519", 20 + n) for n in range(4)]
OUTSIDER = make_key("ed25519", 30)
WORLD = World()
NOW = SIGNED_AT + timedelta(days=30)
IDENTITIES = ("alice@example.com", "bob@example.com")
OBJ = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}, "data": {"k": "v"}}
PAYLOAD = dump_yaml([OBJ]).encode()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _keyless_set(email: str) -> tuple[bytes, str, str]:
    key, cert = WORLD.leaf(email=email)
    signature = sign_bytes(key, PAYLOAD)
    bundle = WORLD.bundle(PAYLOAD, signature, cert)
    return signature, _b64(gzip.compress(pem(cert), mtime=0)), _b64(gzip.compress(bundle, mtime=0))


#: One signature set per signer over the one payload, made once: ("key", n), ("outsider",), ("junk",), ("keyless", email).
SETS: dict[tuple[Any, ...], tuple[bytes, str | None, str | None]] = {
    **{("key", n): (sign_bytes(k, PAYLOAD), None, None) for n, k in enumerate(KEYS)},
    ("outsider",): (sign_bytes(OUTSIDER, PAYLOAD), None, None),
    ("junk",): (bytes(range(64)), None, None),
    **{("keyless", email): _keyless_set(email) for email in IDENTITIES},
}
#: Signer entries: each names which identities satisfy it. Several overlap on alice; "anyone" on both.
SIGNER_ENTRIES: dict[str, tuple[dict[str, Any], frozenset[str]]] = {
    "alice": ({"subject": "alice@example.com"}, frozenset({"alice@example.com"})),
    "alice-regexp": ({"subjectRegExp": "alice@.*"}, frozenset({"alice@example.com"})),
    "alice-google": ({"subject": "alice@example.com", "issuer": GOOGLE}, frozenset({"alice@example.com"})),
    "alice-github": ({"subject": "alice@example.com", "issuer": "https://github.com/login/oauth"}, frozenset()),
    "bob": ({"subject": "bob@example.com"}, frozenset({"bob@example.com"})),
    "anyone": ({"subjectRegExp": ".*@example\\.com"}, frozenset({"alice@example.com", "bob@example.com"})),
}


def envelope(sets: list[tuple[Any, ...]]) -> dict[str, Any]:
    obj = copy.deepcopy(OBJ)
    annotations = {f"{D}/message": _b64(gzip.compress(PAYLOAD, mtime=0))}
    for index, which in enumerate(sets):
        signature, certificate, bundle = SETS[which]
        annotations[set_key(D, "signature", index)] = _b64(signature)
        if certificate is not None and bundle is not None:
            annotations[set_key(D, "certificate", index)] = certificate
            annotations[set_key(D, "bundle", index)] = bundle
    obj["metadata"]["annotations"] = annotations
    return obj


def _most_distinct(choices: list[frozenset[Any]]) -> int:
    """The most entries that can each be given a different signer from their choices (exhaustively)."""
    best = 0
    for pick in itertools.product(*[[None, *sorted(c, key=str)] for c in choices]):
        used = [p for p in pick if p is not None]
        if len(used) == len(set(used)):
            best = max(best, len(used))
    return best


def model(sets: list[tuple[Any, ...]], keys: list[int], signers: list[str], requirement: Any) -> tuple[bool, int, set[Any]]:
    """(verified, satisfied entries, every signer that satisfies some entry), from the entries' own definitions."""
    present_keys = {which[1] for which in sets if which[0] == "key"}
    present_identities = {which[1] for which in sets if which[0] == "keyless"}
    choices = [frozenset({fingerprint_of(KEYS[n].public_key())}) for n in keys if n in present_keys]
    choices += [SIGNER_ENTRIES[name][1] & present_identities for name in signers]
    choices = [c for c in choices if c]
    satisfied = len(choices)
    entries = len(keys) + len(signers)
    if requirement == "AtLeastOne":
        verified = satisfied >= 1
    elif requirement == "MustAll":
        verified = satisfied == entries
    else:
        verified = _most_distinct(choices) >= requirement
    return verified, satisfied, set().union(*choices)


def policy_for(keys: list[int], signers: list[str], requirement: Any) -> Policy:
    data: dict[str, Any] = {"keys": [public_key_pem(KEYS[n]) for n in keys]}
    if signers:
        data["signers"] = [SIGNER_ENTRIES[name][0] for name in signers]
        data["trustedRoot"] = TRUSTED_ROOT
    if requirement in ("AtLeastOne", "MustAll"):
        data["keyOperation"] = requirement
    else:
        data["threshold"] = requirement
    return Policy.from_dict(data)


TRUSTED_ROOT = WORLD.trusted_root()
KEY_SETS = st.sampled_from([("key", n) for n in range(4)] + [("outsider",), ("junk",)])


@st.composite
def requirements(draw: st.DrawFn, entries: int) -> Any:
    return draw(st.sampled_from(["AtLeastOne", "MustAll"]) | st.integers(1, entries))


def check_against_model(sets: list[tuple[Any, ...]], keys: list[int], signers: list[str], requirement: Any) -> None:
    result = decide(Review.for_object(envelope(sets)), policy_for(keys, signers, requirement), now=NOW)
    verified, satisfied, distinct = model(sets, keys, signers, requirement)
    assert result.verified is verified, (result.reason, result.message)
    assert result.allowed is verified
    if verified:
        assert result.reason == "verified"
        key_signers = {s for s in result.signers if isinstance(s, str)}
        identity_signers = {s["subject"] for s in result.signers if isinstance(s, dict)}
        assert key_signers | identity_signers <= distinct  # only entries that really verified are named
    elif satisfied == 0:
        assert result.reason in ("signature-invalid", "identity-mismatch"), result.reason
    else:
        assert result.reason == "key-threshold-not-met", result.reason


@settings(max_examples=300, deadline=None)
@given(st.lists(KEY_SETS, min_size=1, max_size=6), st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True), st.data())
def test_keys_meet_at_least_one_must_all_and_thresholds_as_the_model_says(sets: list[tuple[Any, ...]], keys: list[int], data: st.DataObject) -> None:
    check_against_model(sets, keys, [], data.draw(requirements(len(keys))))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(KEY_SETS | st.sampled_from([("keyless", e) for e in IDENTITIES]), min_size=1, max_size=5),
    st.lists(st.integers(0, 3), max_size=2, unique=True),
    st.lists(st.sampled_from(sorted(SIGNER_ENTRIES)), min_size=1, max_size=4),
    st.data(),
)
def test_overlapping_signer_entries_count_once_for_thresholds_and_each_for_must_all(
    sets: list[tuple[Any, ...]], keys: list[int], signers: list[str], data: st.DataObject
) -> None:
    # "anyone" matches both identities: which one it counts as must not depend on the
    # order of the sets -- the count is the most distinct signers any assignment gives.
    assume(len(keys) + len(signers) >= 1)
    check_against_model(sets, keys, signers, data.draw(requirements(len(keys) + len(signers))))


def test_a_broad_entry_gives_way_to_a_narrow_one_whatever_the_order_of_the_sets() -> None:
    """alice and bob both signed; "anyone" and "alice" are two different people in either set order."""
    for order in ([("keyless", "alice@example.com"), ("keyless", "bob@example.com")], [("keyless", "bob@example.com"), ("keyless", "alice@example.com")]):
        for entries in (["anyone", "alice"], ["alice", "anyone"]):
            result = decide(Review.for_object(envelope(order)), policy_for([], entries, 2), now=NOW)
            assert result.reason == "verified", (order, entries, result.message)
            assert sorted(s["subject"] for s in result.signers) == ["alice@example.com", "bob@example.com"]
    alone = decide(Review.for_object(envelope([("keyless", "alice@example.com")])), policy_for([], ["anyone", "alice"], 2), now=NOW)
    assert alone.reason == "key-threshold-not-met" and "1 distinct signer" in alone.message


def test_one_identity_named_by_two_entries_never_meets_a_threshold_of_two() -> None:
    check_against_model([("keyless", "alice@example.com")], [], ["alice", "alice-regexp"], 2)
    check_against_model([("keyless", "alice@example.com")], [], ["alice", "alice-regexp"], "MustAll")
    result = decide(Review.for_object(envelope([("keyless", "alice@example.com")])), policy_for([], ["alice", "alice-regexp"], 2), now=NOW)
    assert result.reason == "key-threshold-not-met" and "1 distinct signer" in result.message
