"""What a held policy matches: kinds by group, namespaces by name and by label, objects by label.

``spec.match`` of a ``ClusterManifestPolicy`` or ``ManifestPolicy``
(``docs/policy.md``, "Cluster and tenant policies")::

    match:
      kinds:                          # absent: every kind
        - apiGroups: ["", "apps"]     # "" is the core group, "*" any group
          kinds: [ConfigMap, Deployment]   # "*" any kind
      namespaces: [shop, web]         # ClusterManifestPolicy only; absent: every namespace
      namespaceSelector: {...}        # ClusterManifestPolicy only: the namespace's labels
      objectSelector: {...}           # the object's labels

Every criterion given must hold. The selectors are ``metav1.LabelSelector``:
``matchLabels`` and ``matchExpressions`` (``In``, ``NotIn``, ``Exists``,
``DoesNotExist``), ANDed; an empty selector matches everything, as
k8s.io/apimachinery ``metav1.LabelSelectorAsSelector`` reads one (``In`` and
``NotIn`` need values, ``Exists`` and ``DoesNotExist`` take none; anything else
is an error here, never "matches nothing").

The rules where objects have no namespace follow the API server's webhook
``namespaceSelector`` (k8s.io/apiserver
``pkg/admission/plugin/webhook/predicates/namespace/matcher.go``): a Namespace
is matched on its own name and labels; any other cluster-scoped object is never
left out by namespace criteria -- a policy naming namespaces still takes in a
``ClusterRole`` its kinds name. That is the stricter reading (the policy
applies), and the one the webhook configuration in front of it uses.

``objectSelector`` on an UPDATE matches when either the object or the old
object carries the labels (the API server's ``objectSelector``: "evaluated
against both the oldObject and newObject"), so removing a label in the same
write does not escape a policy.

A kind the request cannot name -- a custom resource's ``scale`` subresource,
whose request names the resource (``widgets``), not its kind -- matches every
entry of its group (:attr:`provider.objects.ObjectIdentity.kind_known`): a
policy then applies rather than not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import PolicyError
from ..objects import ObjectIdentity
from ..readers import check_fields, read_list, read_str

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
OPERATORS: tuple[Operator, ...] = ("In", "NotIn", "Exists", "DoesNotExist")
#: The label every namespace carries with its own name (the API server sets it since 1.21).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
#: A label key: an optional DNS-subdomain prefix and a name of at most 63 characters (apimachinery
#: ``validation.IsQualifiedName``); a value: at most 63 characters of the same alphabet, or empty
#: (``IsValidLabelValue``).
_KEY = re.compile(
    r"(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z"
)
_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")
_NAMESPACE = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?\Z")
#: Entries of one list in a match: a bound on what a policy makes every admission walk through.
MAX_ENTRIES = 64


def _key(value: Any, where: str) -> str:
    text = read_str(value, where)
    if len(text) > 316 or not _KEY.match(text):
        raise PolicyError(f"{where}: {text[:80]!r} is not a label key (prefix/name, name at most 63 characters)")
    return text


def _value(value: Any, where: str) -> str:
    text = read_str(value, where)
    if not _VALUE.match(text):
        raise PolicyError(f"{where}: {text[:80]!r} is not a label value (at most 63 letters, digits, '-', '_', '.')")
    return text


def _bounded(items: list[Any], where: str) -> list[Any]:
    if len(items) > MAX_ENTRIES:
        raise PolicyError(f"{where}: {len(items)} entries; at most {MAX_ENTRIES}")
    return items


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels


@dataclass(frozen=True)
class LabelSelector:
    """A ``metav1.LabelSelector`` (module docstring); every requirement must hold."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def from_dict(cls, data: Any, where: str) -> LabelSelector:
        data = check_fields(data, where, ("matchLabels", "matchExpressions"))
        found: list[Requirement] = []
        labels = data.get("matchLabels", {})
        if not isinstance(labels, dict):
            raise PolicyError(f"{where}.matchLabels: expected a mapping of label keys to values")
        _bounded(list(labels), f"{where}.matchLabels")
        for key, value in labels.items():
            spot = f"{where}.matchLabels[{str(key)[:60]!r}]"
            found.append(Requirement(_key(key, spot), "In", frozenset({_value(value, spot)})))
        expressions = _bounded(read_list(data.get("matchExpressions"), f"{where}.matchExpressions"), where)
        for i, item in enumerate(expressions):
            spot = f"{where}.matchExpressions[{i}]"
            entry = check_fields(item, spot, ("key", "operator", "values"))
            key = _key(entry.get("key"), f"{spot}.key")
            operator = read_str(entry.get("operator"), f"{spot}.operator")
            if operator not in OPERATORS:
                raise PolicyError(f"{spot}.operator: {operator[:20]!r} is not one of {', '.join(OPERATORS)}")
            values = [
                _value(v, f"{spot}.values[{j}]")
                for j, v in enumerate(_bounded(read_list(entry.get("values"), f"{spot}.values"), spot))
            ]
            if operator in ("In", "NotIn") and not values:
                raise PolicyError(f"{spot}.values: {operator} needs at least one value")
            if operator in ("Exists", "DoesNotExist") and values:
                raise PolicyError(f"{spot}.values: {operator} takes no values")
            found.append(Requirement(key, operator, frozenset(values)))
        return cls(tuple(found))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self.requirements)


def labels_of(obj: Any) -> dict[str, str]:
    """An object's labels (strings only); anything else reads as no labels."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    if not isinstance(labels, dict):
        return {}
    return {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}


@dataclass(frozen=True)
class KindSelector:
    """One ``kinds`` entry: any of ``groups`` and any of ``kinds`` ("*" for any)."""

    groups: tuple[str, ...]
    kinds: tuple[str, ...]

    @classmethod
    def from_dict(cls, data: Any, where: str) -> KindSelector:
        data = check_fields(data, where, ("apiGroups", "kinds"))
        groups = tuple(
            read_str(g, f"{where}.apiGroups[{i}]")
            for i, g in enumerate(_bounded(read_list(data.get("apiGroups"), f"{where}.apiGroups"), where))
        )
        kinds = tuple(
            read_str(k, f"{where}.kinds[{i}]")
            for i, k in enumerate(_bounded(read_list(data.get("kinds"), f"{where}.kinds"), where))
        )
        if not groups:
            raise PolicyError(f'{where}.apiGroups: name at least one group ("" is the core group, "*" any)')
        if not kinds:
            raise PolicyError(f'{where}.kinds: name at least one kind ("*" for any)')
        return cls(groups, kinds)

    def matches(self, ident: ObjectIdentity) -> bool:
        if "*" not in self.groups and ident.group not in self.groups:
            return False
        # A kind the request cannot name (a custom resource's scale subresource) matches its group: fail closed.
        return "*" in self.kinds or not ident.kind_known or ident.kind in self.kinds


Scope = Literal["cluster", "namespace"]


@dataclass(frozen=True)
class Match:
    """``spec.match`` (module docstring)."""

    kinds: tuple[KindSelector, ...] = ()
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None
    object_selector: LabelSelector | None = None

    @classmethod
    def from_dict(cls, data: Any, where: str, scope: Scope) -> Match:
        fields = ("kinds", "namespaces", "namespaceSelector", "objectSelector")
        data = check_fields({} if data is None else data, where, fields)
        if scope == "namespace":
            for name in ("namespaces", "namespaceSelector"):
                if name in data:
                    raise PolicyError(
                        f"{where}.{name}: a ManifestPolicy applies in its own namespace only; namespaces are chosen "
                        "by a ClusterManifestPolicy"
                    )
        kinds = tuple(
            KindSelector.from_dict(k, f"{where}.kinds[{i}]")
            for i, k in enumerate(_bounded(read_list(data.get("kinds"), f"{where}.kinds"), f"{where}.kinds"))
        )
        if "kinds" in data and not kinds:
            raise PolicyError(f"{where}.kinds: empty; leave it out to match every kind")
        namespaces = tuple(
            read_str(n, f"{where}.namespaces[{i}]")
            for i, n in enumerate(
                _bounded(read_list(data.get("namespaces"), f"{where}.namespaces"), f"{where}.namespaces")
            )
        )
        for i, name in enumerate(namespaces):
            if not _NAMESPACE.match(name):
                raise PolicyError(f"{where}.namespaces[{i}]: {name[:80]!r} is not a namespace name (no patterns)")
        if "namespaces" in data and not namespaces:
            raise PolicyError(f"{where}.namespaces: empty; leave it out to match every namespace")
        return cls(
            kinds,
            namespaces,
            LabelSelector.from_dict(data["namespaceSelector"], f"{where}.namespaceSelector")
            if "namespaceSelector" in data
            else None,
            LabelSelector.from_dict(data["objectSelector"], f"{where}.objectSelector")
            if "objectSelector" in data
            else None,
        )

    @property
    def needs_namespace_labels(self) -> bool:
        return self.namespace_selector is not None

    def matches_kind(self, ident: ObjectIdentity) -> bool:
        return not self.kinds or any(selector.matches(ident) for selector in self.kinds)

    def matches_objects(self, objects: tuple[Any, ...]) -> bool:
        """``objectSelector`` against the object or the old object (module docstring)."""
        if self.object_selector is None:
            return True
        selector = self.object_selector
        return any(selector.matches(labels_of(obj)) for obj in objects if isinstance(obj, dict))

    def matches_namespace(
        self, namespace: str, ident: ObjectIdentity, obj: Any, labels: Callable[[str], Mapping[str, str] | None]
    ) -> bool | None:
        """Whether the namespace criteria hold; None when they depend on labels not known (yet).

        ``namespace`` is the object's namespace ("" for a cluster-scoped object);
        ``labels`` gives a namespace's labels, or None when they are not known.
        """
        if not self.namespaces and self.namespace_selector is None:
            return True
        if not namespace:
            if not (ident.group == "" and ident.kind == "Namespace"):
                return True  # another cluster-scoped object: never left out by namespace criteria
            # A Namespace: its own name and labels (its name label is set by the API server, so is also read here).
            name = ident.name
            own = labels_of(obj)
            if name:
                own = {**own, NAMESPACE_NAME_LABEL: name}
            if self.namespaces and name not in self.namespaces:
                return False
            return self.namespace_selector is None or self.namespace_selector.matches(own)
        if self.namespaces and namespace not in self.namespaces:
            return False
        if self.namespace_selector is None:
            return True
        found = labels(namespace)
        if found is None:
            return None
        return self.namespace_selector.matches(found)
