"""Questions that wait on nothing are verified in the request's own thread; the others still go to a verify thread.

Observed by the name of the thread that runs :func:`provider.verifier.decide`
(the verify threads are ``verify_N``), through the service's own dispatcher and
context (:class:`provider.service.state.Service`), and through the app.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from provider.result import Result
from provider.review import Review
from provider.service import checks
from provider.service.app import create_app
from provider.service.checks import CheckContext, DeadlineExceeded, Job, Question
from provider.service.config import load_config
from provider.service.inline import INLINE_MAX_PATTERNS, MAX_PAIRS, OFFLINE_FIELDS, inline_answer
from provider.service.state import EXTENSION, Service
from provider.signatures.sources import Sources
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign

KEY = make_key()
POLICY = {"keys": [public_key_pem(KEY)]}


@pytest.fixture
def service() -> Iterator[Service]:
    s = Service(load_config({"KEY_SECRET_NAMESPACES": "keys"}))
    yield s
    s.dispatcher.shutdown()


@pytest.fixture
def deciders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of the thread each :func:`~provider.verifier.decide` call of the service ran in."""
    names: list[str] = []
    real = checks.decide

    def recording(*args: Any, **kwargs: Any) -> Result:
        names.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(checks, "decide", recording)
    return names


def signed(name: str) -> dict[str, Any]:
    return sign(configmap(name, "ns", key="value"), KEY)[0]


def job(name: str, policy: Any = POLICY, obj: dict[str, Any] | None = None) -> Job:
    review = Review.for_object(obj if obj is not None else signed(name))
    return Job(name.encode(), lambda: Question("manifest", review, policy))


def run(service: Service, *jobs: Job, ctx: CheckContext | None = None, seconds: float = 30) -> list[str]:
    answers = service.dispatcher.run(list(jobs), ctx or service.context(), time.monotonic() + seconds)
    return [a.verdict.result.reason if a.verdict else f"error: {a.error}" for a in answers]


def test_a_question_that_waits_on_nothing_is_verified_in_the_calling_thread(
    service: Service, deciders: list[str]
) -> None:
    # The first sight of a policy compiles it on a verify thread (compiling may read a file);
    # from then on the calling thread verifies, with the same verdicts.
    assert run(service, job("first")) == ["verified"]
    assert run(service, job("second"), job("third")) == ["verified", "verified"]
    assert deciders[0].startswith("verify")
    assert deciders[1:] == [threading.current_thread().name] * 2


@pytest.mark.parametrize(
    "extra",
    [
        {"dryRun": {"enabled": True}},
        {"signatureResourceRef": "k8s://ConfigMap/ns/signatures"},
        {"keys": ["k8s://keys/signing"]},
    ],
    ids=["dry-run", "signature-configmap", "key-in-a-secret"],
)
def test_a_question_that_may_wait_on_the_cluster_still_goes_to_a_verify_thread(
    service: Service, deciders: list[str], extra: dict[str, Any]
) -> None:
    policy = {**POLICY, **extra}
    for name in ("first", "second"):
        run(service, job(name, policy))
    assert len(deciders) == 2 and all(name.startswith("verify") for name in deciders)


def test_a_question_whose_signature_checks_are_not_bounded_goes_to_a_verify_thread(
    service: Service, deciders: list[str]
) -> None:
    unsigned = configmap("many", "ns", key="value")
    unsigned["metadata"]["annotations"] = {f"note-{i}": "x" for i in range(MAX_PAIRS)}
    (many,) = sign(unsigned, KEY)
    run(service, job("first"))  # compiled
    assert run(service, job("many", obj=many)) == ["verified"]
    assert deciders[1].startswith("verify")


def test_from_the_first_key_that_may_wait_on_the_cluster_the_keys_go_to_a_verify_thread(
    service: Service, deciders: list[str]
) -> None:
    run(service, job("first"))
    dry = {**POLICY, "dryRun": {"enabled": True}}
    assert run(service, job("a"), job("b", dry), job("c")) == ["verified", "verified", "verified"]
    assert deciders[1] == threading.current_thread().name
    assert all(name.startswith("verify") for name in deciders[2:]) and len(deciders) == 4


class SlowConfigMaps:
    """A signature ConfigMap read that waits until the test lets it go: an API server that does not answer."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()

    def read_data(self, namespace: str, name: str, deadline: float) -> dict[str, str] | None:
        self.started.set()
        self.release.wait(30)
        return None


def test_a_slow_cluster_read_still_ends_in_deadline_exceeded_at_the_deadline(
    service: Service, deciders: list[str]
) -> None:
    slow = SlowConfigMaps()
    ctx = dataclasses.replace(service.context(), sources=Sources(configmaps=slow))
    policy = {**POLICY, "signatureResourceRef": "k8s://ConfigMap/ns/signatures"}
    run(service, job("first"))  # the plain policy is compiled: "fast" would be answered here
    try:
        with pytest.raises(DeadlineExceeded, match="1 of 2 keys answered in time"):
            run(service, job("slow", policy), job("fast"), ctx=ctx, seconds=0.5)
        # The request was answered while the read was still waiting: the deadline, not the read, ended it.
        assert slow.started.is_set() and not slow.release.is_set()
    finally:
        slow.release.set()
    assert deciders[1].startswith("verify") or deciders[2].startswith("verify")


def test_a_verification_in_the_calling_thread_that_ends_past_the_deadline_fails_the_request(
    service: Service, deciders: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run(service, job("first"))
    real = checks.decide

    def slow(*args: Any, **kwargs: Any) -> Result:
        time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(checks, "decide", slow)
    with pytest.raises(DeadlineExceeded, match="1 of 1 keys answered in time"):
        run(service, job("late"), seconds=0.1)
    monkeypatch.undo()
    answers = service.dispatcher.run([job("late")], service.context(), time.monotonic() + 30)
    assert answers[0].cached  # as a late drain's verdict, it is kept for the retry


def test_only_fields_that_reach_nothing_outside_are_offline() -> None:
    # Every field of the schema that can read a file, the cluster or a registry stays out.
    assert not OFFLINE_FIELDS & {"signatureResourceRef", "resourceBundleRef", "trustedRoot", "signers", "attestors"}
    ctx = CheckContext()
    review = Review.for_object(signed("x"))
    ctx.policies.compile(POLICY)
    assert inline_answer(Question("manifest", review, POLICY), ctx) is not None
    assert inline_answer(Question("manifest", review, {**POLICY, "future": 1}), ctx) is None
    assert inline_answer(Question("cluster-info", review, POLICY), ctx) is None
    assert inline_answer(Question("manifest", review, "not a policy"), ctx) is None


def test_a_manifest_check_registered_in_place_of_the_built_in_one_is_not_bypassed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctx = CheckContext()
    ctx.policies.compile(POLICY)
    question = Question("manifest", Review.for_object(signed("x")), POLICY)
    monkeypatch.setitem(checks.CHECKS, "manifest", lambda review, policy, ctx: Result.allow("verified", "stand-in"))
    assert inline_answer(question, ctx) is None


def test_through_the_app_an_offline_gatekeeper_key_is_verified_in_the_request_thread(deciders: list[str]) -> None:
    app = create_app({"TESTING": True})
    client = app.test_client()

    def ask(user: str) -> dict[str, Any]:
        review = {"uid": user, "operation": "CREATE", "namespace": "ns", "name": "x",
                  "userInfo": {"username": user}, "object": signed("x")}  # fmt: skip
        body = {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest",
                "request": {"keys": [json.dumps({"review": review, "policy": POLICY})]}}  # fmt: skip
        answer: dict[str, Any] = client.post("/v1/gatekeeper/verify", json=body).get_json()
        return answer

    try:
        for user in ("alice", "bob"):
            (item,) = ask(user)["response"]["items"]
            assert item["value"]["reason"] == "verified"
    finally:
        app.extensions[EXTENSION].dispatcher.shutdown()
    assert deciders[0].startswith("verify") and deciders[1] == threading.current_thread().name


@pytest.mark.parametrize(
    "patterns",
    [
        pytest.param({"ignoreFields": [{"fields": [f"data.z{i}*" for i in range(INLINE_MAX_PATTERNS + 1)]}]},
                     id="ignoreFields"),
        pytest.param({"sensitiveFields": [{"fields": [f"data.z{i}*" for i in range(INLINE_MAX_PATTERNS + 1)]}]},
                     id="sensitiveFields"),
        pytest.param({"skipUsers": [{"users": ["alice"], "fields": [f"data.z{i}"]} for i in range(2)]},
                     id="skipUsers with fields"),
    ],
)  # fmt: skip
def test_a_policy_whose_field_patterns_multiply_the_object_goes_to_a_verify_thread(
    service: Service, deciders: list[str], patterns: dict[str, Any]
) -> None:
    """Each field pattern at a position is tried against every key there, and each ``skipUsers`` entry with
    ``fields`` that covers the requester diffs the whole object: a policy's patterns multiply the object's cost,
    which neither the limits nor :data:`MAX_PAIRS` bound (a thousand ``data.z{i}*`` against a 20 000-key map held
    the calling thread for seconds). Past a few, the question goes to a verify thread, where the deadline answers."""
    policy = {**POLICY, **patterns}
    for name in ("first", "second"):
        run(service, job(name, policy))
    assert len(deciders) == 2 and all(name.startswith("verify") for name in deciders)
    few = {key: [{**rule, "fields": rule["fields"][:INLINE_MAX_PATTERNS]} for rule in rules[:1]]
           for key, rules in patterns.items()}  # fmt: skip
    for name in ("third", "fourth"):
        run(service, job(name, {**POLICY, **few}))
    assert deciders[-1] == threading.current_thread().name


def test_upstream_s_unanchored_ignore_patterns_go_to_a_verify_thread(service: Service, deciders: list[str]) -> None:
    """``unsafeUnanchoredIgnoreFields`` searches every differing path with each pattern on RE2 (microseconds each):
    not bounded by the object's limits alone."""
    policy = {**POLICY, "unsafeUnanchoredIgnoreFields": True, "ignoreFields": [{"fields": ["data.other"]}]}
    for name in ("first", "second"):
        run(service, job(name, policy))
    assert len(deciders) == 2 and all(name.startswith("verify") for name in deciders)
