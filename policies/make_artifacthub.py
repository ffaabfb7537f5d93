"""Write the Artifact Hub metadata (``artifacthub-pkg.yml``) of every policy, from the policy itself.

``python policies/make_artifacthub.py`` rewrites each file; the test
tests/policies/test_artifacthub.py fails when one is out of date.

Each policy folder is an Artifact Hub package with one version at a time (the
"single package, single version" layout of Artifact Hub's repositories guide):
add ``policies/gatekeeper`` as a Gatekeeper policies repository and
``policies/kyverno`` as a Kyverno policies repository.

* Gatekeeper, as gatekeeper-library writes it (scripts/artifacthub/hub.go,
  e.g. artifacthub/library/general/allowedrepos/2.0.0/artifacthub-pkg.yml):
  ``version`` is the template's ``metadata.gatekeeper.sh/version``, ``name`` its
  ``metadata.name``, ``displayName`` its ``metadata.gatekeeper.sh/title``,
  ``description`` and ``readme`` its ``description``, keywords gatekeeper,
  open-policy-agent, policies.
* Kyverno, as kyverno/policies writes it (e.g.
  best-practices/require-labels/artifacthub-pkg.yml): ``name``,
  ``displayName`` and ``description`` from the ``policies.kyverno.io/*``
  annotations, keywords kyverno and the category, and the Artifact Hub Kyverno
  annotations ``kyverno/category``, ``kyverno/subject`` and ``kyverno/version``
  (the minimum Kyverno version; artifacthub.io/docs/topics/annotations/kyverno).
  The version is the package's own: bump it in the file when the policy changes.

``digest`` is the SHA-256 of the policy file: Artifact Hub only compares it to
notice a change. ``createdAt`` is kept from the existing file. No ``homeURL``
and no raw download URL: install from a checkout (``kubectl apply -f``).
"""

from __future__ import annotations

import hashlib
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

POLICIES = Path(__file__).resolve().parent
GATEKEEPER = POLICIES / "gatekeeper"
KYVERNO = POLICIES / "kyverno"
FILE = "artifacthub-pkg.yml"
PROVIDER = {"name": "manifest-provider"}


def _existing(directory: Path) -> dict[str, Any]:
    path = directory / FILE
    return dict(yaml.safe_load(path.read_text())) if path.is_file() else {}


def _created(existing: dict[str, Any]) -> str:
    value = existing.get("createdAt")
    return str(value) if value else datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def gatekeeper_package(directory: Path) -> dict[str, Any]:
    template_path = directory / "template.yaml"
    template = yaml.safe_load(template_path.read_text())
    annotations = template["metadata"]["annotations"]
    title, description = annotations["metadata.gatekeeper.sh/title"], _one_line(annotations["description"])
    relative = template_path.relative_to(POLICIES.parent)
    return {
        "version": str(annotations["metadata.gatekeeper.sh/version"]),
        "name": template["metadata"]["name"],
        "displayName": title,
        "createdAt": _created(_existing(directory)),
        "description": description,
        "digest": _digest(template_path),
        "license": "Apache-2.0",
        "keywords": ["gatekeeper", "open-policy-agent", "policies"],
        "readme": f"# {title}\n{description}",
        "install": f"### Usage\n```shell\nkubectl apply -f {relative}\n```",
        "provider": PROVIDER,
    }


def kyverno_package(directory: Path) -> dict[str, Any]:
    policy_path = directory / f"{directory.name}.yaml"
    policy = yaml.safe_load(policy_path.read_text())
    annotations = policy["metadata"]["annotations"]
    category = annotations["policies.kyverno.io/category"]
    description = _one_line(annotations["policies.kyverno.io/description"])
    existing = _existing(directory)
    relative = policy_path.relative_to(POLICIES.parent)
    return {
        "name": policy["metadata"]["name"],
        "version": str(existing.get("version", "1.0.0")),
        "displayName": annotations["policies.kyverno.io/title"],
        "createdAt": _created(existing),
        "description": description,
        "install": f"```shell\nkubectl apply -f {relative}\n```",
        "keywords": ["kyverno", *(c.strip() for c in category.split(","))],
        "readme": f"{description}\n\nSee policies/README.md and the Kyverno quickstart (docs/quickstart-kyverno.md).",
        "annotations": {
            "kyverno/category": category,
            "kyverno/subject": annotations["policies.kyverno.io/subject"],
            "kyverno/version": str(annotations["policies.kyverno.io/minversion"]),
        },
        "digest": _digest(policy_path),
        "provider": PROVIDER,
    }


def packages() -> dict[Path, dict[str, Any]]:
    """``package directory -> the metadata it should hold``, for every policy."""
    found = {d: gatekeeper_package(d) for d in sorted(p.parent for p in GATEKEEPER.glob("*/template.yaml"))}
    found.update({d: kyverno_package(d) for d in sorted(p for p in KYVERNO.iterdir() if p.is_dir())})
    return found


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (readme, install) as literal blocks, as the two libraries write them."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def dump(metadata: dict[str, Any]) -> str:
    return yaml.dump(metadata, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


def main() -> None:
    for directory, metadata in packages().items():
        (directory / FILE).write_text(dump(metadata))
    print(f"wrote {len(packages())} {FILE} files", file=sys.stderr)


if __name__ == "__main__":
    main()
