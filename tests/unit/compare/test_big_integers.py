"""Attack class: **integers beyond int64 (a false denial).**

kubectl sends an integer beyond int64 as goyaml.v2 reads it (up to uint64 exactly), and the
API server stores any number that is not an int64 as a float64 and hands admission that
float's shortest digits: ``18446744073709551615`` signed is ``18446744073709552000``
admitted. The verifier compared the two exactly and denied an honestly signed object.

Rules, with their sources (read with the search tool):

* API: sigs.k8s.io/json ``internal/golang/encoding/json/decode.go`` ``convertNumber``
  (kubernetes/kubernetes ``vendor/sigs.k8s.io/json``; k8s.io/apimachinery
  ``pkg/util/json`` ``Unmarshal`` uses it, and its older ``convertNumber`` did the same):
  a literal without ``.`` that ``strconv.ParseInt(s, 10, 64)`` accepts is an int64,
  anything else ``strconv.ParseFloat(s, 64)``.
* JSON: Go ``encoding/json`` floatEncoder: the shortest digits that read back as the same
  float64, in ``'f'`` format for magnitudes in [1e-6, 1e21), ``'e'`` beyond.
* YAML: goyaml.v2 ``resolve()`` reads ``0x8000000000000000`` with ``ParseUint`` after
  ``ParseInt`` fails (``tests/unit/test_parsing_kubectl.py`` holds those rows).

The equivalence this adds, and why it is safe: two numbers are equal when the API server
writes the same digits for them, so an integer outside int64 equals every number with the
same nearest float64. The API server stores all of them as that one float64 and writes it
back alike; nothing that reads the object from the cluster can tell them apart. An integer
within int64 still equals only itself: the API server keeps it as an int64, and the
float64 of the same value is written with other digits once it is large
(``-9223372036854775808`` against ``-9223372036854776000``).
"""

from __future__ import annotations

import base64
import json
from decimal import Decimal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from provider import Policy, Review, decide
from provider.compare.diff import FieldTrie, IgnoreSet, diff
from provider.keys.pem import sign_bytes
from provider.parsing import load_json
from provider.signatures.envelope import encode_message
from tests.support.keys import make_key, public_key_pem

KEY = make_key("ecdsa-p256", 10)
POLICY = Policy.from_dict({"keys": [public_key_pem(KEY)]})
DOMAIN = "cosign.sigstore.dev"
INT64 = range(-(2**63), 2**63)
NO_IGNORES = IgnoreSet(FieldTrie())


def go_float_text(value: float) -> str:
    """JSON: encoding/json's text for a float64.

    Go's floatEncoder: ``strconv.AppendFloat(f, fmt, -1, 64)`` -- the shortest digits that read
    back as ``f`` (Python's ``repr`` finds the same digits) -- with ``fmt = 'e'`` when
    ``abs(f) < 1e-6 or abs(f) >= 1e21`` (and ``f != 0``), ``'f'`` otherwise; then ``e-07`` becomes ``e-7``.
    """
    shortest = repr(value)
    if value != 0 and (abs(value) < 1e-6 or abs(value) >= 1e21):
        mantissa, _, exponent = shortest.partition("e")
        sign, digits = exponent[0], exponent[1:]
        if sign == "-" and len(digits) == 2 and digits[0] == "0":
            digits = digits[1:]
        return f"{mantissa}e{sign}{digits}"
    fixed = format(Decimal(shortest), "f")
    return fixed.rstrip("0").rstrip(".") if "." in fixed else fixed


def api_server_text(kubectl_sends: str) -> str:
    """API then JSON: what the API server stores for the number kubectl sent, as it writes it back."""
    if "." not in kubectl_sends:
        try:
            number = int(kubectl_sends)  # strconv.ParseInt(s, 10, 64): no exponent, no point
        except ValueError:
            number = None
        if number is not None and number in INT64:
            return str(number)
    return go_float_text(float(kubectl_sends))  # ParseFloat: the nearest float64 to the decimal text


# (id, the literal as signed in YAML, what kubectl sends for it)
SIGNED_LITERALS = [
    ("two-to-the-63", "9223372036854775808", "9223372036854775808"),
    ("uint64-max", "18446744073709551615", "18446744073709551615"),
    ("hex-two-to-the-63", "0x8000000000000000", "9223372036854775808"),
    ("hex-uint64-max", "0xFFFFFFFFFFFFFFFF", "18446744073709551615"),
    ("octal-two-to-the-63", "0o1000000000000000000000", "9223372036854775808"),
    ("underscored", "18_446_744_073_709_551_615", "18446744073709551615"),
]


def widget(value_text: str) -> str:
    return f"apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: shop\nspec:\n  size: {value_text}\n"


def widget_json(value_text: str) -> str:
    return (
        '{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "shop"}, '
        f'"spec": {{"size": {value_text}}}}}'
    )


def admitted(payload: bytes, stored_text: str) -> Review:
    """The object as admission sees it: the API server's JSON, with the signature annotations."""
    obj = load_json(widget_json(stored_text))
    obj["metadata"]["annotations"] = {
        f"{DOMAIN}/message": encode_message(payload),
        f"{DOMAIN}/signature": base64.b64encode(sign_bytes(KEY, payload)).decode(),
    }
    return Review.for_object(obj)


@pytest.mark.parametrize(
    ("form", "literal", "sent"),
    [("yaml", literal, sent) for _, literal, sent in SIGNED_LITERALS]
    + [("json", literal, sent) for _, literal, sent in SIGNED_LITERALS if literal.isdigit()],
    ids=[f"yaml-{row[0]}" for row in SIGNED_LITERALS]
    + [f"json-{row[0]}" for row in SIGNED_LITERALS if row[1].isdigit()],
)
def test_an_honestly_signed_integer_beyond_int64_verifies(form: str, literal: str, sent: str) -> None:
    payload = (widget(literal) if form == "yaml" else widget_json(literal)).encode()
    stored = api_server_text(sent)
    assert stored != sent  # the API server really changes the digits
    result = decide(admitted(payload, stored), POLICY)
    assert (result.allowed, result.verified, result.reason) == (True, True, "verified"), result.message


# Numbers on both sides, as JSON texts: integers around the int64 and uint64 edges, any integer, floats.
_EDGES = [2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 2**53 + 1]
_TEXTS = st.one_of(
    st.sampled_from(_EDGES).flatmap(lambda e: st.integers(e - 5000, e + 5000)).map(str),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(go_float_text),
)


@settings(max_examples=1000, deadline=None)
@given(signed=_TEXTS, written=_TEXTS)
@example(signed="9223372036854775807", written="9223372036854775808")  # int64 vs float64 in the cluster: differ
@example(signed="18446744073709551615", written="18446744073709555712")  # the next float64 up: differ
@example(signed="9007199254740993", written="9007199254740992")  # int64s: exact, whatever their float64s
@example(signed="-9223372036854775809", written="-9223372036854775808")  # int64 min vs the float64 -2^63: differ
@example(signed="-18446744073709551616", written="-18446744073709551615")  # both the float64 -2^64: equal
@example(signed="1e+21", written="1000000000000000000000")  # one float64, two texts: equal
def test_two_numbers_compare_equal_exactly_when_the_api_server_stores_them_alike(signed: str, written: str) -> None:
    """No equivalence beyond the API server's: a signed number (as kubectl sends it) equals what admission
    shows for a written one exactly when the API server writes both back with the same digits (API, JSON)."""
    # The model's digits for a few values, as Go writes them (API, JSON):
    assert api_server_text("18446744073709551615") == "18446744073709552000"
    assert api_server_text("9223372036854775807") == "9223372036854775807"
    assert api_server_text("-9223372036854775809") == "-9223372036854776000"
    assert api_server_text("1e21") == "1e+21" and api_server_text("0.0000001") == "1e-7"
    admission_sees = json.loads(api_server_text(written))
    same = diff({"v": json.loads(signed)}, {"v": admission_sees}, NO_IGNORES) == []
    assert same is (api_server_text(signed) == api_server_text(written)), (signed, written)
