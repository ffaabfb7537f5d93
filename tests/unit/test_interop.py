"""Every keyed case of tests/data/interop gives the listed outcome through the library."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from provider import Policy, Review, decide
from tests.support.data import KYVERNO, load_yaml
from tests.support.interop_cases import ALL_CASES, Case


def reviews_of(case: Case) -> list[Review]:
    if case.file.suffix == ".json":
        return [Review.from_admission(json.loads(case.file.read_text()))]
    return [Review.for_object(doc) for doc in load_yaml(case.file)]


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.id for c in ALL_CASES])
def test_interop_case(case: Case) -> None:
    policy = Policy.from_dict(case.policy())
    for review in reviews_of(case):
        result = decide(review, policy)
        assert result.reason == case.reason, f"{result.message} ({case.note})"
        assert result.allowed is (case.reason == "verified")
        if case.diff is not None:
            assert [d.to_dict() for d in result.diff] == [
                {"key": d["key"], "values": {"before": d["values"]["before"], "after": d["values"]["after"]}}
                for d in case.diff
            ]
        if case.diff_keys is not None:
            assert [d.key for d in result.diff] == list(case.diff_keys)


def test_the_table_covers_both_projects() -> None:
    ids = {c.id.split(":")[0] for c in ALL_CASES}
    assert {
        "cm-tarball-key-signed",
        "deploy-live-object-needs-dryrun",
        "svc-one-signature",
        "cm-tampered-admissionrequest",
    } <= ids
    assert len(ALL_CASES) >= 30


def test_kyverno_docs_secret_with_changed_label_fails_with_its_diff() -> None:
    (doc,) = load_yaml(KYVERNO / "manifests" / "secret-signed-docs.yaml")
    changed: dict[str, Any] = copy.deepcopy(doc)
    changed["metadata"]["labels"]["location"] = "asia"
    policy = Policy.from_dict({"keys": [(KYVERNO / "keys" / "key3-docs.pub").read_text()]})
    result = decide(Review.for_object(changed), policy)
    assert result.reason == "content-mismatch"
    assert [d.to_dict() for d in result.diff] == [
        {"key": "metadata.labels.location", "values": {"before": "europe", "after": "asia"}}
    ]
