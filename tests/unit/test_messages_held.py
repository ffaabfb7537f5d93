"""A difference's message names the object as what it is: ``stored`` on a live object, ``admitted`` in a request.

Gatekeeper's audit said "data.log-level differs: signed 'info', admitted 'debug'" about
an object the cluster stores, that nobody was admitting. Every review without a request
(Gatekeeper's audit, a Kyverno background scan, ``verify-resource``, the observer) now
says ``stored``; admission requests, and files given to the CLI (which answers what
admission would make of them), say ``admitted``. The faces' own tests check the same
through the CLI, ``verify-resource``, the Gatekeeper route and its Rego.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from provider import Policy, Review, decide
from provider.audit.live import check
from provider.compare.diff import DiffItem
from provider.verifier import describe_diff
from tests.support.gator import review_as_audited
from tests.support.kyverno import admission_request, background_scan_request
from tests.support.live import KEY, PUBLIC_KEY
from tests.support.manifests import configmap, sign

POLICY = Policy.from_dict({"keys": [PUBLIC_KEY]})
(SIGNED,) = sign(configmap("app-settings", "demo", **{"log-level": "info", "mode": "a"}), KEY)


def changed(**data: str | None) -> dict[str, Any]:
    obj = copy.deepcopy(SIGNED)
    for key, value in data.items():
        if value is None:
            del obj["data"][key]
        else:
            obj["data"][key] = value
    return obj


def by_face(face: str, obj: dict[str, Any]) -> str:
    """The verdict's message for ``obj``, reviewed the way ``face`` reviews it."""
    if face == "gatekeeper-audit":
        review = Review.from_admission(review_as_audited(obj))
    elif face == "kyverno-background":
        review = Review.from_admission(background_scan_request(obj))
    elif face == "live":  # verify-resource and the observer
        return check(obj, POLICY).result.message
    elif face == "admission-create":
        review = Review.from_admission(admission_request(obj))
    elif face == "admission-update":
        review = Review.from_admission(admission_request(obj, "UPDATE") | {"oldObject": SIGNED})
    else:  # a file given to the CLI
        review = Review.for_object(obj)
    return decide(review, POLICY).message


STORED = ("gatekeeper-audit", "kyverno-background", "live")
ADMITTED = ("admission-create", "admission-update", "file")


@pytest.mark.parametrize("face", STORED + ADMITTED)
def test_a_changed_value_is_named_as_stored_or_admitted(face: str) -> None:
    word = "stored" if face in STORED else "admitted"
    message = by_face(face, changed(**{"log-level": "debug"}))
    assert f"data.log-level differs: signed 'info', {word} 'debug'" in message
    assert ("admitted" in message) is (word == "admitted")


@pytest.mark.parametrize("face", STORED + ADMITTED)
def test_an_added_and_a_removed_key_are_named_the_same_way(face: str) -> None:
    word = "stored" if face in STORED else "admitted"
    assert f"data.z was added: {word} 'new', not in the signed manifest" in by_face(face, changed(z="new"))
    assert f"data.mode was removed: signed 'a', absent from the {word} object" in by_face(face, changed(mode=None))


def test_a_dry_run_without_a_cluster_says_stored_too() -> None:
    policy = Policy.from_dict({"keys": [PUBLIC_KEY], "dryRun": {"enabled": True}})
    result = decide(Review.for_object(changed(mode="b"), live=True), policy)
    assert result.reason == "dry-run-failed" and "signed 'a', stored 'b'" in result.message


def test_the_garbage_collectors_finalizer_on_a_stored_object_says_stored() -> None:
    obj = copy.deepcopy(SIGNED)
    obj["metadata"]["finalizers"] = ["orphan"]
    result = check(obj, POLICY).result
    assert result.reason == "content-mismatch" and 'stored ["orphan"]' in result.message


def test_describe_diff_defaults_to_admitted() -> None:
    """A library caller of ``verify()`` compares an object it was handed: the word it always used."""
    assert describe_diff([DiffItem(("a",), 1, 2)]) == "a differs: signed 1, admitted 2"
    assert describe_diff([DiffItem(("a",), 1, 2)], held="stored") == "a differs: signed 1, stored 2"


def test_the_review_knows_which_it_is() -> None:
    assert Review.from_admission(review_as_audited(SIGNED)).held == "stored"
    assert Review.from_admission(background_scan_request(SIGNED)).held == "stored"
    assert Review.for_object(SIGNED, live=True).held == "stored"
    assert Review.from_admission(admission_request(SIGNED)).held == "admitted"
    assert Review.for_object(SIGNED).held == "admitted"
