"""Reading the hostile-input corpus, and turning each file into what every entry point receives.

:func:`load` reads ``index.yaml`` (written by ``generate.py``); :func:`materialize`
builds the recipes (inputs large by nature) into a directory. The functions
below turn one corpus file into the input of one entry point -- the object of
an admission review, a policy, a Gatekeeper key, a Kyverno body -- so the
library, CLI and service tests drive every file the same way.

The expected answer (:attr:`CorpusFile.expected`): ``reason`` for objects and
reviews (a verdict, or ``request-invalid``), ``policy-invalid`` for policies and
keys, ``request-invalid`` for raw bodies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from provider.errors import DataError
from provider.parsing import load_json, load_yaml_stream

HERE = Path(__file__).resolve().parent
INDEX = HERE / "index.yaml"
TRUSTED_KEY = HERE / "trusted.pub"
CONTROL = HERE / "control-honestly-signed-configmap.yaml"

#: Verdicts that may say ``allowed: true``; anything else must be a denial.
ALLOWING_REASONS = frozenset({"verified", "skipped-user", "skipped-object", "out-of-scope", "dry-run-request"})
#: Reasons that are not verdicts about the object but about the request or the policy.
ERROR_REASONS = frozenset({"request-invalid", "policy-invalid"})
#: Answers from an entry point must never carry these (a traceback, a Python frame).
TRACEBACK_MARKERS = ("Traceback (most recent call last)", 'File "/', "site-packages")


@dataclass(frozen=True)
class CorpusFile:
    name: str
    kind: str
    reason: str
    what: str
    says: str
    cli: str | None
    recipe: bool
    path: Path

    @property
    def expected(self) -> str:
        """The reason the service and the library answer with."""
        if self.kind in ("policy", "key"):
            return "policy-invalid"
        if self.kind == "body":
            return "request-invalid"
        return self.reason

    @property
    def cli_expected(self) -> str:
        """The CLI's answer: a verdict reason (exit 0/1), or ``usage`` (exit 2)."""
        if self.cli is not None:
            return self.cli
        if self.kind in ("policy", "key"):
            return "usage"
        return self.expected

    def data(self) -> bytes:
        return self.path.read_bytes()


def load(recipe_dir: Path | None = None) -> list[CorpusFile]:
    """Every file of the index; recipes resolve into ``recipe_dir`` (see :func:`materialize`)."""
    index = yaml.safe_load(INDEX.read_text())
    files = []
    for entry in index["files"]:
        recipe = bool(entry.get("recipe", False))
        base = recipe_dir if recipe and recipe_dir is not None else HERE
        files.append(
            CorpusFile(
                entry["name"],
                entry["as"],
                entry["reason"],
                entry["what"],
                entry.get("says", ""),
                entry.get("cli"),
                recipe,
                base / entry["name"],
            )
        )
    return files


def materialize(directory: Path) -> list[CorpusFile]:
    """The corpus with every recipe built into ``directory``."""
    from tests.assets.hostile.generate import build, by_name

    entries = by_name()
    files = load(directory)
    for item in files:
        if item.recipe and not item.path.exists():
            build(entries[item.name], directory)
    return files


# --- inputs for each entry point -------------------------------------------------------


def trusted_pem() -> str:
    return TRUSTED_KEY.read_text()


def trusted_policy() -> dict[str, Any]:
    return {"keys": [trusted_pem()]}


def object_of(item: CorpusFile) -> Any:
    (obj,) = load_yaml_stream(item.data())
    return obj


def control_object() -> Any:
    (obj,) = load_yaml_stream(CONTROL.read_bytes())
    return obj


def admission(obj: Any) -> dict[str, Any]:
    """An AdmissionRequest for ``obj`` as the API server would send it (CREATE by a person)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    namespace, name = meta.get("namespace"), meta.get("name")
    return {
        "uid": "00000000-0000-0000-0000-0000000c0de5",
        "kind": {"group": "", "version": "v1", "kind": obj.get("kind") if isinstance(obj, dict) else None},
        "operation": "CREATE",
        "namespace": namespace if isinstance(namespace, str) else "corpus",
        "name": name if isinstance(name, str) else "target",
        "userInfo": {"username": "mallory@example.com", "groups": ["system:authenticated"]},
        "object": obj,
    }


def review_of(item: CorpusFile) -> Any:
    """What the engines send as the review: the object's AdmissionRequest, or the file itself."""
    if item.kind == "object":
        return admission(object_of(item))
    if item.kind == "review":
        return json.loads(item.data())
    return admission(control_object())


def policy_of(item: CorpusFile) -> Any:
    """The policy a key or body carries: the file's policy (parsed if it parses, else its text), or the trusted one."""
    if item.kind == "key":
        return {"keys": [item.data().decode("utf-8", "replace")]}
    if item.kind != "policy":
        return trusted_policy()
    try:
        if item.name.endswith(".json"):
            return load_json(item.data())
        docs = load_yaml_stream(item.data())
        return docs[0] if len(docs) == 1 else docs
    except DataError:
        return item.data().decode("utf-8", "replace")  # the engines can only send it as a string


def key_text(item: CorpusFile) -> str:
    """The file as one Gatekeeper key (a string: bytes that are not UTF-8 arrive as Latin-1 text)."""
    data = item.data()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def gatekeeper_key(item: CorpusFile) -> str:
    if item.kind == "body":
        return key_text(item)
    return json.dumps({"review": review_of(item), "policy": policy_of(item)})


def provider_request(keys: list[str]) -> bytes:
    return json.dumps(
        {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest", "request": {"keys": keys}}
    ).encode()


def gatekeeper_body(item: CorpusFile) -> bytes:
    """The ProviderRequest: the raw file for bodies, else one key built from the file."""
    return item.data() if item.kind == "body" else provider_request([gatekeeper_key(item)])


def kyverno_body(item: CorpusFile) -> bytes:
    if item.kind == "body":
        return item.data()
    return json.dumps({"request": review_of(item), "policy": policy_of(item)}).encode()


def admission_review_file(item: CorpusFile, directory: Path) -> Path:
    """For the CLI: the review file wrapped in an AdmissionReview, its bytes kept as they are."""
    path = directory / f"admission-review-{item.name}"
    path.write_bytes(
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": ' + item.data() + b"}\n"
    )
    return path


def has_traceback(text: str) -> bool:
    return any(marker in text for marker in TRACEBACK_MARKERS)
