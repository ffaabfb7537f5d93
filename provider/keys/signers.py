"""Who signed: what checking one trusted key or signer entry establishes, and how signers are counted.

:class:`Outcome` is the answer of one check -- a key against the signature
sets (step 2 of :mod:`provider.verifier`), a keyless or certificate signer
entry (:func:`provider.keyless.signer.check_signer`): the signers it accepts
(:class:`Match`) and what every certificate that passed its trust checks
binds (:class:`Binding`). :class:`Signers` joins keys into signers and
:class:`DistinctSigners` counts how many different signers stand behind
distinct entries (``docs/policy.md``, "Keys and signers").

Nothing here knows a policy or does a signature check: both the verifier and
the keyless checks sit above it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from ..result import Signer


@dataclass(frozen=True)
class Match:
    """One signer an anchor accepts: who signed, and how a verdict names them.

    ``key`` is the fingerprint (``sha256:<hex>`` of the DER SubjectPublicKeyInfo,
    :func:`provider.keys.pem.fingerprint_of`) of the key that made the signature: the
    trusted key itself, or the public key of the certificate a signer entry
    accepted. ``signer`` is the verdict's name for it: the fingerprint, or
    ``{"subject", "issuer", "key"}`` for a certificate.
    """

    key: str
    signer: Signer


@dataclass(frozen=True)
class Binding:
    """A certificate the policy trusts says the holder of ``key`` is ``subjects`` (its SAN values)."""

    key: str
    subjects: frozenset[str]


@dataclass(frozen=True)
class Outcome:
    """What checking one trusted key or signer entry against the signature sets found.

    ``matches`` lists the signers that satisfy the anchor: the first one, or every
    one when the caller asked (a threshold counts distinct signers). ``bindings``
    lists what every certificate that passed the entry's trust checks proves --
    matched or not -- so that keys bound to one identity count as one signer.
    """

    verified: bool
    matches: tuple[Match, ...] = ()
    reason: str = "signature-invalid"
    detail: str = ""
    bindings: tuple[Binding, ...] = ()

    @property
    def signer(self) -> Signer | None:
        return self.matches[0].signer if self.matches else None


class Signers:
    """Which signing keys are one signer: a union-find over keys and the subjects certificates bind them to.

    A key is a signer. A certificate the policy trusts joins its key with every
    subject it names, so one certificate is one signer whatever its SANs, a key
    listed in ``keys`` and a certificate for that key are one signer, and one
    subject is one signer whatever keys it used (keyless keys are ephemeral: a
    person who signs twice signs with two keys). Subjects join across issuers:
    ``jane@corp`` certified by two OIDC providers, or by Fulcio and by the
    corporate CA, is one person. Joining only ever lowers a count, so every
    doubt resolves towards "the same signer".
    """

    def __init__(self, bindings: Iterable[Binding]) -> None:
        self._parent: dict[tuple[str, str], tuple[str, str]] = {}
        for binding in bindings:
            key = ("key", binding.key)
            for subject in sorted(binding.subjects):
                self._join(key, ("subject", subject))

    def _root(self, node: tuple[str, str]) -> tuple[str, str]:
        parent = self._parent
        while (up := parent.get(node, node)) != node:
            grandparent = parent.get(up, up)
            parent[node] = grandparent  # path halving: later look-ups take half the steps
            node = grandparent
        return node

    def _join(self, a: tuple[str, str], b: tuple[str, str]) -> None:
        ra, rb = self._root(a), self._root(b)
        if ra != rb:
            self._parent[max(ra, rb)] = min(ra, rb)  # deterministic, whatever the order of the bindings

    def of(self, match: Match) -> tuple[str, str]:
        """The signer behind a match: its key's class."""
        return self._root(("key", match.key))


class DistinctSigners:
    """A maximum matching of anchors to distinct signers, grown one anchor at a time.

    Each satisfied anchor lists every signer that satisfies it; the largest set of
    (anchor, signer) pairs using no anchor and no signer twice is how many
    *different* signers stand behind the object. Adding an anchor grows that
    maximum by one exactly when an augmenting path starts from it (Kuhn's
    algorithm), so the result does not depend on the order of the anchors or of
    the signature sets. ``signer_of`` says which matches are the same signer.
    """

    def __init__(self, signer_of: Callable[[Match], Hashable]) -> None:
        self._signer_of = signer_of
        self._candidates: list[tuple[Match, ...]] = []
        self._owner: dict[Hashable, int] = {}  # signer -> the anchor it is matched to
        self._chosen: dict[int, Match] = {}  # anchor -> its signer

    def add(self, candidates: tuple[Match, ...]) -> None:
        self._candidates.append(candidates)
        self._augment(len(self._candidates) - 1, set())

    def _augment(self, anchor: int, seen: set[Hashable]) -> bool:
        for match in self._candidates[anchor]:
            signer = self._signer_of(match)
            if signer in seen:
                continue
            seen.add(signer)
            if signer not in self._owner or self._augment(self._owner[signer], seen):
                self._owner[signer] = anchor
                self._chosen[anchor] = match
                return True
        return False

    def __len__(self) -> int:
        return len(self._chosen)

    @property
    def signers(self) -> tuple[Signer, ...]:
        """The matched signers, in the order of the anchors they stand for."""
        return tuple(self._chosen[anchor].signer for anchor in sorted(self._chosen))
