"""Ready-to-apply admission policies, built from the shipped ones with a policy and a scope filled in.

The shipped signature policies under ``policies/`` are the templates: the
Gatekeeper ``Provider`` and sample ``K8sVerifyManifestSignature`` constraint
(``policies/gatekeeper/verify-manifest-signature/``), the Kyverno
``ClusterPolicy`` and the ``ValidatingPolicy``
(``policies/kyverno/verify-manifest-signature*/``). Each is read and only
these fields are replaced; their Rego, rules and CEL stay as shipped:

* the policy: the constraint's ``spec.parameters``; the ClusterPolicy's
  ``apiCall.data`` entry ``policy``; the ValidatingPolicy's ``policy``
  variable, as a CEL literal;
* the service CA: the Provider's ``spec.caBundle`` (base64 of the PEM); the
  ``apiCall.service.caBundle``. The ValidatingPolicy takes none: Kyverno's CEL
  ``http.Client(caBundle)`` returns a value no call accepts at run time
  (Kyverno 1.17 to 1.19), so it calls ``http.Post`` and the service CA goes
  into Kyverno's trust store instead (docs/quickstart-kyverno.md);
* kinds and namespaces: ``spec.match``; ``match...resources``;
  ``matchConstraints.resourceRules`` and ``namespaceSelector``;
* enforcement: ``enforcementAction: deny``; ``failureAction: Enforce``;
  ``validationActions: [Deny]``.

Kinds are matched with the subresources through which their objects change
and which the service must see (docs/policy.md, "Subresources"): ``status``
and the others carry the object itself, ``scale`` and ``binding`` carry a
``Scale`` and a ``Binding``, which the Gatekeeper constraint must name as
kinds of their own. Which built-in kind has which subresource is a v1.36 API
server's discovery (``tests/data/dryrun/discovery``).

Kyverno substitutes ``{{ ... }}`` variables and ``$(...)`` references in the
strings of a rule, ``apiCall.data`` included (kyverno/kyverno
``pkg/engine/variables/regex/regex.go``): a policy holding either would not
reach the service as written, so it is refused for the ClusterPolicy.
"""

from __future__ import annotations

import base64
import copy
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, PolicyError
from ..objects import DNS_LABEL
from ..resources import BUILTIN_KINDS, SCALABLE_KINDS

ENGINES = ("gatekeeper", "kyverno", "kyverno-cel", "webhook")
#: The shipped policies, relative to the policies folder.
SIGNATURE_GATEKEEPER = Path("gatekeeper/verify-manifest-signature")
SHIPPED = {
    "provider": SIGNATURE_GATEKEEPER / "provider.yaml",
    "constraint": SIGNATURE_GATEKEEPER / "samples/k8sverifymanifestsignature/constraint.yaml",
    "template": SIGNATURE_GATEKEEPER / "template.yaml",
    "kyverno": Path("kyverno/verify-manifest-signature/verify-manifest-signature.yaml"),
    "kyverno-cel": Path("kyverno/verify-manifest-signature-cel/verify-manifest-signature-cel.yaml"),
}
_PACKAGE = Path(__file__).resolve().parents[1]


def shipped_policies_dir() -> Path:
    """Where the shipped policies are: package data in a built wheel, else the repository's ``policies/``.

    The repository keeps them in ``policies/`` at its root, in the two policy
    libraries' layouts (Artifact Hub reads them there). A wheel carries the
    same files as package data: ``setup.py`` maps that folder to the package
    ``provider._policies``, so ``pip install .`` installs
    ``provider/_policies/{gatekeeper,kyverno}/...`` -- copied from ``policies/``
    at build time, never a second copy in the repository. A checkout and an
    editable install (which maps nothing into ``provider/``) read ``policies/``
    beside the package.
    """
    installed = _PACKAGE / "_policies"
    return installed if installed.is_dir() else _PACKAGE.parent / "policies"


#: The shipped policies of this installation (:func:`shipped_policies_dir`).
DEFAULT_POLICIES_DIR = shipped_policies_dir()

#: Built-in kinds served with a ``status`` subresource (v1.36 discovery): (group, kind).
STATUS_KINDS = frozenset(
    {
        ("", "Namespace"),
        ("", "Node"),
        ("", "PersistentVolume"),
        ("", "PersistentVolumeClaim"),
        ("", "Pod"),
        ("", "ReplicationController"),
        ("", "ResourceQuota"),
        ("", "Service"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("apiregistration.k8s.io", "APIService"),
        ("apps", "DaemonSet"),
        ("apps", "Deployment"),
        ("apps", "ReplicaSet"),
        ("apps", "StatefulSet"),
        ("autoscaling", "HorizontalPodAutoscaler"),
        ("batch", "CronJob"),
        ("batch", "Job"),
        ("certificates.k8s.io", "CertificateSigningRequest"),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
        ("networking.k8s.io", "Ingress"),
        ("networking.k8s.io", "ServiceCIDR"),
        ("policy", "PodDisruptionBudget"),
        ("resource.k8s.io", "ResourceClaim"),
        ("storage.k8s.io", "VolumeAttachment"),
    }
)
#: Other subresources that write the object or carry another kind's object the service must see
#: (docs/policy.md, "Subresources": verified, or denied unless the requester is exempt):
#: (group, kind) -> subresources. eviction, exec/attach/portforward/proxy and token never store anything.
OTHER_SUBRESOURCES: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "Pod"): ("ephemeralcontainers", "resize", "binding"),
    ("", "Namespace"): ("finalize",),
    ("certificates.k8s.io", "CertificateSigningRequest"): ("approval",),
}
#: Subresources whose request carries another kind's object: the Gatekeeper constraint must name it.
OBJECT_KINDS = {"scale": ("autoscaling", "Scale"), "binding": ("", "Binding")}
NAMESPACE_LABEL = "kubernetes.io/metadata.name"
#: Why the ValidatingPolicy carries no CA (Kyverno's CEL ``http.Client(ca)``: see the module docstring).
CEL_TAKES_NO_CA = (
    "kyverno-cel takes no CA: Kyverno's CEL http.Client(ca) cannot call (Kyverno 1.17 to 1.19), so the policy "
    "calls http.Post and Kyverno's admission controller must trust the service CA itself "
    "(manifests/scripts/ca-bundle.sh --kyverno-trust, docs/quickstart-kyverno.md)"
)
_KYVERNO_SUBSTITUTION = re.compile(r"\{\{|\$\(")


@dataclass(frozen=True)
class KindRef:
    """A kind to protect: built in, or a custom resource (``custom``; ``resource`` its plural, "" when not given)."""

    group: str
    kind: str
    resource: str
    custom: bool = False

    @property
    def subresources(self) -> tuple[str, ...]:
        if self.custom:
            # A CRD may serve status (it carries the object itself, so matching it is harmless where there is
            # none). Whether it serves scale only the CRD says, and matching Scale would take in every
            # Deployment's scale requests too: docs/cli.md says how to add it.
            return ("status",)
        key = (self.group, self.kind)
        found = (("status",) if key in STATUS_KINDS else ()) + (("scale",) if key in SCALABLE_KINDS else ())
        return found + OTHER_SUBRESOURCES.get(key, ())

    def describe(self) -> str:
        return f"{self.group}/{self.kind}" if self.group else self.kind


#: A custom resource's group and names, as the API server accepts them in a CustomResourceDefinition
#: (k8s.io/apiextensions-apiserver pkg/apis/apiextensions/validation/validation.go: the group a DNS-1123
#: subdomain "with at least one dot"; the kind a DNS-1035 label once lower-cased, "may have mixed case";
#: the plural a DNS-1035 label).
_CRD_GROUP = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+")
_CRD_KIND = re.compile(r"[A-Za-z]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?")
_CRD_PLURAL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


def _builtin_groups() -> frozenset[str]:
    return frozenset(group for group, _ in BUILTIN_KINDS)


def _nearest(text: str, choices: Iterable[str]) -> str | None:
    """The choice ``text`` most likely misspells (difflib's ratio, case aside), or None."""
    import difflib

    by_lower = {choice.lower(): choice for choice in choices}
    found = difflib.get_close_matches(text.lower(), list(by_lower), n=1, cutoff=0.75)
    return by_lower[found[0]] if found else None


def _custom_kind(text: str, group: str, kind: str) -> KindRef:
    kind, _, plural = kind.partition("=")
    if not _CRD_GROUP.fullmatch(group) or len(group) > 253:
        raise ConfigError(
            f"--match-kind {text}: {group!r} is not an API group (a custom resource's group is a DNS name with a dot, "
            "e.g. example.com/Widget)"
        )
    if not _CRD_KIND.fullmatch(kind):
        raise ConfigError(f"--match-kind {text}: {kind!r} is not a kind name (letters, digits and '-')")
    if plural and not _CRD_PLURAL.fullmatch(plural):
        raise ConfigError(f"--match-kind {text}: {plural!r} is not a resource name (lower case, e.g. widgets)")
    return KindRef(group, kind, plural, custom=True)


def parse_kinds(values: Iterable[str]) -> tuple[KindRef, ...]:
    """``--match-kind`` values, comma lists allowed.

    * ``Kind`` -- a built-in kind (``Deployment``; the plural, ``deployments``, and any case are taken too);
      in two groups it needs ``group/Kind`` (``core/Event`` for the core group);
    * ``group/Kind[=plural]`` -- in a built-in group, one of its kinds; in any other group a custom
      resource (``example.com/Widget``), its plural (``=widgets``) needed only by ``kyverno-cel``,
      whose ``resourceRules`` name resources, not kinds.

    A name that is neither is refused with the built-in kind it most likely misspells.
    """
    by_kind: dict[str, list[tuple[str, str]]] = {}
    by_resource: dict[str, list[tuple[str, str]]] = {}
    for (api_group, resource), builtin in BUILTIN_KINDS.items():
        by_kind.setdefault(builtin.lower(), []).append((api_group, builtin))
        by_resource.setdefault(resource, []).append((api_group, builtin))
    builtin_groups = _builtin_groups()
    found: list[KindRef] = []
    for value in values:
        for text in (part.strip() for part in value.split(",")):
            if not text:
                continue
            group: str | None = None
            kind = text
            if "/" in text:
                group, _, kind = text.rpartition("/")
                group = "" if group == "core" else group
                if group not in builtin_groups:
                    ref = _custom_kind(text, group, kind)
                    if ref not in found:
                        found.append(ref)
                    continue
            if "=" in kind:
                raise ConfigError(f"--match-kind {text}: '=plural' is for custom resources; {kind} is built in")
            known = by_kind.get(kind.lower()) or by_resource.get(kind.lower()) or []
            places = [p for p in known if group is None or p[0] == group]
            if not places:
                names = {k for (g, _), k in BUILTIN_KINDS.items() if group is None or g == group}
                guess = _nearest(kind, names)
                where = f" of group {group or 'core'}" if group is not None else ""
                hint = f"; did you mean {guess}?" if guess else ""
                custom = "" if group is not None else " (a custom resource: give its group, as example.com/Widget)"
                raise ConfigError(f"--match-kind {text}: not a built-in kind{where}{hint}{custom}")
            if len(places) > 1:
                choices = ", ".join(f"{g or 'core'}/{k}" for g, k in places)
                raise ConfigError(f"--match-kind {text}: {places[0][1]} is in several groups; give one of {choices}")
            api_group, builtin = places[0]
            resource = next(r for (g, r), k in BUILTIN_KINDS.items() if g == api_group and k == builtin)
            ref = KindRef(api_group, builtin, resource)
            if ref not in found:
                found.append(ref)
    if not found:
        raise ConfigError("--match-kind names no kind")
    return tuple(found)


# --- values as the engines read them ---------------------------------------------------------------


def _cel_string(text: str) -> str:
    """A CEL string literal (cel-spec langdef "String and Bytes Values"): printable ASCII as is, the rest escaped."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def cel_literal(value: Any, indent: int = 0) -> str:
    """``value`` (JSON data) as a CEL expression that evaluates to it.

    Every list item and map value is wrapped in ``dyn()``: a CEL list or map
    literal must otherwise hold values of one type, and a policy mixes strings,
    numbers, lists and maps.
    """
    pad, inner = "  " * indent, "  " * (indent + 1)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PolicyError(f"{value} has no CEL literal")
        return repr(value)
    if isinstance(value, str):
        return _cel_string(value)
    if isinstance(value, list):
        if not value:
            return "[]"
        items = ",\n".join(f"{inner}dyn({cel_literal(item, indent + 1)})" for item in value)
        return f"[\n{items}\n{pad}]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        entries = ",\n".join(
            f"{inner}{_cel_string(str(key))}: dyn({cel_literal(item, indent + 1)})" for key, item in value.items()
        )
        return f"{{\n{entries}\n{pad}}}"
    raise PolicyError(f"a {type(value).__name__} has no CEL literal")


def _refuse_kyverno_substitution(value: Any, where: str = "policy") -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _refuse_kyverno_substitution(key, where)
            _refuse_kyverno_substitution(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _refuse_kyverno_substitution(item, f"{where}[{index}]")
    elif isinstance(value, str) and _KYVERNO_SUBSTITUTION.search(value):
        raise PolicyError(
            f"{where}: Kyverno would substitute the '{{{{' or '$(' in {value[:60]!r} before calling the service; "
            "use the Gatekeeper or CEL policy, or change the value"
        )


def certificate_bundle(pem: bytes, what: str) -> str:
    """``pem`` checked to be one or more PEM certificates (the CA that signed the service's certificate)."""
    from cryptography import x509

    try:
        text = pem.decode("ascii")
        certificates = x509.load_pem_x509_certificates(pem)
    except (UnicodeDecodeError, ValueError) as exc:  # cryptography's text points at its FAQ, not at the file
        raise ConfigError(f"{what}: not a PEM CA certificate") from exc
    if not certificates or not text.lstrip().startswith("-----BEGIN CERTIFICATE-----"):
        raise ConfigError(f"{what}: not a PEM CA certificate")
    return text.strip() + "\n"


# --- the documents ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """What to build: the policy document (already accepted by :meth:`Policy.from_dict`) and the scope."""

    engine: str
    policy: dict[str, Any]
    enforce: bool = False
    #: None: the shipped policy's kinds (with their subresources).
    kinds: tuple[KindRef, ...] | None = None
    #: None: the shipped namespaces; (): every namespace.
    namespaces: tuple[str, ...] | None = None
    #: The service CA (PEM); None: no Provider (Gatekeeper), the shipped placeholder (ClusterPolicy), always
    #: None for the ValidatingPolicy (:data:`CEL_TAKES_NO_CA`).
    ca_pem: str | None = None


def load_shipped(root: Path, name: str) -> dict[str, Any]:
    import yaml

    path = root / SHIPPED[name]
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except FileNotFoundError:
        raise ConfigError(
            f"{path} not found: `policy` builds on the shipped policies, which this installation lacks "
            "(reinstall manifest-provider) or which --policies DIR does not hold"
        ) from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ConfigError(f"{path}: expected one YAML document")
    return dict(docs[0])


def build(request: Request, root: Path = DEFAULT_POLICIES_DIR) -> list[dict[str, Any]]:
    """The documents to apply, in order."""
    if request.engine == "gatekeeper":
        return _gatekeeper(request, root)
    if request.engine == "kyverno":
        return [_kyverno(request, root)]
    if request.engine == "kyverno-cel":
        return [_kyverno_cel(request, root)]
    raise ConfigError(f"unknown engine {request.engine!r}; choose one of {', '.join(ENGINES)}")


def _gatekeeper(request: Request, root: Path) -> list[dict[str, Any]]:
    docs = []
    if request.ca_pem is not None:
        provider = load_shipped(root, "provider")
        spec = dict(provider.get("spec") or {})
        # Gatekeeper wants the base64 of the PEM (StdEncoding): what ca-bundle.sh --provider writes.
        provider["spec"] = {**spec, "caBundle": base64.b64encode(request.ca_pem.encode()).decode()}
        docs.append(provider)
    constraint = load_shipped(root, "constraint")
    spec = constraint["spec"]
    if request.enforce:
        spec["enforcementAction"] = "deny"
    match = spec["match"]
    if request.kinds is not None:
        match["kinds"] = _gatekeeper_kinds(request.kinds)
    if request.namespaces is not None:
        if request.namespaces:
            match["namespaces"] = list(request.namespaces)
        else:
            match.pop("namespaces", None)
    spec["parameters"] = copy.deepcopy(request.policy)
    docs.append(constraint)
    return docs


def _gatekeeper_kinds(kinds: tuple[KindRef, ...]) -> list[dict[str, Any]]:
    """Constraint kinds by group: each kind, and the kinds of the objects its subresources carry."""
    by_group: dict[str, list[str]] = {}
    for ref in kinds:
        pairs = [(ref.group, ref.kind)] + [OBJECT_KINDS[s] for s in ref.subresources if s in OBJECT_KINDS]
        for group, kind in pairs:
            listed = by_group.setdefault(group, [])
            if kind not in listed:
                listed.append(kind)
    return [{"apiGroups": [group], "kinds": kinds} for group, kinds in by_group.items()]


#: The Helm values that say which requests Gatekeeper's webhook is sent (relative to the repository).
GATEKEEPER_VALUES = Path("manifests/overlays/gatekeeper/gatekeeper-values.yaml")


def unsent_subresources(kinds: tuple[KindRef, ...], values_file: Path) -> list[str] | None:
    """``resource/subresource`` writes the constraint matches but Gatekeeper's webhook rules do not send it.

    The rules are ``validatingWebhookCustomRules`` of the Helm values; a
    resource entry matches as the API server matches it (k8s.io/apiserver
    ``rules.Matcher``: ``x/y``, ``x/*``, ``*/y``, ``*/*``). None when the file
    cannot be read (an installed package has no ``manifests/``): the caller
    then names every subresource Gatekeeper must be sent.
    """
    import yaml

    try:
        values = yaml.safe_load(values_file.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    entries = {
        entry
        for rule in values.get("validatingWebhookCustomRules") or []
        if {"CREATE", "UPDATE", "*"} & set(rule.get("operations") or [])
        for entry in rule.get("resources") or []
    }
    missing = []
    for ref in kinds:
        for sub in ref.subresources:
            if not entries & {f"{ref.resource or '*'}/{sub}", f"{ref.resource or '*'}/*", f"*/{sub}", "*/*"}:
                missing.append(subresource_name(ref, sub))
    return missing


def subresource_name(ref: KindRef, sub: str) -> str:
    """``deployments/scale``; a custom resource without its plural: ``<plural of example.com/Widget>/status``."""
    return f"{ref.resource}/{sub}" if ref.resource else f"<plural of {ref.describe()}>/{sub}"


def _kyverno_selectors(ref: KindRef) -> list[str]:
    """Kyverno kind selectors (kyverno pkg/utils/kube/kind.go ``ParseKindSelector``).

    ``Kind[/sub]`` for the core group, ``group/*/Kind[/sub]`` for the others (any version).
    """
    base = ref.kind if ref.group == "" else f"{ref.group}/*/{ref.kind}"
    return [base] + [f"{base}/{sub}" for sub in ref.subresources]


def _kyverno(request: Request, root: Path) -> dict[str, Any]:
    _refuse_kyverno_substitution(request.policy)
    doc = load_shipped(root, "kyverno")
    calls = 0
    for rule in doc["spec"]["rules"]:
        if request.enforce:
            rule["validate"]["failureAction"] = "Enforce"
        for block in rule["match"].get("any", []) + rule["match"].get("all", []):
            resources = block["resources"]
            if request.kinds is not None:
                resources["kinds"] = [s for ref in request.kinds for s in _kyverno_selectors(ref)]
            if request.namespaces is not None:
                if request.namespaces:
                    resources["namespaces"] = list(request.namespaces)
                else:
                    resources.pop("namespaces", None)
        for entry in rule.get("context", []):
            call = entry.get("apiCall")
            if not call:
                continue
            data = [item for item in call.get("data", []) if item.get("key") == "policy"]
            if len(data) != 1:
                raise ConfigError(f"{SHIPPED['kyverno']}: expected one apiCall data entry named policy")
            data[0]["value"] = copy.deepcopy(request.policy)
            if request.ca_pem is not None:
                call["service"]["caBundle"] = request.ca_pem
            calls += 1
    if calls != 1:
        raise ConfigError(f"{SHIPPED['kyverno']}: expected one service call, found {calls}")
    return doc


def _kyverno_cel(request: Request, root: Path) -> dict[str, Any]:
    doc = load_shipped(root, "kyverno-cel")
    spec = doc["spec"]
    if request.enforce:
        spec["validationActions"] = ["Deny"]
    if request.ca_pem is not None:
        raise ConfigError(CEL_TAKES_NO_CA)
    variables = {v["name"]: v for v in spec["variables"]}
    if "policy" not in variables:
        raise ConfigError(f"{SHIPPED['kyverno-cel']}: expected the variable policy")
    variables["policy"]["expression"] = cel_literal(request.policy)
    constraints = spec["matchConstraints"]
    if request.kinds is not None:
        operations = constraints["resourceRules"][0].get("operations", ["CREATE", "UPDATE"])
        by_group: dict[str, list[str]] = {}
        for ref in request.kinds:
            if not ref.resource:
                raise ConfigError(
                    f"--match-kind {ref.describe()}: kyverno-cel matches resources by name (resourceRules), and only "
                    f"the CustomResourceDefinition knows a custom resource's: give it as {ref.describe()}=PLURAL "
                    f"(kubectl api-resources --api-group {ref.group})"
                )
            by_group.setdefault(ref.group, []).extend(
                [ref.resource] + [f"{ref.resource}/{sub}" for sub in ref.subresources]
            )
        constraints["resourceRules"] = [
            {"apiGroups": [group], "apiVersions": ["*"], "operations": list(operations), "resources": resources}
            for group, resources in by_group.items()
        ]
    if request.namespaces is not None:
        if request.namespaces:
            constraints["namespaceSelector"] = {
                "matchExpressions": [{"key": NAMESPACE_LABEL, "operator": "In", "values": list(request.namespaces)}]
            }
        else:
            constraints.pop("namespaceSelector", None)
    return doc


def dump(docs: list[dict[str, Any]], header: str) -> str:
    """YAML documents, multi-line strings (PEM keys, CEL) as literal blocks, the way people write them."""
    import yaml

    class BlockDumper(yaml.SafeDumper):
        pass

    def represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    BlockDumper.add_representer(str, represent_str)
    body = yaml.dump_all(docs, Dumper=BlockDumper, sort_keys=False, width=2**31 - 1, explicit_start=True)
    return header + body


# --- what was written -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """What a generated policy matches, read back from the documents written (not from the flags)."""

    #: (group, kind) -> subresources matched; group "*": any group (a Kyverno selector without one).
    kinds: dict[tuple[str, str], tuple[str, ...]]
    #: The namespaces named; None: every namespace (or a selector the CLI did not write: ``selector``).
    namespaces: tuple[str, ...] | None
    excluded: tuple[str, ...] = ()
    selector: str = ""

    def includes(self, namespace: str) -> bool:
        """Whether objects in ``namespace`` are matched (a Gatekeeper ``prefix*`` pattern included)."""
        import fnmatch

        def named(patterns: tuple[str, ...]) -> bool:
            return any(fnmatch.fnmatchcase(namespace, p) if p.endswith("*") else p == namespace for p in patterns)

        if self.selector or named(self.excluded):
            return False
        return self.namespaces is None or named(self.namespaces)

    def describe(self) -> str:
        kinds = []
        for (group, kind), subs in self.kinds.items():
            name = kind if group in ("", "*") else f"{group}/{kind}"
            kinds.append(f"{name} ({', '.join(subs)})" if subs else name)
        if self.selector:
            where = f"the namespaces {self.selector} selects"
        elif self.namespaces is None:
            where = "every namespace"
        else:
            where = "namespace" + ("s " if len(self.namespaces) > 1 else " ") + ", ".join(self.namespaces)
        if self.excluded:
            where += " except " + ", ".join(self.excluded)
        return f"kinds {', '.join(kinds) or '(none)'} in {where}"


def _add_kind(kinds: dict[tuple[str, str], tuple[str, ...]], group: str, kind: str, sub: str) -> None:
    subs = kinds.setdefault((group, kind), ())
    if sub and sub not in subs:
        kinds[(group, kind)] = (*subs, sub)


def kyverno_kind_selector(selector: str) -> tuple[str, str, str, str]:
    """(group, version, kind, subresource) of a Kyverno ``kinds`` entry, ``*`` where it names none.

    The grammar of kyverno/kyverno ``pkg/utils/kube/kind.go`` ``ParseKindSelector``
    (v1.19.0): ``Kind``, ``Kind/sub``, ``version/Kind``, ``version/Kind/sub``,
    ``group/version/Kind``, ``group/version/Kind/sub``; a ``.`` in the last part
    also separates a subresource. A group needs the version part: a two-part
    ``example.com/Widget`` reads as kind ``example.com``, subresource ``Widget``.
    """
    from ._convert_kyverno import parse_kind_selector  # the one reading of that grammar

    return parse_kind_selector(selector) or ("", "", "", "")


def written_scope(engine: str, docs: list[dict[str, Any]]) -> Scope:
    """The kinds and namespaces the generated documents match, as each engine reads them."""
    kinds: dict[tuple[str, str], tuple[str, ...]] = {}
    if engine == "gatekeeper":
        match = docs[-1]["spec"].get("match") or {}
        for entry in match.get("kinds") or []:
            for group in entry.get("apiGroups") or ["*"]:
                for kind in entry.get("kinds") or ["*"]:
                    _add_kind(kinds, group, kind, "")
        named = match.get("namespaces")
        return Scope(kinds, tuple(named) if named else None, tuple(match.get("excludedNamespaces") or ()))
    if engine == "kyverno":
        namespaces: list[str] = []
        every = False
        for rule in docs[0]["spec"]["rules"]:
            for block in rule["match"].get("any", []) + rule["match"].get("all", []):
                resources = block.get("resources") or {}
                for selector in resources.get("kinds") or []:
                    group, _, kind, sub = kyverno_kind_selector(selector)
                    _add_kind(kinds, group, kind, sub)
                if resources.get("namespaces"):
                    namespaces += [n for n in resources["namespaces"] if n not in namespaces]
                else:
                    every = True
        return Scope(kinds, None if every or not namespaces else tuple(namespaces))
    spec = docs[0]["spec"]
    constraints = spec.get("matchConstraints") or {}
    by_resource = {(g, r): k for (g, r), k in BUILTIN_KINDS.items()}
    for rule in constraints.get("resourceRules") or []:
        for group in rule.get("apiGroups") or ["*"]:
            for entry in rule.get("resources") or []:
                resource, _, sub = entry.partition("/")
                _add_kind(kinds, group, by_resource.get((group, resource), resource), sub)
    selector = constraints.get("namespaceSelector")
    if not selector:
        return Scope(kinds, None)
    expressions = selector.get("matchExpressions") or []
    labels = selector.get("matchLabels") or {}
    if not expressions and set(labels) == {NAMESPACE_LABEL}:
        return Scope(kinds, (labels[NAMESPACE_LABEL],))
    if (
        not labels
        and len(expressions) == 1
        and expressions[0].get("key") == NAMESPACE_LABEL
        and expressions[0].get("operator") in ("In", "NotIn")
    ):
        values = tuple(expressions[0].get("values") or ())
        return Scope(kinds, values) if expressions[0]["operator"] == "In" else Scope(kinds, None, values)
    import json

    return Scope(kinds, None, selector=json.dumps(selector, sort_keys=True))


_SERVICE_HOST = re.compile(r"https://([^/:'\"\s]+)")


def service_url(engine: str, docs: list[dict[str, Any]], root: Path) -> str:
    """The URL the generated policy calls ("" when it names none); Gatekeeper's is the shipped Provider's."""
    text = ""
    if engine == "gatekeeper":
        providers = [d for d in docs if d.get("kind") == "Provider"] or [load_shipped(root, "provider")]
        text = str((providers[0].get("spec") or {}).get("url", ""))
    elif engine == "kyverno":
        text = " ".join(
            str(((entry.get("apiCall") or {}).get("service") or {}).get("url", ""))
            for rule in docs[0]["spec"]["rules"]
            for entry in rule.get("context", [])
        )
    else:
        text = " ".join(str(v.get("expression", "")) for v in docs[0]["spec"].get("variables", []))
    found = _SERVICE_HOST.search(text)
    return found.group(0) if found else ""


def service_namespace(url: str) -> str | None:
    """The namespace of an in-cluster service URL (``https://NAME.NAMESPACE[.svc[.cluster.local]]...``), else None."""
    from urllib.parse import urlsplit

    labels = (urlsplit(url).hostname or "").split(".")
    if len(labels) == 2 or (len(labels) >= 3 and labels[2] == "svc"):
        return labels[1]
    return None


def parse_namespaces(values: Iterable[str]) -> tuple[str, ...]:
    names = tuple(part.strip() for value in values for part in value.split(","))
    if "*" in names:
        if len(names) > 1:
            raise ConfigError("--match-namespace '*' means every namespace; give it alone")
        return ()
    for name in names:
        if not DNS_LABEL.match(name):
            raise ConfigError(f"--match-namespace {name!r}: not a namespace name (DNS-1123 label)")
    return names
