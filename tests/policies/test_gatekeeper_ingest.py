"""Every shipped ConstraintTemplate passes Gatekeeper's own ingestion rules, then compiles and runs.

OPA accepting a module proves little: Gatekeeper's constraint framework adds
rules of its own (``tests/support/gatekeeper_framework.py`` lists them with the
framework source each comes from) and refuses a template that breaks one --
after the API server has stored it, so ``kubectl apply`` succeeds and nothing
is enforced. These tests put every template under ``policies/gatekeeper/``
through those rules, compile what the framework would compile with
``external_data`` declared, and run the samples through Gatekeeper's hook
(results without ``msg`` dropped). The table of refusals shows each rule can
fail, the first row being the template this repository shipped before
(``import rego.v1``), refused with the message a real Gatekeeper 3.21 gave.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.data import REPO, load_yaml
from tests.support.gatekeeper_framework import (
    ADMISSION_TARGET,
    IngestedTemplate,
    TemplateRefused,
    ingest,
    keywords_used,
    reads_inventory,
    structural_problems,
)
from tests.support.opa import ConstraintTemplateEngine, handle_error, package_of, parse_rego

GATEKEEPER = REPO / "policies" / "gatekeeper"
TEMPLATES = sorted(GATEKEEPER.glob("*/template.yaml"))
FUTURE_IMPORTS = "import future.keywords.contains\nimport future.keywords.if\nimport future.keywords.in\n"


def template(path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text()))


def test_every_policy_folder_has_a_template() -> None:
    assert len(TEMPLATES) == 4
    assert {p.parent.name for p in TEMPLATES} == {p.name for p in GATEKEEPER.iterdir() if p.is_dir()}


# --- the shipped templates ----------------------------------------------------------------------------


@pytest.fixture(scope="module", params=TEMPLATES, ids=lambda p: p.parent.name)
def ingested(request: pytest.FixtureRequest) -> tuple[Path, IngestedTemplate]:
    path: Path = request.param
    return path, ingest(template(path), parse_rego)


def test_the_framework_takes_the_template(ingested: tuple[Path, IngestedTemplate]) -> None:
    path, result = ingested
    assert result.target == ADMISSION_TARGET
    assert result.name == result.kind.lower() == package_of(result.source.rego)
    # The widest-supported form: the classic field, parsed as v0, keywords imported one by one.
    assert result.source.origin == "rego"
    assert result.source.version == "v0"
    assert set(result.imports) == {f"future.keywords.{kw}" for kw in keywords_used(result.source.rego)}
    assert result.source.rego == (path.parent / "src.rego").read_text()


def test_the_test_module_parses_the_same_way(ingested: tuple[Path, IngestedTemplate]) -> None:
    """``src_test.rego`` is not shipped to Gatekeeper, but stays in the syntax both parsers accept."""
    path, _ = ingested
    tests = (path.parent / "src_test.rego").read_text()
    module = parse_rego(tests)
    imported = {".".join(p["value"] for p in imp["path"]["value"]) for imp in module["imports"]}
    assert {f"future.keywords.{kw}" for kw in keywords_used(tests)} <= imported
    assert "rego.v1" not in imported


def test_it_compiles_with_gatekeepers_builtin_and_runs_every_sample(ingested: tuple[Path, IngestedTemplate]) -> None:
    """Compile as the framework does (``external_data`` declared) and run each sample through the hook."""
    path, result = ingested
    calls: list[dict[str, Any]] = []

    def unreachable(request: dict[str, Any]) -> dict[str, Any]:
        calls.append(request)
        return handle_error(500, "Post: dial tcp: connection refused")

    engine = ConstraintTemplateEngine(result.source.rego, unreachable)
    try:
        (sample_dir,) = (path.parent / "samples").iterdir()
        (constraint,) = load_yaml(sample_dir / "constraint.yaml")
        examples = sorted(sample_dir.glob("example_*.yaml"))
        assert examples
        for example in examples:
            (obj,) = load_yaml(example)
            review = {
                "kind": {"group": "", "version": "v1", "kind": obj["kind"]},
                "operation": "CREATE",
                "object": obj,
                "name": obj["metadata"].get("name"),
            }
            for violation in engine.violations(review, constraint["spec"].get("parameters")):
                assert isinstance(violation["msg"], str) and violation["msg"], example.name
    finally:
        engine.close()
    if "external_data" in result.source.rego:
        # Fail closed: an unreachable provider gives the hook a violation with a message.
        assert calls


def test_a_template_reading_the_inventory_says_what_to_sync(ingested: tuple[Path, IngestedTemplate]) -> None:
    """``data.inventory`` is empty unless Gatekeeper syncs the kinds (a Config or SyncSet): the template must say which.

    The annotation ``metadata.gatekeeper.sh/requires-sync-data`` (gatekeeper ``website/docs/sync.md``) is how a
    template declares it; none of ours reads the inventory today.
    """
    path, result = ingested
    declared = json.loads(
        template(path)["metadata"].get("annotations", {}).get("metadata.gatekeeper.sh/requires-sync-data", "[]")
    )
    assert not reads_inventory(result.module) or declared, path.parent.name
    assert not reads_inventory(result.module)
    probe = parse_rego("package p\nimport future.keywords.if\nx if data.inventory.cluster.v1.Namespace\n")
    assert reads_inventory(probe)


def test_parameter_schemas_are_structural() -> None:
    for path in TEMPLATES:
        schema = template(path)["spec"]["crd"]["spec"]["validation"]["openAPIV3Schema"]
        assert structural_problems(schema) == [], path.parent.name


# --- every rule can refuse ------------------------------------------------------------------------------

SIGNATURE = GATEKEEPER / "verify-manifest-signature" / "template.yaml"
Mutation = Callable[[dict[str, Any]], None]


def with_rego(old: str, new: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        target = doc["spec"]["targets"][0]
        assert old in target["rego"]
        target["rego"] = target["rego"].replace(old, new, 1)

    return mutate


def set_path(*path: str | int, value: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        node: Any = doc
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return mutate


def code_entry(version: str | None, rego: str | None = None, *, keep_rego_field: bool = False) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        target = doc["spec"]["targets"][0]
        source = {"rego": rego if rego is not None else target["rego"]}
        if version is not None:
            source["version"] = version
        target["code"] = [{"engine": "Rego", "source": source}]
        if not keep_rego_field:
            del target["rego"]

    return mutate


def both(first: Mutation, second: Mutation) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        first(doc)
        second(doc)

    return mutate


def add_lib(lib: str, import_line: str = "import data.lib.helpers\n") -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        target = doc["spec"]["targets"][0]
        target["libs"] = [lib]
        target["rego"] = target["rego"].replace(FUTURE_IMPORTS, FUTURE_IMPORTS + import_line, 1)

    return mutate


V1_REGO = """package k8sverifymanifestsignature

violation contains {"msg": msg} if {
	some c in input.review.object.spec.containers
	msg := c.name
}
"""

#: (case, mutation, rule that refuses, words of its message)
REFUSALS: list[tuple[str, Mutation, str, str]] = [
    (
        "shipped-before-import-rego-v1",
        with_rego(FUTURE_IMPORTS, "import rego.v1\n"),
        "regorewriter.checkImport",
        'bad import: "rego.v1"',
    ),
    (
        "import-input",
        with_rego(FUTURE_IMPORTS, FUTURE_IMPORTS + "import input.review\n"),
        "regorewriter.checkImport",
        "cannot import input",
    ),
    (
        "import-data-outside-lib",
        with_rego(FUTURE_IMPORTS, FUTURE_IMPORTS + "import data.kubernetes.namespaces\n"),
        "regorewriter.checkImport",
        'bad import: "data.kubernetes.namespaces"',
    ),
    (
        "data-outside-inventory",
        with_rego('provider_name := "manifest-provider"', "provider_name := data.providers.name"),
        "regorewriter.checkDataReferences",
        "disallowed ref data.providers.name",
    ),
    (
        "v0-without-future-imports",
        with_rego(FUTURE_IMPORTS, ""),
        "compilers.parseModule",
        "need import future.keywords",
    ),
    (
        "v0-missing-one-keyword",
        with_rego(FUTURE_IMPORTS, "import future.keywords.contains\nimport future.keywords.if\n"),
        "compilers.parseModule",
        "in need import",
    ),
    (
        "no-violation-rule",
        with_rego("violation contains", "deny contains"),
        "compilers.requireModuleRules",
        "missing required rules: [violation]",
    ),
    (
        "not-rego-at-all",
        with_rego("package k8sverifymanifestsignature", "package k8sverifymanifestsignature\n}{"),
        "compilers.parseModule",
        "",
    ),
    ("empty-rego-in-code", code_entry("v1", rego="   \n"), "compilers.parseModule", "is empty"),
    (
        "code-without-rego",
        set_path(
            "spec",
            "targets",
            0,
            value={"target": ADMISSION_TARGET, "code": [{"engine": "Rego", "source": {"version": "v1"}}]},
        ),
        "schema.GetSource",
        "missing required field: rego",
    ),
    (
        "no-rego-engine",
        set_path("spec", "targets", 0, value={"target": ADMISSION_TARGET, "code": [{"engine": "OPA", "source": {}}]}),
        "compilers.parseConstraintTemplateTarget",
        "Could not extract Rego",
    ),
    # A v1 `code` entry beside the classic field is ignored: the field's Rego wins, as v0.
    (
        "rego-field-overrides-v1-code",
        both(code_entry("v1", rego=V1_REGO, keep_rego_field=True), with_rego(FUTURE_IMPORTS, "")),
        "compilers.parseModule",
        "parsed as Rego v0",
    ),
    (
        "two-targets",
        lambda doc: doc["spec"]["targets"].append(copy.deepcopy(doc["spec"]["targets"][0])),
        "client.getTargetName",
        "exactly one target",
    ),
    ("no-targets", set_path("spec", "targets", value=[]), "client.getTargetName", "exactly one target"),
    (
        "unknown-target",
        set_path("spec", "targets", 0, "target", value="validation.gatekeeper.sh"),
        "client.getTargetHandler",
        "not recognized",
    ),
    (
        "name-not-the-kind",
        set_path("metadata", "name", value="verify-manifest-signature"),
        "client.validateTemplateMetadata",
        "not equal to the lowercase of CRD's Kind",
    ),
    (
        "name-too-long",
        both(
            set_path("metadata", "name", value="k" * 64),
            set_path("spec", "crd", "spec", "names", "kind", value="K" * 64),
        ),
        "webhook.validateGatekeeperResources",
        "longer than 63",
    ),
    (
        "schema-not-structural",
        set_path(
            "spec",
            "crd",
            "spec",
            "validation",
            "openAPIV3Schema",
            "properties",
            "keys",
            value={"items": {"type": "string"}},
        ),
        "crds.ValidateCRD",
        "keys: type is required",
    ),
    (
        "lib-package-is-data-lib",
        add_lib("package lib\n\nx := 1\n"),
        "regorewriter.checkLibPackages",
        "not found in lib prefixes",
    ),
    (
        "lib-package-outside-data-lib",
        add_lib("package helpers\n\nx := 1\n", "import data.helpers\n"),
        "regorewriter.checkLibPackages",
        "not found in lib prefixes",
    ),
]


@pytest.mark.parametrize(("case", "mutate", "rule", "words"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_the_framework_refuses(case: str, mutate: Mutation, rule: str, words: str) -> None:
    doc = template(SIGNATURE)
    mutate(doc)
    with pytest.raises(TemplateRefused) as refused:
        ingest(doc, parse_rego)
    assert refused.value.rule == rule
    assert words in refused.value.message


#: Forms Gatekeeper takes that the shipped templates do not use: the rules must not refuse them either.
ACCEPTED: list[tuple[str, Mutation, str]] = [
    ("code-v1-without-imports", code_entry("v1", rego=V1_REGO), "v1"),
    ("code-v1-keeping-future-imports", code_entry("v1"), "v1"),
    ("code-without-version-is-v0", code_entry(None), "v0"),
    ("all-future-keywords-at-once", with_rego(FUTURE_IMPORTS, "import future.keywords\n"), "v0"),
    (
        "inventory-is-an-extern",
        with_rego(
            'provider_name := "manifest-provider"',
            'provider_name := data.inventory.cluster["v1"].Namespace.x.metadata.name',
        ),
        "v0",
    ),
    ("a-library-under-data-lib", add_lib("package lib.helpers\n\nimport future.keywords.if\n\nok if true\n"), "v0"),
]


@pytest.mark.parametrize(("case", "mutate", "version"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_the_framework_accepts(case: str, mutate: Mutation, version: str) -> None:
    doc = template(SIGNATURE)
    mutate(doc)
    assert ingest(doc, parse_rego).source.version == version


@pytest.mark.parametrize(
    ("rego", "expected"),
    [
        ("p contains x if { x := 1 }", {"contains", "if"}),
        ('q if contains("abc", "b")', {"if"}),
        ("r if { some x in [1]; every y in [2] { y > x } }", {"if", "in", "every"}),
        ('s := "if in contains every" # if in every', set()),
        ("import future.keywords.in\nt := 1", set()),
        ("u := x.in", set()),
    ],
    ids=[
        "head-keywords",
        "contains-builtin-is-not-the-keyword",
        "body-keywords",
        "strings-and-comments",
        "import-path",
        "field-named-in",
    ],
)
def test_keyword_scan(rego: str, expected: set[str]) -> None:
    assert keywords_used(rego) == expected
