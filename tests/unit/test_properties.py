"""Properties of the verifier, against models written independently of it (hypothesis).

1. **Ignored fields and what equals what.** Sign a random object of one of several kinds,
   change it at random (``{}``, ``[]``, ``[{}]`` and ``null`` included), verify: the verdict
   is "verified" exactly when both objects are equal once the ignored region is taken out
   of each and the equivalences are applied -- ``null`` and ``[]`` vanish, ``{}`` vanishes
   only at a map position, a struct stays even when empty, a list keeps its length,
   ``1 == 1.0``, ``true != 1``, ``"1" != 1`` (and the identity is unchanged). The model
   knows the ignored region and the map positions by their paths, written out here from
   the Kubernetes API reference, not through the verifier's trie or its schema data.
2. **keyOperation and threshold.** Random signature sets (trusted keys, an outsider, junk
   bytes, keyless certificates -- several SANs on one certificate, one person with two
   keys, certificates for listed keys) against random policies with overlapping entries:
   ``AtLeastOne`` needs one entry, ``MustAll`` every entry and ``threshold: N`` N entries,
   each of these matched to a *different signer*. The model's signer is a signing key,
   merged with every key a certificate shares a key or a SAN with, and its count is an
   exhaustive search (``provider/verifier/anchors.py::check_anchors`` uses a union-find and
   Kuhn's matching).
"""

from __future__ import annotations

import base64
import copy
import gzip
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from provider import Policy, Review, decide
from provider.keys.pem import fingerprint_of, sign_bytes
from provider.signatures.envelope import set_key
from provider.signatures.signing import dump_yaml
from tests.support.keyless import GOOGLE, SIGNED_AT, World, pem
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import sign

D = "cosign.sigstore.dev"
ENVELOPE = (f"{D}/message", f"{D}/signature")

# --- 1. ignored fields ----------------------------------------------------------------

#: The ignored region, as paths: the policy below says the same in its own syntax.
IGNORED: tuple[tuple[str, ...], ...] = (("spec", "free"), ("metadata", "labels", "scratch"))
IGNORE_POLICY = Policy.from_dict(
    {
        "keys": [public_key_pem(make_key("ed25519"))],
        "ignoreFields": [{"fields": ["spec.free", "metadata.labels.scratch"]}],
    }
)

# Keys never spell a field a built-in profile ignores (status, metadata.uid, ...); dotted keys
# appear only below ``spec``, where no ignore pattern can be read as a dotted key.
PLAIN_KEYS = st.text("abcxyz", min_size=1, max_size=3)
SPEC_KEYS = PLAIN_KEYS | st.sampled_from(
    ["a.b", "free.x", "x-y", "app.kubernetes.io/name", "", "podSelector", "matchLabels", "ingress", "from"]
)
# Floats as the API server can hand them over: encoding/json writes a whole float below 1e21 as its
# shortest digits padded with zeros, so one from 2**53 up arrives as another integer (4.058275127741359e16
# as 40582751277413590), never as itself (provider/parsing.py reads signed YAML the same way).
FLOATS = st.floats(allow_nan=False, allow_infinity=False).filter(
    lambda f: not f.is_integer() or not 2**53 <= abs(f) < 1e21
)
SCALARS = st.none() | st.booleans() | st.integers(-3, 3) | FLOATS | st.text(max_size=5)
EMPTIES = st.sampled_from([None, {}, [], [{}], [None], {"matchLabels": {}}, {"matchLabels": None}])


def trees(keys: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.recursive(
        SCALARS | EMPTIES,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
        max_leaves=10,
    )


#: Kinds the objects are drawn from: (apiVersion, kind) -> the map positions below the
#: object ("*" is any list index or map key), from the Kubernetes API reference
#: (ObjectMeta labels/annotations, ConfigMap data/binaryData, LabelSelector matchLabels).
META_MAPS = (("metadata", "labels"), ("metadata", "annotations"))
SELECTOR_MAPS = tuple(
    ("spec", *where, "matchLabels")
    for where in (
        ("podSelector",),
        *(
            (rules, "*", peers, "*", selector)
            for rules, peers in (("ingress", "from"), ("egress", "to"))
            for selector in ("podSelector", "namespaceSelector")
        ),
    )
)
#: Kinds stored as JSON (custom resources): outside ``metadata`` an empty list is kept, a value.
CUSTOM = {("example.com/v1", "Widget")}
KINDS: dict[tuple[str, str], tuple[tuple[str, ...], ...]] = {
    ("example.com/v1", "Widget"): META_MAPS,  # a custom resource: no schema, so only metadata's maps
    ("v1", "ConfigMap"): (*META_MAPS, ("data",), ("binaryData",)),
    ("networking.k8s.io/v1", "NetworkPolicy"): (*META_MAPS, *SELECTOR_MAPS),
}

OBJECTS = st.builds(
    lambda kind, spec, free, labels: {
        "apiVersion": kind[0],
        "kind": kind[1],
        "metadata": {"name": "w", "namespace": "ns", "labels": labels},
        "spec": {**spec, "free": free},
    },
    st.sampled_from(sorted(KINDS)),
    st.dictionaries(SPEC_KEYS, trees(SPEC_KEYS), max_size=4),
    trees(SPEC_KEYS),
    st.dictionaries(st.sampled_from(["app", "tier", "scratch"]), st.text(max_size=5), max_size=3),
)

Path = tuple[str | int, ...]
VANISHED = object()


def is_map(path: Path, maps: tuple[tuple[str, ...], ...]) -> bool:
    return any(len(m) == len(path) and all(x in ("*", y) for x, y in zip(m, path, strict=True)) for m in maps)


def normal(
    value: Any,
    path: Path,
    maps: tuple[tuple[str, ...], ...],
    ignored: tuple[tuple[str, ...], ...] = IGNORED,
    custom: bool = False,
) -> Any:
    """``value`` without the ignored region and with the equivalences applied; VANISHED when it equals absent.

    ``custom``: the object is a custom resource, whose ``[]`` outside ``metadata`` is a value.
    """
    if any(path == region for region in ignored):
        return VANISHED
    if value is None:
        return VANISHED
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("number", float(value))
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        # The length counts: a vanished element is still a position.
        if not value:
            return ("list", ()) if custom and path[:1] != ("metadata",) else VANISHED
        return (
            "list",
            tuple(_element(normal(item, (*path, i), maps, ignored, custom)) for i, item in enumerate(value)),
        )
    fields = {
        k: n for k, item in value.items() if (n := normal(item, (*path, k), maps, ignored, custom)) is not VANISHED
    }
    if not fields and is_map(path, maps):
        return VANISHED
    return ("mapping", tuple(sorted(fields.items())))


def _element(value: Any) -> Any:
    return ("nothing",) if value is VANISHED else value


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
    kind = (signed["apiVersion"], signed["kind"])
    maps, custom = KINDS[kind], kind in CUSTOM
    return normal(content(signed), (), maps, custom=custom) == normal(content(admitted), (), maps, custom=custom)


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
    return path not in ((), ("metadata",), ("metadata", "annotations")) and not (
        len(path) >= 3 and path[:2] == ("metadata", "annotations") and path[2] in ENVELOPE
    )


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
    outside = [p for p in candidates if (p[:1] == ("spec",) or p[:2] == ("metadata", "labels")) and p not in inside] + [
        ("metadata", "annotations")
    ]
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
def test_a_change_is_verified_exactly_when_every_difference_is_inside_the_ignored_fields(
    data: st.DataObject, obj: dict[str, Any]
) -> None:
    (signed,) = sign(obj, make_key("ed25519"))
    assert decide(Review.for_object(signed), IGNORE_POLICY).verified, "an unchanged signed object must verify"
    admitted = data.draw(mutations(signed))
    result = decide(Review.for_object(admitted), IGNORE_POLICY)
    assert result.verified is expected_verified(signed, admitted), result.message
    assert result.allowed is result.verified
    if not result.verified:
        assert result.reason in ("content-mismatch", "no-matching-manifest", "malformed-message"), result.reason


# --- exemptions never reach beyond their fields ---------------------------------------

OPERATOR = "system:serviceaccount:ns:operator"
OPERATOR_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated")
#: The exemption's fields are the ignored region above; the API server's bookkeeping is always allowed.
BOOKKEEPING = (("metadata", "resourceVersion"), ("metadata", "managedFields"), ("metadata", "generation"))
EXEMPT_POLICY = Policy.from_dict({
    "keys": [public_key_pem(make_key("ed25519"))],
    "defaults": [],
    "skipUsers": [{"users": [OPERATOR], "fields": ["spec.free", "metadata.labels.scratch"], "description": "the operator tunes spec.free"}],
})  # fmt: skip


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), OBJECTS)
def test_a_field_scoped_exemption_covers_exactly_the_changes_within_its_fields(
    data: st.DataObject, obj: dict[str, Any]
) -> None:
    """An UPDATE by the exempt operator passes unsigned exactly when old and new differ only within its fields.

    Anything else -- a change outside, ``{}`` or ``[{}]`` added, the identity -- goes on to
    verification (and, the object being changed from what was signed, is denied there).
    """
    (old,) = sign(obj, make_key("ed25519"))
    new = data.draw(mutations(old))
    review = Review(object=new, old_object=old, operation="UPDATE", username=OPERATOR, groups=OPERATOR_GROUPS)
    result = decide(review, EXEMPT_POLICY)
    kind = (old["apiVersion"], old["kind"])
    maps, custom = KINDS[kind], kind in CUSTOM
    region = (*IGNORED, *BOOKKEEPING)
    within = isinstance(new, dict) and normal(old, (), maps, region, custom) == normal(new, (), maps, region, custom)
    assert (result.reason == "skipped-user") is within, result.message
    if not within:
        assert not result.allowed or result.verified, result.message
    # Without the service-account groups the same name is nobody.
    impostor = decide(Review(object=new, old_object=old, operation="UPDATE", username=OPERATOR), EXEMPT_POLICY)
    assert impostor.reason != "skipped-user"


# --- 2. keyOperation, threshold, distinct signers ---------------------------------------

WORLD = World()
NOW = SIGNED_AT + timedelta(days=30)
OBJ = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}, "data": {"k": "v"}}
PAYLOAD = dump_yaml([OBJ]).encode()
#: Listed keys (ECDSA, so that certificates can be issued for them too) and one nobody lists.
KEYS = [make_key("ecdsa-p256", 40 + n) for n in range(4)]
OUTSIDER = make_key("ecdsa-p256", 50)
ALICE, ALIAS, BOB, CAROL = "alice@example.com", "alice.smith@example.com", "bob@example.com", "carol@example.com"


@dataclass(frozen=True)
class Cert:
    """A certificate of the world's CA: the SANs it names, for a key of its own (keyless) or listed key ``KEYS[n]``."""

    sans: tuple[str, ...]
    key: int | None = None


CERTS: dict[str, Cert] = {
    "alice-1": Cert((ALICE,)),
    "alice-2": Cert((ALICE,)),  # alice signs again: a new ephemeral key
    "alice-both": Cert((ALIAS, ALICE)),  # one certificate, two SANs
    "alias": Cert((ALIAS,)),  # the alias alone: one person with alice through "alice-both"
    "bob": Cert((BOB,)),
    "bob-key0": Cert((BOB,), 0),  # bob certified for listed key 0
    "carol-key1": Cert((CAROL,), 1),
    "carol-key2": Cert((CAROL,), 2),  # carol holds listed keys 1 and 2
}
#: Signer entries and the SANs each accepts (every certificate here is issued for GOOGLE).
SIGNER_ENTRIES: dict[str, tuple[dict[str, Any], frozenset[str]]] = {
    "alice": ({"subject": ALICE}, frozenset({ALICE})),
    "alice-regexp": ({"subjectRegExp": "alice.*@example\\.com"}, frozenset({ALICE, ALIAS})),
    "alias": ({"subject": ALIAS}, frozenset({ALIAS})),
    "alice-google": ({"subject": ALICE, "issuer": GOOGLE}, frozenset({ALICE})),
    "alice-github": ({"subject": ALICE, "issuer": "https://github.com/login/oauth"}, frozenset()),
    "bob": ({"subject": BOB}, frozenset({BOB})),
    "carol": ({"subject": CAROL}, frozenset({CAROL})),
    "anyone": ({"subjectRegExp": ".*@example\\.com"}, frozenset({ALICE, ALIAS, BOB, CAROL})),
}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _fp(key: Any) -> str:
    return fingerprint_of(key.public_key())


def _cert_set(cert: Cert) -> tuple[bytes, str, str, str]:
    key = KEYS[cert.key] if cert.key is not None else ec.generate_private_key(ec.SECP256R1())
    _, leaf = WORLD.leaf(email=cert.sans[0], also=cert.sans[1:], key=key)
    signature = sign_bytes(key, PAYLOAD)
    bundle = WORLD.bundle(PAYLOAD, signature, leaf)
    return signature, _b64(gzip.compress(pem(leaf), mtime=0)), _b64(gzip.compress(bundle, mtime=0)), _fp(key)


#: One signature set per signer over the one payload, made once: ("key", n), ("outsider",), ("junk",), ("cert", name).
#: Each holds (signature, certificate, bundle, the fingerprint of the key that signed).
SETS: dict[tuple[Any, ...], tuple[bytes, str | None, str | None, str | None]] = {
    **{("key", n): (sign_bytes(k, PAYLOAD), None, None, _fp(k)) for n, k in enumerate(KEYS)},
    ("outsider",): (sign_bytes(OUTSIDER, PAYLOAD), None, None, _fp(OUTSIDER)),
    ("junk",): (bytes(range(64)), None, None, None),
    **{("cert", name): _cert_set(cert) for name, cert in CERTS.items()},
}
TRUSTED_ROOT = WORLD.trusted_root()


def envelope(sets: list[tuple[Any, ...]]) -> dict[str, Any]:
    obj = copy.deepcopy(OBJ)
    annotations = {f"{D}/message": _b64(gzip.compress(PAYLOAD, mtime=0))}
    for index, which in enumerate(sets):
        signature, certificate, bundle, _ = SETS[which]
        annotations[set_key(D, "signature", index)] = _b64(signature)
        if certificate is not None and bundle is not None:
            annotations[set_key(D, "certificate", index)] = certificate
            annotations[set_key(D, "bundle", index)] = bundle
    obj["metadata"]["annotations"] = annotations
    return obj


def _same_signer(certs: list[tuple[Cert, str]]) -> Callable[[str], frozenset[str]]:
    """Key -> every key of its signer: certificates that share a key or a SAN are one person, merged until nothing changes."""
    groups = [({key}, set(cert.sans)) for cert, key in certs]
    merged = True
    while merged:
        merged = False
        for a, b in itertools.combinations(range(len(groups)), 2):
            if groups[a][0] & groups[b][0] or groups[a][1] & groups[b][1]:
                groups[a] = (groups[a][0] | groups[b][0], groups[a][1] | groups[b][1])
                del groups[b]
                merged = True
                break
    return lambda key: next((frozenset(keys) for keys, _ in groups if key in keys), frozenset({key}))


def _most_distinct(choices: list[set[frozenset[str]]]) -> int:
    """The most entries that can each be given a different signer from their choices (exhaustive search)."""

    def best(i: int, used: frozenset[frozenset[str]]) -> int:
        if i == len(choices):
            return 0
        return max([best(i + 1, used)] + [1 + best(i + 1, used | {c}) for c in choices[i] if c not in used])

    return best(0, frozenset())


@dataclass(frozen=True)
class Expected:
    verified: bool
    satisfied: int  # entries some signature satisfies
    distinct: int  # the most of them that different signers satisfy
    accepted: frozenset[str]  # every signing key some entry accepts
    same: Callable[[str], frozenset[str]]


def model(sets: list[tuple[Any, ...]], keys: list[int], signers: list[str], requirement: Any) -> Expected:
    """What the policy requires, from the entries' own definitions and "a signer is a key, or keys one subject holds"."""
    signed = {SETS[which][3] for which in sets} - {None}
    certs = [(CERTS[which[1]], SETS[which][3] or "") for which in set(sets) if which[0] == "cert"]
    choices = [{_fp(KEYS[n])} & signed for n in keys]
    choices += [{key for cert, key in certs if set(cert.sans) & SIGNER_ENTRIES[name][1]} for name in signers]
    # Certificates prove who holds a key only to a policy that trusts their CA: one with signer entries.
    same = _same_signer(certs) if signers else (lambda key: frozenset({key}))
    satisfied = sum(1 for c in choices if c)
    distinct = _most_distinct([{same(key) for key in c} for c in choices])
    entries = len(keys) + len(signers)
    if requirement == "AtLeastOne":
        verified = satisfied >= 1
    elif requirement == "MustAll":
        verified = distinct == entries
    else:
        verified = distinct >= requirement
    return Expected(verified, satisfied, distinct, frozenset().union(*choices), same)


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


KEY_SETS = st.sampled_from([("key", n) for n in range(4)] + [("outsider",), ("junk",)])
CERT_SETS = st.sampled_from([("cert", name) for name in CERTS])


@st.composite
def requirements(draw: st.DrawFn, entries: int) -> Any:
    return draw(st.sampled_from(["AtLeastOne", "MustAll"]) | st.integers(1, entries))


def check_against_model(sets: list[tuple[Any, ...]], keys: list[int], signers: list[str], requirement: Any) -> None:
    result = decide(Review.for_object(envelope(sets)), policy_for(keys, signers, requirement), now=NOW)
    expected = model(sets, keys, signers, requirement)
    assert result.verified is expected.verified, (result.reason, result.message)
    assert result.allowed is expected.verified
    required = (
        len(keys) + len(signers) if requirement == "MustAll" else 1 if requirement == "AtLeastOne" else requirement
    )
    if expected.verified:
        assert result.reason == "verified"
        # one signer when one is enough (checking stops there), otherwise the whole count
        assert len(result.signers) == (1 if required == 1 else expected.distinct)
    elif expected.satisfied == 0:
        assert result.reason in ("signature-invalid", "identity-mismatch"), result.reason
    else:
        assert result.reason == "key-threshold-not-met", result.reason
        assert len(result.signers) == expected.distinct
    # Only keys an entry accepts are named, each a different signer, each name true of its key.
    named = [s if isinstance(s, str) else s["key"] for s in result.signers]
    assert set(named) <= expected.accepted
    assert len({expected.same(key) for key in named}) == len(named)
    for signer in result.signers:
        if isinstance(signer, dict):
            assert any(
                signer["subject"] in cert.sans and SETS[("cert", name)][3] == signer["key"]
                for name, cert in CERTS.items()
            )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(KEY_SETS, min_size=1, max_size=6),
    st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True),
    st.data(),
)
def test_keys_meet_at_least_one_must_all_and_thresholds_as_the_model_says(
    sets: list[tuple[Any, ...]], keys: list[int], data: st.DataObject
) -> None:
    check_against_model(sets, keys, [], data.draw(requirements(len(keys))))


#: Thresholds above three are rarely met by random sets; a larger one is clamped to the entries (so: MustAll-like).
REQUIREMENTS = st.sampled_from(["AtLeastOne", "MustAll"]) | st.integers(1, 3)
Case = tuple[list[tuple[Any, ...]], list[int], list[str], Any]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """Entries first, then signature sets: mostly ones some entry accepts (so that counts are met as often as not)."""
    keys = draw(st.lists(st.integers(0, 3), max_size=2, unique=True))
    signers = draw(st.lists(st.sampled_from(sorted(SIGNER_ENTRIES)), min_size=1, max_size=3))
    wanted = [("key", n) for n in keys]
    wanted += [
        ("cert", name) for name, cert in CERTS.items() if any(set(cert.sans) & SIGNER_ENTRIES[e][1] for e in signers)
    ]
    pool = st.sampled_from(wanted) if wanted else CERT_SETS
    sets = draw(st.lists(st.one_of(pool, pool, KEY_SETS, CERT_SETS), min_size=1, max_size=6))
    requirement = draw(REQUIREMENTS)
    if isinstance(requirement, int):
        requirement = min(requirement, len(keys) + len(signers))  # a policy's threshold never exceeds its entries
    return sets, keys, signers, requirement


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
# The reported attacks, tried on every run: two SANs of one certificate; a key and a certificate for it.
@example(([("cert", "alice-both")], [], ["alice", "alias"], 2))
@example(([("cert", "bob-key0")], [0], ["bob"], 2))
@example(([("cert", "bob-key0")], [0], ["bob"], "MustAll"))
# And what counting by key alone would let through: one person, two keyless keys.
@example(([("cert", "alice-1"), ("cert", "alice-2")], [], ["alice", "anyone"], 2))
def test_signers_are_counted_by_who_signed_as_the_model_says(case: Case) -> None:
    # Entries overlap ("anyone" takes everyone), SANs share a certificate, listed keys carry
    # certificates: the count is the most distinct signers any assignment of entries gives.
    check_against_model(*case)


def test_a_broad_entry_gives_way_to_a_narrow_one_whatever_the_order_of_the_sets() -> None:
    """alice and bob both signed; "anyone" and "alice" are two different people in either set order."""
    alice, bob = ("cert", "alice-1"), ("cert", "bob")
    for order in ([alice, bob], [bob, alice]):
        for entries in (["anyone", "alice"], ["alice", "anyone"]):
            result = decide(Review.for_object(envelope(order)), policy_for([], entries, 2), now=NOW)
            assert result.reason == "verified", (order, entries, result.message)
            assert sorted(s["subject"] for s in result.signers) == [ALICE, BOB]  # type: ignore[index]
    alone = decide(Review.for_object(envelope([alice])), policy_for([], ["anyone", "alice"], 2), now=NOW)
    assert alone.reason == "key-threshold-not-met" and "1 distinct signer" in alone.message


def test_one_identity_named_by_two_entries_never_meets_a_threshold_of_two_nor_must_all() -> None:
    for requirement in (2, "MustAll"):
        check_against_model([("cert", "alice-1")], [], ["alice", "alice-regexp"], requirement)
        result = decide(
            Review.for_object(envelope([("cert", "alice-1")])),
            policy_for([], ["alice", "alice-regexp"], requirement),
            now=NOW,
        )
        assert result.reason == "key-threshold-not-met" and "1 distinct signer" in result.message
