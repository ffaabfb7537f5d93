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
#: The fields Artifact Hub's package metadata holds (gatekeeper-library scripts/artifacthub/hub.go,
#: ArtifactHubMetadata): anything else is a typo Artifact Hub would ignore.
FIELDS = {
    "version", "name", "displayName", "createdAt", "description", "logoPath", "logoURL", "digest", "license",
    "homeURL", "appVersion", "containersImages", "containsSecurityUpdates", "operator", "deprecated", "prerelease",
    "keywords", "links", "readme", "install", "changes", "maintainers", "provider", "ignore", "recommendations",
    "screenshots", "annotations",
}  # fmt: skip
SEMVER = re.compile(r"\d+\.\d+\.\d+\Z")


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_artifacthub", POLICIES / "make_artifacthub.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def metadata(directory: Path) -> dict[str, Any]:
    return dict(yaml.safe_load((directory / "artifacthub-pkg.yml").read_text()))


def test_every_policy_is_a_package() -> None:
    assert len(PACKAGES) == 9
    assert set(generator().packages()) == set(PACKAGES)


@pytest.mark.parametrize("directory", PACKAGES, ids=lambda d: f"{d.parent.name}/{d.name}")
def test_the_metadata_is_current(directory: Path) -> None:
    expected = generator().packages()[directory]
    assert metadata(directory) == expected, "out of date: run python policies/make_artifacthub.py"


@pytest.mark.parametrize("directory", PACKAGES, ids=lambda d: f"{d.parent.name}/{d.name}")
def test_the_metadata_describes_its_policy(directory: Path) -> None:
    meta = metadata(directory)
    assert set(meta) <= FIELDS
    assert SEMVER.match(meta["version"]) and re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\Z", meta["createdAt"])
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
