"""Step 5 of verification: what does the cluster make of the signed document?

Nothing admitted equals its signed manifest: the API server fills in defaults
and mutating webhooks add more. When the direct comparison (step 4) finds
differences and the policy enables dry-run, :func:`compare_with_dry_run`

1. prepares the signed document for a create that touches nothing real
   (:func:`plan_dry_run`): ``metadata.name`` becomes ``<name>-dry-run`` (a
   ``generateName``-only manifest keeps its ``generateName``: the server picks
   a fresh name), a CustomResourceDefinition moves to the group
   ``dry-run.<group>`` (its name must stay ``<plural>.<group>``), the
   namespace becomes ``dryRun.namespace`` or the object's own, and the
   server-set metadata a create must not carry is dropped;
2. asks the :class:`DryRunner` to create it with
   ``dryRun=All`` (the runner resolves kind -> resource and scope, so
   cluster-scoped kinds are created cluster-wide);
3. compares the result with the admitted object **by value**
   (:func:`reference_and_admitted`): every field the cluster added must hold
   the value the dry-run produced. Only what differs between *any* two
   objects by construction is taken out of the comparison -- identity and
   bookkeeping metadata, values derived from the name and uid, the generated
   service-account token volume name, and the values the server chooses where
   the signed manifest left them to it (:mod:`provider.compare.allocations`) -- plus
   the policy's own ignore set.

There is deliberately no "fields the cluster touched" mask: ignoring every
field the dry-run added would let anyone change a defaulted field
(``imagePullPolicy``, ``securityContext``, ``hostNetwork``) unnoticed. See
``docs/dryrun.md``.

Pure: no I/O, no kubernetes import. Errors from the runner propagate
unchanged (:class:`~provider.errors.TransientError` when the cluster could not
be asked, a :class:`~provider.errors.VerificationFailure` when the API server
rejects the signed manifest itself).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import MalformedMessage, TransientError
from ..objects import split_api_version
from ..readers import child_list, child_mapping
from ..signatures.envelope import without_envelope
from .allocations import adopt_server_choices
from .diff import DiffItem, IgnoreSet, diff
from .kindschema import object_shape

#: Appended to the signed name, so a dry-run create never clashes with the
#: object under review (which, on UPDATE, exists) and is recognisable in logs
#: and audit events.
DRY_RUN_SUFFIX = "-dry-run"
#: Prefixed to a CustomResourceDefinition's group: a CRD's name must be
#: ``<plural>.<group>``, and a new group cannot clash with the real CRD's
#: names or kinds. A group under ``k8s.io``/``kubernetes.io`` stays under it,
#: so the API-approval rule applies to the dry-run exactly as to the original.
CRD_GROUP_PREFIX = "dry-run."
#: Longest name every kind accepts: a DNS-1123 label (apimachinery
#: ``DNS1123LabelMaxLength``), required for Services, Namespaces and others.
NAME_MAX = 63

_CRD = ("apiextensions.k8s.io", "CustomResourceDefinition")
#: Metadata that differs between any two objects by construction.
_MASKED_METADATA = (
    "name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
    "managedFields", "selfLink",
)  # fmt: skip
#: What a create must not carry: the server sets these (``resourceVersion``
#: set on a create is an error; the rest are overwritten or refused).
_SERVER_SET_METADATA = (*_MASKED_METADATA[2:], "deletionTimestamp", "deletionGracePeriodSeconds")
#: The ServiceAccount admission plugin's projected token volume:
#: ``kube-api-access-`` plus 5 characters of apimachinery's name generator.
_TOKEN_VOLUME = re.compile(r"kube-api-access-[a-z0-9]{5}\Z")


class DryRunner(Protocol):
    """Creates a manifest with ``dryRun=All`` and returns what the API server made of it.

    The deadline is the runner's to keep, and step 5 relies on it: it uses
    whatever :meth:`dry_run` returns. So a runner returns only an answer that
    was complete within its deadline -- every exchange with the API server
    (discovery, the create, a retry), connection and whole body included -- and
    raises :class:`~provider.errors.TransientError` ``dry-run-failed`` for an
    answer that was not, never returning it; and it returns or raises within
    its deadline plus a bounded margin, so the caller's thread is free by then
    (:class:`provider.kube.dryrun.KubeDryRunner`: ``Limits.dry_run_timeout`` plus
    :data:`provider.kube.client.DEADLINE_MARGIN_SECONDS`).
    """

    def dry_run(self, manifest: dict[str, Any], namespace: str | None) -> dict[str, Any]: ...


@dataclass(frozen=True)
class DryRunPlan:
    """The manifest to create with ``dryRun=All``, and how it was renamed."""

    manifest: dict[str, Any]
    #: Where namespaced kinds are created; None lets the runner choose (its default namespace).
    namespace: str | None


def dry_run_name(name: str, token: str = "") -> str:
    """``<name>-dry-run`` (``<name>-dry-run-<token>`` on a retry), at most :data:`NAME_MAX` characters.

    A long name is shortened and given a digest of the full name, so two
    long names never collapse into one; the name is masked in the comparison.
    """
    tail = DRY_RUN_SUFFIX + (f"-{token}" if token else "")
    if len(name) + len(tail) <= NAME_MAX:
        return name + tail
    import hashlib  # for a long name only: a command-line verify need not load the interpreter's OpenSSL

    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    keep = NAME_MAX - len(tail) - len(digest) - 1
    return f"{name[:keep].rstrip('-.')}-{digest}{tail}"


def renamed_for_retry(manifest: dict[str, Any], token: str) -> dict[str, Any]:
    """The manifest renamed again after a 409 AlreadyExists (a real object holds the dry-run name).

    ``<name>-dry-run-<token>``; a CustomResourceDefinition moves to the group
    ``dry-run-<token>.<group>`` instead (its name must stay ``<plural>.<group>``);
    a ``generateName``-only manifest is sent again as it is (the server picks
    another name).
    """
    renamed = copy.deepcopy(manifest)
    meta = child_mapping(renamed, "metadata")
    name = meta.get("name")
    group, _ = split_api_version(renamed.get("apiVersion"))
    spec = child_mapping(renamed, "spec")
    if (group, renamed.get("kind")) == _CRD and isinstance(spec.get("group"), str):
        prefix = CRD_GROUP_PREFIX.rstrip(".")
        base = spec["group"].removeprefix(CRD_GROUP_PREFIX)
        spec["group"] = f"{prefix}-{token}.{base}"
        plural = child_mapping(spec, "names").get("plural")
        if isinstance(plural, str):
            meta["name"] = f"{plural}.{spec['group']}"
    elif isinstance(name, str) and name:
        meta["name"] = dry_run_name(name.removesuffix(DRY_RUN_SUFFIX), token)
    return renamed


def target_namespace(obj: dict[str, Any], namespace: str | None, configured: str) -> str | None:
    """``dryRun.namespace`` if set, else the object's own namespace (None: the runner's default)."""
    if configured:
        return configured
    meta = obj.get("metadata")
    own = meta.get("namespace") if isinstance(meta, dict) else None
    return own if isinstance(own, str) and own else (namespace or None)


def plan_dry_run(document: dict[str, Any], namespace: str | None) -> DryRunPlan:
    """A copy of the signed document that a dry-run create can take without touching real objects."""
    manifest = copy.deepcopy(document)
    meta = manifest.get("metadata")
    if not isinstance(meta, dict):
        raise MalformedMessage("the signed document has no metadata mapping; it cannot be dry-run")
    for key in _SERVER_SET_METADATA:
        meta.pop(key, None)
    if namespace:
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    group, _ = split_api_version(manifest.get("apiVersion"))
    name = meta.get("name")
    spec = manifest.get("spec")
    if (group, manifest.get("kind")) == _CRD and isinstance(spec, dict) and isinstance(spec.get("group"), str):
        old_group = spec["group"]
        new_group = CRD_GROUP_PREFIX + old_group
        spec["group"] = new_group
        names = spec.get("names")
        plural = names.get("plural") if isinstance(names, dict) else None
        if isinstance(name, str) and isinstance(plural, str) and name == f"{plural}.{old_group}":
            meta["name"] = f"{plural}.{new_group}"
        elif isinstance(name, str) and name:
            # Not <plural>.<group>: the API server rejects it, exactly as it
            # would reject the signed manifest.
            meta["name"] = dry_run_name(name)
    elif isinstance(name, str) and name:
        meta["name"] = dry_run_name(name)
    elif not (isinstance(meta.get("generateName"), str) and meta["generateName"]):
        raise MalformedMessage("the signed document has neither metadata.name nor metadata.generateName")
    return DryRunPlan(manifest, namespace or None)


# --- the comparison ---------------------------------------------------------------


def _substitute(value: Any, table: dict[str, str]) -> Any:
    """``value`` with every string *value* (never a key) found in ``table`` replaced."""
    if isinstance(value, str):
        return table.get(value, value)
    if isinstance(value, dict):
        return {k: _substitute(v, table) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, table) for v in value]
    return value


def _token_volumes(obj: dict[str, Any]) -> set[str]:
    return {
        v["name"]
        for v in child_list(child_mapping(obj, "spec"), "volumes")
        if isinstance(v, dict) and isinstance(v.get("name"), str) and _TOKEN_VOLUME.match(v["name"])
    }


def reference_and_admitted(
    result: dict[str, Any], obj: dict[str, Any], document: dict[str, Any], plan: DryRunPlan
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The dry-run result and the admitted object, with what differs by construction made equal.

    Returns copies; the inputs are not changed. Values the server derives from
    the dry-run object's own name and uid (a Job's ``job-name`` and
    ``controller-uid`` labels, a Namespace's ``kubernetes.io/metadata.name``)
    are mapped to the admitted object's, as is the renamed CRD group and the
    generated token volume name; the mapping replaces whole string values
    only, so a field that merely contains the name is compared as it is.
    """
    group, _ = split_api_version(document.get("apiVersion"))
    kind = document.get("kind")
    ref_meta, adm_meta = child_mapping(result, "metadata"), child_mapping(obj, "metadata")
    table: dict[str, str] = {}
    for key in ("name", "uid"):
        dry, real = ref_meta.get(key), adm_meta.get(key)
        if isinstance(dry, str) and dry and isinstance(real, str) and real:
            table[dry] = real
    if (group, kind) == _CRD:
        # The group the dry-run used (``dry-run.<group>``, or another after a
        # retry) stands for the signed one.
        dry_group, signed_group = (
            child_mapping(result, "spec").get("group"),
            child_mapping(document, "spec").get("group"),
        )
        if isinstance(dry_group, str) and isinstance(signed_group, str) and dry_group != signed_group:
            table[dry_group] = signed_group
    if (group, kind) == ("", "Pod"):
        dry_volumes, real_volumes = _token_volumes(result), _token_volumes(obj)
        if len(dry_volumes) == 1 and len(real_volumes) == 1:
            table[dry_volumes.pop()] = real_volumes.pop()
    reference = _substitute(result, table)
    admitted = copy.deepcopy(obj)
    # Before the bookkeeping goes: a DaemonSet's generation annotation is adopted
    # only when it restates the admitted object's own generation.
    adopt_server_choices(reference, admitted, document, allocated_in_reference=True)
    for side in (reference, admitted):
        meta = side.get("metadata")
        if isinstance(meta, dict):
            for key in _MASKED_METADATA:
                meta.pop(key, None)
    return reference, admitted


def _describe(obj: Any) -> str:
    meta = child_mapping(obj, "metadata")
    name = meta.get("name") or f"{meta.get('generateName', '')}…"
    namespace = f"{meta['namespace']}/" if isinstance(meta.get("namespace"), str) and meta["namespace"] else ""
    return f"{obj.get('kind') if isinstance(obj, dict) else '?'} {namespace}{name}"[:200]


def answer_mismatch(result: Any, plan: DryRunPlan) -> str:
    """Why ``result`` is not the object the dry-run asked for ("" when it is).

    The answer must name what was sent: the same API group and kind, the name
    (or one the retry after a name clash gives it, or -- for a ``generateName``
    manifest -- a name with that prefix), and the namespace it was sent to. An
    answer for another object never becomes the reference.
    """
    if not isinstance(result, dict):
        return f"is a {type(result).__name__}, not an object"
    sent = plan.manifest
    if (
        result.get("kind") != sent.get("kind")
        or split_api_version(result.get("apiVersion"))[0] != split_api_version(sent.get("apiVersion"))[0]
    ):
        return (
            f"is a {str(result.get('kind'))[:40]} of API group "
            f"{split_api_version(result.get('apiVersion'))[0][:60]!r}, not what was sent"
        )
    meta, asked = child_mapping(result, "metadata"), child_mapping(sent, "metadata")
    name, wanted, prefix = meta.get("name"), asked.get("name"), asked.get("generateName")
    if not isinstance(name, str) or not name:
        return "names no object"
    if wanted:
        if name != wanted and not _retry_name(name, result, sent):
            return f"names {name[:80]!r}, not {str(wanted)[:80]!r}"
    elif not (isinstance(prefix, str) and name.startswith(prefix)):
        return f"names {name[:80]!r}, which does not start with the generateName {str(prefix)[:80]!r}"
    namespace = meta.get("namespace")
    if plan.namespace and namespace and namespace != plan.namespace:
        return f"is in namespace {str(namespace)[:63]!r}, not {plan.namespace!r}"
    return ""


def _retry_name(name: str, result: dict[str, Any], sent: dict[str, Any]) -> bool:
    """Whether ``name`` is what :func:`renamed_for_retry` makes of the sent manifest (with some token)."""
    group, _ = split_api_version(sent.get("apiVersion"))
    if (group, sent.get("kind")) == _CRD:
        dry_group = child_mapping(result, "spec").get("group")
        prefix = CRD_GROUP_PREFIX.rstrip(".") + "-"
        if not isinstance(dry_group, str) or not dry_group.startswith(prefix):
            return False
        token = dry_group[len(prefix) :].partition(".")[0]
    else:
        token = name.rpartition("-")[2]
    if not token.isalnum():
        return False
    return bool(child_mapping(renamed_for_retry(sent, token), "metadata").get("name") == name)


def compare_with_dry_run(  # noqa: PLR0917 - step 5 of the verifier calls it positionally
    document: dict[str, Any],
    obj: dict[str, Any],
    namespace: str | None,
    configured_namespace: str,
    ignore: IgnoreSet,
    dry_runner: DryRunner,
    envelope: frozenset[str],
) -> list[DiffItem]:
    """Differences between the dry-run of ``document`` and ``obj``, by value (empty: it verifies).

    ``configured_namespace`` is the policy's ``dryRun.namespace`` (empty: the
    object's own, :func:`target_namespace`); ``ignore`` its ignore set for the
    object. ``envelope`` names the annotations the signature envelope was read
    from: exactly those are left out of the admitted object.
    """
    plan = plan_dry_run(document, target_namespace(obj, namespace, configured_namespace))
    result = dry_runner.dry_run(plan.manifest, plan.namespace)
    problem = answer_mismatch(result, plan)
    if problem:
        raise TransientError(
            f"the answer to the dry-run create of {_describe(plan.manifest)} {problem}; it is not used",
            reason="dry-run-failed",
        )
    reference, admitted = reference_and_admitted(result, obj, document, plan)
    return diff(
        without_envelope(reference, envelope), without_envelope(admitted, envelope), ignore, object_shape(document)
    )
