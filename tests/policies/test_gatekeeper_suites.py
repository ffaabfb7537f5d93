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
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from provider import Policy, Review, decide
from tests.support.data import REPO
from tests.support.gatekeeper_framework import TemplateRefused
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


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path.name} no longer holds {old!r}"
    path.write_text(text.replace(old, new, 1))


#: (id, file under the copied package, text replaced, replacement, what the run raises and says).
REFUSED: list[tuple[str, str, str, str, type[Exception], str]] = [
    # OPA alone compiles this; the constraint framework refuses the import (regorewriter checkImport).
    ("template-imports-rego-v1", "template.yaml", "import future.keywords.contains\n",
     "import rego.v1\n        import future.keywords.contains\n", TemplateRefused, "bad import"),
    ("template-named-unlike-its-kind", "template.yaml", "name: k8sverifymanifestsignature",
     "name: k8sverifymanifestsignatures", TemplateRefused, "not equal to the lowercase of CRD's Kind"),
    ("constraint-of-another-kind", "samples/k8sverifymanifestsignature/constraint.yaml",
     "kind: K8sVerifyManifestSignature", "kind: K8sAllowedRepos", AssertionError, "is not the template's"),
    ("constraint-parameter-outside-the-schema", "samples/k8sverifymanifestsignature/constraint.yaml",
     "  parameters:\n", "  parameters:\n    keyOperation: Sometimes\n", AssertionError, "'Sometimes' is not one of"),
    ("constraint-parameter-unknown", "samples/k8sverifymanifestsignature/constraint.yaml",
     "  parameters:\n", "  parameters:\n    keyOperations: MustAll\n", AssertionError, "keyOperations"),
]  # fmt: skip


@pytest.mark.parametrize("refusal", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_suite_stops_where_gatekeeper_would_refuse_the_template_or_constraint(
    tmp_path: Path, refusal: tuple[str, str, str, str, type[Exception], str]
) -> None:
    """gator adds the template and the constraint to a framework client before any case runs: so does the runner."""
    _, file, old, new, raises, says = refusal
    copy = tmp_path / "verify-manifest-signature"
    shutil.copytree(GATEKEEPER / copy.name, copy)
    _edit(copy / file, old, new)
    with pytest.raises(raises, match=re.escape(says)):
        run_suite(copy / "suite.yaml", in_process_provider, review_as_created)


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
