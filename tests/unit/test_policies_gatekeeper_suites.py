"""Every Gatekeeper template has a gator ``suite.yaml`` in gatekeeper-library's format, and its cases pass.

gatekeeper-library's CI refuses a template without a non-empty ``suite.yaml``
beside it (scripts/require-suites.sh) and runs each with ``gator verify``.
gator is not installed here, so tests/support/gator.py reads the suite as
gator does and runs each case under a real OPA engine. The signature and
image-pull suites run here, the verifier answering ``external_data``
in-process; the two suites whose checks read the cluster (bootstrap tokens)
run against the service in tests/integration/test_gatekeeper_suites.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from provider import Policy, Review, decide
from tests.support.data import REPO
from tests.support.gator import Assertion, read_suite, review_as_created, run_suite

GATEKEEPER = REPO / "policies" / "gatekeeper"
TEMPLATES = sorted(p.parent for p in GATEKEEPER.glob("*/template.yaml"))


def in_process_provider(request: dict[str, Any]) -> dict[str, Any]:
    """What the service answers for each key (the HTTPS round trip is in the integration tests)."""
    responses = []
    for key in request["keys"]:
        data = json.loads(key)
        result = decide(Review.from_admission(data["review"]), Policy.from_dict(data["policy"]))
        responses.append([key, result.to_dict()])
    return {"responses": responses, "errors": [], "status_code": 200, "system_error": ""}


def test_every_template_has_a_suite() -> None:
    assert len(TEMPLATES) == 4
    for directory in TEMPLATES:
        suite = directory / "suite.yaml"
        assert suite.is_file() and suite.stat().st_size > 0, f"{directory} has no suite.yaml"


@pytest.mark.parametrize("directory", TEMPLATES, ids=lambda d: d.name)
def test_the_suite_names_its_template_and_covers_every_sample(directory: Path) -> None:
    (test,) = read_suite(directory / "suite.yaml")
    assert test.template == directory / "template.yaml"
    (samples,) = (directory / "samples").iterdir()
    assert test.constraint == samples / "constraint.yaml"
    assert sorted(c.object for c in test.cases) == sorted(samples.glob("example_*.yaml"))
    for case in test.cases:
        expects_none = all(a.violations in ("no", 0) for a in case.assertions)
        assert expects_none == case.object.name.startswith("example_allowed"), case.name


@pytest.mark.parametrize("name", ["verify-manifest-signature", "always-pull-private-images"])
def test_the_suite_passes(name: str) -> None:
    outcome = run_suite(GATEKEEPER / name / "suite.yaml", in_process_provider, review_as_created)
    assert len(outcome) >= 3
    assert {case: why for case, why in outcome.items() if why} == {}


def test_a_wrong_expectation_fails_the_suite(tmp_path: Path) -> None:
    """The runner is not a rubber stamp: the tampered sample promised to pass fails."""
    copy = tmp_path / "verify-manifest-signature"
    shutil.copytree(GATEKEEPER / copy.name, copy)
    suite = copy / "suite.yaml"
    text = suite.read_text()
    suite.write_text(
        text.replace(
            '    - violations: 1\n      message: "data.log-level',
            '    - violations: no\n      message: "data.log-level',
        )
    )
    assert suite.read_text() != text
    outcome = run_suite(suite, in_process_provider, review_as_created)
    failed = {case for case, why in outcome.items() if why}
    assert failed == {"verify-manifest-signature/tampered-disallowed"}


@pytest.mark.parametrize(
    ("violations", "message", "messages", "holds"),
    [
        ("yes", None, ["a"], True),
        ("yes", None, [], False),
        ("no", None, [], True),
        ("no", "b", ["a"], True),
        ("no", "a", ["a"], False),
        (2, "ontainer", ["container x", "initContainer y"], True),
        (1, "^container", ["container x", "initContainer y"], True),
        (1, None, ["a", "b"], False),
    ],
)
def test_assertions_count_as_gator_does(
    violations: int | str, message: str | None, messages: list[str], holds: bool
) -> None:
    assert (Assertion(violations, message).failure(messages) == "") is holds


def test_unquoted_yes_and_no_are_the_words() -> None:
    assert Assertion.read({"violations": False}, "x").violations == "no"
    assert Assertion.read({"violations": True}, "x").violations == "yes"
    assert Assertion.read({}, "x").violations == "yes"
    with pytest.raises(AssertionError):
        Assertion.read({"violations": "maybe"}, "x")
