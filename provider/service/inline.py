"""Which questions the thread that read the request answers itself, without a verify thread.

A request's keys used to go, every one, from the request thread to a verify
thread (:class:`~provider.service.checks.Dispatcher`), so that the request
thread could answer at the deadline while a check waited on the network: a
server-side dry-run, a signature ConfigMap, a key kept in a Secret, a resource
bundle in a registry. For a question that waits on nothing, the hand-off buys
nothing and costs two thread switches (about 75 µs, ``docs/performance.md``,
more under load): :func:`inline_answer` picks those out, and the dispatcher
answers them in the calling thread.

A question is answered in the calling thread only when all of this holds,
decided from the request and the compiled policy, failing safe (anything else,
or anything unsure, goes to a verify thread as before, and so does every key
of the request after it):

1. it asks the ``manifest`` check, and that check is still
   :func:`~provider.service.checks.check_manifest` (the others may read the cluster);
2. its policy names only fields that never reach outside the process
   (:data:`OFFLINE_FIELDS`: no ``dryRun`` enabled, no ``signatureResourceRef``,
   no ``resourceBundleRef``, no ``trustedRoot``, no ``signers``, no ``attestors``)
   -- a field added to the schema later is not in the list, so it goes to a verify
   thread until someone adds it here;
3. that policy is compiled already (:meth:`~provider.service.checks.PolicyCache.cached`:
   compiling may read a trust-root file), and the compiled policy agrees: PEM
   keys only -- none kept in a Secret, no OpenPGP keys, no keyless or
   certificate signers -- and no dry-run, bundle or ConfigMap source;
4. its cost is bounded well inside the deadline: at most
   :data:`MAX_PAIRS` (keys x signature sets) signature checks, and at most
   :data:`INLINE_MAX_PATTERNS` field patterns of the policy's own, no more than one
   ``skipUsers`` entry with ``fields`` and no ``unsafeUnanchoredIgnoreFields`` -- each
   pattern is tried at every position of the object and each such entry diffs all of
   it, so a policy's patterns multiply the object's cost (a thousand of them against a
   20 000-key map held the thread for seconds; :attr:`~provider.limits.Limits.max_field_patterns`
   bounds them on a verify thread).

Why the deadline still holds. A verify thread let the request thread answer
``deadline-exceeded`` at the deadline however long a check took; the calling
thread cannot leave a verification it is in. What bounds that one
verification is the limits (:class:`provider.limits.Limits`): the message,
its payload and the object are bounded in bytes, nodes and depth, and with
:data:`MAX_PAIRS` the signature checks are too. ``bench/inline_bound.py``
measures the worst case those bounds allow -- the largest payload and object,
:data:`MAX_PAIRS` checks with the slowest key the verifier accepts (RSA-16384
with a 64-bit exponent) -- and ``docs/performance.md`` compares it with the
deadline ("What bounds a verification in the request thread"): on the
machine of those figures the worst was 0.66 s of CPU (the largest object,
every one of its 200 000 leaves different), 0.44x the default 1.5 s
deadline, and 52 ms for 15 checks of the slow key. The dispatcher starts a
verification in the calling thread only during the first
:data:`INLINE_SHARE` of the time the request had left, handing the rest to
the pool after it, so a request is answered by ``INLINE_SHARE`` x its budget
plus one bounded verification (0.375 + 0.66 = 1.03 s of 1.5 s); one that finishes past the deadline still
fails the request with ``deadline-exceeded``, as a late drain does. Without
:data:`MAX_PAIRS` the limits alone allow 64 keys x 64 signatures, seconds of
RSA-16384: such a question goes to a verify thread as before, where the
deadline answers for it.

The admission route (:mod:`provider.service.heldpolicies`) still hands its
decision to a verify thread: the policies it holds may read the cluster.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..policy.schema import Policy
from ..result import Result
from ..review import Review
from .checks import CHECKS, DEFAULT_CHECK, CheckContext, Question, check_manifest, judge

#: Policy fields that never make a verification reach outside the process; ``dryRun`` only
#: when not enabled (checked on the compiled policy). Not here, so answered by a verify
#: thread: ``signatureResourceRef`` (a ConfigMap read), ``resourceBundleRef`` (a registry),
#: ``trustedRoot`` (may name a file), ``signers`` and ``attestors`` (certificate-chain work
#: whose cost :data:`MAX_PAIRS` does not bound).
OFFLINE_FIELDS = frozenset({
    "keys", "keyOperation", "threshold", "annotationDomain", "ignoreFields", "sensitiveFields", "skipObjects",
    "inScopeObjects", "skipUsers", "dryRun", "defaults", "unsafeUnanchoredIgnoreFields",
})  # fmt: skip

#: The most signature checks (keys in the policy x signature sets an object may carry) a
#: question answered in the calling thread may need. The limits allow 64 x 64; at the slowest
#: key accepted (RSA-16384, a 64-bit exponent: ~2-4 ms a check here) that is seconds, past any
#: deadline. 16 checks of that key are tens of milliseconds; one key and one signature, the
#: usual case, is 1.
MAX_PAIRS = 16

#: The most field patterns (``ignoreFields``, ``sensitiveFields``, ``skipUsers`` fields) of the policy's own a
#: question answered in the calling thread may carry. A pattern at a map is tried against each of its keys
#: (~0.2 µs): eight against the largest map an object can carry are tens of milliseconds
#: (``bench/inline_bound.py``, "field patterns").
INLINE_MAX_PATTERNS = 8

#: The share of the time a request has left during which the calling thread starts verifications
#: of its own (:meth:`provider.service.checks.Dispatcher._here`); the rest go to the pool.
INLINE_SHARE = 0.25


def inline_answer(question: Question, ctx: CheckContext) -> Callable[[], Result] | None:
    """How to answer ``question`` in the calling thread, or ``None``: hand it to a verify thread."""
    if question.check != DEFAULT_CHECK or CHECKS.get(DEFAULT_CHECK) is not check_manifest:
        return None
    raw = question.policy
    if not isinstance(raw, dict) or not OFFLINE_FIELDS.issuperset(raw):
        return None
    policy = ctx.policies.cached(raw, ctx.limits, ctx.bounds)
    if policy is None or not offline(policy):
        return None
    if len(policy.keys) * signature_sets_at_most(question.review) > MAX_PAIRS or not few_patterns(policy):
        return None
    return functools.partial(judge, question.review, policy, ctx)


def offline(policy: Policy) -> bool:
    """Whether verifying under ``policy`` reads nothing outside the process, with PEM keys alone."""
    return (
        not policy.dry_run.enabled
        and policy.signature_resource_ref is None
        and policy.resource_bundle is None
        and not policy.secret_keys
        and not policy.openpgp_keys
        and not policy.signers
        and not policy.attestors
        and policy.trusted_root is None
    )


def few_patterns(policy: Policy) -> bool:
    """Whether the policy's own field patterns cost little enough for the calling thread (module docstring, 4)."""
    scoped = [rule for rule in policy.skip_users if rule.fields]
    patterns = sum(len(rule.fields) for rule in (*policy.ignore_fields, *policy.sensitive_fields))
    patterns += sum(len(rule.fields) for rule in scoped)
    return patterns <= INLINE_MAX_PATTERNS and len(scoped) <= 1 and not policy.unsafe_unanchored_ignore_fields


def signature_sets_at_most(review: Review) -> int:
    """An upper bound on the signature sets :func:`~provider.verifier.decide` reads for ``review``: its objects'
    annotations (a set is one ``signature[_N]`` annotation; the old object counts for a DELETE)."""
    return max(1, _annotations(review.object), _annotations(review.old_object))


def _annotations(obj: Any) -> int:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return len(annotations) if isinstance(annotations, dict) else 0
