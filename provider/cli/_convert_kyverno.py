"""A Kyverno ``validate.manifests`` rule as this project's policy: the same check, or what was left out.

Every rule below is Kyverno's as its source writes it (kyverno/kyverno, the same in
v1.17.0, v1.18.0 and v1.19.0 unless a tag is named):

* **Which keys an entry holds, and what ``count`` counts.**
  ``pkg/engine/handlers/validation/validate_manifest.go`` ``verifyManifestAttestorSet``
  calls ``internal.ExpandStaticKeys`` (``pkg/engine/internal/utils.go``; in v1.17
  ``imageverifier.go``) *before* ``RequiredCount``: ``splitPEM`` splits ``publicKeys``
  after each ``-----END PUBLIC KEY-----`` (and drops what follows the last), and a
  ``keys`` entry holding more than one piece becomes one entry per piece. ``count``
  (``api/kyverno/v1/image_verification_types.go`` ``RequiredCount``: absent or 0 is
  "all") then counts those entries. So ``count: 2`` over one entry holding keys A
  and B means A *and* B. An OpenPGP block is never split: it is one entry that any
  of its certificates satisfies (k8s-manifest-sigstore reads it as a keyring).
* **Every set must pass**; a nested ``attestor`` entry is a set counting as one entry.
* **An entry's other fields narrow it**: ``annotations`` (the object must carry them,
  ``checkManifestAnnotations``), ``repository`` (the manifest is read from that bundle,
  not from the object), a certificate checked against ``certChain`` or the Fulcio roots
  (k8s-manifest-sigstore ``pkg/cosign/verify.go``), keyless ``additionalExtensions``.
  None has an equivalent here, so such an entry is **left out whole** and ``count`` is
  kept: a set that needed it cannot be met without it (stricter, never looser), and
  the loss is listed.
* **Scope.** ``pkg/engine/utils/match.go`` ``MatchesResourceDescription``: a namespaced
  ``Policy`` applies only in its own namespace; ``match.any`` is a union, ``match.all``
  an intersection; within a filter, criteria are ANDed. ``pkg/utils/match/kind.go``
  ``CheckKind`` with ``pkg/utils/kube/kind.go`` ``ParseKindSelector``: ``Kind``,
  ``v1/Kind``, ``group/v1/Kind``, ``Kind/sub`` (or ``Kind.sub``), each part a wildcard
  (``ext/wildcard``: ``*`` and ``?``); a selector without a subresource matches no
  subresource request, but a Pod's ``ephemeralcontainers``. A Namespace's own
  "namespace" is its name (``checkNameSpace``), and names fall back to
  ``generateName``. What cannot be said with ``inScopeObjects`` (names, selectors,
  annotations, operations, subjects, preconditions) is dropped, so the converted scope
  is **wider** -- more is checked, never less -- and the loss is listed.
* **Exclusions** carried to ``skipObjects`` only when the filter is kinds, names and
  namespaces alone, and only as narrow as Kyverno's (``skipObjects`` never matches by
  ``generateName``, and a Kyverno ``?`` is not widened to ``*``); any other exclusion
  is dropped (stricter) and listed.
* **Enforcement**: ``validate.failureAction``, else ``spec.validationFailureAction``
  (default ``Audit``; ``validate_resource.go``), and their per-namespace overrides.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Any

from ..errors import DataError, PolicyError
from ..keys.refs import is_key_reference

#: A kind selector's version part (``pkg/utils/kube/kind.go`` ``versionRegex``).
_VERSION = re.compile(r"(v\d((alpha|beta)\d)?|\*)\Z")
_END_PEM = "-----END PUBLIC KEY-----"
_INLINE_KEY_PREFIXES = ("-----BEGIN PUBLIC KEY-----", "-----BEGIN PGP PUBLIC KEY BLOCK-----")
#: Rule fields that change nothing a converted policy decides.
_HARMLESS_RULE_FIELDS = frozenset(
    {"name", "match", "exclude", "validate", "context", "reportProperties", "skipBackgroundRequests"}
)


@dataclass
class Rule:
    """One converted ``validate.manifests`` rule."""

    name: str
    policy: dict[str, Any]
    #: ``deny`` (Enforce) or ``dryrun`` (Audit): the rule's failure action, as Gatekeeper names it.
    enforcement: str
    #: ``{apiGroups, kinds}`` entries for a Gatekeeper constraint's ``spec.match.kinds`` (None: every kind).
    kinds: list[dict[str, list[str]]] | None = None


# --- patterns -----------------------------------------------------------------------------


def wildcard_match(pattern: str, value: str) -> bool:
    """``ext/wildcard`` ``Match`` (IGLOU-EU/go-wildcard v1.0.3): ``*`` any run, ``?`` one character."""
    expression = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(expression, value, re.DOTALL) is not None


def _ours(pattern: str, *, widen: bool) -> str | None:
    """A Kyverno wildcard as one alternative of our name pattern; None when it cannot be said exactly and
    ``widen`` is off. ``?`` becomes ``*`` (wider), ``""`` the empty value ``-``, ``**`` a single ``*``."""
    if pattern == "":
        return "-"
    if "?" in pattern:
        if not widen:
            return None
        pattern = pattern.replace("?", "*")
    while "**" in pattern:
        pattern = pattern.replace("**", "*")
    if "," in pattern or any(c.isspace() for c in pattern):
        return None  # no Kubernetes name holds these; our patterns read "," as "or"
    return pattern


def parse_kind_selector(text: str) -> tuple[str, str, str, str] | None:
    """``ParseKindSelector``: (group, version, kind, subresource); None for a selector it reads as nothing."""
    parts = text.split("/")
    parts = [*parts[:-1], *parts[-1].split(".")]
    if len(parts) == 1:
        return "*", "*", parts[0], ""
    if len(parts) == 2:
        if parts == ["*", "*"]:
            return "*", "*", "*", "*"
        if parts[0] == "*" and parts[1].lower() == parts[1]:
            return "*", "*", parts[0], parts[1]
        if _VERSION.match(parts[0]):
            return "*", parts[0], parts[1], ""
        return "*", "*", parts[0], parts[1]
    if len(parts) == 3:
        if _VERSION.match(parts[0]):
            return "*", parts[0], parts[1], parts[2]
        return parts[0], parts[1], parts[2], ""
    if len(parts) == 4:
        return parts[0], parts[1], parts[2], parts[3]
    return None


def _kind_ref(selector: str, *, widen: bool) -> dict[str, str] | None:
    """An object reference for one kind selector (without namespace or name), or None."""
    parsed = parse_kind_selector(selector)
    if parsed is None:
        return None
    group, version, kind, sub = parsed
    ref: dict[str, str] = {}
    for name, value in (("group", group), ("version", version), ("kind", kind)):
        ours = _ours(value, widen=widen)
        if ours is None:
            return None
        if ours != "*":
            ref[name] = ours
    if sub == "":
        # No subresource -- but CheckKind lets a core v1 Pod's ephemeralcontainers through too.
        pod = all(wildcard_match(p, v) for p, v in ((group, ""), (version, "v1"), (kind, "Pod")))
        ref["subresource"] = "-,ephemeralcontainers" if pod else "-"
    elif sub != "*":
        ours = _ours(sub, widen=widen)
        if ours is None:
            return None
        ref["subresource"] = ours
    return ref


def upstream_pattern_is_ours(pattern: str) -> bool:
    """Whether k8s-manifest-sigstore's ``MatchPattern`` (``pkg/util``) and our name patterns read ``pattern`` alike.

    Upstream's ``*`` is a wildcard only as the whole pattern or at its end -- checked before
    the comma split, so ``a,b*`` is the prefix ``a,b`` -- and a ``*`` inside is a literal; ours
    is a wildcard anywhere in each alternative. Without ``*``, or with one trailing ``*`` and
    no comma, the two agree (an empty alternative is an error here, stricter either way).
    """
    text = pattern.strip()
    if "*" not in text or text == "*":
        return True
    return text.endswith("*") and "," not in text and "*" not in text.rstrip("*")


def upstream_refs(value: Any, where: str, lost: list[str], *, narrowing: bool = False) -> list[dict[str, Any]]:
    """k8s-manifest-sigstore ``ObjectReference`` patterns as ours: an empty field is "any" there
    (``MatchPattern``) and absent here. With ``narrowing`` (what skips or ignores), a reference
    whose pattern we would read wider than upstream is left out."""
    refs = []
    for i, item in enumerate(value or []):
        if not isinstance(item, dict):
            lost.append(f"{where}[{i}]: not an object reference; left out")
            continue
        ref = {k: v for k, v in item.items() if v != ""}
        if narrowing and not all(upstream_pattern_is_ours(str(v)) for v in ref.values()):
            lost.append(f"{where}[{i}]: a '*' upstream reads as a literal would match more here; left out, so "
                        "what it would skip or ignore is checked")  # fmt: skip
            continue
        refs.append(ref)
    return refs


def upstream_ignore_fields(value: Any, where: str, lost: list[str]) -> list[Any]:
    """``ObjectFieldBinding`` lists (Kyverno's ``ignoreFields`` are upstream's) with their references read;
    a rule whose every reference is left out is left out too (without objects it would ignore everywhere)."""
    kept: list[Any] = []
    for i, binding in enumerate(value or []):
        if isinstance(binding, dict) and binding.get("objects"):
            objects = upstream_refs(binding["objects"], f"{where}[{i}].objects", lost, narrowing=True)
            if objects:
                kept.append({**binding, "objects": objects})
        else:
            kept.append(binding)
    return kept


# --- keys ------------------------------------------------------------------------------------


def split_pem(text: str) -> list[str]:
    """``splitPEM``: the pieces up to and including each ``-----END PUBLIC KEY-----``; the rest is dropped."""
    pieces = text.split(_END_PEM)
    return [piece + _END_PEM for piece in pieces[:-1]]


def _keys_entry(keys: dict[str, Any], where: str, lost: list[str]) -> list[dict[str, Any]] | None:
    """The converted entries for one Kyverno ``keys`` entry (several when Kyverno expands it), or None."""
    if keys.get("kms"):
        lost.append(f"{where}.kms: keys kept in KMS are not read here: paste the public key")
    # A transparency log narrows nothing for a key signature unless it is required (k8s-manifest-sigstore
    # pkg/cosign/verify.go VerifyBlob ignores the log for a signature without a bundle annotation).
    if isinstance(keys.get("rekor"), dict) and not keys["rekor"].get("ignoreTlog"):
        lost.append(f"{where}.rekor: Rekor entries are not looked up for key signatures here")
    if isinstance(keys.get("ctlog"), dict) and set(keys["ctlog"]) - {"ignoreSCT", "ignoreTlog"}:
        lost.append(f"{where}.ctlog: certificate-transparency settings are not read for key signatures here")
    if keys.get("signatureAlgorithm"):
        lost.append(f"{where}.signatureAlgorithm: not read here (each key's own scheme is used)")
    text = keys.get("publicKeys")
    if not isinstance(text, str) or not text.strip():
        # Kyverno's manifest rules read publicKeys alone (kyverno v1.19.0
        # pkg/engine/handlers/validation/validate_manifest.go buildVerifyResourceOptionsAndPath); its image
        # rules read ``secret`` when publicKeys is empty (pkg/engine/internal/imageverifier.go:
        # k8s://<namespace>/<name>, the Secret's cosign.pub). Carried as the key that Secret holds.
        secret = keys.get("secret")
        if isinstance(secret, dict) and secret:
            return [{"keys": {"secret": {k: v for k, v in secret.items() if k in ("namespace", "name")}}}]
        return None
    if is_key_reference(text):
        # k8s://NAMESPACE/NAME: k8s-manifest-sigstore hands it to cosign, which reads the Secret's cosign.pub
        # (sigstore/cosign v3.1.2 pkg/signature/keys.go PublicKeyFromKeyRefWithHashAlgo): carried as it is.
        return [{"keys": {"publicKeys": text.strip()}}]
    pieces = split_pem(text)
    if len(pieces) <= 1:
        pieces = [text]
    if not pieces[0].lstrip().startswith(_INLINE_KEY_PREFIXES):
        lost.append(f"{where}.publicKeys: {text.strip()[:60]!r} is a key reference (KMS), not a key")
        return None
    if any(not piece.startswith(_INLINE_KEY_PREFIXES) for piece in pieces):
        lost.append(
            f"{where}.publicKeys: Kyverno hands a key that does not start its text (here: after a newline; with "
            f"{len(pieces)} keys, every key after the first) to cosign as a key reference, which does not load "
            "(the entry errors); converted as the keys they are, each an entry of the set"
        )
    converted: list[dict[str, Any]] = []
    for index, piece in enumerate(pieces):
        entry = _one_piece(piece.strip(), f"{where}.publicKeys" + (f" (key {index + 1})" if len(pieces) > 1 else ""),
                           lost)  # fmt: skip
        if entry is None:
            return None  # one unreadable piece: the entry is left out whole
        converted.append(entry)
    return converted


def _one_piece(text: str, where: str, lost: list[str]) -> dict[str, Any] | None:
    """One Kyverno entry's key text as one entry here: a key, or a set of one among an OpenPGP block's certificates."""
    from ..keys.openpgp import load_trusted_keys

    if "-----BEGIN PUBLIC KEY-----" in text and "-----BEGIN PGP PUBLIC KEY BLOCK-----" in text:
        lost.append(f"{where}: mixes PEM and OpenPGP keys in one entry, which Kyverno reads as one or the other")
        return None
    try:
        keys = load_trusted_keys(text, None, 64)
    except DataError as exc:
        lost.append(f"{where}: {exc.message}")
        return None
    if len(keys) == 1:
        return {"keys": {"publicKeys": text}}
    # Several OpenPGP certificates in one block: one Kyverno entry, satisfied by any of them.
    return {"attestor": {"count": 1, "entries": [
        {"keys": {"openpgpKeyring": base64.b64encode(key.certificate_bytes()).decode()}} for key in keys
    ]}}  # fmt: skip


# --- attestor sets ---------------------------------------------------------------------------


def _entry(data: Any, where: str, lost: list[str]) -> tuple[int, list[dict[str, Any]]]:
    """(how many entries Kyverno counts for it, the converted entries -- fewer when some are left out)."""
    if not isinstance(data, dict):
        lost.append(f"{where}: not a mapping")
        return 1, []
    for narrowing, why in (
        ("annotations", "the object must carry these annotations"),
        ("repository", "Kyverno reads the signed manifest from this bundle, not from the object, so an object "
                       "signed for an older bundle would verify here"),
    ):  # fmt: skip
        if data.get(narrowing):
            lost.append(f"{where}.{narrowing}: {why}; no equivalent, so the entry is left out")
            return 1, []
    if "signatureAlgorithm" in data:
        lost.append(f"{where}.signatureAlgorithm: not read here (each key's own scheme is used)")
    if isinstance(data.get("attestor"), dict):
        nested = convert_set(data["attestor"], f"{where}.attestor", lost)
        return 1, ([{"attestor": nested}] if nested["entries"] else [])
    if isinstance(data.get("keys"), dict):
        expanded = split_pem(str(data["keys"].get("publicKeys") or ""))
        counted = len(expanded) if len(expanded) > 1 else 1
        converted = _keys_entry(data["keys"], f"{where}.keys", lost)
        if converted is None:
            lost.append(f"{where}.keys: no key carried over, so the entry is left out")
            return counted, []
        return counted, converted
    if isinstance(data.get("certificates"), dict):
        lost.append(
            f"{where}.certificates: Kyverno checks this certificate (against certChain or the Fulcio roots) "
            "before it trusts its key; a certificate entry here trusts the key as is, so the entry is left out "
            "(give the key under keys, or a keyless signer with roots)"
        )
        return 1, []
    if isinstance(data.get("keyless"), dict):
        keyless = data["keyless"]
        if keyless.get("additionalExtensions"):
            lost.append(f"{where}.keyless.additionalExtensions: no equivalent, so the entry is left out")
            return 1, []
        kept = {k: keyless[k] for k in ("subject", "subjectRegExp", "issuer", "issuerRegExp", "roots") if k in keyless}
        for name in sorted(set(keyless) - set(kept)):
            lost.append(f"{where}.keyless.{name}: not read here (signatures are checked offline against the "
                        "trusted root)")  # fmt: skip
        return 1, [{"keyless": kept}]
    lost.append(f"{where}: no keys, certificates, keyless or attestor")
    return 1, []


def convert_set(data: Any, where: str, lost: list[str]) -> dict[str, Any]:
    """A Kyverno attestor set with Kyverno's count: what it needs, out of what was carried over."""
    if not isinstance(data, dict):
        lost.append(f"{where}: not a mapping; the printed policy is invalid until it is fixed")
        return {"entries": []}
    counted = 0
    entries: list[dict[str, Any]] = []
    for i, item in enumerate(data.get("entries") or []):
        n, converted = _entry(item, f"{where}.entries[{i}]", lost)
        counted += n
        entries.extend(converted)
    count = data.get("count")
    if count is not None and (type(count) is not int or count < 0):
        raise PolicyError(f"{where}.count: expected a whole number, got {count!r}")
    required = count or counted  # RequiredCount: absent or 0 means every (expanded) entry
    if not entries:
        # Every set must pass: leaving it out would drop what it requires. An empty set is an invalid
        # policy, which denies everything until the entries are added.
        lost.append(f"{where}: no entry carried over; the set needs {required} and cannot be met, so the printed "
                    "policy is invalid until its entries are added")  # fmt: skip
        return {"count": required, "entries": []}
    converted_set: dict[str, Any] = {"entries": entries}
    if required != len(entries) or count:
        converted_set["count"] = required
    if required > len(entries):
        lost.append(f"{where}: needs {required} entries but only {len(entries)} carried over: it can never be met "
                    "until the missing ones are added")  # fmt: skip
    return converted_set


# --- scope, exclusions, enforcement ----------------------------------------------------------------


def _filters(block: Any, where: str, lost: list[str], *, exclude: bool) -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(block, dict):
        return []
    if block.get("any"):
        return [(f"{where}.any[{i}]", f) for i, f in enumerate(block["any"]) if isinstance(f, dict)]
    if block.get("all"):
        filters = [f for f in block["all"] if isinstance(f, dict)]
        if len(filters) > 1:
            lost.append(
                f"{where}.all: {'an exclusion when every filter matches' if exclude else 'the intersection'} of "
                f"{len(filters)} filters; "
                + ("not carried, so the converted policy also checks these objects" if exclude else
                   f"the converted scope is {where}.all[0] alone (wider)")
            )  # fmt: skip
            return [] if exclude else [(f"{where}.all[0]", filters[0])]
        return [(f"{where}.all[0]", f) for f in filters]
    legacy = {k: block[k] for k in ("resources", "subjects", "roles", "clusterRoles") if block.get(k)}
    return [(where, legacy)] if legacy else []


def _scope(rule: dict[str, Any], where: str, policy_namespace: str | None, lost: list[str]) -> list[dict[str, str]]:
    refs: list[dict[str, str]] = []
    filters = _filters(rule.get("match"), f"{where}.match", lost, exclude=False)
    for spot, flt in filters:
        for name in ("subjects", "roles", "clusterRoles"):
            if flt.get(name):
                lost.append(f"{spot}.{name}: the converted policy checks every requester's objects (wider)")
        resources = flt.get("resources") or {}
        for name in ("name", "names", "annotations", "selector", "namespaceSelector", "operations"):
            if resources.get(name):
                lost.append(f"{spot}.resources.{name}: not carried; the converted scope includes what it left out "
                            "(wider)")  # fmt: skip
        namespaces = [n for n in resources.get("namespaces") or [] if isinstance(n, str)]
        for selector in resources.get("kinds") or ["*/*"]:
            ref = _kind_ref(str(selector), widen=True)
            if ref is None:
                lost.append(f"{spot}.resources.kinds: {str(selector)[:60]!r} is read by Kyverno as nothing; left out")
                continue
            if "?" in str(selector):
                lost.append(f"{spot}.resources.kinds: {str(selector)[:60]!r}: '?' is widened to '*'")
            if policy_namespace is not None:
                if namespaces and not any(wildcard_match(n, policy_namespace) for n in namespaces):
                    continue  # this filter matches nothing in the policy's namespace
                refs.append({**ref, "namespace": policy_namespace})
                continue
            if namespaces:
                patterns = [_ours(n, widen=True) for n in namespaces]
                if any(p is None for p in patterns) or any("?" in n for n in namespaces):
                    lost.append(f"{spot}.resources.namespaces: widened to every namespace ({namespaces[:3]!r})")
                    refs.append(ref)
                    continue
                refs.append({**ref, "namespace": ",".join(p for p in patterns if p)})
                might_be_namespace = all(wildcard_match(p, v) for p, v in zip(
                    parse_kind_selector(str(selector)) or ("", "", "", ""), ("", "v1", "Namespace", ""), strict=True
                ))  # fmt: skip
                if might_be_namespace:
                    # Kyverno reads a Namespace's own namespace as its name; here a Namespace has none.
                    lost.append(f"{spot}.resources.namespaces: Namespace objects are checked whatever their name")
                    refs.append({"group": "-", "kind": "Namespace", "subresource": "-"})
                continue
            refs.append(ref)
    return refs


def _exclusions(rule: dict[str, Any], where: str, lost: list[str]) -> list[dict[str, str]]:
    skips: list[dict[str, str]] = []
    for spot, flt in _filters(rule.get("exclude"), f"{where}.exclude", lost, exclude=True):
        resources = flt.get("resources") or {}
        others = [k for k in ("subjects", "roles", "clusterRoles") if flt.get(k)]
        others += [k for k in ("annotations", "selector", "namespaceSelector", "operations") if resources.get(k)]
        if others or not resources.get("kinds"):
            lost.append(f"{spot}: an exclusion by {', '.join(others) or 'no kind'} is not carried, so the converted "
                        "policy also checks these objects")  # fmt: skip
            continue
        names = [n for n in [resources.get("name"), *(resources.get("names") or [])] if isinstance(n, str) and n]
        namespaces = [n for n in resources.get("namespaces") or [] if isinstance(n, str)]
        name_pattern = [_ours(n, widen=False) for n in names]
        ns_pattern = [_ours(n, widen=False) for n in namespaces]
        refs = [_kind_ref(str(k), widen=False) for k in resources["kinds"]]
        if any(p is None for p in (*name_pattern, *ns_pattern, *refs)):
            lost.append(f"{spot}: uses a pattern ('?') that would skip more here; not carried, so the converted "
                        "policy also checks these objects")  # fmt: skip
            continue
        for ref in refs:
            assert ref is not None
            skip = dict(ref)
            if name_pattern:
                skip["name"] = ",".join(p for p in name_pattern if p)
            if ns_pattern:
                skip["namespace"] = ",".join(p for p in ns_pattern if p)
            skips.append(skip)
    return skips


_ACTIONS = {"enforce": "deny", "audit": "dryrun"}


def _enforcement(doc: dict[str, Any], rule: dict[str, Any], where: str, lost: list[str]) -> str:
    spec = doc.get("spec") or {}
    validate = rule.get("validate") or {}
    given = validate.get("failureAction") or spec.get("validationFailureAction") or "Audit"
    action = _ACTIONS.get(str(given).lower())
    if action is None:
        raise PolicyError(f"{where}.validate.failureAction: {str(given)[:40]!r} is neither Enforce nor Audit")
    overrides = validate.get("failureActionOverrides") or spec.get("validationFailureActionOverrides") or []
    if overrides:
        actions = {_ACTIONS.get(str(o.get("action", "")).lower()) for o in overrides if isinstance(o, dict)}
        everywhere = "denies everywhere" if "deny" in actions or action == "deny" else "audits everywhere"
        lost.append(f"{where}: failure actions per namespace are not carried; the converted constraint {everywhere}")
        if "deny" in actions:
            action = "deny"
    return action


def _gatekeeper_kinds(refs: list[dict[str, str]]) -> list[dict[str, list[str]]] | None:
    """``spec.match.kinds`` covering every reference (None when one of them needs every kind)."""
    kinds: list[dict[str, list[str]]] = []
    for ref in refs:
        group, kind = ref.get("group", "*"), ref.get("kind", "*")
        if "*" in kind or ("*" in group and group != "*"):
            return None
        if ref.get("subresource") not in ("-", "-,ephemeralcontainers"):
            return None  # Gatekeeper matches a subresource request by its own kind (a Scale), not the parent's
        groups = ["*"] if group == "*" else ["" if g == "-" else g for g in group.split(",")]
        entry = {"apiGroups": groups, "kinds": kind.split(",")}
        if entry not in kinds:
            kinds.append(entry)
    return kinds or None


def convert_rules(doc: dict[str, Any], lost: list[str]) -> list[Rule]:
    """Every ``validate.manifests`` rule of a Kyverno policy, converted (each its own policy: all must pass)."""
    spec = doc.get("spec") or {}
    rules = [r for r in spec.get("rules") or [] if isinstance(r, dict)
             and isinstance((r.get("validate") or {}).get("manifests"), dict)]  # fmt: skip
    if not rules:
        raise PolicyError("the Kyverno policy has no validate.manifests rule")
    if len(rules) > 1:
        lost.append(f"rules: {len(rules)} manifests rules, converted into {len(rules)} policies; use every one of "
                    "them (an object must pass each rule that selects it)")  # fmt: skip
        if spec.get("applyRules") == "One":
            lost.append("spec.applyRules: One (only the first matching rule applies) is not carried: every "
                        "converted policy applies")  # fmt: skip
    if spec.get("admission") is False:
        lost.append("spec.admission: false (Kyverno never blocks an admission with it); the converted policy does")
    for spot, value in (("spec.failurePolicy", spec.get("failurePolicy")),
                        ("spec.webhookConfiguration.failurePolicy", (spec.get("webhookConfiguration") or {}).get(
                            "failurePolicy"))):  # fmt: skip
        if value == "Fail":
            lost.append(f"{spot}: Fail is the engine's webhook setting, not a policy's: set Gatekeeper's "
                        "validating webhook to Fail too (Gatekeeper installs it with Ignore)")  # fmt: skip
    policy_namespace: str | None = None
    if doc.get("kind") == "Policy":
        policy_namespace = (doc.get("metadata") or {}).get("namespace")
        if not policy_namespace:
            lost.append("metadata.namespace: a namespaced Policy without its namespace; the converted scope is "
                        "every namespace (wider)")  # fmt: skip
    return [_convert_rule(doc, rule, policy_namespace, lost) for rule in rules]


def _convert_rule(doc: dict[str, Any], rule: dict[str, Any], policy_namespace: str | None, lost: list[str]) -> Rule:
    name = str(rule.get("name") or "rule")
    where = f"rules[{name}]"
    manifests = rule["validate"]["manifests"]
    for key in sorted(set(rule) - _HARMLESS_RULE_FIELDS):
        if rule.get(key):
            lost.append(f"{where}.{key}: not carried; the converted policy checks every object its scope selects")
    policy: dict[str, Any] = {}
    sets = [
        convert_set(a, f"{where}.validate.manifests.attestors[{i}]", lost)
        for i, a in enumerate(manifests.get("attestors") or [])
    ]
    if sets:
        policy["attestors"] = sets
    ignored = upstream_ignore_fields(manifests.get("ignoreFields"), f"{where}.ignoreFields", lost)
    if ignored:
        policy["ignoreFields"] = ignored
    dry_run = manifests.get("dryRun") or {}
    if dry_run.get("enable"):
        policy["dryRun"] = {
            "enabled": True,
            **({"namespace": dry_run["namespace"]} if dry_run.get("namespace") else {}),
        }
    if manifests.get("annotationDomain"):
        policy["annotationDomain"] = manifests["annotationDomain"]
    if manifests.get("repository"):
        lost.append(f"{where}.validate.manifests.repository: Kyverno reads this bundle for every object; here "
                    "objects name their bundle (resourceBundleRef) and its repository is allow-listed")  # fmt: skip
    refs = _scope(rule, where, policy_namespace, lost)
    if refs and not any(set(r) <= {"subresource"} and r.get("subresource", "*") == "*" for r in refs):
        policy["inScopeObjects"] = refs
    skips = _exclusions(rule, where, lost)
    if skips:
        policy["skipObjects"] = skips
    policy["defaults"] = ["k8s-manifest-sigstore", "common", "kyverno"]
    enforcement = _enforcement(doc, rule, where, lost)
    return Rule(name, policy, enforcement, _gatekeeper_kinds(refs) if "inScopeObjects" in policy else None)
