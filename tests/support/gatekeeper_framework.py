"""Gatekeeper's rules for ingesting a ConstraintTemplate, applied without Gatekeeper.

Gatekeeper accepts a ConstraintTemplate object and only then hands it to the
constraint framework (``open-policy-agent/frameworks``, vendored in
``open-policy-agent/gatekeeper``), which may refuse it: the template's status
says ``created: false``, no constraint CRD appears, and nothing is enforced.
OPA alone accepts Rego the framework refuses (``import rego.v1`` is the case
that bit us), so the shipped templates are put through the framework's rules
here, in the order the framework applies them, before their Rego runs under
OPA (``tests/support/opa.py``). Each rule names where it comes from; paths are in
``open-policy-agent/frameworks`` unless said otherwise:

1. metadata -- ``constraint/pkg/client/client.go`` ``validateTemplateMetadata``:
   the CRD kind is set and the template's name equals it, case-insensitively;
   Gatekeeper's webhook (``pkg/webhook/policy.go``
   ``validateGatekeeperResources``, gatekeeper repo) refuses names over 63
   characters;
2. targets -- ``client.go`` ``getTargetName`` / ``getTargetHandler``: exactly
   one target, named, and known: Gatekeeper registers one,
   ``admission.k8s.gatekeeper.sh`` (gatekeeper ``pkg/target/target.go``);
3. where the Rego comes from -- ``constraint/pkg/apis/templates/v1/conversion.go``
   ``Convert_v1_Target_To_templates_Target``: a non-empty classic ``rego``
   field (with ``libs``) *replaces* the source of any ``code`` entry with
   engine ``Rego``, without a version; otherwise the ``code`` entry is used.
   No Rego code at all: ``drivers/rego/compilers.go`` ``ErrNoRego``;
4. the source -- ``drivers/rego/schema/schema.go`` ``GetSource``: an object
   with the string ``rego`` (required), ``version`` (absent or empty: ``v0``)
   and ``libs`` (strings);
5. the Rego version -- ``drivers/rego/compilers.go``
   ``parseConstraintTemplateTarget``: ``"v1"`` parses as Rego v1, anything
   else as v0 (Gatekeeper 3.19+; earlier releases parse everything as v0);
6. parsing -- ``compilers.go`` ``parseModule``: the module must parse in that
   version and not be empty. In v0, ``if``, ``contains``, ``in`` and
   ``every`` are keywords only when imported from ``future.keywords`` (or,
   with OPA 0.59+, by ``import rego.v1``: OPA's v0 parser);
7. the ``violation`` rule -- ``compilers.go`` ``requireModuleRules``: a rule
   whose head is named ``violation`` (after the package is rewritten to
   ``data.template``, ``rewriteModulePackage``);
8. libraries -- ``constraint/pkg/regorewriter/regorewriter.go``
   ``checkLibPackages``: each ``libs`` module's package is under
   ``data.lib`` and is not ``data.lib`` itself;
9. imports -- ``regorewriter.go`` ``checkImport`` (with ``isFutureRef`` in
   ``ast_helpers.go``): ``input...`` is refused ("cannot import input"); an
   import under ``data.lib`` or beginning with ``future`` is allowed;
   anything else -- ``rego.v1`` included -- is ``bad import``;
10. data references -- ``regorewriter.go`` ``checkDataReferences`` /
    ``checkRef``: every ``data`` reference in a rule is under ``data.lib`` or
    an extern, and the only extern is ``data.inventory``
    (``drivers/rego/args.go`` ``validDataFields``);
11. the parameter schema -- a ``templates.gatekeeper.sh/v1`` template's
    ``openAPIV3Schema`` must be structural (gatekeeper
    ``website/docs/constrainttemplates.md``, checked by
    ``constraint/pkg/client/crds`` ``ValidateCRD``): a ``type`` at every
    level unless ``x-kubernetes-preserve-unknown-fields`` or
    ``x-kubernetes-int-or-string`` stands in for it, ``properties`` only on
    objects, ``items`` (one schema) only on arrays.

Compiling the module with ``external_data`` declared (``args.go``: one
argument of any type) is the last step; :class:`tests.support.opa.ConstraintTemplateEngine`
does it with OPA itself.

:func:`provider_problems` does the same for the ``Provider`` the templates
call: what Gatekeeper's webhook checks before it stores one.

One way this is stricter than Gatekeeper: a v0 module must also parse as
Rego v1 (OPA here parses v1 only), so templates stay in the syntax both
accept.
"""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from cryptography import x509

#: The one target Gatekeeper registers (gatekeeper ``pkg/target/target.go``, ``Name``).
ADMISSION_TARGET = "admission.k8s.gatekeeper.sh"
#: The Rego driver's engine name (``drivers/rego/schema/schema.go``, ``Name``).
REGO_ENGINE = "Rego"
#: The CEL driver's engine name (``drivers/k8scel/schema/schema.go``, ``Name``): a template may carry it instead.
CEL_ENGINE = "K8sNativeValidation"
#: ``drivers/rego/driver.go``: the rule every template must define.
REQUIRED_RULE = "violation"
#: ``drivers/rego/driver.go`` ``libRoot``: library packages live under it.
LIB_ROOT = ("data", "lib")
#: ``drivers/rego/args.go`` ``validDataFields``: the only ``data`` a template may read besides its libraries.
EXTERNS = (("data", "inventory"),)
#: Keywords OPA's v0 parser knows only after ``import future.keywords[.<kw>]``.
FUTURE_KEYWORDS = ("contains", "every", "if", "in")
#: gatekeeper ``pkg/webhook/policy.go`` ``validateGatekeeperResources``.
MAX_NAME_LENGTH = 63
TEMPLATE_API_VERSIONS = (
    "templates.gatekeeper.sh/v1",
    "templates.gatekeeper.sh/v1beta1",
    "templates.gatekeeper.sh/v1alpha1",
)

#: Parses one Rego module (v1 syntax) into OPA's JSON AST, raising on a parse error.
RegoParser = Callable[[str], dict[str, Any]]


class TemplateRefused(Exception):
    """The framework would refuse the template; ``rule`` names the source function."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule
        self.message = message


@dataclass(frozen=True)
class RegoSource:
    """What ``schema.GetSource`` reads from the Rego ``code`` entry."""

    rego: str
    version: str
    libs: tuple[str, ...]
    #: ``"rego"`` when the classic field supplied it, ``"code"`` otherwise.
    origin: str


@dataclass(frozen=True)
class IngestedTemplate:
    name: str
    kind: str
    target: str
    source: RegoSource
    module: dict[str, Any]
    imports: tuple[str, ...]
    parameters_schema: dict[str, Any] | None


# --- 3, 4: where the Rego comes from ----------------------------------------------------------


def rego_source(target: dict[str, Any]) -> RegoSource:
    """The Rego the framework compiles for one ``spec.targets[]`` entry (steps 3 and 4)."""
    rego = target.get("rego")
    if isinstance(rego, str) and rego != "":
        libs = target.get("libs") or []
        if not isinstance(libs, list) or not all(isinstance(lib, str) for lib in libs):
            raise TemplateRefused("schema.GetSource", "libs must be a list of strings")
        # conversion.go: the classic field's source is injected with no version, which GetSource reads as v0.
        return RegoSource(rego=rego, version="v0", libs=tuple(libs), origin="rego")
    code = target.get("code") or []
    if not isinstance(code, list):
        raise TemplateRefused("conversion", "code must be a list")
    entries = [c for c in code if isinstance(c, dict) and c.get("engine") == REGO_ENGINE]
    if not entries:
        raise TemplateRefused(
            "compilers.parseConstraintTemplateTarget", "Could not extract Rego from the constraint template"
        )
    source = entries[0].get("source")  # the first Rego entry, as the driver's loop takes it
    if source is None:
        raise TemplateRefused("schema.GetSource", "rego source missing required field: source")
    if not isinstance(source, dict):
        raise TemplateRefused("schema.GetSource", "could not recognize the type")
    rego = source.get("rego")
    if rego is None:
        raise TemplateRefused("schema.GetSource", "rego source missing required field: rego")
    if not isinstance(rego, str):
        raise TemplateRefused("schema.GetSource", "rego: expected a string")
    version = source.get("version")
    if version is not None and not isinstance(version, str):
        raise TemplateRefused("schema.GetSource", "version: expected a string")
    libs = source.get("libs") or []
    if not isinstance(libs, list) or not all(isinstance(lib, str) for lib in libs):
        raise TemplateRefused("schema.GetSource", "libs must be a list of strings")
    return RegoSource(rego=rego, version=version or "v0", libs=tuple(libs), origin="code")


# --- 6: parsing ------------------------------------------------------------------------------------

_COMMENT_OR_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|`[^`]*`|#[^\n]*')
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\s*\()?")


def keywords_used(rego: str) -> set[str]:
    """The future keywords a module uses as keywords (``contains(`` is the builtin, not the keyword)."""
    code = _COMMENT_OR_STRING.sub(" ", rego)
    used: set[str] = set()
    for match in _WORD.finditer(code):
        word = match.group(0).rstrip("( \t\n")
        called = match.group(1) is not None
        if word in FUTURE_KEYWORDS and not (word == "contains" and called):
            # A dotted name (``future.keywords.in``, ``x.in``) is a path, not a keyword.
            if match.start() > 0 and code[match.start() - 1] == ".":
                continue
            used.add(word)
    return used


def _ref_path(term: dict[str, Any]) -> tuple[str, ...]:
    """``future.keywords.in`` for an import's ref term; non-string parts as ``<type>``."""
    parts = []
    for part in term.get("value", []):
        parts.append(str(part["value"]) if part.get("type") in ("var", "string") else f"<{part.get('type')}>")
    return tuple(parts)


def imports_of(module: dict[str, Any]) -> list[tuple[str, ...]]:
    return [_ref_path(imp["path"]) for imp in module.get("imports", []) or []]


def parse(path: str, rego: str, version: str, parser: RegoParser) -> dict[str, Any]:
    """Step 6: parse ``rego`` as ``version`` would (v1, or v0 with its future-keyword rule)."""
    if rego.strip() == "":
        raise TemplateRefused("compilers.parseModule", f"module {path!r} is empty")
    try:
        module = parser(rego)
    except Exception as exc:
        raise TemplateRefused("compilers.parseModule", f"{path}: {exc}") from exc
    if version != "v1":
        # OPA 0.59+ also takes ``import rego.v1`` in a v0 module as all four keywords (the import
        # itself is then refused by step 9, which is the error a real Gatekeeper reports).
        imported = {p[2] if len(p) == 3 else "*" for p in imports_of(module) if p[:2] == ("future", "keywords")}
        if ("rego", "v1") in imports_of(module):
            imported.add("*")
        missing = sorted(kw for kw in keywords_used(rego) if kw not in imported and "*" not in imported)
        if missing:
            raise TemplateRefused(
                "compilers.parseModule",
                f"{path}: parsed as Rego v0, where {', '.join(missing)} need import future.keywords.<keyword>",
            )
    return module


# --- 7-10: the rewriter's checks -------------------------------------------------------------------


def rule_names(module: dict[str, Any]) -> set[str]:
    """``requireModuleRules``: rules by ``Head.Name`` (a rule with a dotted head has none)."""
    return {str(rule["head"]["name"]) for rule in module.get("rules", []) if rule.get("head", {}).get("name")}


def _refs(node: Any) -> Iterator[list[dict[str, Any]]]:
    if isinstance(node, dict):
        if node.get("type") == "ref" and isinstance(node.get("value"), list):
            yield node["value"]
        for child in node.values():
            yield from _refs(child)
    elif isinstance(node, list):
        for child in node:
            yield from _refs(child)


def _is_sub_ref(base: tuple[str, ...], ref: list[dict[str, Any]]) -> bool:
    """``isSubRef``: ``ref`` begins with ``base`` (``data`` a var, the rest strings)."""
    if len(ref) < len(base):
        return False
    for i, name in enumerate(base):
        want = "var" if i == 0 else "string"
        if ref[i].get("type") != want or ref[i].get("value") != name:
            return False
    return True


def check_imports(module: dict[str, Any], path: str) -> None:
    for imp in module.get("imports", []) or []:
        ref = imp["path"].get("value", [])
        dotted = ".".join(_ref_path(imp["path"]))
        if _is_sub_ref(("input",), ref):
            raise TemplateRefused(
                "regorewriter.checkImport", f"{path}: invalid import: cannot import input: {dotted!r}"
            )
        if _is_sub_ref(LIB_ROOT, ref):
            continue
        if ref and ref[0].get("type") == "var" and ref[0].get("value") == "future":  # isFutureRef
            continue
        raise TemplateRefused("regorewriter.checkImport", f'{path}: invalid import: bad import: "{dotted}"')


def check_data_references(module: dict[str, Any], path: str) -> None:
    for rule in module.get("rules", []):
        for ref in _refs(rule):
            if not (ref and ref[0].get("type") == "var" and ref[0].get("value") == "data"):
                continue
            if any(_is_sub_ref(extern, ref) for extern in EXTERNS) or _is_sub_ref(LIB_ROOT, ref):
                continue
            shown = ".".join(str(p.get("value")) for p in ref)
            raise TemplateRefused("regorewriter.checkDataReferences", f"{path}: disallowed ref {shown}")


def reads_inventory(module: dict[str, Any]) -> bool:
    """Whether any rule reads ``data.inventory`` (which holds only what Gatekeeper is told to sync)."""
    return any(_is_sub_ref(EXTERNS[0], ref) for rule in module.get("rules", []) for ref in _refs(rule))


def check_lib_package(module: dict[str, Any], path: str) -> None:
    package = module["package"]["path"]
    names = tuple(str(p.get("value")) for p in package)
    if not _is_sub_ref(LIB_ROOT, package) or names == LIB_ROOT:
        raise TemplateRefused(
            "regorewriter.checkLibPackages", f"{path}: path {'.'.join(names)} not found in lib prefixes"
        )


# --- 11: the parameter schema --------------------------------------------------------------------


def structural_problems(schema: Any, where: str = "openAPIV3Schema") -> list[str]:
    """Why ``schema`` is not a structural schema (empty when it is)."""
    if not isinstance(schema, dict):
        return [f"{where}: a schema must be an object"]
    problems = []
    if "$ref" in schema:
        problems.append(f"{where}: $ref is not allowed")
    free = (
        schema.get("x-kubernetes-preserve-unknown-fields") is True or schema.get("x-kubernetes-int-or-string") is True
    )
    kind = schema.get("type")
    if kind is None and not free:
        problems.append(f"{where}: type is required")
    if "properties" in schema:
        if kind not in (None, "object"):
            problems.append(f"{where}: properties on a {kind}")
        for name, sub in (schema["properties"] or {}).items():
            problems.extend(structural_problems(sub, f"{where}.properties.{name}"))
        if isinstance(schema.get("additionalProperties"), dict):
            problems.append(f"{where}: properties and additionalProperties together")
    if isinstance(schema.get("additionalProperties"), dict):
        problems.extend(structural_problems(schema["additionalProperties"], f"{where}.additionalProperties"))
    if "items" in schema:
        if kind not in (None, "array"):
            problems.append(f"{where}: items on a {kind}")
        if isinstance(schema["items"], list):
            problems.append(f"{where}: items must be one schema")
        else:
            problems.extend(structural_problems(schema["items"], f"{where}.items"))
    elif kind == "array":
        problems.append(f"{where}: an array needs items")
    return problems


# --- the whole pipeline ------------------------------------------------------------------------------


def ingest(template: dict[str, Any], parser: RegoParser) -> IngestedTemplate:
    """Apply the framework's rules, in its order, raising :class:`TemplateRefused` at the first it breaks."""
    if template.get("apiVersion") not in TEMPLATE_API_VERSIONS or template.get("kind") != "ConstraintTemplate":
        raise TemplateRefused(
            "scheme", f"not a ConstraintTemplate: {template.get('apiVersion')}/{template.get('kind')}"
        )
    name = str((template.get("metadata") or {}).get("name") or "")
    spec = template.get("spec") or {}
    crd_spec = (spec.get("crd") or {}).get("spec") or {}
    kind = str((crd_spec.get("names") or {}).get("kind") or "")
    # 1. metadata
    if len(name) > MAX_NAME_LENGTH:
        raise TemplateRefused("webhook.validateGatekeeperResources", f"metadata.name longer than {MAX_NAME_LENGTH}")
    if kind == "":
        raise TemplateRefused(
            "client.validateTemplateMetadata", f"ConstraintTemplate {name!r} does not specify CRD Kind"
        )
    if name.lower() != kind.lower():
        raise TemplateRefused(
            "client.validateTemplateMetadata",
            f"the ConstraintTemplate's name {name!r} is not equal to the lowercase of CRD's Kind: {kind.lower()!r}",
        )
    # 2. targets
    targets = spec.get("targets") or []
    if not isinstance(targets, list) or len(targets) != 1:
        raise TemplateRefused("client.getTargetName", "must declare exactly one target")
    target = targets[0]
    target_name = target.get("target") or ""
    if target_name == "":
        raise TemplateRefused("client.getTargetName", "target name must not be empty")
    if target_name != ADMISSION_TARGET:
        raise TemplateRefused(
            "client.getTargetHandler", f"target {target_name!r} not recognized, known targets [{ADMISSION_TARGET}]"
        )
    # 11. the parameter schema (the CRD is built before the Rego is compiled)
    validation = crd_spec.get("validation") or {}
    schema = validation.get("openAPIV3Schema")
    if (
        schema is not None
        and template["apiVersion"] == "templates.gatekeeper.sh/v1"
        and not validation.get("legacySchema")
    ):
        problems = structural_problems(schema)
        if problems:
            raise TemplateRefused("crds.ValidateCRD", "; ".join(problems))
    # 3-6. the source, its version, parsing
    source = rego_source(target)
    module = parse("template", source.rego, source.version, parser)
    # 7. the violation rule
    if REQUIRED_RULE not in rule_names(module):
        raise TemplateRefused(
            "compilers.requireModuleRules", f"invalid rego: missing required rules: [{REQUIRED_RULE}]"
        )
    # 8. libraries
    libs = []
    for i, lib in enumerate(source.libs):
        lib_module = parse(f'libs["lib_{i}"]', lib, source.version, parser)
        libs.append((f"lib_{i}", lib_module))
    for path, lib_module in libs:
        check_lib_package(lib_module, path)
    # 9, 10. imports and data references, libraries first as the rewriter walks them
    for path, lib_module in [*libs, ("template", module)]:
        check_imports(lib_module, path)
    for path, lib_module in [*libs, ("template", module)]:
        check_data_references(lib_module, path)
    return IngestedTemplate(
        name=name,
        kind=kind,
        target=target_name,
        source=source,
        module=module,
        imports=tuple(".".join(p) for p in imports_of(module)),
        parameters_schema=schema,
    )


# --- the Provider --------------------------------------------------------------------------------

PROVIDER_API_VERSIONS = ("externaldata.gatekeeper.sh/v1beta1", "externaldata.gatekeeper.sh/v1alpha1")


def _go_pem_first_block(data: bytes) -> bytes | None:
    """Go's ``pem.Decode``: the DER bytes of the first PEM block anywhere in ``data`` (any type), or None."""
    match = re.search(rb"-----BEGIN ([^-\n]*)-----\r?\n(.*?)\r?\n?-----END \1-----", data, re.DOTALL)
    if match is None:
        return None
    body = b"".join(line for line in match.group(2).splitlines() if b":" not in line)  # no PEM headers here
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        return None


def provider_problems(provider: dict[str, Any]) -> list[str]:
    """Why Gatekeeper's webhook refuses this Provider, or why every call through it would fail.

    The webhook (gatekeeper ``pkg/webhook/policy.go`` ``validateProvider``) inserts the
    Provider into a fresh provider cache; ``constraint/pkg/externaldata/cache.go``
    ``ProviderCache.Upsert`` refuses an empty name or url, a negative timeout, and
    (``isValidCABundle``) a scheme other than https, an empty caBundle, a caBundle that
    does not base64-decode (``base64.StdEncoding``, which skips newlines), whose first
    PEM block is missing, or whose first block is not an X.509 certificate. One more
    rule is ours: ``request.go`` ``DefaultSendRequestToProvider`` gives each call a
    deadline of ``timeout`` whole seconds from now, so a timeout of 0 is accepted and
    then fails every call.
    """
    problems = []
    if provider.get("apiVersion") not in PROVIDER_API_VERSIONS or provider.get("kind") != "Provider":
        problems.append(f"not a Provider: {provider.get('apiVersion')}/{provider.get('kind')}")
    metadata = provider.get("metadata") or {}
    if not metadata.get("name"):
        problems.append("provider name can not be empty")
    if "namespace" in metadata:
        problems.append("a Provider is cluster-scoped: metadata.namespace must not be set")
    spec = provider.get("spec") or {}
    url = spec.get("url")
    if not isinstance(url, str) or url == "":
        problems.append(f"invalid provider url. value: {url}")
        url = ""
    timeout = spec.get("timeout", 0)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 0:
        problems.append(f"provider timeout should be a positive integer. value: {timeout}")
    elif timeout == 0:
        problems.append("timeout 0: Gatekeeper accepts it, and then every call's deadline is already past")
    if urllib.parse.urlsplit(url).scheme != "https":
        problems.append("only HTTPS scheme is supported for Providers")
        return problems
    bundle = spec.get("caBundle")
    if not isinstance(bundle, str) or bundle == "":
        problems.append("caBundle should be set for HTTPS scheme")
        return problems
    try:
        pem = base64.b64decode(bundle.replace("\r", "").replace("\n", ""), validate=True)
    except (binascii.Error, ValueError) as exc:
        problems.append(f"failed to base64 decode caBundle: {exc}")
        return problems
    der = _go_pem_first_block(pem)
    if der is None:
        problems.append("bad caBundle")
        return problems
    try:
        x509.load_der_x509_certificate(der)
    except ValueError as exc:
        problems.append(f"failed to parse caBundle: {exc}")
    return problems
