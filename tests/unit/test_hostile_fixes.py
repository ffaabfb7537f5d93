"""Regression tests for what the hostile-input corpus found, one per fix.

* a sparse tar member claimed a terabyte of zeros and ``tarfile`` built it (MemoryError, or
  gigabytes actually allocated);
* the PEM scanner was a backtracking regular expression: quadratic in BEGIN lines without an
  END (2.6 MB took hours);
* a key string with a lone UTF-16 surrogate (JSON carries one, UTF-8 cannot) escaped as a
  UnicodeEncodeError: an ``internal-error`` for the whole request instead of ``policy-invalid``;
* thousands of key strings were all parsed before the key count was checked, and key texts of
  any size were kept as cache keys;
* ``*`` patterns (object names, ignoreFields segments, user names) compiled to ``.*``-joined
  regular expressions that backtrack polynomially on names the requester chooses.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import re
import tarfile
import time
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provider.compare.diff import FieldTrie, IgnoreSet, diff, parse_field_pattern
from provider.errors import KeyLoadError, MalformedMessage, PolicyError
from provider.keys.pem import _load_cached, load_public_keys, public_pem
from provider.objects import Glob, NamePattern, ObjectIdentity, ObjectRef
from provider.policy.schema import Policy
from provider.service.app import create_app
from provider.signatures.envelope import Payload
from tests.support.keys import make_key, public_key_pem


def tarball(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue(), mtime=0)


def sparse(name: str, real_size: int) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    data = b"1\n0\n1\n".ljust(512, b"\0") + b"a".ljust(512, b"\0")
    info.size = len(data)
    info.pax_headers = {
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": name,
        "GNU.sparse.realsize": str(real_size),
    }
    return info, data


def regular(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


# --- tarballs ---------------------------------------------------------------------------


@pytest.mark.parametrize("real_size", [10**12, 3 * 2**30, 5 * 2**20], ids=["1TB", "3GiB", "5MiB"])
def test_a_sparse_member_is_refused_before_its_claimed_size_is_built(real_size: int) -> None:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(tarball(sparse("s.yaml", real_size))))) as archive:
        first = archive.next()
        assert first is not None and first.issparse() and first.size == real_size
    tracemalloc.start()
    with pytest.raises(MalformedMessage, match="sparse file"):
        Payload(tarball(sparse("s.yaml", real_size)), "tarball").documents()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 * 2**20


def test_a_member_claiming_more_than_the_payload_limit_is_refused_before_it_is_read() -> None:
    info = tarfile.TarInfo("big.yaml")
    info.size = 2**30  # the header claims 1 GiB; no data follows
    buffer = io.BytesIO()
    buffer.write(info.tobuf(tarfile.PAX_FORMAT))
    buffer.write(bytes(1024))
    with pytest.raises(MalformedMessage, match=r"'big\.yaml' claims 1073741824 bytes"):
        Payload(gzip.compress(buffer.getvalue()), "tarball").documents()


# --- PEM --------------------------------------------------------------------------------


def test_begin_lines_without_end_are_refused_in_linear_time() -> None:
    for lines in (1_000, 100_000):
        text = "-----BEGIN PUBLIC KEY-----\n" * lines
        start = time.process_time()  # CPU time: the work, whatever else the machine runs
        with pytest.raises(KeyLoadError, match="more than 64 PEM blocks"):
            load_public_keys(text)
        assert time.process_time() - start < 0.5


def test_distinct_unclosed_labels_cost_one_scan_each_and_stop_at_the_block_limit() -> None:
    text = "".join(f"-----BEGIN LABEL {i:06d}-----\n" for i in range(50_000)) + "x" * 2_000_000
    start = time.process_time()
    with pytest.raises(KeyLoadError, match="more than 64 PEM blocks"):
        load_public_keys(text)
    assert time.process_time() - start < 0.5


def test_the_linear_scan_reads_what_the_regular_expression_read() -> None:
    good = public_key_pem(make_key("ed25519"))
    other = public_key_pem(make_key("ecdsa-p256"))
    # An unclosed BEGIN before a good block, text between blocks, a nested BEGIN, CRLF line ends.
    text = "-----BEGIN FOO-----\nnever closed\n" + good + "# between\r\n" + other.replace("\n", "\r\n")
    keys = load_public_keys(text)
    assert [k.key_type for k in keys] == ["ed25519", "ecdsa-p256"]
    old = re.compile(r"-----BEGIN ([A-Z0-9 ]{1,40})-----\r?\n(.*?)-----END \1-----", re.DOTALL)
    assert len(old.findall(text.replace("\r\n", "\n"))) == 2


def test_a_custom_key_limit_is_honoured() -> None:
    pems = "".join(public_key_pem(make_key("ed25519", n)) for n in range(3))
    assert len(load_public_keys(pems, max_blocks=3)) == 3
    with pytest.raises(KeyLoadError, match="more than 2 PEM blocks"):
        load_public_keys(pems, max_blocks=2)


def test_a_lone_surrogate_in_a_key_is_a_policy_error() -> None:
    with pytest.raises(KeyLoadError, match="could not be read"):
        load_public_keys("-----BEGIN PUBLIC KEY-----\n\ud800\n-----END PUBLIC KEY-----\n")


def test_a_lone_surrogate_in_a_key_is_policy_invalid_on_the_kyverno_route_not_an_internal_error() -> None:
    client = create_app({"TESTING": True, "LOG_LEVEL": "error"}).test_client()
    body = b'{"request": {"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}}, "policy": {"keys": ["-----BEGIN PUBLIC KEY-----\\n\\ud800\\n-----END PUBLIC KEY-----\\n"]}}'
    answer = client.post("/v1/kyverno/verify", data=body).get_json()
    assert answer["reason"] == "policy-invalid"
    assert answer["allowed"] is False


def test_empty_and_wrongly_shaped_keys_say_what_they_are() -> None:
    with pytest.raises(KeyLoadError, match="the key is empty"):
        load_public_keys("  \n")
    with pytest.raises(KeyLoadError, match=r"no PEM block found in key\Z"):
        load_public_keys('{"kty": "OKP", "crv": "Ed25519", "x": "abc"}')
    wrapped = base64.b64encode(public_pem(make_key("ed25519"))).decode()
    with pytest.raises(KeyLoadError, match="base64-wrapped"):
        load_public_keys(wrapped)


def test_thousands_of_key_strings_stop_at_the_key_limit() -> None:
    pem = public_key_pem(make_key("ed25519"))
    start = time.process_time()
    with pytest.raises(PolicyError, match="more than 64 keys"):
        Policy.from_dict({"keys": [pem + "\n" * (i % 7) for i in range(5000)]})
    assert time.process_time() - start < 0.5


def test_large_key_texts_are_not_kept_as_cache_keys() -> None:
    pem = public_key_pem(make_key("ed25519"))
    before = _load_cached.cache_info().currsize
    for padding in range(5):
        load_public_keys(pem + "#" * (70 * 1024 + padding))
    assert _load_cached.cache_info().currsize == before
    load_public_keys(pem + "# small")
    assert _load_cached.cache_info().currsize == before + 1


# --- * patterns --------------------------------------------------------------------------


def _old_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")) + r"\Z", re.DOTALL)


@settings(max_examples=500, deadline=None)
@given(st.text("ab*", max_size=8), st.text("ab", max_size=12))
def test_glob_matches_exactly_what_the_regular_expression_matched(pattern: str, value: str) -> None:
    assert Glob(pattern).match(value) == bool(_old_regex(pattern).match(value))


def test_star_patterns_against_long_names_take_linear_time() -> None:
    name = "a" * 253
    start = time.process_time()
    assert not Glob("*a*a*a*a*a*a*a*b").match("a" * 5000)
    assert not NamePattern.compile("*a*a*a*a*a*a*b", "t").matches(name)
    ref = ObjectRef.from_dict({"name": "*a*a*a*a*a*a*b"}, "t")
    assert not ref.matches(ObjectIdentity.of({"kind": "ConfigMap", "metadata": {"name": name}}))
    trie = FieldTrie((parse_field_pattern("data.*a*a*a*a*a*a*b"),))
    signed = {"data": {"a" * 5000: "x"}}
    assert diff(signed, {"data": {"a" * 5000: "y"}}, IgnoreSet(trie))  # not ignored, and found quickly
    assert time.process_time() - start < 0.5


def test_dash_still_matches_only_the_empty_name() -> None:
    pattern = NamePattern.compile("-", "t")
    assert pattern.matches("") and not pattern.matches("-") and not pattern.matches("a")
    assert json.dumps(pattern.text) == '"-"'
