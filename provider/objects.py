"""Object identities, object references and name patterns: what scope, skip and exemption rules match.

Name patterns (object names, namespaces, kinds, user and group names) follow
k8s-manifest-sigstore: ``*`` matches anything, ``-`` matches only the empty
string, a comma separates alternatives, and ``*`` inside an alternative
matches any run of characters (upstream only allows it at the end; a trailing
``*`` -- a prefix -- means the same here). Upstream also reads an *empty*
pattern or alternative as "anything"; here it is an error, because a typo
(``name: "kube-root-ca.crt,"``, a trailing comma) must never widen a policy to
every object: omit the field to match any, or write ``*``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .errors import PolicyError
from .readers import unknown_field_message

# --- name patterns ----------------------------------------------------------------

#: A DNS-1123 label (k8s.io/apimachinery pkg/util/validation ``IsDNS1123Label``): a namespace's form.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
#: A DNS-1123 subdomain's characters and length (``IsDNS1123Subdomain``, at most 253): most objects' names.
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")


class Glob:
    """A whole-string pattern whose only wildcard is ``*`` (any run of characters), matched in linear time.

    The obvious regular expression (the literal parts joined by ``.*``)
    backtracks polynomially: ``*a*a*a*a*b`` against a 400-character name of
    ``a`` takes a minute, and object names and keys are the requester's to
    choose. Finding the literal parts leftmost-first between a fixed prefix
    and suffix is exact for ``*``-only patterns.
    """

    __slots__ = ("_parts", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._parts = pattern.split("*")

    def match(self, value: str) -> bool:
        parts = self._parts
        if len(parts) == 1:
            return value == parts[0]
        first, last = parts[0], parts[-1]
        if len(value) < len(first) + len(last) or not value.startswith(first) or not value.endswith(last):
            return False
        position, end = len(first), len(value) - len(last)
        for part in parts[1:-1]:
            found = value.find(part, position, end)
            if found < 0:
                return False
            position = found + len(part)
        return True


def _compile_alternative(alt: str, text: str, where: str, *, spaces: bool) -> Glob | None:
    """None means "matches anything"; ``-`` matches only the empty string."""
    shown = text[:80]
    if not alt:
        raise PolicyError(
            f"{where}: {shown!r} has an empty alternative (an empty pattern, only spaces, or a leading, trailing or "
            "doubled comma), which would match every name; omit the field to match any, write '*' to say so, "
            "or '-' for the empty value"
        )
    if alt == "*":
        return None
    if "**" in alt:
        raise PolicyError(f"{where}: {shown!r} holds '**'; '*' already matches any run of characters")
    if not spaces and any(c.isspace() for c in alt):
        raise PolicyError(f"{where}: {shown!r} holds whitespace inside a name, which no Kubernetes name can contain")
    return Glob("" if alt == "-" else alt)


@dataclass(frozen=True)
class NamePattern:
    text: str
    _alternatives: tuple[Glob | None, ...] = field(repr=False, compare=False)

    @classmethod
    def compile(cls, text: Any, where: str, *, spaces: bool = False) -> NamePattern:
        """Compile ``a,b*,-``; ``spaces`` allows whitespace in a name (user names may hold it, object names never)."""
        if not isinstance(text, str):
            raise PolicyError(f"{where}: expected a string pattern, got {type(text).__name__}")
        alternatives = tuple(_compile_alternative(a.strip(), text, where, spaces=spaces) for a in text.split(","))
        return cls(text, alternatives)

    @property
    def matches_anything(self) -> bool:
        return any(alt is None for alt in self._alternatives)

    def matches(self, value: str) -> bool:
        return any(alt is None or alt.match(value) for alt in self._alternatives)


ANY = NamePattern("*", (None,))

# --- object references ------------------------------------------------------------

_REF_FIELDS = ("group", "version", "kind", "name", "namespace", "subresource")


def split_api_version(api_version: Any) -> tuple[str, str]:
    """``apps/v1`` -> (``apps``, ``v1``); ``v1`` -> (``""``, ``v1``)."""
    if not isinstance(api_version, str):
        return "", ""
    group, _, version = api_version.rpartition("/")
    return group, version


@dataclass(frozen=True)
class ObjectIdentity:
    """What object references match against.

    ``name`` is ``metadata.name`` and nothing else: an object created with only
    ``generateName`` has no name yet (the API server picks one), and a rule for
    an exact name must not match it. ``generate_name`` is kept for messages only.
    """

    group: str
    version: str
    kind: str
    name: str
    namespace: str
    generate_name: str = ""
    #: The subresource a request acts through (``status``, ``scale``); "" for the object itself.
    subresource: str = ""
    #: False when the kind could not be told: a subresource request for a custom
    #: resource names its resource (``widgets``), not its kind. Scope rules then
    #: read the request as in scope, skip rules as not skipped (fail closed).
    kind_known: bool = True

    @classmethod
    def of(cls, obj: dict[str, Any], namespace: str | None = None) -> ObjectIdentity:
        group, version = split_api_version(obj.get("apiVersion"))
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        name, generate = meta.get("name"), meta.get("generateName")
        ns = meta.get("namespace") or namespace or ""
        kind = obj.get("kind")
        return cls(
            group,
            version,
            kind if isinstance(kind, str) else "",
            name if isinstance(name, str) else "",
            ns if isinstance(ns, str) else "",
            generate if isinstance(generate, str) and not name else "",
        )

    def describe(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        name = self.name or (f"{self.generate_name}… (generateName)" if self.generate_name else "")
        kind = self.kind if self.kind_known else f"{self.kind or 'object'} ({self.group or 'core'})"
        text = f"{kind} {where}{name}".strip()
        return f"{text} ({self.subresource} subresource)" if self.subresource else text


@dataclass(frozen=True)
class ObjectRef:
    """``{group, version, kind, name, namespace, subresource}``, each a name pattern; absent = any.

    ``subresource`` names what a request acts through: ``status``, ``scale``,
    ``-`` for the object itself; absent means the object and all of its
    subresources.
    """

    group: NamePattern = ANY
    version: NamePattern = ANY
    kind: NamePattern = ANY
    name: NamePattern = ANY
    namespace: NamePattern = ANY
    subresource: NamePattern = ANY

    @classmethod
    def from_dict(cls, data: Any, where: str) -> ObjectRef:
        if not isinstance(data, dict):
            raise PolicyError(f"{where}: expected an object reference {{group, version, kind, name, namespace}}")
        unknown = sorted(set(data) - set(_REF_FIELDS))
        if unknown:
            raise PolicyError(unknown_field_message(where, unknown[0], _REF_FIELDS))
        return cls(**{k: NamePattern.compile(v, f"{where}.{k}") for k, v in data.items()})

    def matches(self, ident: ObjectIdentity, *, unknown_kind_matches: bool = False) -> bool:
        """Every field matches. A kind that could not be told matches only ``*`` -- or, with
        ``unknown_kind_matches`` (a scope rule, which must not leave such a request out), any kind."""
        kind = (
            self.kind.matches(ident.kind) if ident.kind_known else (unknown_kind_matches or self.kind.matches_anything)
        )
        return (
            kind
            and self.name.matches(ident.name)
            and self.namespace.matches(ident.namespace)
            and self.group.matches(ident.group)
            and self.version.matches(ident.version)
            and self.subresource.matches(ident.subresource)
        )
