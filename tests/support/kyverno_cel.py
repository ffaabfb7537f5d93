"""Kyverno's CEL environment for a ValidatingPolicy, release by release, and a real CEL type checker over it.

Kyverno compiles a ``ValidatingPolicy`` when it is created (its policy webhook
refuses one that does not compile) and again in every controller. This module
declares what Kyverno's compiler declares -- read from kyverno/kyverno at the
tags in :data:`tests.support.kyverno.VERSIONS` -- and type-checks every
expression with **cel-expr-python**, the Python binding of the CEL project's C++
implementation (cel-cpp), which has a full type checker. ``cel-python`` (the
evaluator the other Kyverno tests use) parses and evaluates but has no type
checker: ``celpy.Environment.compile`` is the parser alone.

What is declared (``pkg/cel/policies/vpol/compiler/compiler.go``,
``createBaseVpolEnv``; ``pkg/cel/compiler/env.go``, ``DefaultEnvOptions``):

* ``object``, ``oldObject``: ``dyn``.
* ``request``: ``kubernetes.AdmissionRequest`` as k8s.io/apiserver
  ``pkg/admission/plugin/cel/compile.go`` ``BuildRequestType`` declares it
  (``kind``/``requestKind`` a GroupVersionKind, ``resource``/``requestResource``
  a GroupVersionResource, ``userInfo.groups`` a ``list(string)``, ...); from 1.18
  with ``object`` and ``oldObject`` fields of type ``dyn`` as well
  (``pkg/cel/compiler/request.go``). The object types are built as protobuf
  messages for the checker; the one field protobuf cannot say exactly,
  ``userInfo.extra`` (``map(string, list(string))``), is declared
  ``map(string, list(dyn))``, looser than Kyverno.
* ``variables.<name>``: each variable has the type of its expression, and a
  variable sees only those before it (``pkg/cel/compiler/compiler.go``
  ``CompileVariable``: ``RegisterField`` after a successful compile; a variable
  that failed is an "undefined field" for the ones after it).
* ``http``: the opaque ``http.Context`` with member functions ``Get(string)``,
  ``Get(string, map(string, string))``, ``Post(string, dyn)``,
  ``Post(string, dyn, map(string, string))`` and ``Client(string) -> http.Context``;
  from 1.18 also spelled ``get``/``post``/``client`` (1.17: kyverno
  ``pkg/cel/libs/http/lib.go``; 1.18, 1.19: kyverno/sdk ``cel/libs/http/lib.go``,
  the camel-case names when the library version is at least 1.18).
* CEL's standard library with the strings, math, encoders, bindings and
  optional extensions. Kyverno also binds ext.Lists, ext.Sets, ext.Regex and the
  Kubernetes libraries (quantity, url, ip, cidr, ...), which cel-cpp does not
  have: an expression using them is refused here although Kyverno accepts it.
* ``cel.HomogeneousAggregateLiterals()``: a list or map literal whose elements
  (map keys, map values) are not all of one type is an error, ``expected type 'A'
  but found 'B'`` (cel-go ``cel/validator.go``, ``homogeneousAggregateLiteralValidator``,
  v0.26 to v0.30: the first element's type against each other's with
  ``IsEquivalentType``). cel-cpp has no such option: the rule is applied here to
  the checked AST cel-cpp returns, with cel-cpp's type for every node.
* The results: a validation's ``expression`` must be ``bool``, its
  ``messageExpression`` a ``string``, a match condition ``bool``
  (``CompileValidation``, ``CompileMatchCondition``).

Anything else Kyverno declares (``namespaceObject``, ``globalContext``,
``resource``, ``image``, ...) is not declared: an expression using it is refused
until it is added here from the source.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_encoders, ext_math, ext_optional, ext_strings
from google.protobuf import descriptor_pb2, descriptor_pool, struct_pb2

from tests.support.kyverno import VERSIONS

_F = descriptor_pb2.FieldDescriptorProto
_STRING, _BOOL, _MESSAGE = _F.TYPE_STRING, _F.TYPE_BOOL, _F.TYPE_MESSAGE
_ONE, _MANY = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

#: The runtime type of the value ``http.Client(caBundle)`` returns, per release. cel-go checks every
#: argument of a bound overload against its declared type before calling it (common/decls/decls.go,
#: ``matchesRuntimeSignature``; types.go ``defaultIsAssignableRuntimeType`` compares type names), and
#: the member functions are declared on ``http.Context``; the Client value is the bare Go type, turned
#: into a CEL value by ext.NativeTypes under its own name, so every call on it is "no such overload"
#: (what Kyverno 1.18.1 answered: ``no such overload: Post(http.contextImpl, string, map, map)``).
#: 1.17: kyverno pkg/cel/libs/http/impl.go ``http_client_string`` returns ``NativeToValue(*contextImpl)``;
#: 1.18: the same in kyverno/sdk cel/libs/http/impl.go; 1.19.0: kyverno pkg/cel/libs/http_mock.go,
#: ``mockAwareHTTPContext.Client`` returns a ``*mockAwareHTTPContext`` (and the sdk's impl.go still
#: returns the value unwrapped in every version read).
CLIENT_RUNTIME_TYPE = {"1.17": "http.contextImpl", "1.18": "http.contextImpl", "1.19": "libs.mockAwareHTTPContext"}
CONTEXT_TYPE = "http.Context"


class TypeCheckError(Exception):
    """An expression Kyverno's compiler would refuse."""


@dataclass(frozen=True)
class Checked:
    where: str
    expression: str
    output: str


# --- the declarations -------------------------------------------------------------------------------


def _message(file: descriptor_pb2.FileDescriptorProto, name: str, fields: list[tuple[str, int, int, str]]) -> Any:
    message = file.message_type.add(name=name)
    for number, (field, kind, label, type_name) in enumerate(fields, 1):
        added = message.field.add(name=field, number=number, type=kind, label=label)
        if type_name:
            added.type_name = type_name
    return message


@functools.cache
def _pool(version: str) -> descriptor_pool.DescriptorPool:
    """``kubernetes.AdmissionRequest`` and its parts, as BuildRequestType declares them, as protobuf messages."""
    pool = descriptor_pool.DescriptorPool()
    struct = descriptor_pb2.FileDescriptorProto()
    struct_pb2.DESCRIPTOR.CopyToProto(struct)
    pool.Add(struct)
    file = descriptor_pb2.FileDescriptorProto(
        name=f"kyverno_{version}_request.proto",
        package="kubernetes",
        syntax="proto3",
        dependency=["google/protobuf/struct.proto"],
    )
    _message(file, "GroupVersionKind", [(f, _STRING, _ONE, "") for f in ("group", "version", "kind")])
    _message(file, "GroupVersionResource", [(f, _STRING, _ONE, "") for f in ("group", "version", "resource")])
    user = _message(
        file,
        "UserInfo",
        [("username", _STRING, _ONE, ""), ("uid", _STRING, _ONE, ""), ("groups", _STRING, _MANY, "")],
    )
    extra = user.nested_type.add(name="ExtraEntry")
    extra.options.map_entry = True
    extra.field.add(name="key", number=1, type=_STRING, label=_ONE)
    extra.field.add(name="value", number=2, type=_MESSAGE, label=_ONE, type_name=".google.protobuf.ListValue")
    user.field.add(name="extra", number=4, type=_MESSAGE, label=_MANY, type_name=".kubernetes.UserInfo.ExtraEntry")
    gvk, gvr, value = ".kubernetes.GroupVersionKind", ".kubernetes.GroupVersionResource", ".google.protobuf.Value"
    fields = [
        ("kind", _MESSAGE, _ONE, gvk),
        ("resource", _MESSAGE, _ONE, gvr),
        ("subResource", _STRING, _ONE, ""),
        ("requestKind", _MESSAGE, _ONE, gvk),
        ("requestResource", _MESSAGE, _ONE, gvr),
        ("requestSubResource", _STRING, _ONE, ""),
        ("name", _STRING, _ONE, ""),
        ("namespace", _STRING, _ONE, ""),
        ("operation", _STRING, _ONE, ""),
        ("userInfo", _MESSAGE, _ONE, ".kubernetes.UserInfo"),
        ("dryRun", _BOOL, _ONE, ""),
        ("options", _MESSAGE, _ONE, value),
    ]
    if version != "1.17":  # pkg/cel/compiler/request.go from 1.18: object and oldObject, dyn
        fields += [("object", _MESSAGE, _ONE, value), ("oldObject", _MESSAGE, _ONE, value)]
    _message(file, "AdmissionRequest", fields)
    pool.Add(file)
    return pool


def request_pool() -> descriptor_pool.DescriptorPool:
    """``kubernetes.AdmissionRequest`` as k8s.io/apiserver ``BuildRequestType`` declares it (no object fields).

    The Kubernetes declaration is what Kyverno 1.17 used unchanged: the type a
    webhook's ``matchConditions`` see (``tests/support/webhook_config.py``).
    """
    return _pool("1.17")


def _http_functions(version: str) -> list[Any]:
    t = cel.Type
    context, headers = t.AbstractType(CONTEXT_TYPE), t.Map(t.STRING, t.STRING)
    names = [("Get", "Post", "Client", "pascal")]
    if version != "1.17":
        names.append(("get", "post", "client", "camel"))
    functions = []
    for get, post, client, suffix in names:
        functions += [
            cel.FunctionDecl(
                get,
                [
                    cel.Overload(f"http_get_string_{suffix}", t.DYN, [context, t.STRING], is_member=True),
                    cel.Overload(
                        f"http_get_string_headers_{suffix}", t.DYN, [context, t.STRING, headers], is_member=True
                    ),
                ],
            ),
            cel.FunctionDecl(
                post,
                [
                    cel.Overload(f"http_post_string_any_{suffix}", t.DYN, [context, t.STRING, t.DYN], is_member=True),
                    cel.Overload(
                        f"http_post_string_any_headers_{suffix}",
                        t.DYN,
                        [context, t.STRING, t.DYN, headers],
                        is_member=True,
                    ),
                ],
            ),
            cel.FunctionDecl(
                client, [cel.Overload(f"http_client_string_{suffix}", context, [context, t.STRING], is_member=True)]
            ),
        ]
    return functions


def environment(version: str, variables: dict[str, Any]) -> Any:
    """Kyverno ``version``'s ValidatingPolicy environment, with the ``variables.<name>`` declared so far."""
    if version not in VERSIONS:
        raise TypeCheckError(f"Kyverno {version} is not a supported release")
    declared = {
        "object": cel.Type.DYN,
        "oldObject": cel.Type.DYN,
        "request": cel.Type("kubernetes.AdmissionRequest"),
        "http": cel.Type.AbstractType(CONTEXT_TYPE),
    } | {f"variables.{name}": kind for name, kind in variables.items()}
    return cel.NewEnv(
        descriptor_pool=_pool(version),
        variables=declared,
        functions=_http_functions(version),
        extensions=[
            ext_strings.ExtStrings(),
            ext_math.ExtMath(),
            ext_encoders.ExtEncoders(),
            ext_bindings.ExtBindings(),
            ext_optional.ExtOptional(),
        ],
    )


# --- the checked AST, as cel-cpp returns it -----------------------------------------------------------
#
# ``Expression.serialize()`` is a google.protobuf.Any holding a cel.expr.CheckedExpr
# (cel-spec proto/cel/expr/checked.proto, syntax.proto). Read with the wire format and those
# field numbers: the expression tree and the type of every node.

_PRIMITIVES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_WELL_KNOWN = {1: "google.protobuf.Any", 2: "google.protobuf.Timestamp", 3: "google.protobuf.Duration"}


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _fields(data: bytes) -> dict[int, list[Any]]:
    """One protobuf message: field number -> values (int for varints, bytes for length-delimited)."""
    out: dict[int, list[Any]] = {}
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 2:
            size, at = _varint(data, at)
            value, at = data[at : at + size], at + size
        elif wire == 1:
            value, at = data[at : at + 8], at + 8
        elif wire == 5:
            value, at = data[at : at + 4], at + 4
        else:
            raise TypeCheckError(f"unexpected protobuf wire type {wire} in a checked expression")
        out.setdefault(number, []).append(value)
    return out


def _type(data: bytes) -> tuple[Any, ...]:
    """A cel.expr.Type as a comparable tuple: (kind, name, *parameters)."""
    f = _fields(data)
    if 1 in f:
        return ("dyn",)
    if 2 in f:
        return ("null",)
    if 3 in f:
        return ("primitive", _PRIMITIVES[f[3][0]])
    if 4 in f:
        return ("wrapper", _PRIMITIVES[f[4][0]])
    if 5 in f:
        return ("well_known", _WELL_KNOWN[f[5][0]])
    if 6 in f:
        return ("list", _type(_fields(f[6][0]).get(1, [b""])[0]))
    if 7 in f:
        m = _fields(f[7][0])
        return ("map", _type(m[1][0]), _type(m[2][0]))
    if 9 in f:
        return ("message", f[9][0].decode())
    if 10 in f:
        return ("type_param", f[10][0].decode())
    if 11 in f:
        return ("type", _type(f[11][0]))
    if 12 in f:
        return ("error",)
    if 14 in f:
        a = _fields(f[14][0])
        return ("abstract", a[1][0].decode(), *(_type(p) for p in a.get(2, [])))
    raise TypeCheckError(f"a type the checker returned is not understood: {sorted(f)}")


def type_name(kind: tuple[Any, ...]) -> str:
    """The type as cel-go's ``FormatCELType`` writes it (``list(string)``, ``map(string, dyn)``)."""
    tag = kind[0]
    if tag in ("primitive", "well_known", "message", "type_param"):
        return str(kind[1]).removeprefix("google.protobuf.").lower() if tag == "well_known" else str(kind[1])
    if tag == "wrapper":
        return f"wrapper({kind[1]})"
    if tag == "list":
        return f"list({type_name(kind[1])})"
    if tag == "map":
        return f"map({type_name(kind[1])}, {type_name(kind[2])})"
    if tag == "abstract":
        params = ", ".join(type_name(p) for p in kind[2:])
        return f"{kind[1]}({params})" if params else str(kind[1])
    if tag == "type":
        return f"type({type_name(kind[1])})"
    return str(tag)


def _checked(expression: Any) -> tuple[dict[int, tuple[Any, ...]], bytes]:
    any_message = _fields(expression.serialize())
    if any_message[1][0] != b"type.googleapis.com/cel.expr.CheckedExpr":
        raise TypeCheckError(f"cel-expr-python serialized a {any_message[1][0]!r}, not a CheckedExpr")
    checked = _fields(any_message[2][0])
    types: dict[int, tuple[Any, ...]] = {}
    for entry in checked.get(3, []):
        e = _fields(entry)
        types[e[1][0]] = _type(e.get(2, [b""])[0])
    return types, checked[4][0]


def _literals(expr: bytes) -> Iterator[tuple[str, list[bytes], list[bytes]]]:
    """Every list literal (elements) and map literal (keys, values) in an expression tree, nested ones too."""
    f = _fields(expr)
    children: list[bytes] = []
    if 5 in f:  # select: operand
        children += _fields(f[5][0]).get(1, [])
    if 6 in f:  # call: target, args
        call = _fields(f[6][0])
        children += call.get(1, []) + call.get(3, [])
    if 7 in f:  # list literal
        elements = _fields(f[7][0]).get(1, [])
        yield "list", elements, []
        children += elements
    if 8 in f:  # struct or map literal
        create = _fields(f[8][0])
        entries = [_fields(e) for e in create.get(2, [])]
        keys = [e[3][0] for e in entries if 3 in e]
        values = [e[4][0] for e in entries]
        if keys:
            yield "map", keys, values
        children += keys + values
    if 9 in f:  # comprehension: range, init, condition, step, result
        comprehension = _fields(f[9][0])
        for number in (2, 4, 5, 6, 7):
            children += comprehension.get(number, [])
    for child in children:
        yield from _literals(child)


def _node_id(expr: bytes) -> int:
    return int(_fields(expr)[2][0])


def homogeneous_literal_errors(expression: Any) -> list[str]:
    """cel-go's ``homogeneousAggregateLiteralValidator`` over cel-cpp's checked AST (no exempt functions)."""
    types, root = _checked(expression)
    errors = []
    for kind, first_list, values in _literals(root):
        for group in (first_list, values):
            if not group:
                continue
            expected = types[_node_id(group[0])]
            for element in group[1:]:
                found = types[_node_id(element)]
                if found != expected:
                    errors.append(f"expected type '{type_name(expected)}' but found '{type_name(found)}'")
                    if kind == "list":
                        break
    return errors


# --- the policy, checked as Kyverno compiles it ----------------------------------------------------


def _compile(env: Any, where: str, expression: str) -> Any:
    try:
        compiled = env.compile(expression)
    except RuntimeError as exc:  # cel-expr-python reports checker errors as RuntimeError(INVALID_ARGUMENT: ...)
        raise TypeCheckError(f"{where}: {exc}") from None
    problems = homogeneous_literal_errors(compiled)
    if problems:
        raise TypeCheckError(f"{where}: {'; '.join(problems)}")
    return compiled


def type_check(doc: dict[str, Any], version: str) -> list[Checked]:
    """Every CEL expression of the ValidatingPolicy ``doc``, checked in Kyverno ``version``'s environment.

    Returns each expression with its output type; raises :class:`TypeCheckError` for the first one Kyverno
    would refuse, naming its field as Kyverno does (``spec.variables[3].expression``).
    """
    if doc.get("kind") != "ValidatingPolicy":
        raise TypeCheckError(f"{doc.get('kind')} is not a ValidatingPolicy")
    spec = doc["spec"]
    out: list[Checked] = []
    declared: dict[str, Any] = {}
    for i, condition in enumerate(spec.get("matchConditions", [])):
        where = f"spec.matchConditions[{i}].expression"
        compiled = _compile(environment(version, declared), where, condition["expression"])
        if compiled.return_type() != cel.Type.BOOL:
            raise TypeCheckError(f"{where}: output is expected to be of type bool")
        out.append(Checked(where, condition["expression"], compiled.return_type().name()))
    for i, variable in enumerate(spec.get("variables", [])):
        where = f"spec.variables[{i}].expression"
        compiled = _compile(environment(version, declared), where, variable["expression"])
        declared[variable["name"]] = compiled.return_type()
        out.append(Checked(where, variable["expression"], compiled.return_type().name()))
    env = environment(version, declared)
    for i, validation in enumerate(spec.get("validations", [])):
        for field, result in (("expression", cel.Type.BOOL), ("messageExpression", cel.Type.STRING)):
            if field not in validation:
                continue
            where = f"spec.validations[{i}].{field}"
            compiled = _compile(env, where, validation[field])
            if compiled.return_type() != result:
                raise TypeCheckError(f"{where}: output is expected to be of type {result.name().lower()}")
            out.append(Checked(where, validation[field], compiled.return_type().name()))
    for key in ("auditAnnotations", "matchImageReferences"):
        if spec.get(key):
            raise TypeCheckError(f"spec.{key}: not modelled; declare it from Kyverno's source first")
    return out
