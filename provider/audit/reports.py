"""Verdicts on live objects as ``wgpolicyk8s.io/v1alpha2`` PolicyReports, the shape Kyverno and policy-reporter read.

One report per object, like Kyverno's own since 1.10 (kyverno/kyverno
``pkg/utils/report``: ``NewPolicyReport`` names a report after the resource it
is about and sets ``scope`` to it): a ``PolicyReport`` in the object's
namespace, a ``ClusterPolicyReport`` for a cluster-scoped object. One report
per object keeps every report small whatever a namespace holds (a report is
one etcd object, at most 1.5 MiB), lets a writer stream them, and lets the
observer rewrite only the report of an object whose verdict changed. Each
report is owned by its object (``ownerReferences``), so the garbage collector
deletes it with the object. The name is ``manifest-provider-<uid>``: Kyverno
names its own report after the bare uid, and the two must not overwrite each
other.

Each report holds one result, as Kyverno fills one (``ToPolicyReportResult``
in ``pkg/utils/report/results.go``), checked against the CRD schema Kyverno
installs (``config/crds/policyreport/``, descended from
kubernetes-sigs/wg-policy-prototypes ``policy-report/crd``; a copy is in
``tests/assets/policyreport/``)::

    policy, rule, result (pass|fail|warn|error|skip), source, scored,
    message, properties (string values), resources[] (ObjectReference),
    timestamp {seconds, nanos}, category, severity

and ``summary`` counts the results by outcome. What each verdict becomes:

=======================================  ========  ==========================================
verdict                                  result    why
=======================================  ========  ==========================================
verified                                 pass      what its signers signed (a difference an
                                                   exempt controller made is named in the message)
denied (unsigned, content-mismatch, ...) fail      the object is not what was signed
allowed without verification             skip      skipped user or object, out of scope: the
                                                   policy does not ask for a signature
no verdict (the cluster could not be     error     a dry-run failed for a reason of the
asked, an unusable object)                         cluster's; the next check may succeed
=======================================  ========  ==========================================

The ``properties`` say what a machine needs: the reason code, the signers,
the ``resourceVersion`` checked, whether a dry-run was made and how many
differences were found.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from .live import Checked, ObjectRef

API_VERSION = "wgpolicyk8s.io/v1alpha2"
#: ``results[].source``: which engine wrote the result (Kyverno writes ``kyverno``).
SOURCE = "manifest-provider"
#: ``results[].policy`` and ``rule``: the names the shipped Kyverno policy and its rule have.
POLICY = "verify-manifest-signature"
RULE = "verify-signature"
#: ``results[].category`` and ``severity``: the shipped policy's ``policies.kyverno.io/*`` annotations.
CATEGORY = "Software Supply Chain Security"
SEVERITY = "high"
#: Reports this project writes carry the label and the name prefix; nothing else is touched.
MANAGED_BY = {"app.kubernetes.io/managed-by": "manifest-provider"}
NAME_PREFIX = "manifest-provider-"
#: Characters of a verdict's message kept in a result (a long diff description is cut).
MAX_MESSAGE_CHARS = 2048

Outcome = Literal["pass", "fail", "warn", "error", "skip"]
OUTCOMES: tuple[Outcome, ...] = ("pass", "fail", "warn", "error", "skip")


def outcome(checked: Checked) -> Outcome:
    """A verdict in the PolicyReport's terms (module docstring)."""
    if checked.error:
        return "error"
    result = checked.result
    if result.verified:
        return "pass"
    return "skip" if result.allowed else "fail"


def report_name(ref: ObjectRef) -> str:
    """``manifest-provider-<uid>``; without a uid (never so for a stored object), a digest of its identity."""
    if ref.uid:
        return NAME_PREFIX + ref.uid
    ident = "/".join((ref.api_version, ref.kind, ref.namespace, ref.name))
    return NAME_PREFIX + hashlib.sha256(ident.encode()).hexdigest()[:32]


def signer_text(signer: str | dict[str, str]) -> str:
    if isinstance(signer, str):
        return signer
    subject, issuer, key = signer.get("subject", ""), signer.get("issuer", ""), signer.get("key", "")
    who = f"{subject} ({issuer})" if issuer else subject
    return who or key


def _reference(ref: ObjectRef) -> dict[str, str]:
    return {k: v for k, v in ref.to_dict().items() if k != "resourceVersion"}


def result_entry(
    checked: Checked, *, now: float, policy: str = POLICY, rule: str = RULE, source: str = SOURCE
) -> dict[str, Any]:
    """One ``results[]`` entry for one verdict, found at ``now`` (seconds since the epoch)."""
    result = checked.result
    message = result.message
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 3] + "..."
    properties = {
        "reason": result.reason,
        "allowed": str(result.allowed).lower(),
        "verified": str(result.verified).lower(),
    }
    if result.signers:
        properties["signers"] = ", ".join(signer_text(s) for s in result.signers)
    if result.diff_count:
        properties["differences"] = str(result.diff_count)
    if result.used_cluster:
        properties["dryRun"] = "true"
    if checked.ref.resource_version:
        properties["resourceVersion"] = checked.ref.resource_version
    seconds = int(now)
    return {
        "policy": policy,
        "rule": rule,
        "result": outcome(checked),
        "source": source,
        "scored": True,
        "category": CATEGORY,
        "severity": SEVERITY,
        "message": message,
        "properties": properties,
        "resources": [_reference(checked.ref)],
        "timestamp": {"seconds": seconds, "nanos": int((now - seconds) * 1e9)},
    }


def summary(results: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
    for entry in results:
        counts[entry["result"]] += 1
    return counts


def report_for(
    checked: Checked, *, now: float, policy: str = POLICY, rule: str = RULE, source: str = SOURCE
) -> dict[str, Any]:
    """The PolicyReport (or, for a cluster-scoped object, ClusterPolicyReport) of one verdict."""
    ref = checked.ref
    meta: dict[str, Any] = {"name": report_name(ref), "labels": dict(MANAGED_BY)}
    if ref.namespace:
        meta["namespace"] = ref.namespace
    if ref.uid:
        # No blockOwnerDeletion: setting it needs permission to update the owner's
        # finalizers (the OwnerReferencesPermissionEnforcement admission plugin).
        meta["ownerReferences"] = [{"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name, "uid": ref.uid}]
    results = [result_entry(checked, now=now, policy=policy, rule=rule, source=source)]
    return {
        "apiVersion": API_VERSION,
        "kind": "PolicyReport" if ref.namespace else "ClusterPolicyReport",
        "metadata": meta,
        "scope": _reference(ref),
        "results": results,
        "summary": summary(results),
    }


def report_stub(ref: ObjectRef) -> dict[str, Any]:
    """Which report is an object's (its kind, name and namespace): what deleting it needs."""
    meta: dict[str, Any] = {"name": report_name(ref), "labels": dict(MANAGED_BY)}
    if ref.namespace:
        meta["namespace"] = ref.namespace
    kind = "PolicyReport" if ref.namespace else "ClusterPolicyReport"
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": meta}


def same_content(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two reports say the same, timestamps aside (an unchanged verdict is not rewritten)."""

    def content(report: dict[str, Any]) -> Any:
        results = report.get("results")
        stripped = [
            {k: v for k, v in r.items() if k != "timestamp"} if isinstance(r, dict) else r
            for r in (results if isinstance(results, list) else [])
        ]
        meta = report.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        return (
            stripped,
            report.get("summary"),
            report.get("scope"),
            meta.get("labels"),
            meta.get("ownerReferences"),
        )

    return bool(content(a) == content(b))
