"""YAML is read as kubectl reads it: one row per rule of sigs.k8s.io/yaml's YAML-to-JSON conversion.

kubectl (and the API server, for YAML bodies) converts YAML with sigs.k8s.io/yaml: goyaml.v2
decodes, ``convertToJSONableObject`` makes keys strings, ``encoding/json`` writes the JSON.
Every row names the rule and where it is written; the expected value is what a JSON reader gets
from the JSON kubectl sends. Sources (read with the search tool):

* RESOLVE: go.yaml.in/yaml/v2 resolve.go, init() (resolveTable, resolveMap) and resolve() --
  kubernetes/kubernetes vendor/go.yaml.in/yaml/v2/resolve.go; the same table is in
  kubernetes-sigs/yaml goyaml.v2/resolve.go.
* DECODE: goyaml.v2 decode.go, decoder.scalar(), mapping(), merge(), isMerge() --
  kubernetes/kubernetes vendor/gopkg.in/yaml.v2/decode.go.
* CONVERT: kubernetes-sigs/yaml yaml.go, yamlToJSON() and convertToJSONableObject().
* JSON: Go encoding/json floatEncoder (shortest digits, 'f' format in [1e-6, 1e21)).
* STRCONV: Go strconv ParseInt/ParseUint with base 0, ParseFloat (golang/go src/strconv/atof.go).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from provider import Policy, Review, decide
from provider.errors import MalformedMessage
from provider.keys.pem import sign_bytes
from provider.parsing import KubectlSafeDumper, load_json, load_yaml_stream
from provider.signatures.envelope import encode_message
from provider.signatures.signing import dump_yaml
from tests.support.keys import make_key, public_key_pem

RESOLVE = "resolve.go resolve()"
WORDS = "resolve.go resolveMap"
HINT = "resolve.go resolveTable: no hint for this first character, so a string"
INT = "resolve.go resolve(): '_' removed, then strconv.ParseInt(s, 0, 64)"
UINT = "resolve.go resolve(): strconv.ParseUint(s, 0, 64) after ParseInt fails"
FLOAT = "resolve.go resolve(): yamlStyleFloat, then strconv.ParseFloat"
DOT = "resolve.go resolve(): '.' hint, strconv.ParseFloat(s) as Go float-literal syntax"
BIN = "resolve.go resolve(): the '0b' branch, ParseInt(s[2:], 2, 64)"
NUMBER_TEXT = "JSON floatEncoder: shortest digits, 'f' format below 1e21, so a whole float is an integer"
STRING = "resolve.go resolve(): nothing matched, so a string"
TIMESTAMP = "DECODE scalar(): a timestamp decoded into interface{} stays its text"
QUOTED = "DECODE scalar(): untagged and not plain, so a string"
TAGGED = "resolve.go resolve(tag, s) and its deferred check"
KEY = "CONVERT convertToJSONableObject: map keys"
MERGE = "DECODE mapping() and merge()"

# (rule id, plain scalar as written after "v: ", the JSON value kubectl sends, where the rule is)
SCALARS: list[tuple[str, str, Any, str]] = [
    ("bool-y", "y", True, WORDS),
    ("bool-Y", "Y", True, WORDS),
    ("bool-yes", "yes", True, WORDS),
    ("bool-YES", "YES", True, WORDS),
    ("bool-true", "true", True, WORDS),
    ("bool-True", "True", True, WORDS),
    ("bool-on", "on", True, WORDS),
    ("bool-ON", "ON", True, WORDS),
    ("bool-n", "n", False, WORDS),
    ("bool-N", "N", False, WORDS),
    ("bool-no", "no", False, WORDS),
    ("bool-FALSE", "FALSE", False, WORDS),
    ("bool-off", "off", False, WORDS),
    ("bool-Off", "Off", False, WORDS),
    ("bool-mixed-case-is-a-string", "yEs", "yEs", WORDS),
    ("bool-tRUE-is-a-string", "tRUE", "tRUE", WORDS),
    ("null-tilde", "~", None, WORDS),
    ("null-null", "null", None, WORDS),
    ("null-Null", "Null", None, WORDS),
    ("null-NULL", "NULL", None, WORDS),
    ("null-empty", "", None, WORDS),
    ("null-nULL-is-a-string", "nULL", "nULL", WORDS),
    ("word-hint-other-words-are-strings", "nginx", "nginx", WORDS),
    ("int-decimal", "42", 42, INT),
    ("int-plus-sign", "+1", 1, INT),
    ("int-minus-sign", "-17", -17, INT),
    ("int-negative-zero", "-0", 0, INT),
    ("int-hex", "0x1F", 31, INT),
    ("int-hex-upper-prefix", "0X1f", 31, INT),
    ("int-hex-signed", "-0x10", -16, INT),
    ("int-octal-0o", "0o17", 15, INT),
    ("int-octal-0O", "0O17", 15, INT),
    ("int-octal-leading-zero", "017", 15, INT),
    ("int-octal-leading-zero-012", "012", 10, INT),
    ("int-binary", "0b101", 5, INT),
    ("int-binary-signed", "-0b101", -5, INT),
    ("int-binary-sign-after-prefix", "0b-101", -5, BIN),
    ("int-underscores-removed", "1_000", 1000, INT),
    ("int-underscores-removed-anywhere", "1__0_", 10, INT),
    ("int-hex-underscore-after-prefix", "0x_1F", 31, INT),
    ("int64-max", "9223372036854775807", 9223372036854775807, INT),
    ("int64-min", "-9223372036854775808", -9223372036854775808, INT),
    ("uint64-max", "18446744073709551615", 18446744073709551615, UINT),
    ("leading-zero-not-octal-is-a-float", "08", 8, FLOAT),
    ("beyond-int64-signed-is-a-float", "+9223372036854775808", 9223372036854776000, FLOAT + "; " + NUMBER_TEXT),
    ("beyond-uint64-is-a-float", "99999999999999999999", 100000000000000000000, FLOAT + "; " + NUMBER_TEXT),
    ("below-int64-is-a-float", "-9223372036854775809", -9223372036854776000, FLOAT + "; " + NUMBER_TEXT),
    ("float", "1.5", 1.5, FLOAT),
    ("float-exponent-without-dot", "1e3", 1000, FLOAT + "; " + NUMBER_TEXT),
    ("float-exponent-upper-case", "1E3", 1000, FLOAT),
    ("float-exponent-with-dot", "1.5e3", 1500, FLOAT),
    ("float-exponent-signed", "6.8523015e+5", 685230.15, FLOAT),
    ("float-leading-dot", ".5", 0.5, DOT),
    ("float-signed-leading-dot", "-.5", -0.5, FLOAT),
    ("float-trailing-dot", "1.", 1, FLOAT + "; " + NUMBER_TEXT),
    ("float-whole-is-an-integer", "1.0", 1, NUMBER_TEXT),
    ("float-negative-zero-is-zero", "-0.0", 0, NUMBER_TEXT),
    ("float-below-1e-6-stays-a-float", "1e-7", 1e-07, NUMBER_TEXT),
    ("float-below-1e21-is-an-integer", "1e20", 100000000000000000000, NUMBER_TEXT),
    ("float-from-1e21-stays-a-float", "1e21", 1e21, NUMBER_TEXT),
    ("float-whole-beyond-2**53-is-its-shortest-digits", "4.058275127741359e16", 40582751277413590, NUMBER_TEXT),
    ("float-underscores-removed", "1_0.5", 10.5, FLOAT),
    ("float-leading-dot-underscore-between-digits", ".5_5", 0.55, DOT),
    ("float-leading-dot-underscore-misplaced-is-a-string", "._5", "._5", DOT),
    ("float-overflow-is-a-string", "1e999", "1e999", FLOAT + ": ParseFloat's range error"),
    ("float-leading-dot-overflow-is-a-string", ".5e999", ".5e999", DOT + ": ParseFloat's range error"),
    ("float-underflow-is-zero", "1e-999", 0, FLOAT),
    ("float-inf-in-another-case-is-a-string", ".iNf", ".iNf", DOT),
    ("sexagesimal-int-is-a-string", "1:30", "1:30", "resolve.go: base 60 is purposefully unsupported"),
    ("sexagesimal-float-is-a-string", "1:30.5", "1:30.5", "resolve.go: base 60 is purposefully unsupported"),
    ("sexagesimal-signed-is-a-string", "-1:30", "-1:30", STRING),
    ("timestamp-date-is-a-string", "2001-12-14", "2001-12-14", TIMESTAMP),
    ("timestamp-rfc3339-is-a-string", "2001-12-14T21:59:43.10Z", "2001-12-14T21:59:43.10Z", TIMESTAMP),
    ("dotted-version-is-a-string", "1.25.3", "1.25.3", STRING),
    ("prefix-without-digits-is-a-string", "0x", "0x", STRING),
    ("leading-underscore-is-a-string", "_1", "_1", HINT),
    ("merge-word-as-a-value-is-a-string", "<<", "<<", HINT + " (isMerge applies to keys only)"),
    ("equals-is-a-string", "=", "=", HINT),
    ("quoted-single", "'y'", "y", QUOTED),
    ("quoted-double", '"0o17"', "0o17", QUOTED),
    ("non-specific-tag-is-a-string", "! 12", "12", "resolve.go resolvableTag: '!' is not resolved"),
    ("tag-str", "!!str 12", "12", TAGGED),
    ("tag-str-on-a-word", "!!str y", "y", TAGGED),
    ("tag-int", "!!int 0o17", 15, TAGGED),
    ("tag-int-quoted", "!!int '12'", 12, TAGGED + ": DECODE resolves any tagged scalar, quoted or not"),
    ("tag-int-uint64", "!!int 18446744073709551615", 18446744073709551615, TAGGED),
    ("tag-float-on-an-int", "!!float 1", 1, TAGGED + ": an int64 is taken as a float; " + NUMBER_TEXT),
    ("tag-float-on-hex", "!!float 0x10", 16, TAGGED),
    ("tag-float-rounds-an-int", "!!float 9007199254740993", 9007199254740992, TAGGED),
    ("tag-bool-y", "!!bool y", True, TAGGED),
    ("tag-null-tilde", "!!null ~", None, TAGGED),
    ("tag-null-empty", "!!null ''", None, TAGGED),
    ("tag-timestamp-date", "!!timestamp 2001-12-14", "2001-12-14", TAGGED + ": parseTimestamp"),
    ("tag-timestamp-leap-day", "!!timestamp 2000-02-29", "2000-02-29", TAGGED + ": parseTimestamp"),
    (
        "tag-timestamp-space-separated",
        "!!timestamp 2001-12-14  21:59:43.10",
        "2001-12-14  21:59:43.10",
        TAGGED + ": parseTimestamp",
    ),
    (
        "tag-timestamp-lower-t-and-offset",
        "!!timestamp 2001-12-14t21:59:43,10-05:00",
        "2001-12-14t21:59:43,10-05:00",
        TAGGED + ": parseTimestamp",
    ),
]


@pytest.mark.parametrize(("text", "expected", "source"), [row[1:] for row in SCALARS], ids=[row[0] for row in SCALARS])
def test_scalar_resolves_as_kubectl_sends_it(text: str, expected: Any, source: str) -> None:
    (document,) = load_yaml_stream(f"v: {text}\n")
    value = document["v"]
    assert (value, type(value)) == (expected, type(expected)), source


# (rule id, value as written after "v: ", what the error says, where kubectl refuses it)
REFUSED: list[tuple[str, str, str, str]] = [
    ("nan", ".nan", "not finite", "JSON: json.Marshal refuses NaN"),
    ("nan-other-case", ".NaN", "not finite", "JSON: json.Marshal refuses NaN"),
    ("infinity", ".inf", "not finite", "JSON: json.Marshal refuses infinities"),
    ("infinity-signed", "-.Inf", "not finite", "JSON: json.Marshal refuses infinities"),
    ("tag-float-nan", "!!float .NAN", "not finite", "JSON: json.Marshal refuses NaN"),
    (
        "hex-beyond-uint64",
        "0x10000000000000000",
        "beyond uint64",
        "go.yaml.in/yaml/v2 reads a string, the sigs.k8s.io/yaml v1.4 fork a big.Int",
    ),
    (
        "octal-beyond-uint64",
        "0o7777777777777777777777",
        "beyond uint64",
        "go.yaml.in/yaml/v2 reads a string, the sigs.k8s.io/yaml v1.4 fork a big.Int",
    ),
    (
        "binary-beyond-uint64",
        "0b1" + "0" * 64,
        "beyond uint64",
        "go.yaml.in/yaml/v2 reads a string, the sigs.k8s.io/yaml v1.4 fork a big.Int",
    ),
    ("tag-int-on-a-float", "!!int 1.5", "tagged !!int but is a !!float", TAGGED),
    ("tag-int-on-sexagesimal", "!!int 1:30", "tagged !!int but is a !!str", TAGGED),
    (
        "tag-float-on-uint64",
        "!!float 18446744073709551615",
        "tagged !!float but is a !!int",
        TAGGED + ": only int and int64 become floats",
    ),
    ("tag-float-overflow", "!!float 1e999", "tagged !!float but is a !!str", TAGGED),
    ("tag-bool-on-an-int", "!!bool 1", "tagged !!bool but is a !!int", TAGGED),
    ("tag-null-on-a-word", "!!null x", "tagged !!null but is a !!str", TAGGED),
    ("tag-timestamp-not-a-date", "!!timestamp nope", "tagged !!timestamp", TAGGED + ": parseTimestamp"),
    (
        "tag-timestamp-no-such-day",
        "!!timestamp 1900-02-29",
        "tagged !!timestamp",
        TAGGED + ": time.Parse checks the day",
    ),
    (
        "tag-timestamp-hour-24",
        "!!timestamp 2001-12-14T24:00:00Z",
        "tagged !!timestamp",
        TAGGED + ": time.Parse checks the hour",
    ),
    (
        "tag-timestamp-no-zone",
        "!!timestamp 2001-12-14T21:59:43",
        "tagged !!timestamp",
        TAGGED + ": 'T' forms need a zone",
    ),
    (
        "tag-binary",
        "!!binary aGk=",
        "not supported",
        "narrower than kubectl (it base64-decodes): manifests do not use it",
    ),
    ("tag-custom", "!custom x", "not supported", "narrower than kubectl (it reads the text): manifests do not use it"),
    (
        "tag-merge-on-a-value",
        "!!merge <<",
        "only supported on a merge key",
        "narrower than kubectl (it reads the text)",
    ),
]


@pytest.mark.parametrize(("text", "fragment", "source"), [row[1:] for row in REFUSED], ids=[row[0] for row in REFUSED])
def test_scalar_kubectl_refuses_or_reads_two_ways_is_refused(text: str, fragment: str, source: str) -> None:
    with pytest.raises(MalformedMessage, match=fragment):
        load_yaml_stream(f"v: {text}\n", error=MalformedMessage)


# (rule id, key as written before ": v", the JSON object key kubectl sends)
KEYS: list[tuple[str, str, str]] = [
    ("key-string", "a", "a"),
    ("key-int", "1", "1"),
    ("key-int-hex-is-decimal-text", "0x10", "16"),
    ("key-int-octal-is-decimal-text", "0o17", "15"),
    ("key-int-negative", "-1", "-1"),
    ("key-int64-max", "9223372036854775807", "9223372036854775807"),
    ("key-bool-true", "true", "true"),
    ("key-bool-y", "y", "true"),
    ("key-bool-off", "off", "false"),
    ("key-float", "1.5", "1.5"),
    ("key-float-whole", "1.0", "1"),
    ("key-float-exponent-from-1e6", "1e6", "1e+06"),
    ("key-float-below-1e6", "123456.0", "123456"),
    ("key-float-below-1e-4", "0.00001", "1e-05"),
    ("key-float-from-1e-4", "0.0001", "0.0001"),
    ("key-float-rounded-to-float32", "3.14159265358979", "3.1415927"),
    ("key-float-float32-exponent", "123456789.0", "1.2345679e+08"),
    ("key-float-beyond-float32-is-inf", "1e39", ".inf"),
    ("key-float-negative-zero", "-0.0", "-0"),
    ("key-big-decimal-is-a-float", "99999999999999999999", "1e+20"),
    ("key-inf", ".inf", ".inf"),
    ("key-negative-inf", "-.inf", "-.inf"),
    ("key-nan", ".nan", ".nan"),
    ("key-timestamp", "2001-12-14", "2001-12-14"),
    ("key-sexagesimal", "1:30", "1:30"),
    ("key-quoted", "'y'", "y"),
    ("key-tagged-str", "!!str 1", "1"),
]


@pytest.mark.parametrize(("text", "expected"), [row[1:] for row in KEYS], ids=[row[0] for row in KEYS])
def test_key_becomes_the_text_kubectl_gives_it(text: str, expected: str) -> None:
    # CONVERT: string as is; int strconv.Itoa; bool "true"/"false"; float
    # strconv.FormatFloat(k, 'g', -1, 32) with +Inf/-Inf/NaN spelt .inf/-.inf/.nan.
    assert load_yaml_stream(f"{text}: v\n") == [{expected: "v"}], KEY


# (rule id, document, what the error says)
REFUSED_KEYS: list[tuple[str, str, str]] = [
    ("key-null", "~: v\n", "null map key"),  # CONVERT: a nil key is "unsupported map key"
    ("key-null-word", "null: v\n", "null map key"),
    ("key-empty", "? \n: v\n", "null map key"),
    ("key-uint64", "18446744073709551615: v\n", "beyond int64"),  # CONVERT: no case for uint64
    (
        "key-int-and-string-with-one-text",
        "1: a\n'1': b\n",
        "duplicate key '1'",
    ),  # two Go keys, one JSON key: either wins at random
    ("key-bool-and-string-with-one-text", "y: a\n'true': b\n", "duplicate key 'true'"),
    ("key-mapping", "? {a: 1}\n: v\n", "as a key"),  # DECODE mapping(): "invalid map key"
]


@pytest.mark.parametrize(("text", "fragment"), [row[1:] for row in REFUSED_KEYS], ids=[row[0] for row in REFUSED_KEYS])
def test_key_kubectl_refuses_or_picks_at_random_is_refused(text: str, fragment: str) -> None:
    with pytest.raises(MalformedMessage, match=fragment):
        load_yaml_stream(text, error=MalformedMessage)


# (rule id, document, the object kubectl sends) -- DECODE merge(): a mapping, an alias of one, or
# a sequence of them merged last to first; isMerge(): "<<" plain, with the "!" tag, or !!merge.
MERGES: list[tuple[str, str, Any]] = [
    ("merge-then-explicit-key-overrides", "<<: {a: 1, b: 2}\nb: 3\n", {"a": 1, "b": 3}),
    ("merge-sequence-first-wins", "<<: [{a: 1}, {a: 2, b: 2}]\n", {"a": 1, "b": 2}),
    ("merge-alias", "base: &b {a: 1}\nuse:\n  <<: *b\n  c: 2\n", {"base": {"a": 1}, "use": {"a": 1, "c": 2}}),
    ("merge-non-specific-tag", "! <<: {a: 1}\n", {"a": 1}),
    ("merge-tag", "!!merge <<: {a: 1}\n", {"a": 1}),
    ("merge-quoted-is-a-plain-key", "'<<': {a: 1}\n", {"<<": {"a": 1}}),
    ("merge-alias-of-merge-word-is-a-plain-key", "x: &m <<\n*m : 1\n", {"x": "<<", "<<": 1}),
    ("merge-typed-key-then-same-typed-key", "<<: {y: 1}\ny: 2\n", {"true": 2}),
]


@pytest.mark.parametrize(("text", "expected"), [row[1:] for row in MERGES], ids=[row[0] for row in MERGES])
def test_merge_key_as_kubectl_applies_it(text: str, expected: Any) -> None:
    assert load_yaml_stream(text) == [expected], MERGE


REFUSED_MERGES: list[tuple[str, str, str]] = [
    # kubectl: the merged value (set later); the YAML spec: the explicit one.
    ("merge-overrides-a-key-set-before", "a: 1\n<<: {a: 2}\n", "would override 'a'"),
    ("merge-twice-with-one-key", "<<: {a: 1}\n<<: {a: 2}\n", "would override 'a'"),
    # merge() fails on an alias of a sequence, and on anything but mappings.
    ("merge-alias-of-a-sequence", "s: &s [{a: 1}]\nm: {<<: *s}\n", "not a mapping"),
    ("merge-scalar", "<<: 3\n", "not a mapping"),
    ("merge-sequence-of-scalars", "<<: [1, 2]\n", "not a mapping"),
    # Two Go keys, one JSON key: kubectl keeps either at random.
    ("merge-int-and-string-keys", "<<: [{1: a}, {'1': b}]\n", "at random"),
    ("merge-int-key-then-string-key", "<<: {1: a}\n'1': b\n", "duplicate key '1'"),
]


@pytest.mark.parametrize(
    ("text", "fragment"), [row[1:] for row in REFUSED_MERGES], ids=[row[0] for row in REFUSED_MERGES]
)
def test_merge_kubectl_and_the_spec_disagree_on_is_refused(text: str, fragment: str) -> None:
    with pytest.raises(MalformedMessage, match=fragment):
        load_yaml_stream(text, error=MalformedMessage)


def test_an_anchor_is_known_only_in_its_own_document() -> None:
    # kubectl splits the stream and decodes each document on its own: "unknown anchor".
    with pytest.raises(MalformedMessage, match="undefined or recursive alias"):
        load_yaml_stream("a: &x 1\n---\nb: *x\n", error=MalformedMessage)


def test_an_alias_of_a_scalar_resolves_where_it_is_used() -> None:
    # decode.go re-decodes the anchored node: a float is a whole number as a value, float32 text as a key.
    assert load_yaml_stream("a: &x 1e6\n*x : b\nc: *x\n") == [{"a": 1000000, "1e+06": "b", "c": 1000000}]


# --- Writing: strings are quoted wherever kubectl would read another type -------


@pytest.mark.parametrize(
    "text",
    [
        "y",
        "N",
        "on",
        "0o17",
        "017",
        "08",
        "1e3",
        "1_000",
        "0b-1",
        "+.5",
        ".5_5",
        "1:30",
        "2001-12-14",
        "null",
        "",
        "0x10000000000000000",
    ],
)
def test_the_signer_quotes_a_string_kubectl_would_read_as_another_type(text: str) -> None:
    # goyaml.v2 encode.go stringv writes a string plain only when resolve() gives !!str back.
    written = dump_yaml([{"v": text, text: "k"}])
    assert f"v: {text}\n" not in written
    assert load_yaml_stream(written) == [{"v": text, text: "k"}]


GO_INTEGERS = st.integers(-(2**63), 2**64 - 1)


@given(st.dictionaries(st.text(), st.text() | GO_INTEGERS | st.booleans() | st.none(), max_size=4))
def test_whatever_the_signer_writes_reads_back_the_same(document: dict[str, Any]) -> None:
    assert load_yaml_stream(yaml.dump(document, Dumper=KubectlSafeDumper)) == [document]


@pytest.mark.parametrize(
    ("number", "sent"), [(-(2**63) - 1, -9223372036854776000), (2**64, 18446744073709552000), (10**30, 1e30)]
)
def test_the_signer_writes_an_integer_goyaml_cannot_hold_plain_so_it_reads_as_kubectl_reads_it(
    number: int, sent: float
) -> None:
    # Beyond int64/uint64 goyaml.v2 reads a decimal as a float (RESOLVE): kubectl sends it rounded.
    # Written plain, the payload reads the same way; tagged !!int, goyaml.v2 would refuse it.
    written = yaml.dump({"v": number}, Dumper=KubectlSafeDumper)
    assert written == f"v: {number}\n"
    assert load_yaml_stream(written) == [{"v": sent}]


# --- A signed manifest compares with the object the API server stores -----------

KEY = make_key("ecdsa-p256", 3)
POLICY = Policy.from_dict({"keys": [public_key_pem(KEY)]})
DOMAIN = "cosign.sigstore.dev"

# As an author writes it: a Flux HelmRelease (spec.values is free-form, stored as sent) and a
# Deployment, with scalars that goyaml.v2 and YAML 1.1 read differently.
SIGNED_PAYLOAD = b"""\
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: shop
  namespace: shop
spec:
  chart:
    spec: {chart: shop, version: 1.10.0}
  values:
    replicaCount: 0o3
    debug: y
    timeout: 1:30
    ratio: 1e3
    retries: 08
    tls: on
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
spec:
  replicas: 0o3
  template:
    spec:
      containers:
      - name: web
        image: nginx:1.25
        args: [--window, 1:30]
"""

# What kubectl sends for each document (and the API server stores and hands to admission), as JSON.
AS_KUBECTL_SENDS = {
    "HelmRelease": {
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {"name": "shop", "namespace": "shop"},
        "spec": {
            "chart": {"spec": {"chart": "shop", "version": "1.10.0"}},
            "values": {"replicaCount": 3, "debug": True, "timeout": "1:30", "ratio": 1000, "retries": 8, "tls": True},
        },
    },
    "Deployment": {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "replicas": 3,
            "template": {
                "spec": {"containers": [{"name": "web", "image": "nginx:1.25", "args": ["--window", "1:30"]}]}
            },
        },
    },
}

# The same documents read with YAML 1.1 rules (PyYAML): what the verifier used to compare against.
AS_YAML_1_1_READS = {kind: doc for kind, doc in zip(AS_KUBECTL_SENDS, yaml.safe_load_all(SIGNED_PAYLOAD), strict=True)}


def admitted(document: dict[str, Any]) -> Review:
    """The object as admission sees it: JSON from the API server, the signature annotations on it."""
    obj = load_json(json.dumps(document))
    obj["metadata"]["annotations"] = {
        f"{DOMAIN}/message": encode_message(SIGNED_PAYLOAD),
        f"{DOMAIN}/signature": base64.b64encode(sign_bytes(KEY, SIGNED_PAYLOAD)).decode(),
    }
    return Review.for_object(obj)


def test_the_yaml_1_1_reading_really_differs() -> None:
    assert AS_YAML_1_1_READS["HelmRelease"]["spec"]["values"] == {
        "replicaCount": "0o3",
        "debug": "y",
        "timeout": 90,
        "ratio": "1e3",
        "retries": "08",
        "tls": True,
    }
    assert AS_YAML_1_1_READS["Deployment"]["spec"]["replicas"] == "0o3"


@pytest.mark.parametrize("kind", AS_KUBECTL_SENDS)
def test_the_object_kubectl_creates_from_a_signed_file_verifies(kind: str) -> None:
    result = decide(admitted(AS_KUBECTL_SENDS[kind]), POLICY)
    assert (result.allowed, result.verified, result.reason) == (True, True, "verified"), result.message


@pytest.mark.parametrize("kind", AS_KUBECTL_SENDS)
def test_an_object_read_with_yaml_1_1_rules_from_the_signed_file_is_denied(kind: str) -> None:
    # Before: the verifier read the payload with YAML 1.1 rules, so this object -- not the one
    # kubectl creates from the signed file (timeout 90, not "1:30"; debug "y", not true) -- verified.
    result = decide(admitted(AS_YAML_1_1_READS[kind]), POLICY)
    assert (result.allowed, result.verified, result.reason) == (False, False, "content-mismatch"), result.message
