"""``manifest-provider convert-policy``: another verifier's policy as this project's, and what did not carry over.

Reads one of:

* a Kyverno ``ClusterPolicy``/``Policy`` with a ``validate.manifests`` rule
  (CRD ``kyverno.io_clusterpolicies.yaml``): ``attestors``, ``ignoreFields``,
  ``dryRun``, ``annotationDomain``, ``repository``;
* an Integrity Shield ``ManifestIntegrityConstraint`` (stolostron
  ``shield/pkg/config/parameter.go``): ``parameters.signers``,
  ``ignoreFields``, ``skipObjects``, ``objectSelector``, ``skipUsers``,
  ``signatureRef``;
* a ``kubectl sigstore verify-resource`` config (``pkg/k8smanifest/option.go``:
  ``ignoreFields``, ``signers``, ``skipObjects``, ``annotationConfig``).

and prints the policy (``-o policy``), a Gatekeeper constraint for the
``verify-manifest-signature`` template, or a Kyverno policy calling the
service. Whatever has no equivalent (keys kept in Secrets or KMS, Rekor and
CT log settings, certificate chains, a repository Kyverno reads for every
object) is listed on standard error and the exit code is 3, so nothing is
dropped silently; the printed policy is then incomplete until edited.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml

from ..errors import PolicyError
from . import EXIT_OK, EXIT_UNVERIFIED
from ._common import command_parser, read_documents

HELP = "convert a Kyverno manifests rule, an Integrity Shield constraint or a kubectl sigstore config to a policy"


EXAMPLES = (
    "manifest-provider convert-policy -f kyverno-policy.yaml > policy.yaml",
    "manifest-provider convert-policy -f kyverno-policy.yaml -o gatekeeper > constraint-converted.yaml",
    "manifest-provider convert-policy -f integrity-shield-constraint.yaml   # exit 3 when something did not carry over",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = command_parser(
        sub, "convert-policy", HELP, EXAMPLES, description=HELP + " (exit 3 when something did not carry over)"
    )
    p.add_argument("-f", "--filename", required=True, metavar="FILE", help="the policy to convert (- for stdin)")
    p.add_argument(
        "-o", "--output", choices=("policy", "gatekeeper", "kyverno"), default="policy",
        help="policy (default): this project's policy; gatekeeper: a K8sVerifyManifestSignature constraint; "
        "kyverno: the converted policy as a Kyverno data entry",
    )  # fmt: skip
    p.set_defaults(run=run)


def _keys_of(entry: dict[str, Any], where: str, lost: list[str]) -> dict[str, Any] | None:
    keys = entry.get("keys")
    if not isinstance(keys, dict):
        return None
    for field in ("kms", "secret", "rekor", "ctlog", "signatureAlgorithm"):
        if field in keys:
            lost.append(f"{where}.keys.{field}: keys from KMS or Secrets and log settings are not read; paste the PEM")
    public = keys.get("publicKeys")
    if isinstance(public, str) and "-----BEGIN" in public:
        return {"keys": {"publicKeys": public}}
    if public:
        lost.append(f"{where}.keys.publicKeys: {str(public)[:60]!r} is a reference, not a key; paste the PEM")
    return None


def _entry(entry: Any, where: str, lost: list[str]) -> dict[str, Any] | None:
    if not isinstance(entry, dict):
        lost.append(f"{where}: not a mapping")
        return None
    if entry.get("repository"):
        lost.append(f"{where}.repository: a bundle Kyverno reads for every object; list its repository in "
                    "resourceBundleRef.repositories and annotate the objects")  # fmt: skip
    if entry.get("annotations"):
        lost.append(f"{where}.annotations: required object annotations are not a signer; use a policy engine rule")
    if "attestor" in entry:
        nested = _set(entry["attestor"], f"{where}.attestor", lost)
        return {"attestor": nested} if nested else None
    if "keys" in entry:
        return _keys_of(entry, where, lost)
    if isinstance(entry.get("certificates"), dict):
        cert = entry["certificates"]
        for field in ("certChain", "rekor", "ctlog"):
            if field in cert:
                lost.append(f"{where}.certificates.{field}: not checked here; use keyless.roots for a CA")
        return {"certificates": {"cert": cert["cert"]}} if cert.get("cert") else None
    if isinstance(entry.get("keyless"), dict):
        keyless = entry["keyless"]
        kept = {k: keyless[k] for k in ("subject", "subjectRegExp", "issuer", "issuerRegExp", "roots") if k in keyless}
        for field in sorted(set(keyless) - set(kept)):
            lost.append(f"{where}.keyless.{field}: not supported")
        return {"keyless": kept}
    lost.append(f"{where}: no keys, certificates, keyless or attestor")
    return None


def _set(data: Any, where: str, lost: list[str]) -> dict[str, Any] | None:
    if not isinstance(data, dict):
        lost.append(f"{where}: not a mapping")
        return None
    converted_entries = (_entry(e, f"{where}.entries[{i}]", lost) for i, e in enumerate(data.get("entries") or []))
    entries = [e for e in converted_entries if e]
    if not entries:
        return None
    converted: dict[str, Any] = {"entries": entries}
    if "count" in data:
        converted["count"] = min(int(data["count"]), len(entries))
    return converted


def from_kyverno(doc: dict[str, Any], lost: list[str]) -> dict[str, Any]:
    rules = [
        r
        for r in (doc.get("spec") or {}).get("rules") or []
        if isinstance((r.get("validate") or {}).get("manifests"), dict)
    ]
    if not rules:
        raise PolicyError("the Kyverno policy has no validate.manifests rule")
    if len(rules) > 1:
        lost.append(f"rules: {len(rules)} manifests rules; only the first ({rules[0].get('name')}) is converted")
    manifests = rules[0]["validate"]["manifests"]
    where = f"rules[{rules[0].get('name')}].validate.manifests"
    policy: dict[str, Any] = {}
    sets = [
        s for i, a in enumerate(manifests.get("attestors") or []) if (s := _set(a, f"{where}.attestors[{i}]", lost))
    ]
    if sets:
        policy["attestors"] = sets
    if manifests.get("ignoreFields"):
        policy["ignoreFields"] = manifests["ignoreFields"]
    dry_run = manifests.get("dryRun") or {}
    if dry_run.get("enable"):
        policy["dryRun"] = {
            "enabled": True,
            **({"namespace": dry_run["namespace"]} if dry_run.get("namespace") else {}),
        }
    if manifests.get("annotationDomain"):
        policy["annotationDomain"] = manifests["annotationDomain"]
    if manifests.get("repository"):
        lost.append(f"{where}.repository: Kyverno reads this bundle for every object; list its repository in "
                    "resourceBundleRef.repositories and annotate the objects with resourceBundleRef")  # fmt: skip
    policy["defaults"] = ["k8s-manifest-sigstore", "common", "kyverno"]
    return policy


def _common(params: dict[str, Any], policy: dict[str, Any], lost: list[str], where: str) -> None:
    if params.get("signers"):
        policy["signers"] = [s for s in params["signers"] if isinstance(s, str)]
    fields = params.get("ignoreFields") or params.get("ignoreAttrs")
    if fields:
        policy["ignoreFields"] = fields
    if params.get("skipObjects"):
        policy["skipObjects"] = params["skipObjects"]
    if params.get("skipUsers"):
        policy["skipUsers"] = [{k: v for k, v in u.items() if k in ("users", "objects")} for u in params["skipUsers"]]
    domain = (params.get("annotationConfig") or {}).get("annotationKeyDomain") or params.get("annotationKeyDomain")
    if domain:
        policy["annotationDomain"] = domain
    for field in ("keyConfigs", "imageProfile", "inScopeUsers", "action", "maxResourceManifestNum", "getProvenance"):
        if params.get(field):
            lost.append(f"{where}.{field}: no equivalent (keys: give them with keys or verify --key)")


def from_integrity_shield(doc: dict[str, Any], lost: list[str]) -> dict[str, Any]:
    params = (doc.get("spec") or {}).get("parameters") or {}
    policy: dict[str, Any] = {}
    _common(params, policy, lost, "spec.parameters")
    if params.get("objectSelector"):
        policy["inScopeObjects"] = params["objectSelector"]
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
    match = (doc.get("spec") or {}).get("match")
    if match:
        lost.append("spec.match: the constraint's match block belongs to the Gatekeeper constraint (-o gatekeeper)")
    return policy


def from_kubectl_sigstore(doc: dict[str, Any], lost: list[str]) -> dict[str, Any]:
    policy: dict[str, Any] = {}
    _common(doc, policy, lost, "config")
    return policy


def convert(doc: Any) -> tuple[dict[str, Any], list[str]]:
    """The converted policy and what did not carry over."""
    if not isinstance(doc, dict):
        raise PolicyError("the input is not a mapping")
    lost: list[str] = []
    kind = doc.get("kind")
    if kind in ("ClusterPolicy", "Policy") and str(doc.get("apiVersion", "")).startswith("kyverno.io/"):
        policy = from_kyverno(doc, lost)
    elif kind == "ManifestIntegrityConstraint":
        policy = from_integrity_shield(doc, lost)
    elif kind is None:
        policy = from_kubectl_sigstore(doc, lost)
    else:
        raise PolicyError(f"{str(kind)[:60]} is not a Kyverno policy, a ManifestIntegrityConstraint or a kubectl "
                          "sigstore config")  # fmt: skip
    if not any(k in policy for k in ("keys", "signers", "attestors")):
        lost.append("no keys or signers carried over: add keys (a policy without them denies everything)")
    return policy, lost


def run(args: argparse.Namespace) -> int:
    docs = read_documents(args.filename)
    if len(docs) != 1:
        raise PolicyError(f"{args.filename}: expected one document, found {len(docs)}")
    policy, lost = convert(docs[0])
    if args.output == "gatekeeper":
        out: Any = {"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "K8sVerifyManifestSignature",
                    "metadata": {"name": "converted"}, "spec": {"parameters": policy}}  # fmt: skip
    elif args.output == "kyverno":
        out = {"policy": policy}
    else:
        out = policy
    sys.stdout.write(yaml.safe_dump(out, sort_keys=False))
    for item in lost:
        print(f"not carried over: {item}", file=sys.stderr)
    return EXIT_UNVERIFIED if lost else EXIT_OK
