"""Every policy folder is an Artifact Hub package whose metadata is current and in its library's format.

Gatekeeper packages follow gatekeeper-library (scripts/artifacthub/hub.go writes
their artifacthub-pkg.yml from the template's annotations), Kyverno packages
kyverno/policies (artifacthub-pkg.yml beside each policy, with Artifact Hub's
``kyverno/*`` annotations). ``policies/make_artifacthub.py`` writes them; this
test fails when a policy changed and its metadata did not follow.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.support.data import REPO

POLICIES = REPO / "policies"
PACKAGES = sorted(p.parent for p in POLICIES.glob("*/*/template.yaml")) + sorted(
    p for p in (POLICIES / "kyverno").iterdir() if p.is_dir()
)
#: The fields of Artifact Hub's package metadata file and their types (artifacthub/hub
#: docs/metadata/artifacthub-pkg.yml). The tracker decodes the file with yaml.UnmarshalStrict
#: (internal/pkg/metadata.go GetPackageMetadata): any other key, or a value of another type, and the
#: package is skipped with an error in the repository's log. (Scalars are held to be strings where a
#: string is due, as the field list asks of annotations, though Go's decoder would take ``1.0`` as text.)
STRING, BOOL, STRINGS, OBJECTS = "string", "boolean", "list of strings", "list of mappings"
FIELDS: dict[str, str] = {
    **dict.fromkeys(("version", "name", "alternativeName", "category", "displayName", "createdAt", "description",
                     "logoPath", "logoURL", "digest", "license", "homeURL", "appVersion", "readme", "install"), STRING),
    **dict.fromkeys(("containsSecurityUpdates", "operator", "deprecated", "prerelease"), BOOL),
    **dict.fromkeys(("keywords", "ignore"), STRINGS),
    **dict.fromkeys(("containersImages", "links", "maintainers", "recommendations", "screenshots"), OBJECTS),
    "changes": "list", "provider": "mapping", "annotations": "mapping",
}  # fmt: skip
#: Semantic Versioning 2.0.0 (semver.org, "Is there a suggested regular expression"): what the file's
#: ``version`` must be ("A SemVer 2 version (required)").
SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?\Z"
)
#: "The name of the package (only alphanum, no spaces, dashes allowed)".
PACKAGE_NAME = re.compile(r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*\Z")
#: time.RFC3339, as ValidatePackageMetadata parses ``createdAt``.
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)\Z")
#: artifacthub/hub internal/hub (PackageCategory names), for the optional ``category``.
CATEGORIES = {
    "ai-machine-learning", "database", "integration-delivery", "monitoring-logging", "networking", "security",
    "storage", "streaming-messaging", "skip-prediction",
}  # fmt: skip
#: The Kyverno annotations Artifact Hub reads (artifacthub.io/docs/topics/annotations/kyverno), all strings.
KYVERNO_ANNOTATIONS = {"kyverno/category", "kyverno/kubernetesVersion", "kyverno/subject", "kyverno/version"}
CHANGE_KINDS = {"added", "changed", "deprecated", "removed", "fixed", "security"}


def _typed(value: Any, kind: str) -> bool:
    if kind == STRING:
        return isinstance(value, str)
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == STRINGS:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == OBJECTS:
        return isinstance(value, list) and all(isinstance(v, dict) for v in value)
    return isinstance(value, list if kind == "list" else dict)


def artifact_hub_problems(meta: Any, directory: Path) -> list[str]:
    """Why Artifact Hub's tracker would skip this package version ([] when it would list it).

    The metadata rules are ValidatePackageMetadata's (artifacthub/hub internal/pkg/metadata.go) and the
    field list's above; the files a package must hold are the generic tracker's
    (internal/tracker/source/generic/generic.go): a Gatekeeper package's ``template.yaml`` and its gator
    suite, read with gator's ReadSuites over the folder (every ``.yaml``/``.yml`` file must parse, and the
    examples are shown only when exactly one is a ``test.gatekeeper.sh`` Suite), each of its constraints
    and case objects read from the folder; a Kyverno package's policy file named after the package
    (artifacthub.io/docs/topics/repositories/kyverno-policies).
    """
    if not isinstance(meta, dict):
        return ["the file is not a mapping"]
    problems = [f"unknown field {k!r}" for k in meta if k not in FIELDS]
    problems += [f"{k} is not a {FIELDS[k]}" for k, v in meta.items() if k in FIELDS and not _typed(v, FIELDS[k])]
    for required in ("version", "name", "displayName", "createdAt", "description"):
        if not meta.get(required):
            problems.append(f"{required} not provided")
    if isinstance(meta.get("version"), str) and not SEMVER.match(meta["version"]):
        problems.append(f"invalid version (semver expected): {meta['version']!r}")
    if isinstance(meta.get("name"), str) and meta["name"] and not PACKAGE_NAME.match(meta["name"]):
        problems.append(f"invalid name: {meta['name']!r}")
    if isinstance(meta.get("createdAt"), str) and not RFC3339.match(meta["createdAt"]):
        problems.append(f"invalid createdAt (RFC3339 expected): {meta['createdAt']!r}")
    if "category" in meta and meta["category"] not in CATEGORIES:
        problems.append(f"invalid category: {meta['category']!r}")
    annotations = meta.get("annotations") or {}
    if isinstance(annotations, dict):
        problems += [f"annotation {k!r} is not a string" for k, v in annotations.items() if not isinstance(v, str)]
    provider = meta.get("provider")
    if isinstance(provider, dict) and (set(provider) != {"name"} or not isinstance(provider["name"], str)):
        problems.append("provider holds only a name")
    for maintainer in meta.get("maintainers") or []:
        if isinstance(maintainer, dict) and not maintainer.get("email"):
            problems.append("maintainer email not provided")
    for change in meta.get("changes") or []:
        if isinstance(change, dict):
            if str(change.get("kind", "added")).lower() not in CHANGE_KINDS:
                problems.append(f"invalid change: invalid kind: {change.get('kind')}")
            if not change.get("description"):
                problems.append("invalid change: description not provided")
    if directory.parent.name == "gatekeeper":
        problems += _gatekeeper_files(directory)
    else:
        if not (directory / f"{directory.name}.yaml").is_file():
            problems.append(f"no policy file {directory.name}.yaml")
        problems += [
            f"annotation {k!r} is not one Artifact Hub reads" for k in annotations if k not in KYVERNO_ANNOTATIONS
        ]
        if isinstance(annotations.get("kyverno/version"), str) and not SEMVER.match(annotations["kyverno/version"]):
            problems.append(f"kyverno/version is not a version: {annotations['kyverno/version']!r}")
    return problems


def _gatekeeper_files(directory: Path) -> list[str]:
    if not (directory / "template.yaml").is_file():
        return ["no template.yaml"]
    suites = []
    for path in sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml")):
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            return [f"{path.name} does not parse: {exc}"]
        if (
            isinstance(data, dict)
            and str(data.get("apiVersion", "")).startswith("test.gatekeeper.sh/")
            and (data.get("kind") == "Suite")
        ):
            suites.append(data)
    if len(suites) != 1:
        return [f"{len(suites)} gator suites in the folder, not one: Artifact Hub shows no examples"]
    problems = []
    for test in suites[0].get("tests") or []:
        files = [test.get("constraint"), *(case.get("object") for case in test.get("cases") or [])]
        problems += [
            f"the suite names {f}, which is not in the package" for f in files if f and not (directory / f).is_file()
        ]
    return problems


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_artifacthub", POLICIES / "make_artifacthub.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def metadata(directory: Path) -> dict[str, Any]:
    return dict(yaml.safe_load((directory / "artifacthub-pkg.yml").read_text()))


def test_every_policy_is_a_package() -> None:
    assert len(PACKAGES) == 10  # 4 Gatekeeper templates, 6 Kyverno policies
    assert set(generator().packages()) == set(PACKAGES)


@pytest.mark.parametrize("directory", PACKAGES, ids=lambda d: f"{d.parent.name}/{d.name}")
def test_the_metadata_is_current(directory: Path) -> None:
    expected = generator().packages()[directory]
    assert metadata(directory) == expected, "out of date: run python policies/make_artifacthub.py"


@pytest.mark.parametrize("directory", PACKAGES, ids=lambda d: f"{d.parent.name}/{d.name}")
def test_artifact_hub_would_list_the_package(directory: Path) -> None:
    assert artifact_hub_problems(metadata(directory), directory) == []


BROKEN: list[tuple[str, str, Callable[[dict[str, Any]], None], str]] = [
    ("unknown-field", "kyverno", lambda m: m.update(homepage="x"), "unknown field 'homepage'"),
    ("version-not-semver", "gatekeeper", lambda m: m.update(version="1.1"), "invalid version"),
    ("name-with-a-space", "kyverno", lambda m: m.update(name="verify manifest"), "invalid name"),
    ("no-display-name", "gatekeeper", lambda m: m.pop("displayName"), "displayName not provided"),
    ("created-at-a-date", "kyverno", lambda m: m.update(createdAt="2026-11-23"), "invalid createdAt"),
    ("annotation-not-a-string", "kyverno", lambda m: m["annotations"].update({"kyverno/version": 1.13}),
     "is not a string"),
    ("kyverno-annotation-misspelt", "kyverno", lambda m: m["annotations"].update({"kyverno/subjects": "Pod"}),
     "not one Artifact Hub reads"),
    ("keywords-a-string", "gatekeeper", lambda m: m.update(keywords="gatekeeper"), "keywords is not a list"),
    ("provider-a-string", "gatekeeper", lambda m: m.update(provider="us"), "provider is not a mapping"),
    ("change-of-unknown-kind", "kyverno", lambda m: m.update(changes=[{"kind": "new", "description": "x"}]),
     "invalid kind"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "engine", "break_it", "problem"), BROKEN, ids=[b[0] for b in BROKEN])
def test_the_check_refuses_broken_metadata(
    case: str, engine: str, break_it: Callable[[dict[str, Any]], None], problem: str
) -> None:
    directory = POLICIES / engine / "verify-manifest-signature"
    meta = metadata(directory)
    break_it(meta)
    assert any(problem in p for p in artifact_hub_problems(meta, directory)), artifact_hub_problems(meta, directory)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: (d / "suite.yaml").unlink(), "0 gator suites"),
        (lambda d: (d / "extra-suite.yaml").write_text((d / "suite.yaml").read_text()), "2 gator suites"),
        (
            lambda d: (d / "samples" / "k8sverifymanifestsignature" / "example_allowed.yaml").unlink(),
            "not in the package",
        ),
        (lambda d: (d / "broken.yaml").write_text("a: [\n"), "does not parse"),
        (lambda d: (d / "template.yaml").unlink(), "no template.yaml"),
    ],
    ids=["no-suite", "two-suites", "missing-case-object", "unparseable-yaml", "no-template"],
)
def test_a_gatekeeper_package_needs_its_files(tmp_path: Path, change: Callable[[Path], None], problem: str) -> None:
    directory = tmp_path / "gatekeeper" / "verify-manifest-signature"
    shutil.copytree(POLICIES / "gatekeeper" / directory.name, directory)
    assert artifact_hub_problems(metadata(directory), directory) == []
    change(directory)
    assert any(problem in p for p in artifact_hub_problems(metadata(directory), directory))


@pytest.mark.parametrize("directory", PACKAGES, ids=lambda d: f"{d.parent.name}/{d.name}")
def test_the_metadata_describes_its_policy(directory: Path) -> None:
    meta = metadata(directory)
    if directory.parent.name == "gatekeeper":
        policy_file = directory / "template.yaml"
        template = yaml.safe_load(policy_file.read_text())
        annotations = template["metadata"]["annotations"]
        assert meta["name"] == template["metadata"]["name"]
        assert meta["version"] == annotations["metadata.gatekeeper.sh/version"]
        assert meta["displayName"] == annotations["metadata.gatekeeper.sh/title"]
        assert meta["keywords"] == ["gatekeeper", "open-policy-agent", "policies"]
    else:
        policy_file = directory / f"{directory.name}.yaml"
        policy = yaml.safe_load(policy_file.read_text())
        annotations = policy["metadata"]["annotations"]
        assert meta["name"] == policy["metadata"]["name"] == directory.name
        assert meta["annotations"] == {
            "kyverno/category": annotations["policies.kyverno.io/category"],
            "kyverno/subject": annotations["policies.kyverno.io/subject"],
            "kyverno/version": annotations["policies.kyverno.io/minversion"],
        }
        assert meta["keywords"][0] == "kyverno"
    assert meta["digest"] == hashlib.sha256(policy_file.read_bytes()).hexdigest()
    assert f"kubectl apply -f {policy_file.relative_to(REPO)}" in meta["install"]
