"""The keyed interop expectations of tests/data/interop as one table, for the library and CLI tests.

Each case: the fixture file, the policy (keys by file name, plus config), and the
expected verdict. Upstream's outcomes map onto our reason codes:

* upstream ``verified: true``  -> ``verified``;
* ``verified: false`` with a diff -> ``content-mismatch`` with exactly that diff;
* ``SignatureVerificationError`` -> ``signature-invalid``; ``MessageNotFoundError`` -> ``unsigned``;
* Kyverno ``pass`` -> ``verified``; ``fail`` -> ``content-mismatch``/``unsigned``; ``error`` (a listed key
  that signed nothing) -> ``signature-invalid`` or ``key-threshold-not-met``.

Where our stricter defaults differ from upstream's, the case says why (``note``).
Keyless cases live with the keyless tests; the inclusion-match case with the dry-run tests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.data import KYVERNO, UPSTREAM, load_yaml


@dataclass(frozen=True)
class Case:
    id: str
    file: Path
    keys: tuple[Path, ...]
    reason: str
    diff_keys: tuple[str, ...] | None = None
    diff: tuple[dict[str, Any], ...] | None = None
    config: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def policy(self) -> dict[str, Any]:
        return {**self.config, "keys": [p.read_text() for p in self.keys]}


def _upstream_reason(outcome: dict[str, Any]) -> str:
    if outcome.get("verified") is True:
        return "verified"
    if outcome.get("verified") is False:
        return "content-mismatch"
    error = outcome.get("error", "")
    if "MessageNotFound" in error:
        return "unsigned"
    if "SignatureVerification" in error or "signature verification failed" in error:
        return "signature-invalid"
    raise AssertionError(f"unmapped upstream outcome {outcome}")


#: Where our verdict deliberately differs from upstream's: case id -> (reason, extra diff keys, why).
UPSTREAM_DEVIATIONS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "cm-plain-2keys-multi-signed.numbering-gap:verify_resource_other_key": (
        "content-mismatch",
        ("metadata.annotations.cosign.sigstore.dev/signature_2",),
        "signature_2 lies past the first gap in the numbering, so it is never read; upstream masks every annotation "
        "under the domain, which lets a verified object carry anything there. Only the annotations read are masked.",
    ),
    "deploy-live-object-needs-dryrun:verify_resource": (
        "content-mismatch",
        ("spec.template.spec.securityContext",),
        "the live object's pod securityContext is an empty struct {}; upstream treats {} as absent, but an empty "
        "struct is a value (the API server keeps it, and an empty selector selects everything).",
    ),
}


def _deviate(case: Case) -> Case:
    if case.id not in UPSTREAM_DEVIATIONS:
        return case
    reason, extra, why = UPSTREAM_DEVIATIONS[case.id]
    diff_keys = tuple(sorted({*(case.diff_keys or ()), *extra}))
    return Case(case.id, case.file, case.keys, reason, diff_keys, None, case.config, why)


def upstream_cases() -> list[Case]:
    expected = json.loads((UPSTREAM / "expected.json").read_text())
    cases = []
    for entry in expected["cases"]:
        path = UPSTREAM / entry["file"]
        stem = Path(entry["file"]).stem
        for label, outcome in entry.items():
            if not isinstance(outcome, dict) or not (
                label.startswith("verify_resource") or label.startswith("must_all")
            ):
                continue
            keys = outcome.get("keys")
            if (
                keys is None
                and "config" not in outcome
                and "ignoreFields" not in outcome
                and "error" in outcome
                and "MessageNotFound" in outcome["error"]
            ):
                keys = ["keys/testpub.pem"]  # an unsigned object: any key
            if not keys and label == "verify_resource_with_config":
                keys = [k for k in entry.get("verify_resource", {}).get("keys", [])]
            if not keys or outcome.get("dry_run") is True:
                continue  # keyless or dry-run: covered elsewhere
            config: dict[str, Any] = {}
            if label.startswith("must_all"):
                config["keyOperation"] = "MustAll"
            if "ignoreFields" in outcome:
                config["ignoreFields"] = outcome["ignoreFields"]
            if "config" in outcome:
                (config_doc,) = load_yaml(UPSTREAM / outcome["config"])
                config.update(config_doc)
            diff = outcome.get("diff")
            cases.append(
                Case(
                    id=f"{stem}:{label}",
                    file=path,
                    keys=tuple(UPSTREAM / k for k in keys),
                    reason=_upstream_reason(outcome),
                    diff_keys=tuple(outcome["diff_keys"]) if "diff_keys" in outcome else None,
                    diff=tuple(diff) if diff else None,
                    config=config,
                )
            )
    assert all(key in {c.id for c in cases} for key in UPSTREAM_DEVIATIONS), (
        "a deviation names a case that no longer exists"
    )
    return [_deviate(case) for case in cases]


KYVERNO_MODES = {
    "K1": (("key1.pub",), {}),
    "K2": (("key2.pub",), {}),
    "K3": (("key3-docs.pub",), {}),
    "ANY(K1,K2)": (("key1.pub", "key2.pub"), {}),
    "ALL(K1,K2)": (("key1.pub", "key2.pub"), {"keyOperation": "MustAll"}),
}

#: Objects carrying server-populated Service fields pass in Kyverno only through its
#: default ignoreFields; ours (upstream's list, anchored) do not hide them, so the
#: opt-in "kyverno" profile is needed -- or, better, dry-run.
KYVERNO_PROFILE_NEEDED = {"svc-k1only-admissionrequest"}


def kyverno_cases() -> list[Case]:
    data = json.loads((KYVERNO / "cases.json").read_text())
    cases = []
    for entry in data["cases"]:
        path = KYVERNO / entry["file"]
        stem = path.stem
        for mode, verdict in entry["kyverno"].items():
            key_names, config = KYVERNO_MODES[mode]
            if verdict == "pass":
                reason = "verified"
            elif verdict == "fail":
                reason = "content-mismatch" if entry["diff"] else "unsigned"
            else:
                reason = "key-threshold-not-met" if mode.startswith("ALL") else "signature-invalid"
            note = ""
            if stem in KYVERNO_PROFILE_NEEDED and reason == "verified":
                config = {**config, "defaults": ["k8s-manifest-sigstore", "common", "kyverno"]}
                note = "passes in Kyverno through its default ignoreFields: needs our opt-in kyverno profile"
            cases.append(
                Case(
                    id=f"{stem}:{mode}",
                    file=path,
                    keys=tuple(KYVERNO / "keys" / k for k in key_names),
                    reason=reason,
                    diff=tuple(entry["diff"]) if entry["diff"] else None,
                    config=config,
                    note=note,
                )
            )
            if note:
                cases.append(
                    Case(
                        id=f"{stem}:{mode}:our-defaults",
                        file=path,
                        keys=tuple(KYVERNO / "keys" / k for k in key_names),
                        reason="content-mismatch",
                        config={k: v for k, v in config.items() if k != "defaults"},
                        note="stricter than Kyverno: server-populated Service fields are not ignored by default",
                    )
                )
    return cases


ALL_CASES = upstream_cases() + kyverno_cases()
