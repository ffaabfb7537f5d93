"""Limits a dependency applies before our own check: whoever trips first, the answer is ours.

Each dependency limit is tested twice: with the dependency's refusal out of the way (or
absent, as in older releases), so our own check answers; and with the dependency refusing
first -- for real where the installed release does, and simulated at the exact point where
a release raises it -- so the mapping answers. Both must give the same reason and message,
whichever release is installed.
"""

from __future__ import annotations

import base64
import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
import yaml.parser
import yaml.scanner
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from provider import Policy, parsing
from provider.errors import DataError, KeyLoadError, MalformedMessage, PolicyError, RequestError
from provider.keys.pem import load_public_keys
from provider.limits import MAX_DEPTH_CEILING, Limits
from provider.parsing import load_json, load_yaml_stream
from provider.service.auth import token_expiry
from provider.signatures.sources import _payload_mismatch
from tests.support.keys import make_key, public_key_pem

KEY_PEM = public_key_pem(make_key())
DEEP = 100  # Limits().max_depth
REFUSED_DEEP = f"nested deeper than {DEEP} levels"


# --- libyaml's nesting limit ------------------------------------------------------------


@contextlib.contextmanager
def libyaml_nest_level(level: int) -> Iterator[bool]:
    """libyaml's own nesting limit set to ``level`` for the block; False when this libyaml has none.

    PyYAML 6.0.4 (libyaml 0.2.6) has one, 1000 by default, behind the private
    ``yaml._yaml._set_max_nest_level``; PyYAML 6.0.3 and older (libyaml 0.2.5) have none.
    """
    from yaml import _yaml

    getter = getattr(_yaml, "_get_max_nest_level", None)
    setter = getattr(_yaml, "_set_max_nest_level", None)
    if getter is None or setter is None:
        yield False
        return
    before = getter()
    setter(level)
    try:
        yield True
    finally:
        setter(before)


#: Inputs deeper than libyaml's limit (1000), in the shapes its scanner and parser count differently.
DEEPER_THAN_LIBYAML = {
    "flow-on-one-line": "[" * 10_000 + "]" * 10_000,  # 0.2.6's scanner refuses before the first event
    "flow-mappings": "{a: " * 1_500 + "1" + "}" * 1_500,
    "flow-across-lines": "[\n" * 1_500 + "]" * 1_500,
    "block-sequences": "- " * 1_500 + "x\n",
    "block-mappings": "".join("  " * i + "k:\n" for i in range(1_500)) + "  " * 1_500 + "v\n",
    "block-then-flow": "".join("  " * i + "k:\n" for i in range(999)) + "  " * 999 + "[" * 10 + "]" * 10 + "\n",
}


@pytest.mark.parametrize("text", DEEPER_THAN_LIBYAML.values(), ids=DEEPER_THAN_LIBYAML.keys())
def test_input_deeper_than_libyamls_limit_gets_our_answer_with_the_installed_libyaml(text: str) -> None:
    with pytest.raises(MalformedMessage, match=REFUSED_DEEP) as refused:
        load_yaml_stream(text, error=MalformedMessage, what="YAML in message")
    assert refused.value.reason == "malformed-message"
    assert str(refused.value) == f"YAML in message is {REFUSED_DEEP}"


@pytest.mark.parametrize("text", DEEPER_THAN_LIBYAML.values(), ids=DEEPER_THAN_LIBYAML.keys())
def test_with_libyamls_limit_out_of_the_way_our_own_check_gives_the_same_answer(text: str) -> None:
    """libyaml 0.2.5 and older: no limit of its own; our check refuses at 100 levels."""
    with libyaml_nest_level(1_000_000), pytest.raises(MalformedMessage) as refused:
        load_yaml_stream(text, error=MalformedMessage, what="YAML in message")
    assert str(refused.value) == f"YAML in message is {REFUSED_DEEP}"


def test_with_libyamls_limit_in_force_the_flow_line_is_refused_by_libyaml_first() -> None:
    """The case the mapping is for, where the installed libyaml has the limit: its refusal, our words."""
    with libyaml_nest_level(1000) as has_limit:
        if not has_limit:
            pytest.skip("this libyaml has no nesting limit; the simulated refusal below covers the mapping")
        loader = yaml.CSafeLoader("[" * 10_000)
        events: list[type] = []
        try:
            with pytest.raises(yaml.YAMLError, match="nesting"):
                while True:
                    events.append(type(loader.get_event()))
        finally:
            loader.dispose()
        # The scanner looked ahead and refused before the first level was an event: our check never saw one.
        assert events == [yaml.StreamStartEvent]
        with pytest.raises(DataError, match=REFUSED_DEEP):
            load_yaml_stream("[" * 10_000)


#: What each libyaml release says when its nesting limit trips, and where: 0.2.6's scanner
#: (yaml/libyaml#329; context and problem as PyYAML 6.0.4 reports them), and the parser check
#: of yaml/libyaml#287 (libyaml master since 51843fe, src/parser.c yaml_maximum_level_reached).
LIBYAML_REFUSALS = [
    (yaml.scanner.ScannerError, "while increasing flow level", "exceeded maximum nesting depth"),
    (yaml.scanner.ScannerError, "while increasing block level", "exceeded maximum nesting depth"),
    (yaml.parser.ParserError, "while parsing", "Maximum nesting level reached, set with yaml_set_max_nest_level())"),
]


@pytest.mark.parametrize(
    ("error", "context", "problem"), LIBYAML_REFUSALS, ids=["scanner-flow", "scanner-block", "parser-287"]
)
def test_libyamls_refusal_simulated_where_it_raises_gets_our_answer(
    monkeypatch: pytest.MonkeyPatch, error: type[yaml.MarkedYAMLError], context: str, problem: str
) -> None:
    """Independent of the installed libyaml: the loader raises as 0.2.6 does on a 10 000-deep flow line,
    right after the stream's start event (line 1, column 1001)."""
    mark = yaml.Mark("<unicode string>", 1000, 0, 1000, None, None)

    class Refusing(parsing._CLoader):  # type: ignore[name-defined,misc]
        started = False

        def get_event(self) -> Any:
            if self.started:
                raise error(context, mark, problem, mark)
            self.started = True
            return super().get_event()

    monkeypatch.setattr(parsing, "_CLoader", Refusing)
    with pytest.raises(MalformedMessage) as refused:
        load_yaml_stream("[" * 10_000 + "]" * 10_000, error=MalformedMessage, what="YAML in message")
    assert str(refused.value) == f"YAML in message is {REFUSED_DEEP}"
    assert refused.value.reason == "malformed-message"


def test_other_yaml_errors_keep_their_own_message() -> None:
    with pytest.raises(DataError, match=r"^YAML is not valid YAML: did not find expected node content at line 2"):
        load_yaml_stream("[[")


def test_libyamls_simple_key_limit_is_grammar_and_the_same_in_every_release() -> None:
    """An implicit key ends within 1024 characters (YAML 1.1 section 9.1.1.2; libyaml and goyaml.v2
    scanner.c ``simple_key.mark.index+1024``): a syntax rule kubectl shares, unchanged in 0.2.6."""
    assert load_yaml_stream("a" * 1023 + ": 1\n") == [{"a" * 1023: 1}]
    with pytest.raises(DataError, match="is not valid YAML"):
        load_yaml_stream("a" * 1025 + ": 1\n")


def test_the_depth_limit_stays_below_what_the_dependencies_refuse_themselves() -> None:
    assert Limits(max_depth=MAX_DEPTH_CEILING).max_depth == MAX_DEPTH_CEILING
    with pytest.raises(ValueError, match=f"between 1 and {MAX_DEPTH_CEILING}"):
        Limits(max_depth=MAX_DEPTH_CEILING + 1)
    with pytest.raises(ValueError, match="between 1"):
        Limits(max_depth=0)


@pytest.mark.parametrize("depth", [DEEP + 1, MAX_DEPTH_CEILING, 999, 10_000])
def test_json_deeper_than_the_limit_gets_our_answer_whether_json_or_our_walk_refuses(depth: int) -> None:
    """json's C scanner raises RecursionError near the interpreter's recursion limit (1000 frames);
    below it our own walk refuses. One answer."""
    with pytest.raises(RequestError) as refused:
        load_json("[" * depth + "]" * depth, error=RequestError, what="the body")
    assert str(refused.value) == f"the body is {REFUSED_DEEP}"


# --- Python's int-from-text digit limit ----------------------------------------------------


@contextlib.contextmanager
def int_max_str_digits(limit: int) -> Iterator[None]:
    """The interpreter's digit limit for ``int(text)`` (Python 3.11+: 4300 by default, 640 at the
    least, 0 for none -- as before 3.11), as ``-X int_max_str_digits`` or PYTHONINTMAXSTRDIGITS sets it."""
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(limit)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(before)


#: 0: no limit (Python before 3.11); 640: the lowest an interpreter accepts; 4300: the default.
INTERPRETER_DIGIT_LIMITS = [0, 640, 4300]


@pytest.mark.parametrize("limit", INTERPRETER_DIGIT_LIMITS)
@pytest.mark.parametrize("digits", [400, 700, 5_000])
def test_a_json_integer_beyond_float64_gets_our_answer_whatever_the_interpreters_digit_limit(
    limit: int, digits: int
) -> None:
    with int_max_str_digits(limit), pytest.raises(RequestError) as refused:
        load_json('{"x": 1' + "0" * (digits - 1) + "}", error=RequestError, what="the body")
    assert str(refused.value) == (
        f"the body is not valid JSON: number 10000000000000000000… ({digits} digits) is not finite as a float64"
    )


@pytest.mark.parametrize("limit", INTERPRETER_DIGIT_LIMITS)
def test_json_integers_within_float64_read_exactly_whatever_the_interpreters_digit_limit(limit: int) -> None:
    largest = "1" + "7" * 308  # 309 digits, below float64's 1.797e308
    with int_max_str_digits(limit):
        assert load_json(f"[{largest}, -{'9' * 30}, 0]") == [int(largest), -int("9" * 30), 0]


@pytest.mark.parametrize("limit", INTERPRETER_DIGIT_LIMITS)
def test_a_field_pattern_index_of_5000_digits_is_a_policy_error_not_pythons_value_error(limit: int) -> None:
    with int_max_str_digits(limit), pytest.raises(PolicyError, match="has 5000 digits; no list is that long"):
        Policy.from_dict({"keys": [KEY_PEM], "ignoreFields": [{"fields": ["data.items[" + "9" * 5000 + "]"]}]})


@pytest.mark.parametrize("limit", INTERPRETER_DIGIT_LIMITS)
def test_a_field_pattern_segment_of_5000_digits_is_a_map_key(limit: int) -> None:
    with int_max_str_digits(limit):
        policy = Policy.from_dict({"keys": [KEY_PEM], "ignoreFields": [{"fields": ["data." + "9" * 5000]}]})
    assert policy.ignore_fields[0].fields == ("data." + "9" * 5000,)


# --- JSON from other parties, read within the parser's limits ----------------------------------

DEEP_JSON = b"[" * 30_000 + b"]" * 30_000  # past json's recursion limit (1000 frames)


@pytest.mark.parametrize(
    ("payload", "says"),
    [(DEEP_JSON, "the payload is nested deeper than 100 levels"), (b"[1" + b"0" * 4999 + b"]", "(5000 digits)")],
    ids=["deep", "5000-digit-number"],
)
def test_a_cosign_payload_from_a_registry_is_refused_in_our_words(payload: bytes, says: str) -> None:
    """The simple-signing payload of an image signature comes from the registry (bundles.py)."""
    assert says in _payload_mismatch(payload, "sha256:" + "0" * 64, Limits())


@pytest.mark.parametrize(
    "claims",
    [DEEP_JSON, b'{"exp": 1' + b"0" * 400 + b"}", b'{"exp": 1' + b"0" * 5000 + b"}"],
    ids=["deep", "exp-beyond-float64", "exp-of-5000-digits"],
)
def test_a_tokens_claims_that_json_or_float_would_refuse_mean_no_expiry_not_an_exception(claims: bytes) -> None:
    """Read after the API server accepted the token, to bound how long it is cached: RecursionError
    (deep claims) and OverflowError (float() of a huge ``exp``) escaped the authentication."""
    token = "header." + base64.urlsafe_b64encode(claims).decode().rstrip("=") + ".signature"
    assert token_expiry(token) is None
    assert token_expiry("h." + base64.urlsafe_b64encode(b'{"exp": 1700000000}').decode().rstrip("=") + ".s") == 1.7e9


# --- OpenSSL's RSA limits ----------------------------------------------------------------


def _rsa_pem(e: int, n: int) -> str:
    key = rsa.RSAPublicNumbers(e, n).public_key()
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def _rsa_with_exponent(bits: int, e: int) -> rsa.RSAPrivateKey:
    """A real RSA key pair with public exponent ``e``: the primes of a generated key, ``d`` derived anew."""
    numbers = rsa.generate_private_key(65537, bits).private_numbers()
    p, q = numbers.p, numbers.q
    d = pow(e, -1, (p - 1) * (q - 1))
    public = rsa.RSAPublicNumbers(e, p * q)
    return rsa.RSAPrivateNumbers(p, q, d, d % (p - 1), d % (q - 1), pow(q, -1, p), public).private_key()


#: Odd, coprime with (p - 1)(q - 1) for any two primes: itself a prime (2^89 - 1, a Mersenne prime).
BIG_EXPONENT = 2**89 - 1


@pytest.mark.parametrize(("bits", "openssl_verifies"), [(3072, True), (3104, False)], ids=["3072-bits", "3104-bits"])
def test_openssl_refuses_rsa_keys_over_3072_bits_with_an_exponent_over_64_bits(
    bits: int, openssl_verifies: bool
) -> None:
    """The dependency's own limit (rsa_ossl.c): an honest signature by such a key fails as if forged.
    Ours refuses the key at load, with its reason, on the same side of the boundary."""
    private = _rsa_with_exponent(bits, BIG_EXPONENT)
    signature = private.sign(b"payload", padding.PKCS1v15(), hashes.SHA256())
    try:
        private.public_key().verify(signature, b"payload", padding.PKCS1v15(), hashes.SHA256())
        verified = True
    except InvalidSignature:
        verified = False
    assert verified is openssl_verifies
    pem = private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    if openssl_verifies:
        (key,) = load_public_keys(pem.decode())
        assert key.verifies(signature, b"payload")
    else:
        with pytest.raises(KeyLoadError, match=f"RSA key of {bits} bits has a 89-bit public exponent; OpenSSL"):
            load_public_keys(pem.decode())


def test_rsa_keys_over_16384_bits_are_refused_at_load_not_at_every_signature() -> None:
    n = (1 << 16399) | int.from_bytes(b"\x5a" * 2050, "big") | 1  # 16 400 bits, odd
    with pytest.raises(KeyLoadError, match="RSA key of 16400 bits is larger than OpenSSL verifies with"):
        load_public_keys(_rsa_pem(65537, n))
    with pytest.raises(PolicyError, match="16400 bits"):
        Policy.from_dict({"keys": [_rsa_pem(65537, n)]})
