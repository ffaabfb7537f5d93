"""Kyverno's ``validate.manifests`` rule, reproduced from its source for the converter's property test.

Kyverno cannot run here. This is what it decides for one admission request, rule by rule
from kyverno/kyverno (v1.17.0, v1.18.0 and v1.19.0 alike):

* whether the rule applies: ``pkg/engine/utils/match.go`` ``MatchesResourceDescription``
  (a namespaced ``Policy`` only in its own namespace; ``match.any`` a union, ``match.all``
  an intersection, the legacy ``match.resources``; ``exclude`` likewise, when the match
  held) with ``doesResourceMatchConditionBlock`` (operations, ``CheckKind``, a name that
  falls back to ``generateName``, namespaces where a Namespace's own is its name);
* the verdict: ``pkg/engine/handlers/validation/validate_manifest.go``
  ``verifyManifestAttestorSet`` -- every set passes, a set when ``RequiredCount`` of its
  entries (after ``ExpandStaticKeys``) verify, a nested ``attestor`` recursively;
* what blocks: a failing rule whose failure action (``validate.failureAction``, else
  ``spec.validationFailureAction``, default Audit) is Enforce.

One entry's own check -- k8s-manifest-sigstore's ``VerifyResource`` with one key and
Kyverno's default ignore fields -- is left to ``entry_verifies``, which the test answers
with this project's ``decide()`` and a policy of that one key: the same signature and
comparison on both sides, so the property is about what the converter carries. The
model follows the rules as written (each key of a ``publicKeys`` text an entry), not the
leading-newline slip ``convert-policy`` lists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from provider.cli._convert_kyverno import parse_kind_selector, split_pem, wildcard_match


@dataclass(frozen=True)
class Request:
    group: str
    version: str
    kind: str
    namespace: str
    name: str
    generate_name: str
    operation: str
    subresource: str = ""


def _kind_matches(kinds: list[str], request: Request) -> bool:
    """``CheckKind`` with ``allowEphemeralContainers``."""
    for selector in kinds:
        parsed = parse_kind_selector(selector)
        if parsed is None:
            continue
        group, version, kind, sub = parsed
        if (
            wildcard_match(group, request.group)
            and wildcard_match(version, request.version)
            and wildcard_match(kind, request.kind)
        ):
            if wildcard_match(sub, request.subresource):
                return True
            if (request.group, request.version, request.kind) == ("", "v1", "Pod") and (
                request.subresource == "ephemeralcontainers"
            ):
                return True
    return False


def _block_matches(flt: dict[str, Any], request: Request) -> bool:
    """``doesResourceMatchConditionBlock`` for what the generated policies use (no selectors or subjects)."""
    resources = flt.get("resources") or {}
    if resources.get("operations") and request.operation not in resources["operations"]:
        return False
    if resources.get("kinds") and not _kind_matches(resources["kinds"], request):
        return False
    name = request.name or request.generate_name
    if resources.get("name") and not wildcard_match(resources["name"], name):
        return False
    if resources.get("names") and not any(wildcard_match(n, name) for n in resources["names"]):
        return False
    if resources.get("namespaces"):
        own = request.name if request.kind == "Namespace" else request.namespace
        if not any(wildcard_match(n, own) for n in resources["namespaces"]):
            return False
    return bool(resources)


def _filters(block: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    if block.get("any"):
        return "any", block["any"]
    if block.get("all"):
        return "all", block["all"]
    return "one", [{"resources": block.get("resources")}] if block.get("resources") else []


def applies(doc: dict[str, Any], rule: dict[str, Any], request: Request) -> bool:
    if doc["kind"] == "Policy" and doc["metadata"].get("namespace") != request.namespace:
        return False
    how, filters = _filters(rule.get("match") or {})
    hits = [_block_matches(f, request) for f in filters]
    matched = any(hits) if how == "any" else bool(hits) and all(hits)
    if not matched:
        return False
    exclude = rule.get("exclude") or {}
    how, filters = _filters(exclude)
    hits = [_block_matches(f, request) for f in filters]
    excluded = any(hits) if how in ("any", "one") else bool(hits) and all(hits)
    return not excluded


def _expanded(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``ExpandStaticKeys``."""
    out: list[dict[str, Any]] = []
    for entry in entries:
        keys = entry.get("keys")
        pieces = split_pem(keys.get("publicKeys") or "") if keys else []
        if len(pieces) > 1:
            out.extend({**entry, "keys": {**keys, "publicKeys": piece.strip()}} for piece in pieces)
        else:
            out.append(entry)
    return out


def set_passes(attestor_set: dict[str, Any], entry_verifies: Callable[[str], bool]) -> bool:
    entries = _expanded(attestor_set.get("entries") or [])
    required = attestor_set.get("count") or len(entries)  # RequiredCount
    verified = 0
    for entry in entries:
        if "attestor" in entry:
            ok = set_passes(entry["attestor"], entry_verifies)
        elif "keys" in entry and entry["keys"].get("publicKeys"):
            ok = entry_verifies(entry["keys"]["publicKeys"].strip())
        else:
            ok = False  # a key kept in KMS or a Secret: none of the test's objects is signed by it
        verified += ok
        if verified >= required:
            return True
    return False


def enforces(doc: dict[str, Any], rule: dict[str, Any]) -> bool:
    action = (rule.get("validate") or {}).get("failureAction") or doc["spec"].get("validationFailureAction") or "Audit"
    return str(action).lower() == "enforce"


def denies(doc: dict[str, Any], request: Request, entry_verifies: Callable[[str], bool]) -> bool:
    """Whether Kyverno refuses the request: some manifests rule applies, fails, and enforces."""
    for rule in doc["spec"]["rules"]:
        manifests = (rule.get("validate") or {}).get("manifests")
        if manifests is None or not applies(doc, rule, request):
            continue
        passed = all(set_passes(s, entry_verifies) for s in manifests.get("attestors") or [])
        if not passed and enforces(doc, rule):
            return True
    return False
