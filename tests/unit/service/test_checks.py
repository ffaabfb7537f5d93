"""Check dispatch: the manifest check, the policy cache, and answering a request's keys under a deadline."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from provider.cache import LRUCache, digest
from provider.errors import PolicyError, RequestError, TransientError
from provider.result import Result
from provider.review import Review
from provider.service.app import Service
from provider.service.checks import (
    CHECKS,
    DEFAULT_CHECK,
    CheckContext,
    DeadlineExceeded,
    Dispatcher,
    InternalError,
    Job,
    PolicyCache,
    Question,
    Subject,
    check_manifest,
    run_check,
)
from provider.service.config import load_config
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign

CTX = CheckContext()


def policy(**extra: Any) -> dict[str, Any]:
    return {"keys": [public_key_pem(make_key())], **extra}


def signed(name: str = "cm", **data: str) -> dict[str, Any]:
    return sign(configmap(name, "ns", **(data or {"key": "value"})))[0]


@pytest.fixture
def dispatcher() -> Iterator[Dispatcher]:
    d = Dispatcher(LRUCache(100), threads=4)
    yield d
    d.shutdown()


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A check named "counting" that records each call and allows; ``used_cluster`` when the policy says so."""
    calls: list[str] = []

    def check(review: Review, policy_raw: Any, ctx: CheckContext) -> Result:
        calls.append(str(policy_raw))
        if isinstance(policy_raw, dict) and policy_raw.get("sleep"):
            time.sleep(policy_raw["sleep"])
        return Result(
            True,
            True,
            "verified",
            "counted",
            used_cluster=bool(isinstance(policy_raw, dict) and policy_raw.get("cluster")),
        )

    monkeypatch.setitem(CHECKS, "counting", check)
    return calls


def job(policy_raw: Any, key: bytes | None = b"k", check: str = "counting", obj: dict[str, Any] | None = None) -> Job:
    review = Review.for_object(obj or configmap())
    return Job(key, lambda: Question(check, review, policy_raw))


# --- run_check and the manifest check ---------------------------------------------


def test_manifest_is_the_default_check() -> None:
    assert DEFAULT_CHECK == "manifest" and CHECKS[DEFAULT_CHECK] is check_manifest
    result = run_check("manifest", Review.for_object(signed()), policy(), CTX)
    assert (result.allowed, result.reason) == (True, "verified")


def test_an_unknown_check_is_a_request_error_naming_the_known_ones() -> None:
    with pytest.raises(RequestError, match=r"unknown check 'nope'; known checks: .*manifest"):
        run_check("nope", Review.for_object(signed()), policy(), CTX)


def test_a_policy_is_compiled_once_for_the_same_canonical_json() -> None:
    cache = PolicyCache(8)
    first = cache.compile({"keys": [public_key_pem(make_key())], "keyOperation": "AtLeastOne"})
    second = cache.compile({"keyOperation": "AtLeastOne", "keys": [public_key_pem(make_key())]})
    other = cache.compile({"keys": [public_key_pem(make_key())], "keyOperation": "MustAll"})
    assert first is second
    assert other is not first and other.key_operation == "MustAll"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"keys": [1.5, float("nan")]}, "not JSON data"),
        ({"keys": {"a"}}, "not JSON data"),
        ({"keys": []}, "no keys or signers"),
        (None, "expected a mapping"),
        ({"kyes": []}, "unknown field 'kyes'"),
    ],
    ids=["nan", "set", "no-keys", "absent", "typo"],
)
def test_an_unusable_policy_is_a_policy_error_every_time(raw: Any, message: str) -> None:
    cache = PolicyCache(8)
    for _ in range(2):
        with pytest.raises(PolicyError, match=message):
            cache.compile(raw)


def test_the_services_policy_cache_is_sized_by_its_config() -> None:
    policies = Service(load_config({"POLICY_CACHE_ENTRIES": 1})).policies
    a = policies.compile(policy())
    policies.compile(policy(keyOperation="MustAll"))
    assert policies.compile(policy()) is not a  # evicted by the second policy


def test_dry_run_policy_without_a_runner_is_dry_run_failed_only_when_the_object_differs() -> None:
    obj = signed()
    changed = copy.deepcopy(obj)
    changed["data"]["key"] = "changed"
    with_dry_run = policy(dryRun={"enabled": True})
    same = run_check("manifest", Review.for_object(obj), with_dry_run, CTX)
    differs = run_check("manifest", Review.for_object(changed), with_dry_run, CTX)
    plain = run_check("manifest", Review.for_object(changed), policy(), CTX)
    assert (same.allowed, same.reason) == (True, "verified")
    assert (differs.allowed, differs.reason) == (False, "dry-run-failed")
    assert differs.message.startswith(
        "ConfigMap ns/cm: the policy enables dry-run, but no cluster is configured to run it"
    )
    assert "data.key differs" in differs.message
    assert [d.key for d in differs.diff] == ["data.key"]
    assert (plain.allowed, plain.reason) == (False, "content-mismatch")


class DownCluster:
    """A DryRunner whose API server does not answer."""

    def dry_run(self, manifest: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        raise TransientError("connection refused", reason="dry-run-failed")


def test_a_cluster_that_does_not_answer_is_transient() -> None:
    changed = copy.deepcopy(signed())
    changed["data"]["key"] = "changed"
    with pytest.raises(TransientError, match="connection refused"):
        run_check(
            "manifest",
            Review.for_object(changed),
            policy(dryRun={"enabled": True}),
            CheckContext(dry_runner=DownCluster()),
        )


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({"kind": "ConfigMap", "metadata": {"namespace": "ns", "name": "cm"}}, Subject("ConfigMap", "ns", "cm")),
        ({"kind": ["x"], "metadata": "nope"}, Subject("", "review-ns", "review-name")),
        ({"kind": "K" * 300, "metadata": {"name": 7}}, Subject("K" * 253, "review-ns", "review-name")),
    ],
    ids=["ordinary", "malformed", "oversized"],
)
def test_subject_holds_only_short_strings(obj: dict[str, Any], expected: Subject) -> None:
    review = Review(object=obj, namespace="review-ns", name="review-name")
    assert Subject.of(review) == expected


# --- the dispatcher ---------------------------------------------------------------


def test_answers_come_back_in_order_with_per_key_errors(dispatcher: Dispatcher) -> None:
    def unusable() -> Question:
        raise RequestError("the key is not valid JSON")

    jobs = [
        Job(b"1", lambda: Question("manifest", Review.for_object(signed()), policy())),
        Job(b"2", unusable),
        Job(b"3", lambda: Question("manifest", Review.for_object(signed()), {"keys": []})),
        Job(b"4", lambda: Question("nope", Review.for_object(signed()), policy())),
    ]
    answers = dispatcher.run(jobs, CTX, time.monotonic() + 30)
    assert answers[0].verdict is not None and answers[0].verdict.result.reason == "verified"
    assert answers[0].verdict.subject == Subject("ConfigMap", "ns", "cm")
    assert [type(a.error).__name__ for a in answers[1:]] == ["RequestError", "PolicyError", "RequestError"]
    assert all(a.verdict is None for a in answers[1:])


def test_the_same_key_twice_is_computed_once(dispatcher: Dispatcher, counting: list[str]) -> None:
    answers = dispatcher.run([job({"n": 1}), job({"n": 1})], CTX, time.monotonic() + 30)
    assert len(counting) == 1
    assert answers[0].verdict is answers[1].verdict


def test_a_verdict_that_did_not_use_the_cluster_is_cached(dispatcher: Dispatcher, counting: list[str]) -> None:
    first = dispatcher.run([job({"n": 1})], CTX, time.monotonic() + 30)
    second = dispatcher.run([job({"n": 1})], CTX, time.monotonic() + 30)
    assert len(counting) == 1
    assert (first[0].cached, second[0].cached) == (False, True)
    assert second[0].verdict == first[0].verdict


@pytest.mark.parametrize(
    ("policy_raw", "key"), [({"cluster": True}, b"k"), ({}, None)], ids=["used-cluster", "no-cache-key"]
)
def test_some_verdicts_are_never_cached(
    dispatcher: Dispatcher, counting: list[str], policy_raw: Any, key: bytes | None
) -> None:
    for _ in range(2):
        (answer,) = dispatcher.run([job(policy_raw, key)], CTX, time.monotonic() + 30)
        assert not answer.cached
    assert len(counting) == 2


def test_keys_of_one_request_run_concurrently(dispatcher: Dispatcher, counting: list[str]) -> None:
    start = time.monotonic()
    answers = dispatcher.run([job({"sleep": 0.2, "n": i}, digest(str(i))) for i in range(4)], CTX, start + 30)
    elapsed = time.monotonic() - start
    assert len(answers) == 4 and len(counting) == 4
    assert elapsed < 0.6  # four 0.2 s checks on four threads, not 0.8 s in a row


def test_the_deadline_fails_the_request_and_the_late_verdict_fills_the_cache(
    dispatcher: Dispatcher, counting: list[str]
) -> None:
    start = time.monotonic()
    with pytest.raises(DeadlineExceeded, match="0 of 1 keys answered in time") as caught:
        dispatcher.run([job({"sleep": 0.3})], CTX, start + 0.05)
    assert caught.value.reason == "deadline-exceeded" and isinstance(caught.value, TransientError)
    assert time.monotonic() - start < 0.25
    time.sleep(0.4)
    (answer,) = dispatcher.run([job({"sleep": 0.3})], CTX, time.monotonic() + 0.05)
    assert answer.cached and len(counting) == 1


def test_a_transient_failure_fails_the_whole_request(
    dispatcher: Dispatcher, monkeypatch: pytest.MonkeyPatch, counting: list[str]
) -> None:
    def down(review: Review, policy_raw: Any, ctx: CheckContext) -> Result:
        raise TransientError("the API server did not answer", reason="dry-run-failed")

    monkeypatch.setitem(CHECKS, "down", down)
    with pytest.raises(TransientError, match="did not answer"):
        dispatcher.run([job({}, b"a"), job({}, b"b", check="down")], CTX, time.monotonic() + 30)


def test_an_unexpected_exception_is_an_internal_error_without_its_detail(
    dispatcher: Dispatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(review: Review, policy_raw: Any, ctx: CheckContext) -> Result:
        raise KeyError("secret-detail")

    monkeypatch.setitem(CHECKS, "broken", broken)
    with pytest.raises(InternalError) as caught:
        dispatcher.run([job({}, check="broken")], CTX, time.monotonic() + 30)
    assert caught.value.reason == "internal-error" and "secret-detail" not in caught.value.message


def test_the_pool_is_created_on_first_use_and_can_be_recreated_after_shutdown(counting: list[str]) -> None:
    d = Dispatcher(LRUCache(0), threads=2)
    assert d._pool is None
    d.run([job({})], CTX, time.monotonic() + 30)
    d.shutdown()
    d.run([job({})], CTX, time.monotonic() + 30)
    d.shutdown()
    assert len(counting) == 2


def test_concurrent_requests_share_one_dispatcher(dispatcher: Dispatcher) -> None:
    objs = [signed(f"cm-{i}") for i in range(8)]
    results: list[list[str]] = []
    lock = threading.Lock()

    def request(i: int) -> None:
        def make(o: dict[str, Any]) -> Callable[[], Question]:
            return lambda: Question("manifest", Review.for_object(o), policy())

        answers = dispatcher.run(
            [Job(digest(str(i), str(n)), make(o)) for n, o in enumerate(objs)], CTX, time.monotonic() + 30
        )
        with lock:
            results.append([a.verdict.result.reason if a.verdict else "error" for a in answers])

    threads = [threading.Thread(target=request, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [["verified"] * 8] * 4
