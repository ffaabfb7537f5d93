"""The one policy schema every entry point speaks.

A policy arrives as a mapping: a CLI ``--config`` file, Gatekeeper constraint
parameters, a Kyverno ``data`` entry. :meth:`Policy.from_dict` validates it
completely -- unknown fields, wrong types and impossible combinations are a
:class:`~provider.errors.PolicyError`, because a typo must never weaken a
policy -- and compiles it (keys loaded, patterns compiled) once.

Reference: ``docs/policy.md``.

Fields (camelCase on the wire)::

    keys: [PEM | {publicKey: PEM, name: str} | {openpgpKeyring: base64, name: str}
           | k8s://NS/NAME | {secretRef: {namespace, name, key}, name: str}]
                                                 # each PEM block / OpenPGP certificate is one key;
                                                 # a Secret holds one (provider/keys/refs.py)
    signers: [{subject | subjectRegExp, issuer | issuerRegExp, roots}]  # keyless / certificates
    keyOperation: AtLeastOne | MustAll           # default AtLeastOne
    threshold: N                                 # at least N distinct keys/signers
    trustedRoot: ...                             # sigstore TrustedRoot for keyless signers
    annotationDomain: cosign.sigstore.dev
    ignoreFields: [{objects: [ObjectRef], fields: [pattern]}]
    sensitiveFields: [{objects: [ObjectRef], fields: [pattern]}]  # never quoted in a verdict (Secret data always)
    skipObjects: [ObjectRef]
    inScopeObjects: [ObjectRef]                  # empty = every object is in scope
    skipUsers: [{users: [pattern], groups: [pattern], operations: [CREATE|UPDATE|DELETE|CONNECT],
                 objects: [ObjectRef], fields: [pattern]}]   # an exemption; fields: UPDATE within them only
    dryRun: {enabled: bool, namespace: str}
    defaults: [k8s-manifest-sigstore, common, kyverno, argocd, flux, helm, openshift]   # built-in profiles
    unsafeUnanchoredIgnoreFields: false          # upstream's regex matching (opt-in)
    attestors: [{count, name, entries: [{keys | certificates | keyless | attestor}]}]
                                                 # nested signer sets instead of keys/signers (policy/attestors.py)
    resourceBundleRef: {repositories: [prefix], timeoutSeconds, pullSecrets: [{namespace, name, key}]}
                                                 # OCI resource bundles (signatures/sources.py, oci/auth.py)
    signatureResourceRef: k8s://ConfigMap/NS/NAME  # message and signature kept in a ConfigMap
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar

from ..bounds import SERVICE, Bounds
from ..compare.controlplane import CONTROL_PLANE_OBJECTS, Written
from ..compare.diff import FieldTrie, IgnoreSet, Segment, diff, parse_field_pattern, unanchored_matcher
from ..compare.kindschema import object_shape
from ..compare.stamps import STAMPS, Stamp
from ..errors import PolicyError
from ..keys.pem import PublicKey
from ..keys.refs import SecretKeyRef, check_allowed, is_key_reference, parse_key_reference, secret_ref_from_dict
from ..keys.trusted import is_openpgp_key, load_trusted_keys
from ..limits import DEFAULT_LIMITS, Limits
from ..objects import NamePattern, ObjectIdentity, ObjectRef
from ..parsing import load_yaml_stream
from ..readers import check_fields, read_list, read_str
from ..regexes import PolicyRegex
from ..resources import BUILTIN_KINDS, SCALABLE_KINDS
from ..review import Review
from ..signatures.envelope import DEFAULT_DOMAIN
from ..signatures.sources import BundleOptions, ConfigMapRef
from .attestors import AnchorSet, Leaf, parse_attestors, read_keyring

if TYPE_CHECKING:
    from ..keyless.identity import SignerSpec
    from ..keyless.trust import TrustRoot
    from ..keys.openpgp import OpenPGPKey

KeyOperation = Literal["AtLeastOne", "MustAll"]
KEY_OPERATIONS: tuple[KeyOperation, ...] = ("AtLeastOne", "MustAll")

#: Built-in profiles, shipped in ``provider/policy/profiles/<name>.yaml``.
PROFILES = ("k8s-manifest-sigstore", "common", "kyverno", "argocd", "flux", "helm", "openshift")
DEFAULT_PROFILES = ("k8s-manifest-sigstore", "common")

_DOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")

_POLICY_FIELDS = (
    "keys", "signers", "keyOperation", "threshold", "trustedRoot", "annotationDomain",
    "ignoreFields", "sensitiveFields", "skipObjects", "inScopeObjects", "skipUsers", "dryRun", "defaults",
    "unsafeUnanchoredIgnoreFields", "attestors", "resourceBundleRef", "signatureResourceRef",
)  # fmt: skip


def _refs(value: Any, where: str) -> tuple[ObjectRef, ...]:
    return tuple(ObjectRef.from_dict(item, f"{where}[{i}]") for i, item in enumerate(read_list(value, where)))


#: The fields of an object reference; a ``skipObjects`` entry must narrow at least one of them.
_REF_FIELDS = ("group", "version", "kind", "name", "namespace", "subresource")


def _skip_refs(value: Any, where: str) -> tuple[ObjectRef, ...]:
    """``skipObjects``: as :func:`_refs`, but an entry that matches every object is refused.

    ``{}`` (a template that rendered nothing, a stray ``- {}``) or ``{kind: "*"}`` would switch
    verification off for the whole cluster -- the mistake ``skipUsers`` already refuses for users.
    """
    refs = _refs(value, where)
    for i, ref in enumerate(refs):
        if all(getattr(ref, name).matches_anything for name in _REF_FIELDS):
            raise PolicyError(
                f"{where}[{i}]: matches every object, so nothing would be verified; name the objects to skip "
                "(kind and group, name, namespace)"
            )
    return refs


# --- rule types -------------------------------------------------------------------


def _wildcards_only(segments: tuple[Segment, ...]) -> bool:
    """Whether a field pattern is made of wildcards alone (``*``, ``**``, ``*.*``, ``[]``): every field at its depth."""
    return all(
        kind in ("star", "any-index") or (kind == "glob" and not str(value).strip("*")) for kind, value in segments
    )


def _narrow_field_pattern(text: str, where: str) -> tuple[Segment, ...]:
    """A field pattern that ignores or exempts: refused when it is wildcards alone.

    ``*`` (or ``*.*``) covers every field of the object -- its whole content -- so an ignore rule or an
    exemption holding it would let anything through where the author meant one field.
    """
    segments = parse_field_pattern(text, where)
    if _wildcards_only(segments):
        raise PolicyError(
            f"{where}: {text.strip()[:60]!r} is wildcards alone and covers every field of the object; name the "
            "fields (skipObjects or skipUsers skip whole objects, on purpose)"
        )
    return segments


@dataclass(frozen=True)
class IgnoreRule:
    objects: tuple[ObjectRef, ...]
    fields: tuple[str, ...]
    segments: tuple[tuple[Segment, ...], ...] = field(repr=False)

    @classmethod
    def from_dict(cls, data: Any, where: str, *, widens: bool = True) -> IgnoreRule:
        """``widens``: the rule lets differences through (``ignoreFields``), so wildcard-only patterns are refused;
        ``sensitiveFields`` only hides values, and may name every field."""
        data = check_fields(data, where, ("objects", "fields"))
        fields = tuple(
            read_str(f, f"{where}.fields[{i}]") for i, f in enumerate(read_list(data.get("fields"), f"{where}.fields"))
        )
        if not fields:
            raise PolicyError(f"{where}.fields: at least one field pattern is required")
        parse = _narrow_field_pattern if widens else parse_field_pattern
        segments = tuple(parse(f, f"{where}.fields[{i}]") for i, f in enumerate(fields))
        # No ``objects`` means every object, as upstream reads it.
        return cls(_refs(data.get("objects"), f"{where}.objects"), fields, segments)

    def applies_to(self, ident: ObjectIdentity) -> bool:
        return not self.objects or any(ref.matches(ident) for ref in self.objects)


#: Admission operations an exemption may name (admission.k8s.io/v1 Operation).
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
#: A service account's user name: ``system:serviceaccount:<namespace>:<name>``.
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
#: What every update changes by itself and no exemption has to name: the API
#: server's own bookkeeping (it bumps ``generation`` on a spec change and records
#: the writer in ``managedFields``; ``resourceVersion`` is the optimistic lock).
BOOKKEEPING_FIELDS = ("metadata.resourceVersion", "metadata.managedFields", "metadata.generation")


def service_account_groups(username: str) -> tuple[str, ...]:
    """The groups the API server's service-account authenticator always gives ``username``, or () for other users."""
    if not username.startswith(SERVICE_ACCOUNT_PREFIX):
        return ()
    namespace = username[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")[0]
    return ("system:serviceaccounts", f"system:serviceaccounts:{namespace}")


@dataclass(frozen=True)
class UserRule:
    """An exemption: requests by these users (or groups), doing these operations on these objects, pass unsigned.

    Every criterion given must hold (``docs/policy.md``, "Exemptions"):

    * **who** -- a listed user and/or a member of a listed group. A user named
      like a service account must also carry the service-account groups the API
      server gives every real one (``system:serviceaccounts`` and
      ``system:serviceaccounts:<namespace>``): a client certificate or token
      user that only borrows the name is not exempted;
    * **which operations** -- ``operations`` (default: all);
    * **which objects** -- ``objects`` by group, kind, name, namespace and
      subresource (default: all);
    * **which fields** -- with ``fields``, the entry covers an UPDATE only, and
      only when the object differs from the request's ``oldObject`` in those
      fields alone (plus the API server's bookkeeping): a trusted controller
      changing anything beyond its job is verified like anyone else.
    """

    users: tuple[NamePattern, ...]
    groups: tuple[NamePattern, ...]
    objects: tuple[ObjectRef, ...]
    description: str = ""
    operations: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    #: The ignore set for ``fields`` plus the bookkeeping fields (None without ``fields``).
    changes: IgnoreSet | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Any, where: str) -> UserRule:
        data = check_fields(data, where, ("users", "groups", "objects", "operations", "fields", "description"))
        users = tuple(
            NamePattern.compile(u, f"{where}.users[{i}]", spaces=True)
            for i, u in enumerate(read_list(data.get("users"), f"{where}.users"))
        )
        groups = tuple(
            NamePattern.compile(g, f"{where}.groups[{i}]", spaces=True)
            for i, g in enumerate(read_list(data.get("groups"), f"{where}.groups"))
        )
        if not users and not groups:
            raise PolicyError(f"{where}: name at least one user or group; an entry without them would skip everyone")
        for pattern in users + groups:
            if pattern.matches_anything:
                raise PolicyError(f"{where}: pattern {pattern.text!r} matches every user; list the users to skip")
        operations = tuple(
            read_str(o, f"{where}.operations[{i}]")
            for i, o in enumerate(read_list(data.get("operations"), f"{where}.operations"))
        )
        if "operations" in data and not operations:
            raise PolicyError(f"{where}.operations: empty; leave the field out to cover every operation")
        for operation in operations:
            if operation not in OPERATIONS:
                raise PolicyError(f"{where}.operations: {operation[:20]!r} is not one of {', '.join(OPERATIONS)}")
        fields = tuple(
            read_str(f, f"{where}.fields[{i}]") for i, f in enumerate(read_list(data.get("fields"), f"{where}.fields"))
        )
        changes = None
        if "fields" in data:
            if not fields:
                raise PolicyError(f"{where}.fields: empty; an exemption for no field would exempt nothing")
            if operations not in ((), ("UPDATE",)):
                raise PolicyError(
                    f"{where}: fields scope an UPDATE (a change to an existing object); give operations [UPDATE] or "
                    "leave it out"
                )
            operations = ("UPDATE",)
            segments = tuple(
                _narrow_field_pattern(f, f"{where}.fields[{i}]") for i, f in enumerate((*fields, *BOOKKEEPING_FIELDS))
            )
            changes = IgnoreSet(FieldTrie(segments))
        description = read_str(data.get("description", ""), f"{where}.description")
        return cls(
            users, groups, _refs(data.get("objects"), f"{where}.objects"), description, operations, fields, changes
        )

    def covers_requester(self, username: str, groups: tuple[str, ...]) -> bool:
        if self.users:
            if not any(p.matches(username) for p in self.users):
                return False
            if not all(g in groups for g in service_account_groups(username)):
                return False
        return not self.groups or any(p.matches(g) for p in self.groups for g in groups)

    def matches(self, review: Review, ident: ObjectIdentity) -> bool:
        """Whether this entry exempts the request (every criterion in the class docstring)."""
        if review.username is None or not self.covers_requester(review.username, review.groups):
            return False
        if self.operations and review.operation not in self.operations:
            return False
        if self.objects and not any(ref.matches(ident) for ref in self.objects):
            return False
        return self.changes is None or self._changes_only_fields(review)

    def _changes_only_fields(self, review: Review) -> bool:
        assert self.changes is not None
        new, old = review.object, review.old_object
        if not isinstance(new, dict) or not isinstance(old, dict):
            # An audit log records no old object: the field check is taken on trust there,
            # and only there (docs/classify.md). At admission, no old object, no exemption.
            return review.replayed and old is None
        return not diff(old, new, self.changes, object_shape(old))

    def describe(self) -> str:
        if self.description:
            return self.description
        who = ", ".join(p.text for p in self.users + self.groups)
        return f"skipUsers entry for {who}"


@dataclass(frozen=True)
class DryRunOptions:
    enabled: bool = False
    namespace: str = ""

    @classmethod
    def from_dict(cls, data: Any, where: str) -> DryRunOptions:
        data = check_fields(data, where, ("enabled", "namespace"))
        enabled = data.get("enabled", False)
        if not isinstance(enabled, bool):
            raise PolicyError(f"{where}.enabled: expected true or false")
        return cls(enabled, read_str(data.get("namespace", ""), f"{where}.namespace"))


#: A Secret's values are never quoted in a message, a diff or a log: Gatekeeper
#: audit writes messages into the Constraint's status and Kyverno into
#: PolicyReports, which people read who may not read Secrets. ``kubectl apply``
#: copies the whole Secret, values included, into its last-applied annotation
#: (k8s.io/kubectl pkg/util/apply.go ``LastAppliedConfigAnnotation``), so that
#: annotation is a Secret value too whenever no profile ignores it.
SECRET_VALUES = (
    IgnoreRule.from_dict(
        {
            "objects": [{"group": "-", "kind": "Secret"}],
            "fields": [
                "data",
                "stringData",
                'metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]',
            ],
        },
        "Secret values",
    ),
)


def _scalable(ident: ObjectIdentity) -> bool:
    """A kind with a scale subresource: the built-in workloads, or a kind Kubernetes does not build in (a CRD may)."""
    return (ident.group, ident.kind) in SCALABLE_KINDS or ident.kind not in BUILTIN_KINDS.values()


#: What a Scale's ``spec.replicas`` stands for on its parent (and the API server's bookkeeping, as for every exemption).
_REPLICAS = IgnoreSet(FieldTrie(tuple(parse_field_pattern(f) for f in ("spec.replicas", *BOOKKEEPING_FIELDS))))


# --- built-in profiles ------------------------------------------------------------


def read_tool_metadata(data: Any, where: str) -> Stamp:
    """A profile's ``toolMetadata`` entry: ``{check, labels, annotations}``, the keys exactly those the check knows.

    The check (``provider/compare/stamps.py``) holds the tool's format; the profile
    names its keys too, so a reader of the profile sees what it lets a tool
    add, and the two can never drift apart unnoticed.
    """
    data = check_fields(data, where, ("check", "labels", "annotations"))
    name = read_str(data.get("check"), f"{where}.check")
    stamp = STAMPS.get(name)
    if stamp is None:
        raise PolicyError(f"{where}.check: unknown check {name[:60]!r}; choose from {', '.join(STAMPS)}")
    for field_name, keys in (("labels", stamp.labels), ("annotations", stamp.annotations)):
        listed = tuple(
            read_str(k, f"{where}.{field_name}[{i}]")
            for i, k in enumerate(read_list(data.get(field_name), f"{where}.{field_name}"))
        )
        if sorted(listed) != sorted(keys):
            raise PolicyError(
                f"{where}.{field_name}: the check {name} takes exactly {list(keys)}, not {list(listed)[:5]}"
            )
    return stamp


def read_control_plane_object(data: Any, where: str) -> Written:
    """A profile's ``controlPlaneObjects`` entry: ``{check, group, kind, name}``, the object exactly the check's.

    The check (``provider/compare/controlplane.py``) holds what the writer writes; the
    profile names the object too, so a reader of the profile sees which objects
    it lets through unsigned, and the two can never drift apart unnoticed.
    """
    data = check_fields(data, where, ("check", "group", "kind", "name"))
    name = read_str(data.get("check"), f"{where}.check")
    written = CONTROL_PLANE_OBJECTS.get(name)
    if written is None:
        raise PolicyError(f"{where}.check: unknown check {name[:60]!r}; choose from {', '.join(CONTROL_PLANE_OBJECTS)}")
    listed = tuple(read_str(data.get(f), f"{where}.{f}") for f in ("group", "kind", "name"))
    if listed != (written.group or "-", written.kind, written.name):
        raise PolicyError(
            f"{where}: the check {name} is for {written.kind} {written.name} in group "
            f"{written.group or '-'!r}, not {listed}"
        )
    return written


@dataclass(frozen=True)
class BuiltinProfile:
    name: str
    description: str
    ignore_fields: tuple[IgnoreRule, ...]
    skip_users: tuple[UserRule, ...]
    out_of_scope: tuple[ObjectRef, ...]
    #: Metadata a deployment tool adds, taken only with the value it writes (``provider/compare/stamps.py``).
    tool_metadata: tuple[Stamp, ...] = ()
    #: Objects the control plane writes whole, allowed by content where no request names a writer
    #: (``provider/compare/controlplane.py``).
    control_plane_objects: tuple[Written, ...] = ()

    @classmethod
    def from_dict(cls, name: str, data: Any) -> BuiltinProfile:
        where = f"profile {name}"
        data = check_fields(
            data,
            where,
            ("description", "ignoreFields", "skipUsers", "outOfScope", "toolMetadata", "controlPlaneObjects"),
        )
        return cls(
            name,
            read_str(data.get("description", ""), f"{where}.description"),
            tuple(
                IgnoreRule.from_dict(r, f"{where}.ignoreFields[{i}]")
                for i, r in enumerate(read_list(data.get("ignoreFields"), where))
            ),
            tuple(
                UserRule.from_dict(r, f"{where}.skipUsers[{i}]")
                for i, r in enumerate(read_list(data.get("skipUsers"), where))
            ),
            _refs(data.get("outOfScope"), f"{where}.outOfScope"),
            tuple(
                read_tool_metadata(r, f"{where}.toolMetadata[{i}]")
                for i, r in enumerate(read_list(data.get("toolMetadata"), f"{where}.toolMetadata"))
            ),
            tuple(
                read_control_plane_object(r, f"{where}.controlPlaneObjects[{i}]")
                for i, r in enumerate(read_list(data.get("controlPlaneObjects"), f"{where}.controlPlaneObjects"))
            ),
        )


@cache
def load_profile(name: str) -> BuiltinProfile:
    if name not in PROFILES:
        raise PolicyError(f"unknown built-in profile {name!r}; choose from {', '.join(PROFILES)}")
    # A file beside this module, read as one (importlib.resources, for packages inside zip files, costs a
    # command's start-up more than the read: tempfile, zipfile; the package is installed as files).
    text = (Path(__file__).with_name("profiles") / f"{name}.yaml").read_text(encoding="utf-8")
    (data,) = load_yaml_stream(text, error=PolicyError, what=f"profile {name}")
    return BuiltinProfile.from_dict(name, data)


# --- the policy -------------------------------------------------------------------


def _load_key_entry(item: Any, spot: str, limits: Limits) -> tuple[PublicKey | OpenPGPKey | SecretKeyRef, ...]:
    """One ``keys`` entry: a PEM / armored OpenPGP string, ``{publicKey, name}``, ``{openpgpKeyring, name}``,
    or a key kept in a Secret: ``k8s://NS/NAME`` or ``{secretRef: {namespace, name, key}, name}``."""
    if is_key_reference(item):
        return (parse_key_reference(item, spot),)
    if isinstance(item, dict):
        entry = check_fields(item, spot, ("publicKey", "openpgpKeyring", "secretRef", "name"))
        name = read_str(entry["name"], f"{spot}.name") if "name" in entry else None
        if sum(k in entry for k in ("publicKey", "openpgpKeyring", "secretRef")) != 1:
            raise PolicyError(f"{spot}: give one of publicKey, openpgpKeyring or secretRef")
        if "secretRef" in entry:
            return (secret_ref_from_dict(entry["secretRef"], f"{spot}.secretRef", name),)
        if "openpgpKeyring" in entry:
            return read_keyring(entry["openpgpKeyring"], f"{spot}.openpgpKeyring", name, limits)
        text = read_str(entry.get("publicKey"), f"{spot}.publicKey")
    else:
        name, text = None, read_str(item, spot)
    try:
        return tuple(load_trusted_keys(text, name, limits.max_keys))
    except PolicyError as exc:
        raise PolicyError(f"{spot}: {exc.message}") from exc


def _identity(key: PublicKey | OpenPGPKey | SecretKeyRef) -> str:
    """What makes two ``keys`` entries the same key: a fingerprint, or the Secret value named."""
    if isinstance(key, SecretKeyRef):
        return f"secret:{key.namespace}/{key.name}/{key.key}"
    return key.fingerprint


def _with_compiled(node: AnchorSet, compiled: dict[int, SignerSpec]) -> AnchorSet:
    """``node`` with each signer entry replaced by its compiled copy (trust roots parsed)."""
    entries = tuple(
        _with_compiled(e, compiled) if isinstance(e, AnchorSet) else compiled.get(id(e), e) for e in node.entries
    )
    return dataclasses.replace(node, entries=entries)


_T = TypeVar("_T")


def _each(
    data: dict[str, Any], name: str, where: str, read: Callable[[Any, str], _T], default: Any = None
) -> tuple[_T, ...]:
    """``read`` applied to each item of the list field ``name`` (``default`` when absent), told where it stands."""
    spot = f"{where}.{name}"
    return tuple(read(item, f"{spot}[{i}]") for i, item in enumerate(read_list(data.get(name, default), spot)))


class _Anchors(NamedTuple):
    """The keys and signers a policy lists, by type: its flat lists, or its attestor sets' leaves."""

    keys: tuple[PublicKey, ...]
    openpgp_keys: tuple[OpenPGPKey, ...]
    secret_keys: tuple[SecretKeyRef, ...]
    signers: tuple[SignerSpec, ...]
    attestors: tuple[AnchorSet, ...]
    #: Keys and signers counted one by one (an OpenPGP keyring counts each certificate).
    total: int


def _anchors_of(leaves: Sequence[Leaf], attestors: tuple[AnchorSet, ...] = ()) -> _Anchors:
    """``leaves`` sorted by type, each type in the order listed."""
    keys: list[PublicKey] = []
    openpgp_keys: list[OpenPGPKey] = []
    secret_keys: list[SecretKeyRef] = []
    signers: list[SignerSpec] = []
    for leaf in leaves:
        if isinstance(leaf, PublicKey):
            keys.append(leaf)
        elif is_openpgp_key(leaf):
            openpgp_keys.append(leaf)
        elif isinstance(leaf, SecretKeyRef):
            secret_keys.append(leaf)
        else:
            from ..keyless.identity import SignerSpec  # loaded already by whoever read a keyless entry

            if isinstance(leaf, SignerSpec):
                signers.append(leaf)
    return _Anchors(tuple(keys), tuple(openpgp_keys), tuple(secret_keys), tuple(signers), attestors, len(leaves))


def _read_keys(data: dict[str, Any], where: str, limits: Limits) -> list[PublicKey | OpenPGPKey | SecretKeyRef]:
    """``keys``, loaded; refused as soon as there are more than ``max_keys``."""
    loaded: list[PublicKey | OpenPGPKey | SecretKeyRef] = []
    for i, item in enumerate(read_list(data.get("keys"), f"{where}.keys")):
        loaded.extend(_load_key_entry(item, f"{where}.keys[{i}]", limits))
        if len(loaded) > limits.max_keys:  # stop loading here: thousands of key strings cost seconds
            raise PolicyError(
                f"{where}.keys: more than {limits.max_keys} keys; at most {limits.max_keys} keys and signers are "
                "allowed"
            )
    return loaded


def _read_attestors(data: dict[str, Any], where: str, limits: Limits, flat: bool) -> _Anchors:
    """``attestors``: nested signer sets, which replace keys and signers (``flat``: some were given) entirely."""
    if flat or "keyOperation" in data or "threshold" in data:
        raise PolicyError(
            f"{where}: give attestors, or keys/signers with keyOperation/threshold, not both; a key needed "
            "beside the sets is one more set"
        )
    attestors = parse_attestors(data["attestors"], f"{where}.attestors", limits)
    return _anchors_of([leaf for s in attestors for leaf in s.leaves()], attestors)


def _read_anchors(data: dict[str, Any], where: str, limits: Limits, bounds: Bounds) -> _Anchors:
    """The keys and signers: at least one, at most ``max_keys``, no key twice, Secrets only where ``bounds`` allow."""
    loaded = _read_keys(data, where, limits)
    signers: tuple[SignerSpec, ...] = ()
    if data.get("signers") is not None:
        from ..keyless.identity import SignerSpec  # keyless code, loaded for a policy that names signers

        signers = _each(data, "signers", where, SignerSpec.from_value)
    if "attestors" in data:
        anchors = _read_attestors(data, where, limits, flat=bool(loaded or signers))
    else:
        anchors = _anchors_of([*loaded, *signers])
    if anchors.total == 0:
        raise PolicyError(f"{where}: no keys or signers; an empty key list would accept nothing (or, worse, anything)")
    if anchors.total > limits.max_keys:
        raise PolicyError(f"{where}: {anchors.total} keys and signers; at most {limits.max_keys} are allowed")
    if not anchors.attestors and len({_identity(k) for k in loaded}) != len(loaded):
        raise PolicyError(f"{where}.keys: the same key is listed twice; MustAll and threshold count distinct keys")
    for ref in anchors.secret_keys:  # before anything is read: the operator's bound (provider/bounds.py)
        check_allowed(ref, bounds, f"{where}.keys")
    return anchors


def _sensitive_rule(data: Any, where: str) -> IgnoreRule:
    """A ``sensitiveFields`` entry: an ignore rule's shape, but it hides fields rather than widening anything."""
    return IgnoreRule.from_dict(data, where, widens=False)


def _read_sources(data: dict[str, Any], where: str, bounds: Bounds) -> tuple[BundleOptions | None, ConfigMapRef | None]:
    """Where signatures may come from besides the object: ``resourceBundleRef``, ``signatureResourceRef``."""
    bundle_options = (
        BundleOptions.from_dict(
            data["resourceBundleRef"],
            f"{where}.resourceBundleRef",
            allowed=bounds.bundle_repositories,
            pull_namespaces=bounds.pull_secret_namespaces,
        )
        if "resourceBundleRef" in data
        else None
    )
    signature_ref = (
        ConfigMapRef.parse(data["signatureResourceRef"], f"{where}.signatureResourceRef")
        if "signatureResourceRef" in data
        else None
    )
    return bundle_options, signature_ref


def _read_requirement(data: dict[str, Any], where: str, anchors: int) -> tuple[KeyOperation, int | None]:
    """``keyOperation`` and ``threshold``: how many of the ``anchors`` keys and signers must have signed."""
    operation = data.get("keyOperation", "AtLeastOne")
    if operation not in KEY_OPERATIONS:
        raise PolicyError(f"{where}.keyOperation: {str(operation)[:40]!r} is not one of {', '.join(KEY_OPERATIONS)}")
    threshold = data.get("threshold")
    if threshold is not None:
        if type(threshold) is not int or threshold < 1:
            raise PolicyError(f"{where}.threshold: expected a whole number of at least 1")
        if threshold > anchors:
            raise PolicyError(
                f"{where}.threshold: {threshold} exceeds the {anchors} keys and signers listed; it could never be met"
            )
        if operation == "MustAll":
            raise PolicyError(f"{where}: give keyOperation MustAll or a threshold, not both")
    return operation, threshold


def _read_domain(data: dict[str, Any], where: str) -> str:
    domain = read_str(data.get("annotationDomain", DEFAULT_DOMAIN), f"{where}.annotationDomain")
    if not _DOMAIN_RE.match(domain):
        raise PolicyError(f"{where}.annotationDomain: {domain[:60]!r} is not a DNS subdomain")
    return domain


def _read_defaults(data: dict[str, Any], where: str) -> tuple[str, ...]:
    """``defaults``: names of built-in profiles."""
    defaults = _each(data, "defaults", where, read_str, default=list(DEFAULT_PROFILES))
    for name in defaults:
        if name not in PROFILES:
            raise PolicyError(f"{where}.defaults: unknown profile {name!r}; choose from {', '.join(PROFILES)}")
    return defaults


def _read_ignore_fields(data: dict[str, Any], where: str) -> tuple[bool, tuple[IgnoreRule, ...]]:
    """``unsafeUnanchoredIgnoreFields`` and ``ignoreFields``; with the first, every pattern must compile for RE2."""
    unanchored = data.get("unsafeUnanchoredIgnoreFields", False)
    if not isinstance(unanchored, bool):
        raise PolicyError(f"{where}.unsafeUnanchoredIgnoreFields: expected true or false")
    ignore_fields = _each(data, "ignoreFields", where, IgnoreRule.from_dict)
    if unanchored:  # refuse a pattern RE2 cannot run now, not at the first object it applies to
        for i, rule in enumerate(ignore_fields):
            for j, text in enumerate(rule.fields):
                unanchored_matcher(text, f"{where}.ignoreFields[{i}].fields[{j}]")
    return unanchored, ignore_fields


def _compile_signers(
    anchors: _Anchors, trusted_root: Any, limits: Limits, bounds: Bounds, deadline: float | None
) -> tuple[_Anchors, TrustRoot | None]:
    """Parse the signers' trust material now and keep it (with ``anchors`` holding the compiled signers).

    A bad ``trustedRoot`` or ``roots`` is a policy error when the policy is read, and no
    verification parses it again. Without signers, ``trustedRoot`` is not read.
    """
    if not anchors.signers:
        return anchors, None
    from ..keyless.trust import load_signer_roots, load_trusted_root

    root = None
    if any(spec.roots is None for spec in anchors.signers):
        root = load_trusted_root(trusted_root, limits=limits, bounds=bounds, deadline=deadline)
    compiled = {
        id(spec): dataclasses.replace(spec, anchors=load_signer_roots(spec.roots, limits))
        for spec in anchors.signers
        if spec.roots is not None
    }
    signers = tuple(compiled.get(id(spec), spec) for spec in anchors.signers)
    attestors = tuple(_with_compiled(s, compiled) for s in anchors.attestors)
    return anchors._replace(signers=signers, attestors=attestors), root


@dataclass(frozen=True)
class Policy:
    keys: tuple[PublicKey, ...]
    signers: tuple[SignerSpec, ...] = ()
    key_operation: KeyOperation = "AtLeastOne"
    threshold: int | None = None
    #: The sigstore TrustedRoot, parsed, when a keyless signer entry needs it.
    trusted_root: TrustRoot | None = None
    annotation_domain: str = DEFAULT_DOMAIN
    ignore_fields: tuple[IgnoreRule, ...] = ()
    sensitive_fields: tuple[IgnoreRule, ...] = ()
    skip_objects: tuple[ObjectRef, ...] = ()
    in_scope_objects: tuple[ObjectRef, ...] = ()
    skip_users: tuple[UserRule, ...] = ()
    dry_run: DryRunOptions = DryRunOptions()
    defaults: tuple[str, ...] = DEFAULT_PROFILES
    unsafe_unanchored_ignore_fields: bool = False
    #: Trusted OpenPGP certificates (provider/keys/openpgp.py), counted with ``keys``.
    openpgp_keys: tuple[OpenPGPKey, ...] = ()
    #: Keys kept in Secrets (provider/keys/refs.py), read at verification time; counted with ``keys``.
    secret_keys: tuple[SecretKeyRef, ...] = ()
    #: Nested signer sets (provider/policy/attestors.py); when given, ``keys``, ``openpgp_keys`` and ``signers``
    #: list the sets' leaves and keyOperation/threshold do not apply.
    attestors: tuple[AnchorSet, ...] = ()
    #: Where objects signed into an OCI resource bundle may point (provider/signatures/sources.py); None: not enabled.
    resource_bundle: BundleOptions | None = None
    #: A ConfigMap holding the message and signature for every object (``kubectl sigstore sign -o k8s://...``).
    signature_resource_ref: ConfigMapRef | None = None
    #: What the operator lets this policy name (provider/bounds.py); the verifier checks the signature
    #: ConfigMap's namespace against it for each object.
    bounds: Bounds = field(default=SERVICE, compare=False)
    _ignore_cache: dict[tuple[int, ...], IgnoreSet] = field(default_factory=dict, repr=False, compare=False)
    _sensitive_cache: dict[tuple[int, ...], FieldTrie] = field(default_factory=dict, repr=False, compare=False)

    # -- construction --

    @classmethod
    def from_dict(
        cls,
        data: Any,
        *,
        limits: Limits = DEFAULT_LIMITS,
        where: str = "policy",
        bounds: Bounds = SERVICE,
        deadline: float | None = None,
    ) -> Policy:
        """Validate and compile a policy.

        ``bounds`` is what the operator lets the policy name (:mod:`provider.bounds`; the default is
        the service's: no trust-root files, signature ConfigMaps in the object's own namespace only,
        no registries); ``deadline`` (a :func:`time.monotonic` instant) bounds reading a trust-root file.
        """
        data = check_fields(data, where, _POLICY_FIELDS)
        anchors = _read_anchors(data, where, limits, bounds)
        bundle_options, signature_ref = _read_sources(data, where, bounds)
        operation, threshold = _read_requirement(data, where, anchors.total)
        domain = _read_domain(data, where)
        defaults = _read_defaults(data, where)
        unanchored, ignore_fields = _read_ignore_fields(data, where)
        anchors, trusted_root = _compile_signers(anchors, data.get("trustedRoot"), limits, bounds, deadline)
        return cls(
            keys=anchors.keys,
            signers=anchors.signers,
            key_operation=operation,
            threshold=threshold,
            trusted_root=trusted_root,
            annotation_domain=domain,
            ignore_fields=ignore_fields,
            sensitive_fields=_each(data, "sensitiveFields", where, _sensitive_rule),
            skip_objects=_skip_refs(data.get("skipObjects"), f"{where}.skipObjects"),
            in_scope_objects=_refs(data.get("inScopeObjects"), f"{where}.inScopeObjects"),
            skip_users=_each(data, "skipUsers", where, UserRule.from_dict),
            dry_run=DryRunOptions.from_dict(data.get("dryRun", {}), f"{where}.dryRun"),
            defaults=defaults,
            unsafe_unanchored_ignore_fields=unanchored,
            openpgp_keys=anchors.openpgp_keys,
            secret_keys=anchors.secret_keys,
            attestors=anchors.attestors,
            resource_bundle=bundle_options,
            signature_resource_ref=signature_ref,
            bounds=bounds,
        )

    # -- derived --

    @property
    def anchors(self) -> tuple[Leaf, ...]:
        """Every key and signer entry: the flat list, or the attestor sets' leaves in order."""
        if self.attestors:
            return tuple(leaf for s in self.attestors for leaf in s.leaves())
        return (*self.keys, *self.openpgp_keys, *self.secret_keys, *self.signers)

    @property
    def anchor_count(self) -> int:
        return len(self.anchors)

    @property
    def required_count(self) -> int:
        """How many distinct keys/signers must verify."""
        if self.threshold is not None:
            return self.threshold
        return self.anchor_count if self.key_operation == "MustAll" else 1

    def requirement(self) -> str:
        if self.threshold is not None:
            return f"threshold {self.threshold}"
        return self.key_operation

    @property
    def profiles(self) -> tuple[BuiltinProfile, ...]:
        return tuple(load_profile(name) for name in self.defaults)

    def control_plane_object(self, ident: ObjectIdentity) -> tuple[Written, str] | None:
        """The control-plane object ``ident`` is, by group, kind and name, and the profile listing it; else None."""
        for profile in self.profiles:
            for written in profile.control_plane_objects:
                if written.owns(ident):
                    return written, profile.name
        return None

    @property
    def tool_metadata(self) -> tuple[Stamp, ...]:
        """The tool-stamped metadata the enabled profiles take, each once, in profile order."""
        stamps = [stamp for profile in self.profiles for stamp in profile.tool_metadata]
        return tuple(dict.fromkeys(stamps))

    def ignore_set_for(self, ident: ObjectIdentity) -> IgnoreSet:
        """The compiled ignore patterns that apply to this object (cached per set of rules)."""
        rules = [rule for profile in self.profiles for rule in profile.ignore_fields] + list(self.ignore_fields)
        own = len(rules) - len(self.ignore_fields)
        applicable = tuple(i for i, rule in enumerate(rules) if rule.applies_to(ident))
        cached = self._ignore_cache.get(applicable)
        if cached is not None:
            return cached
        anchored: list[tuple[Segment, ...]] = []
        unanchored: list[PolicyRegex] = []
        for i in applicable:
            if i >= own and self.unsafe_unanchored_ignore_fields:
                unanchored.extend(unanchored_matcher(f) for f in rules[i].fields)
            else:
                anchored.extend(rules[i].segments)
        result = IgnoreSet(FieldTrie(tuple(anchored)), tuple(unanchored))
        if len(self._ignore_cache) < 256:
            self._ignore_cache[applicable] = result
        return result

    def controller_fields_for(self, ident: ObjectIdentity) -> tuple[tuple[IgnoreSet, UserRule], ...]:
        """The fields of this object that a field-scoped exemption lets a trusted controller change, rule by rule.

        An exemption scoped to the object itself (or any subresource) lends its
        ``fields``; one scoped to the ``scale`` subresource lends ``spec.replicas``
        -- the field a Scale's replicas stand for in every built-in scalable kind
        and, by default, in a custom resource's scale subresource. Used to judge a
        live object (``docs/policy.md``, "Changes by exempt controllers").
        """
        found: list[tuple[IgnoreSet, UserRule]] = []
        rules = [rule for profile in self.profiles for rule in profile.skip_users] + list(self.skip_users)
        for rule in rules:
            if rule.changes is None:
                continue
            refs = rule.objects or (ObjectRef(),)
            main = any(
                ref.matches(dataclasses.replace(ident, subresource=sub))
                for ref in refs
                for sub in ("", "status", "finalize", "approval")
            )
            if main:
                found.append((rule.changes, rule))
            elif _scalable(ident) and any(ref.matches(dataclasses.replace(ident, subresource="scale")) for ref in refs):
                found.append((_REPLICAS, rule))
        return tuple(found)

    def sensitive_for(self, ident: ObjectIdentity) -> FieldTrie:
        """The paths whose values a verdict never quotes: a Secret's data always, plus ``sensitiveFields``."""
        rules = (*SECRET_VALUES, *self.sensitive_fields)
        applicable = tuple(i for i, rule in enumerate(rules) if rule.applies_to(ident))
        cached = self._sensitive_cache.get(applicable)
        if cached is None:
            cached = FieldTrie(tuple(segments for i in applicable for segments in rules[i].segments))
            if len(self._sensitive_cache) < 256:
                self._sensitive_cache[applicable] = cached
        return cached
