"""The Helm chart, rendered and linted by the real Helm v4 engine (helm-python-sdk's libhelm).

``render`` is ``helm template`` (no cluster: ``lookup`` finds nothing), with the
chart's ``values.schema.json`` applied as Helm applies it on install. Rendered
objects are cached per (values, release, namespace): a matrix renders each
combination once per session.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from typing import Any

import helm_python
import yaml

from tests.support.data import REPO

CHART = REPO / "manifests" / "charts" / "manifest-provider"
#: Where each engine's service runs in the overlays, and so where the comparisons install the chart.
OVERLAY_NAMESPACES = {
    "gatekeeper": "gatekeeper-system",
    "kyverno": "manifest-provider",
    "kyverno-cel": "manifest-provider",
    "webhook": "manifest-provider",
}


@cache
def chart() -> helm_python.Chart:
    return helm_python.Chart.load(CHART)


@cache
def _render(values_json: str, name: str, namespace: str) -> tuple[tuple[str, str], ...]:
    rendered = chart().render(json.loads(values_json), name=name, namespace=namespace, is_install=True)
    return tuple(sorted(rendered.items()))


def render_files(
    values: dict[str, Any] | None = None, *, name: str = "manifest-provider", namespace: str = "manifest-provider"
) -> dict[str, str]:
    """Template path -> rendered text (NOTES.txt included); :class:`helm_python.HelmError` when Helm refuses."""
    return dict(_render(json.dumps(values or {}, sort_keys=True), name, namespace))


def render(
    values: dict[str, Any] | None = None, *, name: str = "manifest-provider", namespace: str = "manifest-provider"
) -> list[dict[str, Any]]:
    """The objects Helm would install, in template order."""
    docs: list[dict[str, Any]] = []
    for path, text in render_files(values, name=name, namespace=namespace).items():
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return copy.deepcopy(docs)


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [(d["kind"], d["metadata"]["name"]) for d in docs])
    return found[0]


def lint(values: dict[str, Any] | None = None, *, namespace: str = "manifest-provider") -> dict[str, Any]:
    return helm_python.lint(CHART, values, strict=True, namespace=namespace)
