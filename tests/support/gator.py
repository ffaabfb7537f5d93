"""gator's ``suite.yaml``, read and run the way ``gator verify`` does, where gator itself is not installed.

The format is gatekeeper-library's (``library/general/allowedrepos/suite.yaml``)
and gator's types (open-policy-agent/gatekeeper pkg/gator/verify/suite.go):
a ``Suite`` holds ``tests``, each a template and a constraint (paths relative to
the suite) and ``cases``, each an ``object`` file and ``assertions``. An
assertion (pkg/gator/verify/assertion.go) counts the violations whose message
matches the ``message`` regular expression (all of them without one) and
compares with ``violations``: an integer is an exact count, ``yes`` at least
one, ``no`` none; absent means ``yes``. A case without assertions is invalid
(pkg/gator/verify/runner.go ``checkCase``: "assertions must be non-empty"). Unquoted ``yes``/``no`` read as YAML 1.1 booleans here and are
taken as those words, as gator's typed decoding does.

:func:`run_suite` does what ``gator verify`` does before any case runs
(pkg/gator/verify/runner.go: the template added to a constraint framework
client, then the constraint): the template goes through the framework's
ingestion rules (:func:`tests.support.gatekeeper_framework.ingest`, which
refuses what Gatekeeper would not compile), and the constraint must be of the
template's kind, in the ``constraints.gatekeeper.sh`` group, with parameters
the template's schema accepts (:func:`tests.support.kube_schema.validate`,
strict as ``kubectl apply``). Each case is then evaluated with a real OPA
engine over the ingested Rego and the constraint's parameters;
``external_data`` and the review the engine sees (who asks, which operation)
are the caller's, since gator can answer neither for these templates.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.gatekeeper_framework import IngestedTemplate, ingest
from tests.support.kube_schema import validate
from tests.support.opa import ConstraintTemplateEngine, ExternalData, parse_rego

#: The constraints' API group; Gatekeeper serves v1beta1 (and v1alpha1, v1) of every constraint kind.
CONSTRAINT_API_VERSIONS = ("constraints.gatekeeper.sh/v1", "constraints.gatekeeper.sh/v1beta1",
                           "constraints.gatekeeper.sh/v1alpha1")  # fmt: skip

SUITE_FIELDS = {"kind", "apiVersion", "metadata", "tests", "skip"}
TEST_FIELDS = {"name", "template", "constraint", "cases", "invalid", "skip"}
CASE_FIELDS = {"name", "object", "inventory", "assertions", "skip"}
ASSERTION_FIELDS = {"violations", "message"}


@dataclass(frozen=True)
class Assertion:
    violations: int | str
    message: str | None

    @classmethod
    def read(cls, data: Any, where: str) -> Assertion:
        assert isinstance(data, dict) and set(data) <= ASSERTION_FIELDS, f"{where}: {data!r}"
        raw = data.get("violations", "yes")
        value: int | str = {True: "yes", False: "no"}.get(raw, raw) if isinstance(raw, bool) else raw
        assert (isinstance(value, int) and value >= 0) or value in ("yes", "no"), f"{where}.violations: {raw!r}"
        message = data.get("message")
        assert message is None or isinstance(message, str), f"{where}.message: {message!r}"
        if message is not None:
            re.compile(message)
        return cls(value, message)

    def failure(self, messages: list[str]) -> str:
        """ "" when the violations' messages satisfy this assertion, else why not."""
        matching = sum(1 for m in messages if self.message is None or re.search(self.message, m))
        about = f" matching {self.message!r}" if self.message is not None else ""
        if self.violations == "yes" and matching == 0:
            return f"want at least one violation{about}, got none: {messages}"
        if self.violations == "no" and matching > 0:
            return f"want no violation{about}, got {matching}: {messages}"
        if isinstance(self.violations, int) and matching != self.violations:
            return f"want exactly {self.violations} violations{about}, got {matching}: {messages}"
        return ""


@dataclass(frozen=True)
class Case:
    name: str
    object: Path
    assertions: tuple[Assertion, ...]


@dataclass(frozen=True)
class Test:
    name: str
    template: Path
    constraint: Path
    cases: tuple[Case, ...]


def read_suite(path: Path) -> tuple[Test, ...]:
    """The suite's tests, every path resolved and present, every field one gator knows."""
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict) and set(data) <= SUITE_FIELDS, f"{path}: {sorted(data)}"
    assert (data.get("kind"), data.get("apiVersion")) == ("Suite", "test.gatekeeper.sh/v1alpha1"), path
    assert isinstance(data.get("metadata", {}).get("name"), str), f"{path}: metadata.name"
    tests = []
    for i, test in enumerate(data.get("tests") or []):
        where = f"{path}: tests[{i}]"
        assert isinstance(test, dict) and set(test) <= TEST_FIELDS, f"{where}: {test!r}"
        assert not test.get("invalid") and not test.get("skip"), f"{where}: invalid and skipped tests are not run here"
        cases = []
        for j, case in enumerate(test.get("cases") or []):
            spot = f"{where}.cases[{j}]"
            assert isinstance(case, dict) and set(case) <= CASE_FIELDS, f"{spot}: {case!r}"
            assert not case.get("inventory") and not case.get("skip"), f"{spot}: inventory and skip are not used here"
            obj = path.parent / case["object"]
            assert obj.is_file(), f"{spot}.object: {obj} does not exist"
            assert case.get("assertions"), f"{spot}: gator refuses a case without assertions (runner.go checkCase)"
            assertions = tuple(Assertion.read(a, f"{spot}.assertions[{k}]") for k, a in enumerate(case["assertions"]))
            cases.append(Case(case["name"], obj, assertions))
        template, constraint = path.parent / test["template"], path.parent / test["constraint"]
        assert template.is_file() and constraint.is_file(), f"{where}: {template}, {constraint}"
        tests.append(Test(test["name"], template, constraint, tuple(cases)))
    assert tests, f"{path}: no tests"
    return tuple(tests)


def constraint_problems(constraint: Any, template: IngestedTemplate) -> list[str]:
    """Why the constraint framework would refuse ``constraint`` for ``template`` ([] when it takes it)."""
    if not isinstance(constraint, dict):
        return ["the constraint is not a mapping"]
    problems = []
    if constraint.get("apiVersion") not in CONSTRAINT_API_VERSIONS:
        problems.append(f"apiVersion {constraint.get('apiVersion')!r} is not a constraints.gatekeeper.sh version")
    if constraint.get("kind") != template.kind:
        problems.append(f"kind {constraint.get('kind')!r} is not the template's {template.kind!r}")
    if not (constraint.get("metadata") or {}).get("name"):
        problems.append("the constraint has no metadata.name")
    parameters = (constraint.get("spec") or {}).get("parameters")
    if parameters is not None and template.parameters_schema is not None:
        problems += [f"spec.parameters: {p}" for p in validate(parameters, template.parameters_schema)]
    return problems


def run_suite(
    path: Path, external_data: ExternalData | None, review: Callable[[dict[str, Any]], dict[str, Any]]
) -> dict[str, str]:
    """``case name -> failure`` for every case of the suite ("" for a case that passes).

    A template the framework refuses raises :class:`tests.support.gatekeeper_framework.TemplateRefused`,
    a constraint it refuses an AssertionError, as gator stops a test before its cases.
    """
    outcome: dict[str, str] = {}
    for test in read_suite(path):
        template = ingest(yaml.safe_load(test.template.read_text()), parse_rego)
        (constraint,) = [d for d in yaml.safe_load_all(test.constraint.read_text()) if d]
        problems = constraint_problems(constraint, template)
        assert not problems, f"{test.constraint}: {problems}"
        engine = ConstraintTemplateEngine(template.source.rego, external_data)
        try:
            for case in test.cases:
                (obj,) = [d for d in yaml.safe_load_all(case.object.read_text()) if d]
                messages = [v["msg"] for v in engine.violations(review(obj), constraint["spec"].get("parameters"))]
                failures = [f for f in (a.failure(messages) for a in case.assertions) if f]
                outcome[f"{test.name}/{case.name}"] = "; ".join(failures)
        finally:
            engine.close()
    return outcome


def review_as_created(obj: dict[str, Any], username: str = "alice@example.com") -> dict[str, Any]:
    """``input.review`` as Gatekeeper builds it for a CREATE of ``obj`` by ``username``."""
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    meta = obj.get("metadata", {})
    return {
        "uid": "5f0c1a7e-0000-4000-8000-000000000000",
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "operation": "CREATE",
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
    }


def review_as_audited(obj: dict[str, Any]) -> dict[str, Any]:
    """``input.review`` in Gatekeeper's audit: an AdmissionRequest built from the stored object alone.

    open-policy-agent/gatekeeper v3.21.1 pkg/target/target.go ``unstructuredToAdmissionRequest``
    sets ``kind``, ``object``, ``name`` and ``namespace`` and nothing else; serialised with
    the AdmissionRequest's JSON tags (k8s.io/api admission/v1 types.go), the fields without
    ``omitempty`` stay as empty values -- ``uid: ""``, ``resource`` with empty strings,
    ``operation: ""``, ``userInfo: {}`` -- and ``oldObject`` and ``options`` (RawExtensions
    with no bytes) are ``null``.
    """
    group, _, version = obj["apiVersion"].rpartition("/")
    meta = obj["metadata"]
    review: dict[str, Any] = {
        "uid": "",
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": "", "version": "", "resource": ""},
        "name": meta["name"],
        "operation": "",
        "userInfo": {},
        "object": obj,
        "oldObject": None,
        "options": None,
    }
    if meta.get("namespace"):
        review["namespace"] = meta["namespace"]
    return review
