"""Step 2, the anchors: every trusted key and signer against every signature set.

:func:`check_anchors` checks the policy's keys, OpenPGP certificates and signer
entries (keyless and certificate signers, :mod:`provider.keyless.signer`) over
the payload bytes of each signature set, then applies the requirement --
``AtLeastOne``, ``threshold``, ``MustAll`` or ``attestors`` -- counting distinct
signers (:mod:`provider.keys.signers`). It reads nothing: keys kept in Secrets
come in already read (:func:`provider.verifier.fetching.secret_keys`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, cast

from ..errors import SignatureInvalid, ThresholdNotMet
from ..keys.pem import PublicKey
from ..keys.refs import SecretKeyRef
from ..keys.signers import DistinctSigners, Match, Outcome, Signers
from ..keys.trusted import is_openpgp_key
from ..limits import Limits
from ..policy.attestors import SEARCH_BUDGET, BudgetExceeded, Leaf, solve
from ..policy.schema import Policy
from ..result import Signer
from ..signatures.envelope import Envelope

if TYPE_CHECKING:  # loaded where a policy uses them: a key-only policy needs neither
    from ..keyless.identity import SignerSpec
    from ..keys.openpgp import OpenPGPKey


def _check_key(key: PublicKey, envelope: Envelope) -> Outcome:
    for sig_set in envelope.sets:
        if key.verifies(sig_set.signature, envelope.signed_bytes(sig_set)):
            return Outcome(True, (Match(key.fingerprint, key.fingerprint),))
    return Outcome(False, (), "signature-invalid", f"key {key.label()} verifies none of them")


def _check_openpgp(key: OpenPGPKey, envelope: Envelope, now: datetime | None) -> Outcome:
    """An OpenPGP certificate against every set: the first that verifies, else the most telling refusal."""
    refusal = None
    for sig_set in envelope.sets:
        check = key.check(sig_set.signature, envelope.signed_bytes(sig_set), now)
        if check.verified:
            return Outcome(True, (Match(key.signer, key.signer),))
        if refusal is None or (refusal.reason == "signature-invalid" and check.reason != "signature-invalid"):
            refusal = check
    assert refusal is not None  # an envelope has at least one set
    return Outcome(False, (), refusal.reason, refusal.detail)


def _check_signer(
    spec: SignerSpec, envelope: Envelope, policy: Policy, now: datetime | None, limits: Limits, *, every: bool
) -> Outcome:
    from ..keyless.signer import check_signer  # sigstore and certificate machinery: loaded only when used

    return check_signer(spec, envelope, policy.trusted_root, now=now, limits=limits, every=every)


def _leaf_check(
    leaf: Leaf,
    envelope: Envelope,
    policy: Policy,
    now: datetime | None,
    limits: Limits,
    *,
    every: bool,
    in_secrets: dict[SecretKeyRef, PublicKey | OpenPGPKey] | None = None,
) -> tuple[str, Callable[[], Outcome]]:
    """A leaf's label and its check: keys cost one signature check each, OpenPGP one Sequoia verify, signers more.

    A key kept in a Secret is checked as the key ``in_secrets`` says it holds now.
    """
    if isinstance(leaf, SecretKeyRef):
        key = (in_secrets or {})[leaf]
        label, check = _leaf_check(key, envelope, policy, now, limits, every=every)
        return f"{leaf} ({label})", check
    if isinstance(leaf, PublicKey):
        return leaf.label(), partial(_check_key, leaf, envelope)
    if is_openpgp_key(leaf):
        return leaf.label(), partial(_check_openpgp, leaf, envelope, now)
    signer = cast("SignerSpec", leaf)  # what is left: a keyless or certificate signer entry
    return signer.describe(), partial(_check_signer, signer, envelope, policy, now, limits, every=every)


def check_anchors(
    envelope: Envelope,
    policy: Policy,
    now: datetime | None,
    limits: Limits,
    in_secrets: dict[SecretKeyRef, PublicKey | OpenPGPKey] | None = None,
) -> tuple[Signer, ...]:
    """The signers that satisfy the policy's keys and signer entries, or raise why they do not.

    A *signer* is who signed, not an entry's name for them (:class:`~provider.keys.signers.Signers`):
    the signing key, joined with every key a trusted certificate binds to the
    same subject; an OpenPGP certificate is one signer whichever subkey signed.
    An entry matches signers; the requirement counts distinct signers matched
    by distinct entries (:class:`~provider.keys.signers.DistinctSigners`):

    * ``AtLeastOne`` (and ``threshold: 1``): one satisfied entry; checking stops
      at the first (keys are tried before signer entries: a key costs one
      signature check, a signer a certificate chain and a log entry).
    * ``threshold: N``: N entries, each matched to a different signer.
    * ``MustAll``: every entry, each matched to a different signer. Two entries
      one signer satisfies are not both met: a policy that lists key A and
      identity B under MustAll asks for two approvals, and one key certified
      as B is one approval. (In the lenient reading an entry that overlaps
      another would add nothing, silently: the author who listed two entries to
      get two approvals would get one.)
    * ``attestors``: every set, each by its count of entries, signers distinct
      across the whole tree (:func:`_check_attestors`).

    Counting (N > 1, MustAll, attestors) checks every entry against every
    signature set before deciding: a set checked later can show that two keys
    counted apart are one signer, so stopping early would depend on order.
    """
    if policy.attestors:
        return _check_attestors(envelope, policy, now, limits, in_secrets)
    required = policy.required_count  # MustAll: every anchor
    counting = required > 1
    checks = [
        _leaf_check(leaf, envelope, policy, now, limits, every=counting, in_secrets=in_secrets)
        for leaf in policy.anchors
    ]
    outcomes: list[tuple[str, Outcome]] = []
    for label, run in checks:
        outcome = run()
        outcomes.append((label, outcome))
        if outcome.verified and not counting:
            return (outcome.matches[0].signer,)
    satisfied = [outcome for _, outcome in outcomes if outcome.verified and outcome.matches]
    signers = Signers(binding for _, outcome in outcomes for binding in outcome.bindings)
    distinct = DistinctSigners(signers.of)
    for outcome in satisfied:
        distinct.add(outcome.matches)
    verified = distinct.signers
    if counting and len(distinct) >= required:
        return verified
    failed = [(label, o) for label, o in outcomes if not o.verified]
    count, unread = _counted(envelope)
    details = "; ".join(o.detail for _, o in failed[:3] if o.detail)
    if not verified:
        reasons = {o.reason for _, o in failed}
        reason = reasons.pop() if len(reasons) == 1 else "signature-invalid"
        raise SignatureInvalid(
            f"no trusted key or signer verifies the object's {count} ({details}){unread}", reason=reason
        )
    found = f"{len(verified)} distinct signer{'s' if len(verified) != 1 else ''}"
    if policy.threshold is None:  # MustAll
        shortfall = f"{len(satisfied)} of the {required} keys and signers required by MustAll verified, by {found}"
    else:
        shortfall = f"{found} verified, {policy.requirement()} requires {required}"
    missing = ", ".join(label for label, _ in failed[:5]) or "(entries satisfied by the same signer)"
    raise ThresholdNotMet(
        f"{shortfall} for the object's {count}; not verified: {missing}{unread}",
        signers=verified,
    )


def _counted(envelope: Envelope) -> tuple[str, str]:
    sets = len(envelope.sets)
    unread = ""
    if envelope.unread:
        unread = f"; {', '.join(envelope.unread)} not read: signature numbering stops at the first gap"
    return f"{sets} signature{'s' if sets != 1 else ''}", unread


def _check_attestors(
    envelope: Envelope,
    policy: Policy,
    now: datetime | None,
    limits: Limits,
    in_secrets: dict[SecretKeyRef, PublicKey | OpenPGPKey] | None = None,
) -> tuple[Signer, ...]:
    """Every attestor set satisfied by its count of entries, with signers distinct across the tree.

    Every leaf is checked (with every signer each accepts); :func:`provider.policy.attestors.solve`
    then looks for an assignment of distinct signers. A denial names each set
    that fails on its own, or -- when each passes alone -- says the sets are
    met only by the same signers.
    """
    leaves = list(policy.anchors)
    outcomes: dict[int, tuple[str, Outcome]] = {}
    for leaf in leaves:
        if id(leaf) not in outcomes:
            label, run = _leaf_check(leaf, envelope, policy, now, limits, every=True, in_secrets=in_secrets)
            outcomes[id(leaf)] = (label, run())
    signers = Signers(binding for _, outcome in outcomes.values() for binding in outcome.bindings)
    by_class: dict[Hashable, Signer] = {}

    def candidates(leaf: Leaf) -> list[Hashable]:
        _, outcome = outcomes[id(leaf)]
        found: list[Hashable] = []
        for match in outcome.matches if outcome.verified else ():
            cls = signers.of(match)
            by_class.setdefault(cls, match.signer)
            found.append(cls)
        return found

    count, unread = _counted(envelope)
    try:
        assignment = solve(policy.attestors, candidates)
    except BudgetExceeded:
        raise ThresholdNotMet(
            f"the attestor sets are too large to decide within {SEARCH_BUDGET} steps for the object's {count}; "
            "split them or lower their counts"
        ) from None
    if assignment is not None:
        chosen = dict.fromkeys(assignment[id(leaf)] for leaf in leaves if id(leaf) in assignment)
        return tuple(by_class[cls] for cls in chosen)
    failing = []
    for attestor_set in policy.attestors:
        try:
            alone = solve((attestor_set,), candidates)
        except BudgetExceeded:
            alone = None
        if alone is None:
            unmet = [outcomes[id(leaf)] for leaf in attestor_set.leaves() if not outcomes[id(leaf)][1].verified]
            detail = "; ".join(o.detail for _, o in unmet[:2] if o.detail)
            failing.append(
                f"set {attestor_set.describe()} needs {attestor_set.count} of its {len(attestor_set.entries)} "
                f"entries by distinct signers; not verified: {', '.join(label for label, _ in unmet[:4]) or '-'}"
                + (f" ({detail})" if detail else "")
            )
    any_verified = any(o.verified for _, o in outcomes.values())
    if failing:
        message = "; ".join(failing) + f", for the object's {count}{unread}"
    else:
        message = (
            f"each attestor set is met on its own, but not by distinct signers together (one signer cannot stand "
            f"for two sets), for the object's {count}{unread}"
        )
    if not any_verified:
        reasons = {o.reason for _, o in outcomes.values()}
        raise SignatureInvalid(message, reason=reasons.pop() if len(reasons) == 1 else "signature-invalid")
    raise ThresholdNotMet(message)
