"""Nested signer sets: Kyverno's ``attestors``, compiled to one tree and decided over distinct signers.

A policy's ``attestors`` (Kyverno ``validate.manifests.attestors``, CRD
``kyverno.io_clusterpolicies.yaml``; semantics in kyverno
``pkg/engine/handlers/validation/validate_manifest.go``) is a list of sets::

    attestors:
    - name: teams            # optional, names the set in verdicts
      count: 1               # entries that must verify; default: all of them
      entries:
      - keys: {publicKeys: PEM | armored OpenPGP (several keys: several entries)}
      - keys: {openpgpKeyring: base64 of a binary keyring}
      - keys: {secret: {namespace, name, key}}   # a key kept in a Secret (provider/keys/refs.py)
      - certificates: {cert: PEM}          # the certificate's key
      - keyless: {subject | subjectRegExp, issuer | issuerRegExp, roots}
      - attestor: {count, entries, name}   # a nested set counts as one entry

**Every set must pass**, as in Kyverno. Like Kyverno's ``ExpandStaticKeys``, a
``keys`` entry holding several keys is that many entries.

**Signers are counted distinct across the whole tree** (:func:`solve`): the
tree is satisfied when some assignment gives each counted leaf a *different*
signer (:class:`provider.keys.signers.Signers`: a key, joined with whatever a
trusted certificate binds to it). So ``[{entries: [team]}, {entries:
[security]}]`` asks for two people even when one person holds both keys, as
``MustAll`` over the two keys does today; Kyverno, which checks each set
alone, would take one. The search is exact (a property test holds it to a
brute-force model) and bounded by :data:`SEARCH_BUDGET` steps; a tree too
large to decide within it is a denial, never a guess.

Nothing here checks a signature: the verifier checks each leaf and hands
:func:`solve` the signers each leaf accepts.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from ..errors import PolicyError
from ..keys.pem import PublicKey
from ..keys.refs import SecretKeyRef, is_key_reference, parse_key_reference, secret_ref_from_dict
from ..keys.trusted import load_trusted_keys
from ..limits import DEFAULT_LIMITS, Limits
from ..readers import check_fields, read_list, read_str

if TYPE_CHECKING:  # loaded where used: a key-only policy needs neither OpenPGP nor keyless code
    from ..keyless.identity import SignerSpec
    from ..keys.openpgp import OpenPGPKey

#: What a leaf of the tree is: a key, an OpenPGP certificate, a key kept in a Secret, or a keyless /
#: certificate identity.
Leaf: TypeAlias = "PublicKey | OpenPGPKey | SecretKeyRef | SignerSpec"
#: Nesting depth of ``attestor`` entries: Kyverno's examples use one level; four is generous.
MAX_DEPTH = 4
#: Steps :func:`solve` may take before it gives up (and the verdict is a denial). A tree of the
#: policy's at most ``max_keys`` leaves with a handful of signers each is decided in a few hundred.
SEARCH_BUDGET = 200_000


@dataclass(frozen=True)
class AnchorSet:
    """One set: ``count`` of its ``entries`` (leaves or nested sets) must be satisfied by distinct signers."""

    count: int
    entries: tuple[Leaf | AnchorSet, ...]
    where: str
    name: str = ""

    def describe(self) -> str:
        return f"{self.where} ({self.name})" if self.name else self.where

    def leaves(self) -> list[Leaf]:
        found: list[Leaf] = []
        for entry in self.entries:
            found.extend(entry.leaves() if isinstance(entry, AnchorSet) else [entry])
        return found


def keys_from_entry(data: Any, where: str, limits: Limits) -> tuple[PublicKey | OpenPGPKey | SecretKeyRef, ...]:
    """The keys of a ``keys`` entry: ``publicKeys`` (PEM and armored OpenPGP, or ``k8s://NS/NAME``),
    ``openpgpKeyring`` (base64) and/or ``secret`` (Kyverno's ``{namespace, name}``)."""
    data = check_fields(data, where, ("publicKeys", "openpgpKeyring", "secret", "name"))
    name = read_str(data["name"], f"{where}.name") if "name" in data else None
    found: list[PublicKey | OpenPGPKey | SecretKeyRef] = []
    if "secret" in data:
        found.append(secret_ref_from_dict(data["secret"], f"{where}.secret", name))
    if "publicKeys" in data and is_key_reference(data["publicKeys"]):
        found.append(parse_key_reference(data["publicKeys"], f"{where}.publicKeys", name))
    elif "publicKeys" in data:
        try:
            found.extend(load_trusted_keys(read_str(data["publicKeys"], f"{where}.publicKeys"), name, limits.max_keys))
        except PolicyError as exc:
            raise PolicyError(f"{where}.publicKeys: {exc.message}") from exc
    if "openpgpKeyring" in data:
        found.extend(read_keyring(data["openpgpKeyring"], f"{where}.openpgpKeyring", name, limits))
    if not found:
        raise PolicyError(f"{where}: give publicKeys, openpgpKeyring or secret")
    return tuple(found)


def read_keyring(value: Any, where: str, name: str | None, limits: Limits) -> tuple[OpenPGPKey, ...]:
    text = read_str(value, where)
    try:
        raw = base64.b64decode(text.replace("\n", "").replace("\r", ""), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PolicyError(f"{where}: not base64 ({exc})") from exc
    try:
        from ..keys.openpgp import load_openpgp_keys

        return load_openpgp_keys(raw, name, limits.max_keys)
    except PolicyError as exc:
        raise PolicyError(f"{where}: {exc.message}") from exc


def _entry(data: Any, where: str, limits: Limits, depth: int) -> list[Leaf | AnchorSet]:
    data = check_fields(data, where, ("keys", "certificates", "keyless", "attestor"))
    kinds = [k for k in ("keys", "certificates", "keyless", "attestor") if k in data]
    if len(kinds) != 1:
        raise PolicyError(f"{where}: give exactly one of keys, certificates, keyless or attestor")
    (kind,) = kinds
    spot = f"{where}.{kind}"
    if kind == "keys":
        return list(keys_from_entry(data[kind], spot, limits))
    if kind == "certificates":
        cert = check_fields(data[kind], spot, ("cert",))  # certChain: not checked here, so refused
        if "cert" not in cert:
            raise PolicyError(f"{spot}.cert: a PEM certificate is required")
        try:
            return list(load_trusted_keys(read_str(cert["cert"], f"{spot}.cert"), None, limits.max_keys))
        except PolicyError as exc:
            raise PolicyError(f"{spot}.cert: {exc.message}") from exc
    if kind == "keyless":
        from ..keyless.identity import SignerSpec

        return [SignerSpec.from_value(data[kind], spot)]
    if depth >= MAX_DEPTH:
        raise PolicyError(f"{spot}: attestor sets nest at most {MAX_DEPTH} deep")
    return [parse_set(data[kind], spot, limits, depth + 1)]


def parse_set(data: Any, where: str, limits: Limits = DEFAULT_LIMITS, depth: int = 1) -> AnchorSet:
    data = check_fields(data, where, ("count", "entries", "name"))
    entries: list[Leaf | AnchorSet] = []
    for i, item in enumerate(read_list(data.get("entries"), f"{where}.entries")):
        entries.extend(_entry(item, f"{where}.entries[{i}]", limits, depth))
    if not entries:
        raise PolicyError(f"{where}.entries: a set without entries would be satisfied by nobody, or by anybody")
    count = data.get("count", len(entries))
    if type(count) is not int or count < 1:
        raise PolicyError(f"{where}.count: expected a whole number of at least 1")
    if count > len(entries):
        raise PolicyError(f"{where}.count: {count} exceeds the {len(entries)} entries listed; it could never be met")
    name = read_str(data.get("name", ""), f"{where}.name")
    return AnchorSet(count, tuple(entries), where, name)


def parse_attestors(value: Any, where: str, limits: Limits = DEFAULT_LIMITS) -> tuple[AnchorSet, ...]:
    sets = tuple(parse_set(item, f"{where}[{i}]", limits) for i, item in enumerate(read_list(value, where)))
    if not sets:
        raise PolicyError(f"{where}: empty; leave it out, or list at least one set")
    return sets


# --- deciding ---------------------------------------------------------------------


class BudgetExceeded(Exception):
    """The search took more than its budget of steps."""


def solve(
    sets: Sequence[AnchorSet],
    candidates: Callable[[Leaf], Sequence[Hashable]],
    budget: int = SEARCH_BUDGET,
) -> dict[int, Hashable] | None:
    """An assignment ``id(leaf) -> signer`` satisfying every set with distinct signers, or None if none exists.

    ``candidates(leaf)`` lists the signers that satisfy a leaf (none: the leaf
    failed). Depth-first over the entries of each set, trying "this entry
    counts" before "it does not"; a (set, start, count, used) state that once
    led nowhere is not tried again. Raises :class:`BudgetExceeded` past ``budget`` steps.
    """
    steps = [0]
    dead: set[tuple[int, int, int, frozenset[Hashable]]] = set()

    def tick() -> None:
        steps[0] += 1
        if steps[0] > budget:
            raise BudgetExceeded

    def ways(
        node: Leaf | AnchorSet, used: frozenset[Hashable], chosen: tuple[tuple[int, Hashable], ...]
    ) -> Iterator[tuple[frozenset[Hashable], tuple[tuple[int, Hashable], ...]]]:
        tick()
        if not isinstance(node, AnchorSet):
            for signer in candidates(node):
                if signer not in used:
                    yield used | {signer}, (*chosen, (id(node), signer))
            return
        yield from fill(node, 0, 0, used, chosen)

    def fill(
        node: AnchorSet, start: int, met: int, used: frozenset[Hashable], chosen: tuple[tuple[int, Hashable], ...]
    ) -> Iterator[tuple[frozenset[Hashable], tuple[tuple[int, Hashable], ...]]]:
        tick()
        if met == node.count:
            yield used, chosen
            return
        if len(node.entries) - start < node.count - met:
            return
        state = (id(node), start, met, used)
        if state in dead:
            return
        produced = False
        for used2, chosen2 in ways(node.entries[start], used, chosen):
            for result in fill(node, start + 1, met + 1, used2, chosen2):
                produced = True
                yield result
        for result in fill(node, start + 1, met, used, chosen):
            produced = True
            yield result
        if not produced:
            dead.add(state)

    def all_sets(
        index: int, used: frozenset[Hashable], chosen: tuple[tuple[int, Hashable], ...]
    ) -> Iterator[tuple[tuple[int, Hashable], ...]]:
        if index == len(sets):
            yield chosen
            return
        for used2, chosen2 in fill(sets[index], 0, 0, used, chosen):
            yield from all_sets(index + 1, used2, chosen2)

    # A set that cannot be met even alone ends the search at once (the common denial).
    if any(next(fill(s, 0, 0, frozenset(), ()), None) is None for s in sets):
        return None
    for chosen in all_sets(0, frozenset(), ()):
        return dict(chosen)
    return None
