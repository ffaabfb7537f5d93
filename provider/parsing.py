"""Bounded YAML and JSON parsing: hostile input in, plain JSON-shaped data out.

Contract: every function here returns only ``dict`` (string keys), ``list``,
``str``, ``int``, ``float`` (finite), ``bool`` and ``None`` -- the JSON data
model Kubernetes objects live in -- or raises the caller's error class with a
message a person can act on. Time and memory are bounded by
:class:`provider.limits.Limits`.

YAML is read as ``kubectl`` reads it, so that the verifier and the cluster never
see two different objects in one signed file. ``kubectl`` (and the API server,
for YAML request bodies) turns YAML into JSON with ``sigs.k8s.io/yaml``:
goyaml.v2 decodes the document, ``convertToJSONableObject`` makes the keys
strings, ``encoding/json`` writes the result. This module gives the object a
JSON reader gets from that text (docs/format.md has the table; every rule has a
row in ``tests/unit/test_parsing_kubectl.py``):

* Plain scalars resolve by goyaml.v2's ``resolve()``, which is neither YAML 1.1
  nor 1.2: ``y``/``n``/``on``/``off`` are booleans, ``0o17``/``017``/``0x1F``/
  ``0b101`` are integers, ``1e3`` is a number, ``1:30`` (YAML 1.1
  sexagesimal) and timestamps stay strings. Explicit core-schema tags
  (``!!str``, ``!!int``, ``!!float``, ``!!bool``, ``!!null``, ``!!timestamp``)
  follow its rules too, and are refused where it refuses them.
* Numbers come out as ``encoding/json`` writes them: a whole float is an
  integer (``1e3`` is ``1000``, ``1.0`` is ``1``).
* Non-string keys become the text ``convertToJSONableObject`` gives them
  (``1.5`` -> ``"1.5"``, ``1e6`` -> ``"1e+06"``, ``yes`` -> ``"true"``); null keys
  and keys beyond int64 are refused, as it refuses them.

Where ``kubectl`` fails, where two ``kubectl`` versions disagree, or where its
result depends on Go's random map order, the document is refused (fail closed):
duplicate keys (the API server's strict decoder refuses them too), a merge key
``<<`` that would override a key set earlier in its mapping, ``.nan``/``.inf``
values, hexadecimal/octal/binary integers beyond uint64, ``!!binary`` and tags
outside the core schema.

YAML is read from libyaml's *event* stream (PyYAML's C parser; goyaml.v2's
parser is a Go port of the same libyaml) and the objects are built here,
iteratively:

* PyYAML's C composer recurses once per nesting level and crashes the process
  (a segmentation fault, not an exception) on deeply nested input; the event
  parser does not recurse, and depth is checked before anything is built.
* Aliases are allowed (valid YAML that ``kubectl`` accepts) but each one counts
  as the full size of what it refers to, so a "billion laughs" document stops
  at ``max_nodes`` without being expanded. An anchor is known only in its own
  document (``kubectl`` decodes each document on its own).
* Duplicate keys are refused, as the Kubernetes API server's strict decoder
  does: a verifier and the cluster must never read different values from one
  document.
"""

from __future__ import annotations

import json
import math
import re
import struct
from typing import Any

import yaml
from yaml import events as ev

from .errors import DataError
from .limits import DEFAULT_LIMITS, Limits

_CLoader: Any = getattr(yaml, "CSafeLoader", None)
if _CLoader is None:  # pragma: no cover - the C loader is a hard requirement
    raise ImportError("PyYAML was built without libyaml; reinstall pyyaml with the C extension")

_YAML = "tag:yaml.org,2002:"
_STR, _NULL, _BOOL, _INT, _FLOAT = (_YAML + t for t in ("str", "null", "bool", "int", "float"))
_TIMESTAMP, _MERGE = _YAML + "timestamp", _YAML + "merge"
_MAP_TAGS = frozenset({None, "!", _YAML + "map"})
_SEQ_TAGS = frozenset({None, "!", _YAML + "seq"})

_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1

# --- Scalars, as goyaml.v2 resolves them ----------------------------------------
# Source: resolve.go of go.yaml.in/yaml/v2, the goyaml.v2 that sigs.k8s.io/yaml
# (and so kubectl and the API server) uses -- kubernetes/kubernetes
# vendor/go.yaml.in/yaml/v2/resolve.go, same table as kubernetes-sigs/yaml
# goyaml.v2/resolve.go. resolve() looks at the first character ("resolveTable"):
# a sign or digit may be a number, "." a float, one of "yYnNtTfFoO~" a word of
# "resolveMap"; anything else is a string without further look.

#: resolveMap (resolve.go init()). It also holds "<<", but "<" has no hint, so a
#: plain "<<" resolves to a string; only as a mapping key is it a merge
#: (decode.go isMerge).
_WORDS: dict[str, Any] = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
    **dict.fromkeys(("~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
_SIGNS, _DIGITS, _WORD_STARTS = "+-", "0123456789", "yYnNtTfFoO~"

#: strconv.ParseInt(s, 0, 64) / ParseUint(s, 0, 64) syntax, after resolve()
#: has removed every "_": a sign, then a 0b/0o/0x prefix (either case), a
#: leading 0 (octal) or a decimal.
_GO_INT = re.compile(r"([+-]?)(?:0[bB]([01]+)|0[oO]([0-7]+)|0[xX]([0-9a-fA-F]+)|0([0-7]*)|([1-9][0-9]*))")
#: resolve.go yamlStyleFloat: only what matches it is handed to ParseFloat.
_YAML_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
#: strconv.ParseFloat(s) for s starting with "." (resolve()'s "." hint, no "_"
#: removed): Go float-literal syntax, "_" only between digits (atof.go
#: readFloat and underscoreOK).
_DOT_FLOAT = re.compile(r"\.[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+(?:_[0-9]+)*)?")
#: What resolve()'s own "0b" branch hands to ParseInt(s[2:], 2, 64): a sign is
#: accepted there, so "0b-101" is -5.
_SIGNED_BINARY = re.compile(r"[+-]?[01]+")


def _resolve_plain(text: str, error: type[DataError]) -> Any:
    """goyaml.v2 ``resolve("", text)`` for a plain scalar: the Go value as ``str``,
    ``None``, ``bool``, ``int`` or ``float`` (possibly NaN or infinite)."""
    if not text:
        return None
    first = text[0]
    if first in _DIGITS:
        return _number(text, error)
    if first in _WORD_STARTS:
        return _WORDS.get(text, text)
    if first in _SIGNS:
        return _WORDS[text] if text in _WORDS else _number(text, error)
    if first == ".":
        if text in _WORDS:
            return _WORDS[text]
        if _DOT_FLOAT.fullmatch(text):
            number = float(text.replace("_", ""))
            if not math.isinf(number):  # ParseFloat reports overflow as an error: the scalar stays a string
                return number
    return text


def _number(text: str, error: type[DataError]) -> Any:
    """resolve()'s sign-or-digit branch. Timestamps are not tried: one starts with
    "YYYY-", which no number does, and decoded into interface{} it is its own
    text (decode.go scalar()), the same string this falls back to."""
    plain = text.replace("_", "") if "_" in text else text
    unsigned_overflow = False
    match = _GO_INT.fullmatch(plain)
    if match is not None:
        sign, binary, octal, hexadecimal, octal0, decimal = match.groups()
        if decimal is not None:
            # More than 20 digits is beyond uint64 anyway (and int() of long decimal text is slow).
            number = int(decimal) if len(decimal) <= 20 else _UINT64_MAX + 1
        elif hexadecimal is not None:
            number = int(hexadecimal, 16)
        elif binary is not None:
            number = int(binary, 2)
        else:
            number = int(octal if octal is not None else octal0 or "0", 8)
        if sign == "-":
            number = -number
        # ParseInt first; then ParseUint, which takes no sign.
        if _INT64_MIN <= number <= _INT64_MAX or (not sign and number <= _UINT64_MAX):
            return number
        unsigned_overflow = not sign and (binary or octal or hexadecimal) is not None
    if _YAML_FLOAT.fullmatch(plain):
        real = float(plain)
        if not math.isinf(real):  # ParseFloat's overflow is an error: fall through
            return real
    if plain.startswith("0b") and _SIGNED_BINARY.fullmatch(plain, 2):
        number = int(plain[2:], 2)
        if _INT64_MIN <= number <= _INT64_MAX:
            return number
    if unsigned_overflow:
        # go.yaml.in/yaml/v2 (Kubernetes since sigs.k8s.io/yaml v1.5) reads this
        # as a string; the goyaml.v2 fork in sigs.k8s.io/yaml v1.4 had a big.Int
        # fallback and reads a number. Two kubectl versions disagree: refuse.
        raise error(
            f"YAML integer {text[:40]!r} is beyond uint64; kubectl versions read it differently (a string or a number)"
        )
    return text


def _tag_of(value: Any) -> str:
    if value is None:
        return _NULL
    kind = type(value)
    return _BOOL if kind is bool else _INT if kind is int else _FLOAT if kind is float else _STR


def _short(tag: str) -> str:
    return "!!" + tag[len(_YAML) :] if tag.startswith(_YAML) else tag


def _resolve_tagged(tag: str, text: str, error: type[DataError]) -> Any:
    """goyaml.v2 ``resolve(tag, text)`` for an explicit tag, quoted or not: the
    value when the text is of that type, else refused as goyaml.v2 refuses it
    ("cannot decode !!str `x` as a !!int"); ``!!float`` also takes an int64."""
    if tag == _STR:
        return text
    if tag == _TIMESTAMP:
        if _go_timestamp(text):
            return text  # decode.go scalar(): a timestamp decoded into interface{} stays its text
        resolved = _tag_of(_resolve_plain(text, error))
    elif tag in (_NULL, _BOOL, _INT, _FLOAT):
        value = _resolve_plain(text, error)
        resolved = _tag_of(value)
        if resolved == tag:
            return value
        if tag == _FLOAT and resolved == _INT and value <= _INT64_MAX:
            return float(value)
    else:
        # goyaml.v2 reads a scalar with any other tag as its text; !!binary it
        # base64-decodes. Kubernetes manifests use neither: refuse.
        raise error(f"YAML tag {tag[:60]!r} is not supported; Kubernetes manifests use plain JSON types")
    raise error(f"YAML value {text[:40]!r} is tagged {_short(tag)} but is a {_short(resolved)}; kubectl refuses it")


# resolve.go allowedTimestampFormats, read by Go's time.Parse: a 4-digit year,
# 1-2 digit month, day, hour, minute and second, any number of fraction digits
# after "." or ",", then "T"/"t" and a "Z" or "+hh:mm" zone, or one or more
# spaces and no zone, or nothing after the date.
_TS_DATE = re.compile(r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})")
_TS_TIME = re.compile(r"(?:[Tt]|( +))([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,2})(?:[.,][0-9]+)?")
_TS_ZONE = re.compile(r"Z|[+-]([0-9]{2}):([0-9]{2})")
_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _go_timestamp(text: str) -> bool:
    """resolve.go parseTimestamp(): whether ``!!timestamp text`` is accepted."""
    date = _TS_DATE.match(text)
    if date is None:
        return False
    year, month, day = (int(part) for part in date.groups())
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not (1 <= month <= 12 and 1 <= day <= _DAYS[month] + (month == 2 and leap)):
        return False
    rest = text[date.end() :]
    if not rest:
        return True
    clock = _TS_TIME.match(rest)
    if clock is None or int(clock[2]) > 23 or int(clock[3]) > 59 or int(clock[4]) > 59:
        return False
    rest = rest[clock.end() :]
    if clock[1]:  # "2006-1-2 15:4:5.999999999": no zone
        return not rest
    zone = _TS_ZONE.fullmatch(rest)
    # time.Parse allows zone offsets up to 24 hours and 60 minutes.
    return zone is not None and (zone[1] is None or (int(zone[1]) <= 24 and int(zone[2]) <= 60))


# --- From goyaml.v2's values to the JSON kubectl sends --------------------------
# kubernetes-sigs/yaml yaml.go yamlToJSON(): convertToJSONableObject, then
# json.Marshal.

#: Whole floats below this are integers exactly; above, their shortest digits
#: are padded with zeros (as strconv's shortest 'f' format writes them).
_EXACT_WHOLE = float(1 << 53)


def _json_number(number: float, error: type[DataError]) -> int | float:
    """A float as encoding/json writes it and a JSON reader reads it back. Its
    floatEncoder writes the shortest digits, in 'f' format for magnitudes in
    [1e-6, 1e21): a whole number there has no fraction and reads back as an
    integer. NaN and infinities make json.Marshal fail."""
    if not math.isfinite(number):
        raise error(f"YAML number {number!r} is not finite; JSON (and Kubernetes) cannot carry it")
    if number.is_integer() and abs(number) < 1e21:
        if abs(number) < _EXACT_WHOLE:
            return int(number)
        # decimal (with numbers and its C module) is loaded for a whole float this large only: every
        # command-line run reads YAML, almost none holds such a number.
        from decimal import Decimal

        return int(Decimal(repr(number)))
    return number


def api_server_number(number: int | float) -> int | float:
    """A JSON number as the API server holds it, read back from the digits it writes for it.

    The API server (and kubectl) read JSON into untyped values with
    sigs.k8s.io/json's ``convertNumber`` (``internal/golang/encoding/json/decode.go``;
    k8s.io/apimachinery ``pkg/util/json`` ``Unmarshal`` uses it, for custom
    resources and every object admission is handed): a literal without ``.``
    that ``strconv.ParseInt(s, 10, 64)`` accepts is an ``int64``, anything else
    ``strconv.ParseFloat(s, 64)``, the nearest float64 (ties to even). It writes
    the float64 back with ``encoding/json``'s shortest digits (:func:`_json_number`).
    So an integer within int64 stays itself, and ``18446744073709551615`` is
    stored as 2^64 and shown to admission as ``18446744073709552000``.

    Two numbers are the same object field exactly when this gives equal values
    of one type: the API server then writes the same digits for both, and
    nothing that reads the object from it can tell them apart. ``int64`` ``-2^63``
    and the float64 ``-2^63`` are *not* alike (``-9223372036854775808`` against
    ``-9223372036854776000``, which an int64 field refuses). ``float(int)``
    rounds as ParseFloat does (correctly, ties to even). An integer beyond the
    float64 range makes ParseFloat fail and the API server refuse the object;
    it is returned unchanged.
    """
    if type(number) is int:
        if _INT64_MIN <= number <= _INT64_MAX:
            return number
        try:
            number = float(number)
        except OverflowError:
            return number
    if not math.isfinite(number):
        return number
    return _json_number(number, DataError)


def _key_text(key: Any, error: type[DataError], what: str) -> str:
    """A scalar key as convertToJSONableObject makes it a JSON object key."""
    kind = type(key)
    if kind is str:
        return key  # type: ignore[no-any-return]
    if kind is bool:
        return "true" if key else "false"
    if kind is int:
        if key <= _INT64_MAX:  # strconv.Itoa / FormatInt
            return str(key)
        raise error(f"{what} has a map key {key} beyond int64; kubectl's YAML-to-JSON conversion refuses it")
    if kind is float:
        return _float32_text(key)
    raise error(f"{what} has a null map key; kubectl's YAML-to-JSON conversion refuses it")


def _float32_text(number: float) -> str:
    """strconv.FormatFloat(number, 'g', -1, 32) with "+Inf"/"-Inf"/"NaN" spelt
    ".inf"/"-.inf"/".nan": how convertToJSONableObject writes a float key. Note
    the 32: the key is rounded to float32 first (3.14159265358979 -> "3.1415927")."""
    if math.isnan(number):
        return ".nan"
    try:
        single: float = struct.unpack("<f", struct.pack("<f", number))[0]
    except OverflowError:  # beyond float32: Go's conversion gives an infinity
        single = math.copysign(math.inf, number)
    if math.isinf(single):
        return ".inf" if single > 0 else "-.inf"
    sign = "-" if math.copysign(1.0, single) < 0 else ""
    if single == 0:
        return sign + "0"
    digits, point = _shortest_float32_digits(abs(single))  # value = 0.<digits> x 10**point
    exponent = point - 1
    if exponent < -4 or exponent >= 6:  # 'g' of the shortest digits: %e outside [1e-4, 1e6), with 2+ exponent digits
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _shortest_float32_digits(value: float) -> tuple[str, int]:
    """strconv's shortest digits for a positive float32: the fewest digits whose
    decimal reads back as this float32 (round half to even), the nearest such
    decimal when there are several. Exact rational arithmetic; keys only."""
    from fractions import Fraction  # loaded for a float32 key only, not by every run that reads YAML

    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    biased, fraction = bits >> 23, bits & 0x7FFFFF
    mantissa, exp2 = (fraction, -149) if biased == 0 else (fraction | 0x800000, biased - 150)
    exact = mantissa * Fraction(2) ** exp2
    half_up = Fraction(2) ** exp2 / 2
    # The next float32 down is nearer when the mantissa is a power of two (above the smallest exponent).
    half_down = half_up / 2 if mantissa == 0x800000 and biased > 1 else half_up
    low, high = exact - half_down, exact + half_up
    inclusive = mantissa % 2 == 0
    point = math.floor(math.log10(value)) + 1
    while exact >= Fraction(10) ** point:
        point += 1
    while exact < Fraction(10) ** (point - 1):
        point -= 1
    for count in range(1, 10):  # 9 significant digits always identify a float32
        unit = Fraction(10) ** (point - count)
        below = math.floor(exact / unit)
        best: int | None = None
        for candidate in (below, below + 1):
            decimal = candidate * unit
            if not (low < decimal < high or (inclusive and decimal in (low, high))):
                continue
            if (
                best is None
                or abs(decimal - exact) < abs(best * unit - exact)
                or (abs(decimal - exact) == abs(best * unit - exact) and candidate % 2 == 0)
            ):
                best = candidate
        if best is not None:
            text = str(best)  # below + 1 may carry into one more digit (999 -> 1000)
            return text.rstrip("0"), point - count + len(text)
    raise AssertionError("no float32 needs more than 9 significant digits")  # pragma: no cover


# --- Writing YAML that kubectl reads back ---------------------------------------


class KubectlSafeDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """PyYAML's safe dumper, but a string is written plain only when kubectl reads
    it back as that string (and a YAML 1.1 reader too): ``y``, ``0o17``, ``1e3``,
    ``08`` and ``1:30`` are quoted. goyaml.v2's encoder does the same (encode.go
    stringv: plain only if resolve() gives !!str, and not a base-60 float)."""

    def represent_int(self, data: int) -> Any:
        if _INT64_MIN <= data <= _UINT64_MAX:
            return super().represent_int(data)
        # Beyond int64/uint64 goyaml.v2 reads a number as a float (kubectl sends it rounded):
        # written plain it reads back the same way; tagged !!int it would be refused.
        return self.represent_scalar(_FLOAT, str(data))

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        # The emitter writes a scalar plain only if this returns the node's own tag.
        if kind is yaml.ScalarNode and implicit[0] and isinstance(value, str):
            try:
                tag = _tag_of(_resolve_plain(value, DataError))
            except DataError:
                return _YAML + "ambiguous"  # never plain
            if tag != _STR:
                return tag
        return super().resolve(kind, value, implicit)


KubectlSafeDumper.add_representer(int, KubectlSafeDumper.represent_int)


# --- Building the objects ------------------------------------------------------


class _MergeKey:
    """Marker for the merge key ``<<`` in key position."""


class _NoKey:
    pass


class _Frame:
    __slots__ = ("anchor", "container", "is_map", "key", "key_type", "merged", "start", "typed")

    def __init__(self, container: Any, start: int, anchor: str | None, is_map: bool) -> None:
        self.container = container
        self.start = start
        self.anchor = anchor
        self.is_map = is_map
        self.key: Any = _NoKey
        #: The Go type of the pending key when it was not a string in YAML (``1``, ``true``, ``1.5``).
        self.key_type: type | None = None
        #: Keys set by a merge and not overridden since.
        self.merged: set[str] | None = None
        #: Keys of this mapping that were not strings in YAML, with their type.
        self.typed: dict[str, type] | None = None


def load_yaml_stream(
    text: str | bytes,
    *,
    limits: Limits = DEFAULT_LIMITS,
    error: type[DataError] = DataError,
    what: str = "YAML",
) -> list[Any]:
    """Parse a YAML stream into its non-empty documents, as kubectl reads them, within ``limits``."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise error(f"{what} is not valid UTF-8 (byte {exc.start})") from exc
    loader = _CLoader(text)
    try:
        return _Builder(limits, error, what).build(loader)
    except yaml.YAMLError as exc:
        if _LIBYAML_NESTING.search(str(getattr(exc, "problem", None) or "")):
            # libyaml's own depth limit tripped before ours could: the same answer as ours.
            raise error(f"{what} is nested deeper than {limits.max_depth} levels") from exc
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{what} is not valid YAML: {problem}{where}") from exc
    finally:
        loader.dispose()


#: libyaml's own nesting limit, in the words of each release that has one. 0.2.6's scanner
#: (yaml/libyaml#329, "Enforce nesting limit in scanner") refuses more than 1000 flow levels
#: plus block indents with "exceeded maximum nesting depth"; its parser check (yaml/libyaml#287,
#: on libyaml's master since 51843fe) says "Maximum nesting level reached". The scanner looks
#: up to 1024 characters ahead while a simple key is possible, so a line opening 1001 flow
#: collections is refused before its first event reaches :class:`_Builder`: our own check never
#: sees the input. Every other depth is refused by our check first (at ``max_depth`` levels,
#: far below libyaml's 1000), so the two answers must say the same thing. libyaml's limit
#: (1000 by default) is above ``Limits.max_depth`` (at most ``MAX_DEPTH_CEILING``), so
#: whatever libyaml refuses is deeper than ``max_depth``.
_LIBYAML_NESTING = re.compile(r"maximum nesting (?:depth|level)", re.IGNORECASE)


def _same_go_key(first: type | None, second: type | None) -> bool:
    """Whether two keys with one JSON text are one Go map key.

    They are when both are strings, booleans or integers; a string and an integer
    (``"1"``, ``1``) are two, and so may be two floats (3.14159265358979 and
    3.1415927 both read "3.1415927").
    """
    return first is second and first is not float


def _tagged_value(tag: str, text: str, error: type[DataError]) -> Any:
    """A scalar with an explicit tag, as goyaml.v2 resolves it (a float not yet made a JSON number)."""
    if tag == "!":
        return text  # the non-specific tag: a string (resolve() does not resolve it)
    if tag == _MERGE and text == "<<":
        return text
    return _resolve_tagged(tag, text, error)


def _set_key(frame: _Frame, raw: Any, error: type[DataError], what: str) -> None:
    """Make ``raw`` the pending key of the mapping ``frame``, as the text Go's JSON gives it."""
    if isinstance(raw, (dict, list)):
        raise error(f"{what} uses a mapping or sequence as a key; Kubernetes objects have string keys")
    frame.key = _key_text(raw, error, what)
    frame.key_type = None if type(raw) is str else type(raw)


def _override_merged(frame: _Frame, key: str, error: type[DataError], what: str) -> None:
    """``key`` is set again in the mapping ``frame``: allowed only over the value a merge ``<<`` set.

    Anything else is a duplicate key, which the API server's strict decoder refuses.
    """
    merged = frame.merged
    if merged is None or key not in merged or not _same_go_key(frame.key_type, (frame.typed or {}).get(key)):
        raise error(f"{what} has a duplicate key {key[:60]!r}; the API server's strict decoder refuses it")
    merged.discard(key)  # an explicit key after "<<" overrides the merged value


def _combine(
    sources: list[Any], typed: dict[int, dict[str, type]], error: type[DataError], what: str
) -> tuple[dict[str, Any], dict[str, type]]:
    """The keys a merge ``<<`` brings: decode.go merge() takes a mapping (or an alias of one), or a
    sequence of them merged last to first, so that the first wins; with the Go types of its non-string keys."""
    if not all(type(source) is dict for source in sources):
        raise error(f"{what} has a merge key '<<' whose value is not a mapping or a sequence of mappings")
    combined: dict[str, Any] = {}
    combined_typed: dict[str, type] = {}
    for source in sources:
        source_typed = typed.get(id(source), {})
        for key, value in source.items():
            if key not in combined:
                combined[key] = value
                if key in source_typed:
                    combined_typed[key] = source_typed[key]
            elif not _same_go_key(source_typed.get(key), combined_typed.get(key)):
                raise error(
                    f"{what} merges two different keys that both read {key[:60]!r}; kubectl keeps either at random"
                )
    return combined, combined_typed


def _merge(
    frame: _Frame, sources: list[Any], typed: dict[int, dict[str, type]], error: type[DataError], what: str
) -> None:
    """Apply a merge ``<<`` to the mapping ``frame``.

    Each merged key is set on the mapping where ``<<`` stands in document order, so a later
    explicit key overrides it (as the YAML spec says), but a merge overrides a key set before it
    (the spec says the opposite): refused.
    """
    combined, combined_typed = _combine(sources, typed, error, what)
    container = frame.container
    for key in combined:
        if key in container:
            raise error(
                f"{what} has a merge key '<<' that would override {key[:60]!r} set before it in the same mapping;"
                " kubectl takes the merged value, the YAML spec the earlier one"
            )
    container.update(combined)
    frame.merged = combined.keys() | (frame.merged or set())
    if combined_typed:
        frame.typed = {**(frame.typed or {}), **combined_typed}


class _Builder:
    """The documents of one YAML stream, built from libyaml's events one at a time.

    One handler per kind of event; the state they share is this object's (a fresh one per stream).
    """

    __slots__ = ("anchors", "documents", "error", "limits", "nodes", "root", "stack", "typed", "what")

    def __init__(self, limits: Limits, error: type[DataError], what: str) -> None:
        self.limits, self.error, self.what = limits, error, what
        self.documents: list[Any] = []
        #: anchor -> (its container, or a scalar's resolved value; its node count)
        self.anchors: dict[str, tuple[Any, int]] = {}
        #: id(mapping) -> its keys that were not strings in YAML
        self.typed: dict[int, dict[str, type]] = {}
        self.stack: list[_Frame] = []
        self.nodes = 0
        self.root: Any = None

    def build(self, loader: Any) -> list[Any]:
        """Read events until the stream ends; every event counts against ``max_nodes``."""
        handlers = {
            ev.MappingStartEvent: self._collection_start,
            ev.SequenceStartEvent: self._collection_start,
            ev.MappingEndEvent: self._collection_end,
            ev.SequenceEndEvent: self._collection_end,
            ev.AliasEvent: self._alias,
            ev.DocumentStartEvent: self._document_start,
            ev.DocumentEndEvent: self._document_end,
        }
        scalar, on_scalar, max_nodes = ev.ScalarEvent, self._scalar, self.limits.max_nodes
        while True:
            event = loader.get_event()
            kind = type(event)
            if kind is ev.StreamEndEvent:
                return self.documents
            if kind is scalar:  # most events: no table look-up for them
                on_scalar(event)
            else:
                handler = handlers.get(kind)
                if handler is not None:
                    handler(event)
            if self.nodes > max_nodes:
                raise self.error(f"{self.what} has more than {max_nodes} nodes (aliases counted expanded)")

    def _key_pending(self) -> _Frame | None:
        """The innermost mapping when it waits for a key, else None."""
        frame = self.stack[-1] if self.stack else None
        return frame if frame is not None and frame.is_map and frame.key is _NoKey else None

    def _attach(self, value: Any) -> None:
        """Put a finished value where it belongs: the document root, a sequence, or a mapping's pending key."""
        if not self.stack:
            self.root = value
            return
        frame = self.stack[-1]
        if not frame.is_map:
            frame.container.append(value)
            return
        key, frame.key = frame.key, _NoKey
        if key is _MergeKey:
            _merge(frame, value if type(value) is list else [value], self.typed, self.error, self.what)
            return
        container = frame.container  # _override_merged is the rare case: the common one stays inline
        if key in container:
            _override_merged(frame, key, self.error, self.what)
        container[key] = value
        if frame.key_type is not None:
            if frame.typed is None:
                frame.typed = {}
            frame.typed[key] = frame.key_type

    def _scalar(self, event: Any) -> None:
        """A scalar: a mapping's key (or the merge key ``<<``), or a value."""
        self.nodes += 1
        text, tag = event.value, event.tag
        if tag is None:  # the common case, kept inline: most events are plain scalars
            raw = _resolve_plain(text, self.error) if event.implicit[0] else text
        else:
            raw = _tagged_value(tag, text, self.error)
        stack = self.stack
        frame = stack[-1] if stack else None  # _key_pending(), inline on the hottest path
        if frame is not None and frame.is_map and frame.key is _NoKey:
            # decode.go isMerge: "<<" unquoted (or with the "!" tag) or tagged !!merge.
            if text == "<<" and (event.implicit[0] or tag == _MERGE):
                frame.key = _MergeKey
            else:
                _set_key(frame, raw, self.error, self.what)
        elif tag == _MERGE:
            raise self.error(f"YAML tag {tag!r} is only supported on a merge key '<<'")
        else:
            self._attach(_json_number(raw, self.error) if type(raw) is float else raw)
        if event.anchor is not None:
            self.anchors[event.anchor] = (raw, 1)

    def _collection_start(self, event: Any) -> None:
        """A mapping or sequence opens: only the plain JSON types, never as a key, within ``max_depth``."""
        is_map = type(event) is ev.MappingStartEvent
        if event.tag not in (_MAP_TAGS if is_map else _SEQ_TAGS):
            raise self.error(
                f"YAML tag {str(event.tag)[:60]!r} is not supported; Kubernetes manifests use plain JSON types"
            )
        if self._key_pending() is not None:
            raise self.error(f"{self.what} uses a mapping or sequence as a key; Kubernetes objects have string keys")
        self.nodes += 1
        if len(self.stack) >= self.limits.max_depth:
            raise self.error(f"{self.what} is nested deeper than {self.limits.max_depth} levels")
        self.stack.append(_Frame({} if is_map else [], self.nodes, event.anchor, is_map))

    def _collection_end(self, event: Any) -> None:
        """A mapping or sequence closes: remember it for its anchor and put it in its place."""
        frame = self.stack.pop()
        if frame.typed:
            self.typed[id(frame.container)] = frame.typed
        if frame.anchor is not None:
            self.anchors[frame.anchor] = (frame.container, self.nodes - frame.start + 1)
        self._attach(frame.container)

    def _alias(self, event: Any) -> None:
        """``*name``: what the anchor holds, counted at its full size against ``max_nodes``."""
        target = self.anchors.get(event.anchor)
        if target is None:
            raise self.error(f"{self.what} refers to an undefined or recursive alias *{str(event.anchor)[:40]}")
        self.nodes += target[1]
        value = target[0]
        frame = self.stack[-1] if self.stack else None
        if frame is not None and frame.is_map and frame.key is _NoKey:
            _set_key(frame, value, self.error, self.what)  # an alias is never a merge key (isMerge wants a scalar)
        elif frame is not None and frame.is_map and frame.key is _MergeKey and type(value) is list:
            # decode.go merge(): an alias must refer to a mapping; only an inline sequence lists several.
            raise self.error(f"{self.what} has a merge key '<<' whose value is not a mapping or a sequence of mappings")
        else:
            self._attach(_json_number(value, self.error) if type(value) is float else value)

    def _document_start(self, event: Any) -> None:
        # An anchor is known only in its own document (kubectl decodes each document on its own).
        self.root = None
        self.anchors.clear()
        self.typed.clear()

    def _document_end(self, event: Any) -> None:
        if self.root is None:
            return
        self.documents.append(self.root)
        if len(self.documents) > self.limits.max_documents:
            raise self.error(f"{self.what} holds more than {self.limits.max_documents} documents")


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):  # 1e999 overflows to infinity
        raise ValueError(f"number {text[:40]} is not finite")
    return number


#: Longest integer text read without a range check: any 20 digits fit a float64's range.
_SHORT_INT = 20


def _finite_int(text: str) -> int:
    """A JSON integer, refused beyond float64's range.

    Go's encoding/json reads a number into ``interface{}`` with
    ``strconv.ParseFloat(s, 64)`` (sigs.k8s.io/json tries int64 first) and fails
    on overflow, so no Kubernetes object holds an integer beyond float64. The
    check also keeps Python's own limit out of the answer: ``int()`` refuses
    more than ``sys.get_int_max_str_digits()`` digits (4300 by default, 640 at
    the least) with a message of its own, while float64 tops out at 309 digits.
    ``float()`` of digit text has no such limit.
    """
    if len(text) > _SHORT_INT and math.isinf(float(text)):
        digits = len(text.lstrip("-"))
        raise ValueError(f"number {text[:20]}… ({digits} digits) is not finite as a float64")
    return int(text)


def _unique_pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(items)
    if len(result) != len(items):
        seen: set[str] = set()
        duplicate = next(k for k, _ in items if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate key {duplicate[:60]!r}")
    return result


def load_json(
    text: str | bytes,
    *,
    limits: Limits = DEFAULT_LIMITS,
    error: type[DataError] = DataError,
    what: str = "JSON",
) -> Any:
    """Parse strict JSON: no NaN/Infinity, no duplicate keys, bounded depth and size."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8-sig")
        value = json.loads(
            text,
            object_pairs_hook=_unique_pairs,
            parse_constant=_no_constants,
            parse_float=_finite_float,
            parse_int=_finite_int,
        )
    except UnicodeDecodeError as exc:
        raise error(f"{what} is not valid UTF-8 (byte {exc.start})") from exc
    except RecursionError as exc:
        raise error(f"{what} is nested deeper than {limits.max_depth} levels") from exc
    except ValueError as exc:
        raise error(f"{what} is not valid JSON: {str(exc)[:120]}") from exc
    # Every JSON node takes at least one character, so short text cannot
    # exceed the node limit; only the depth needs checking then -- and not even
    # that when the text holds fewer "{" and "[" than the depth limit (a path
    # cannot nest more containers than there are).
    count_nodes = len(text) > limits.max_nodes
    if count_nodes or text.count("{") + text.count("[") >= limits.max_depth:
        _check_containers(value, limits, error, what, count_nodes=count_nodes, check_floats=False)
    return value


def check_shape(
    value: Any, *, limits: Limits = DEFAULT_LIMITS, error: type[DataError] = DataError, what: str = "object"
) -> None:
    """Check depth, node count and finite numbers of already-parsed JSON-shaped data, iteratively."""
    _check_containers(value, limits, error, what, count_nodes=True, check_floats=True)


def _check_containers(
    value: Any, limits: Limits, error: type[DataError], what: str, *, count_nodes: bool, check_floats: bool
) -> None:
    """Walk the containers only (scalars are counted in bulk), without recursion."""
    if isinstance(value, float) and check_floats and not math.isfinite(value):
        raise error(f"{what} holds a number that is not finite")
    if not isinstance(value, (dict, list)):
        return
    nodes = 1
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if type(item) is dict else item
        if count_nodes:
            nodes += len(children)
            if nodes > limits.max_nodes:
                raise error(f"{what} has more than {limits.max_nodes} nodes")
        for child in children:
            kind = type(child)
            if kind is dict or kind is list:
                if depth + 1 >= limits.max_depth:
                    raise error(f"{what} is nested deeper than {limits.max_depth} levels")
                pending.append((child, depth + 1))
            elif check_floats and kind is float and not math.isfinite(child):
                raise error(f"{what} holds a number that is not finite")
