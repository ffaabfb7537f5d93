"""``manifest-provider convert-policy``: another verifier's policy as this project's, and what did not carry over.

Reads one of:

* a Kyverno ``ClusterPolicy``/``Policy`` with ``validate.manifests`` rules
  (CRD ``kyverno.io_clusterpolicies.yaml``; :mod:`._convert_kyverno` holds
  Kyverno's rules, each with its source): ``attestors`` with Kyverno's ``count``,
  ``ignoreFields``, ``dryRun``, ``annotationDomain``, and the rule's ``match``,
  ``exclude`` and ``failureAction``;
* an Integrity Shield ``ManifestIntegrityConstraint`` (stolostron
  ``shield/pkg/config/parameter.go``): ``parameters.signers``, ``ignoreFields``,
  ``skipObjects``, ``objectSelector``, ``skipUsers``, ``signatureRef``, ``action``,
  and the constraint's own ``match`` and ``enforcementAction``;
* a ``kubectl sigstore verify-resource`` config (``pkg/k8smanifest/option.go``:
  ``ignoreFields``, ``signers``, ``skipObjects``, the annotation config).

and prints the policy (``-o policy``), a Gatekeeper constraint for the
``verify-manifest-signature`` template (scope and enforcement included), a
Kyverno data entry, or the object the service holds as its own admission
webhook (``-o manifest-policy``: a ``ClusterManifestPolicy``, or for a
namespaced Kyverno ``Policy`` a ``ManifestPolicy`` in its namespace; scope and
enforcement included) -- the way off Kyverno's ``validate.manifests``, which
Kyverno's CEL policy types do not support. **The converted policy never admits what the source would
deny**: what has no equivalent is either left out in the direction that checks
more (a wider scope, an entry that can no longer be satisfied, an exclusion
dropped) or, where that is impossible, makes the printed policy invalid -- and
every such difference is listed on standard error with exit code 3. Exit 0 means
the printed policy is the source's.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..bounds import SERVICE
from ..errors import PolicyError
from ..objects import DNS_LABEL
from . import COMMANDS, EXIT_OK, EXIT_UNVERIFIED
from ._args import command_parser
from ._common import read_documents
from ._convert_kyverno import (
    Rule,
    convert_rules,
    upstream_ignore_fields,
    upstream_pattern_is_ours,
    upstream_refs,
)

HELP = COMMANDS["convert-policy"]


EXAMPLES = (
    "manifest-provider convert-policy -f kyverno-policy.yaml > policy.yaml",
    "manifest-provider convert-policy -f kyverno-policy.yaml -o gatekeeper > constraint-converted.yaml",
    "manifest-provider convert-policy -f integrity-shield-constraint.yaml   # exit 3 when something did not carry over",
    "manifest-provider convert-policy -f kyverno-policy.yaml -o manifest-policy | kubectl apply -f -",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = command_parser(
        sub, "convert-policy", HELP, EXAMPLES, description=HELP + " (exit 3 when something did not carry over)"
    )
    p.add_argument("-f", "--filename", required=True, metavar="FILE", help="the policy to convert (- for stdin)")
    p.add_argument(
        "-o", "--output", choices=("policy", "gatekeeper", "kyverno", "manifest-policy"), default="policy",
        help="policy (default): this project's policy; gatekeeper: a K8sVerifyManifestSignature constraint; "
        "kyverno: the converted policy as a Kyverno data entry; manifest-policy: a ClusterManifestPolicy (a "
        "namespaced Kyverno Policy: a ManifestPolicy) for the service as its own admission webhook",
    )  # fmt: skip
    p.set_defaults(run=run)


@dataclass
class Conversion:
    """The converted policies (one per source rule; an object must pass every one) and what did not carry over."""

    rules: list[Rule]
    lost: list[str] = field(default_factory=list)
    #: A Gatekeeper source's own ``spec.match``, carried verbatim into ``-o gatekeeper``.
    gatekeeper_match: dict[str, Any] | None = None
    #: A namespaced Kyverno ``Policy``'s namespace: ``-o manifest-policy`` writes a ManifestPolicy there.
    namespace: str | None = None


# --- Integrity Shield and kubectl sigstore: k8s-manifest-sigstore's option types ------------------------


_BASE_NAMES = ("resourceBundleRefBaseName", "signatureBaseName", "certificateBaseName", "messageBaseName",
               "bundleBaseName")  # fmt: skip


def _common(params: dict[str, Any], policy: dict[str, Any], lost: list[str], where: str) -> None:
    signers = params.get("signers")
    if signers:
        kept = [s for s in signers if isinstance(s, str)]
        if len(kept) != len(signers):
            lost.append(f"{where}.signers: entries that are not strings (upstream refuses them) are left out")
        if kept:
            policy["signers"] = kept
    fields = params.get("ignoreFields") or params.get("ignoreAttrs")
    kept = upstream_ignore_fields(fields, f"{where}.ignoreFields", lost) if fields else []
    if kept:
        policy["ignoreFields"] = kept
    if params.get("skipObjects"):
        policy["skipObjects"] = upstream_refs(params["skipObjects"], f"{where}.skipObjects", lost, narrowing=True)
    if params.get("skipUsers"):
        # ObjectUserBinding is users and objects; upstream reads nothing else in an entry.
        # ObjectUserBinding.Match: the objects match *and* a users pattern does (none listed: nobody).
        policy["skipUsers"] = []
        for i, u in enumerate(params["skipUsers"]):
            spot = f"{where}.skipUsers[{i}]"
            users = u.get("users") if isinstance(u, dict) else None
            if not users or not all(isinstance(p, str) and upstream_pattern_is_ours(p) for p in users):
                if users:
                    lost.append(f"{spot}.users: a pattern read wider here than upstream; the entry is left out")
                continue  # an entry without users exempts nobody upstream
            entry: dict[str, Any] = {"users": users}
            if u.get("objects"):
                objects = upstream_refs(u["objects"], f"{spot}.objects", lost, narrowing=True)
                if len(objects) != len(u["objects"]):
                    continue  # an object reference left out would widen the exemption to every object
                entry["objects"] = objects
            policy["skipUsers"].append(entry)
        if not policy["skipUsers"]:
            del policy["skipUsers"]
    config = params.get("annotationConfig") or {}
    domain = config.get("annotationKeyDomain") or params.get("annotationKeyDomain")
    if domain:
        policy["annotationDomain"] = domain
    for name in _BASE_NAMES:
        if config.get(name) or params.get(name):
            lost.append(f"{where}.{name}: annotation names other than upstream's default are not read here")
    for name, why in (
        ("keyConfigs", "keys kept in Secrets are not read: give them with keys"),
        ("imageProfile", "image verification is another check"),
        ("inScopeUsers", "the converted policy checks every requester (wider)"),
        ("maxResourceManifestNum", "every signed document is searched for the one naming this object"),
        ("getProvenance", "provenance is not read"),
    ):
        if params.get(name):
            lost.append(f"{where}.{name}: {why}")


#: Integrity Shield's ``action.mode`` as a Gatekeeper enforcement action (``shield/pkg/shield``: detect reports).
_MODES = {"enforce": "deny", "detect": "dryrun"}


def from_integrity_shield(doc: dict[str, Any], lost: list[str]) -> Conversion:
    spec = doc.get("spec") or {}
    params = spec.get("parameters") or {}
    policy: dict[str, Any] = {}
    _common(params, policy, lost, "spec.parameters")
    if params.get("objectSelector"):
        policy["inScopeObjects"] = upstream_refs(params["objectSelector"], "spec.parameters.objectSelector", lost)
    ref = params.get("signatureRef") or {}
    image = ref.get("imageRef")
    if image:
        repository = image.rsplit("@", 1)[0].rsplit(":", 1)[0] if "/" in image else image
        policy["resourceBundleRef"] = {"repositories": [repository]}
        lost.append(f"spec.parameters.signatureRef.imageRef: {image} is read for every object by Integrity Shield; "
                    "here objects name their bundle and its repository is allow-listed")  # fmt: skip
    resource = ref.get("signatureResourceRef") or {}
    if resource.get("name") and resource.get("namespace"):
        policy["signatureResourceRef"] = f"k8s://ConfigMap/{resource['namespace']}/{resource['name']}"
    elif resource.get("name"):
        lost.append("spec.parameters.signatureRef.signatureResourceRef: a ConfigMap without its namespace is not "
                    "read here: name the namespace")  # fmt: skip
    if (ref.get("provenanceResourceRef") or {}).get("name"):
        lost.append("spec.parameters.signatureRef.provenanceResourceRef: provenance is not read")
    action = params.get("action") or {}
    enforcement = str(spec.get("enforcementAction") or "deny")
    mode = str(action.get("mode") or "").lower()
    if mode:
        if mode not in _MODES:
            raise PolicyError(f"spec.parameters.action.mode: {mode[:40]!r} is neither enforce nor detect")
        if _MODES[mode] != "deny":
            enforcement = _MODES[mode]
    if action.get("admissionOnly"):
        lost.append("spec.parameters.action.admissionOnly: Gatekeeper's audit checks existing objects too")
    match = spec.get("match") or None
    return Conversion([Rule(str((doc.get("metadata") or {}).get("name") or "converted"), policy, enforcement)],
                      lost, gatekeeper_match=match)  # fmt: skip


def from_kubectl_sigstore(doc: dict[str, Any], lost: list[str]) -> Conversion:
    policy: dict[str, Any] = {}
    _common(doc, policy, lost, "config")
    return Conversion([Rule("converted", policy, "deny")], lost)


# --- the command --------------------------------------------------------------------------


def convert_document(doc: Any) -> Conversion:
    """Every policy ``doc`` converts to, and what did not carry over (nothing when they are the source's)."""
    if not isinstance(doc, dict):
        raise PolicyError("the input is not a mapping")
    lost: list[str] = []
    kind = doc.get("kind")
    if kind in ("ClusterPolicy", "Policy") and str(doc.get("apiVersion", "")).startswith("kyverno.io/"):
        conversion = Conversion(convert_rules(doc, lost), lost)
        if kind == "Policy":
            conversion.namespace = (doc.get("metadata") or {}).get("namespace") or None
    elif kind == "ManifestIntegrityConstraint":
        conversion = from_integrity_shield(doc, lost)
    elif kind is None:
        conversion = from_kubectl_sigstore(doc, lost)
    else:
        raise PolicyError(f"{str(kind)[:60]} is not a Kyverno policy, a ManifestIntegrityConstraint or a kubectl "
                          "sigstore config")  # fmt: skip
    from ..policy.schema import Policy

    for rule in conversion.rules:
        if not any(k in rule.policy for k in ("keys", "signers", "attestors")):
            lost.append(f"{rule.name}: no keys or signers carried over: add keys (a policy without them denies "
                        "everything)")  # fmt: skip
            continue
        try:
            # Which namespaces may hold key Secrets is the operator's setting, not the converter's to know.
            Policy.from_dict(rule.policy, bounds=dataclasses.replace(SERVICE, key_secret_namespaces=None))
        except PolicyError as exc:
            lost.append(f"{rule.name}: the printed policy is invalid, so it denies everything until it is edited: "
                        f"{exc.message}")  # fmt: skip
    return conversion


def convert(doc: Any) -> tuple[dict[str, Any], list[str]]:
    """The converted policy of a single-rule source and what did not carry over (the first rule's, if several)."""
    conversion = convert_document(doc)
    return conversion.rules[0].policy, conversion.lost


def _constraint_name(rule: Rule, several: bool) -> str:
    if not several:
        return "converted"
    slug = re.sub(r"[^a-z0-9-]+", "-", rule.name.lower()).strip("-")[:50] or "rule"
    return f"converted-{slug}"


def outputs(conversion: Conversion, output: str) -> list[Any]:
    """The documents to print for ``-o output``."""
    several = len(conversion.rules) > 1
    docs: list[Any] = []
    for rule in conversion.rules:
        if output == "gatekeeper":
            spec: dict[str, Any] = {"enforcementAction": rule.enforcement}
            if conversion.gatekeeper_match is not None:
                spec["match"] = conversion.gatekeeper_match
            elif rule.kinds:
                spec["match"] = {"kinds": rule.kinds}
            spec["parameters"] = rule.policy
            docs.append({"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "K8sVerifyManifestSignature",
                         "metadata": {"name": _constraint_name(rule, several)}, "spec": spec})  # fmt: skip
        elif output == "manifest-policy":
            docs.append(_manifest_policy(conversion, rule, _constraint_name(rule, several)))
        else:
            docs.append({"policy": rule.policy} if output == "kyverno" else rule.policy)
    return docs


#: Gatekeeper match fields a held policy's match says the same way.
_HELD_MATCH = ("kinds", "namespaces", "namespaceSelector")


def _held_match(conversion: Conversion, rule: Rule) -> dict[str, Any]:
    """``spec.match`` of a held policy: the rule's kinds, or what a Gatekeeper source's match says alike."""
    source = conversion.gatekeeper_match
    if source is None:
        return {"kinds": rule.kinds} if rule.kinds else {}
    match = {k: source[k] for k in _HELD_MATCH if source.get(k)}
    if "labelSelector" in source:
        match["objectSelector"] = source["labelSelector"]
    if any(not DNS_LABEL.match(str(n)) for n in match.get("namespaces", [])):
        del match["namespaces"]  # a prefix or suffix pattern: not said here (listed as lost)
    return match


def _manifest_policy(conversion: Conversion, rule: Rule, name: str) -> dict[str, Any]:
    from ..policystore.objects import API_VERSION, CLUSTER_KIND, NAMESPACED_KIND

    meta: dict[str, Any] = {"name": name}
    if conversion.namespace:
        meta["namespace"] = conversion.namespace
    spec: dict[str, Any] = {"action": "Enforce" if rule.enforcement == "deny" else "Audit"}
    match = _held_match(conversion, rule)
    if match:
        spec["match"] = match
    spec["policy"] = rule.policy
    kind = NAMESPACED_KIND if conversion.namespace else CLUSTER_KIND
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": meta, "spec": spec}


def not_in_the_output(conversion: Conversion, output: str) -> list[str]:
    """What this output cannot say that the source does: enforcement and a Gatekeeper source's match."""
    lost: list[str] = []
    if output == "gatekeeper":
        return lost
    if output == "manifest-policy":
        source = conversion.gatekeeper_match or {}
        for key in sorted(set(source) - {*_HELD_MATCH, "labelSelector"}):
            lost.append(f"spec.match.{key}: not carried by a held policy's match; it checks what that left out (wider)")
        if any(not DNS_LABEL.match(str(n)) for n in source.get("namespaces") or []):
            lost.append("spec.match.namespaces: a prefix or suffix pattern is not carried; every namespace (wider)")
        return lost
    for rule in conversion.rules:
        if rule.enforcement == "deny":
            lost.append(f"{rule.name}: the source denies (Enforce); a policy carries no enforcement: set "
                        "enforcementAction: deny on the Gatekeeper constraint or failureAction: Enforce on the Kyverno "
                        "policy that uses it (the shipped ones audit)")  # fmt: skip
    if conversion.gatekeeper_match is not None:
        lost.append("spec.match: the constraint's match is carried by -o gatekeeper only; this policy checks every "
                    "object it is asked about (wider)")  # fmt: skip
    return lost


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (PEM keys) as literal blocks, as people write them."""


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


_Dumper.add_representer(str, _str)


def run(args: argparse.Namespace) -> int:
    docs = read_documents(args.filename)
    if len(docs) != 1:
        raise PolicyError(f"{args.filename}: expected one document, found {len(docs)}")
    conversion = convert_document(docs[0])
    lost = conversion.lost + not_in_the_output(conversion, args.output)
    sys.stdout.write(yaml.dump_all(outputs(conversion, args.output), Dumper=_Dumper, sort_keys=False))
    for item in lost:
        print(f"not carried over: {item}", file=sys.stderr)
    return EXIT_UNVERIFIED if lost else EXIT_OK
