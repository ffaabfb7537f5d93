"""The chart's policies are what ``manifest-provider policy`` prints for the same settings.

Both read the shipped policies (the chart through the links in its ``files/``)
and replace the same fields: the policy, the CA, the kinds and namespaces, the
enforcement. For a matrix of settings the chart is rendered by the real Helm
engine and the command is run with the equivalent flags (``-c`` the policy,
``--match-kind``, ``--match-namespace``, ``--enforce``, ``--ca-file`` the CA
the chart generated); the documents must be equal, but for the chart's labels.
The one field compared by value is the ValidatingPolicy's ``policy``
variable: a CEL expression whose map keys Helm writes sorted and whose
escapes may be spelled differently (``\\t`` for ``\\u0009``), so both are
evaluated with cel-python and the values compared. With the release named
``manifest-provider`` in each overlay's namespace the service URL is the
shipped one, so it is compared too; ``test_chart.py`` checks that another
release calls its own Service.

The rendered policies then pass what the shipped ones pass: Kyverno's CRDs,
Gatekeeper's Provider rules, the template's parameter schema, Gatekeeper's
ingestion of the ConstraintTemplate, and a signed sample decided through the
rendered ClusterPolicy's body and the ValidatingPolicy's variables.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

from provider.cli import main
from provider.policy import Policy
from provider.review import Review
from provider.verifier import decide
from tests.support.data import CRDS, REPO, load_yaml
from tests.support.gatekeeper_framework import ingest, provider_problems
from tests.support.helm import OVERLAY_NAMESPACES, find, render
from tests.support.kube_schema import validate, validate_object
from tests.support.kyverno import admission_request, cel_variables, request_body, to_python
from tests.support.opa import parse_rego

GATEKEEPER = REPO / "policies" / "gatekeeper" / "verify-manifest-signature"
SAMPLES = GATEKEEPER / "samples" / "k8sverifymanifestsignature"
SAMPLE_KEY = load_yaml(SAMPLES / "constraint.yaml")[0]["spec"]["parameters"]["keys"][0]
KYVERNO_CRDS = {d["spec"]["names"]["kind"]: d for p in sorted((CRDS / "kyverno").glob("*.yaml")) for d in load_yaml(p)}
CHART_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
}

#: (id, scope and enforcement values, policy document, the same as flags of `manifest-provider policy`).
SETTINGS: list[tuple[str, dict[str, Any], dict[str, Any], list[str]]] = [
    (
        "as-shipped-scope",
        {"kinds": ["ConfigMap", "apps/Deployment"], "namespaces": ["demo"]},
        {"keys": [SAMPLE_KEY]},
        ["--match-kind", "ConfigMap,apps/Deployment", "--match-namespace", "demo"],
    ),
    (
        "enforced-everywhere-signers",
        {"kinds": ["core/Pod", "apps/StatefulSet", "CertificateSigningRequest"], "namespaces": ["*"], "enforce": True},
        {
            "signers": [{"subject": "release-bot@example.com", "issuer": "https://accounts.google.com"}],
            "keys": [SAMPLE_KEY],
            "keyOperation": "MustAll",
        },
        [
            "--match-kind",
            "core/Pod",
            "--match-kind",
            "apps/StatefulSet,CertificateSigningRequest",
            "--match-namespace",
            "*",
            "--enforce",
        ],
    ),
    (
        "threshold-dry-run-profiles",
        {"kinds": ["apps/Deployment", "ConfigMap", "core/ConfigMap"], "namespaces": ["shop", "web"]},
        {
            "keys": [{"publicKey": SAMPLE_KEY, "name": "team"}],
            "threshold": 1,
            "dryRun": {"enabled": True, "namespace": "manifest-provider"},
            "defaults": ["k8s-manifest-sigstore", "common", "argocd"],
            "ignoreFields": [{"objects": [{"kind": "ConfigMap"}], "fields": ["data.note"]}],
            "skipUsers": [{"users": ["system:serviceaccount:shop:operator"], "objects": [{"kind": "Deployment"}]}],
        },
        ["--match-kind", "apps/Deployment,ConfigMap", "--match-namespace", "shop,web"],
    ),
    (
        "text-cel-spells-differently",
        {"kinds": ["ConfigMap"], "namespaces": ["demo"]},
        {"keys": [SAMPLE_KEY], "signers": ['jöhn\t<dev>&"ops"@example.com', "🔑@example.com"]},
        ["--match-kind", "ConfigMap", "--match-namespace", "demo"],
    ),
]
ENGINES = ["gatekeeper", "kyverno", "kyverno-cel"]


def chart_values(engine: str, scope: dict[str, Any], policy: dict[str, Any]) -> dict[str, Any]:
    return {"engine": engine, "policies": {"enabled": True, **scope}, "policy": policy}


def chart_docs(engine: str, scope: dict[str, Any], policy: dict[str, Any]) -> list[dict[str, Any]]:
    return render(chart_values(engine, scope, policy), namespace=OVERLAY_NAMESPACES[engine])


def generated(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    engine: str,
    *,
    policy: dict[str, Any],
    flags: list[str],
    ca: str,
) -> list[dict[str, Any]]:
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy, allow_unicode=True))
    (tmp_path / "ca.crt").write_text(ca)
    code = main(["policy", engine, "-c", str(tmp_path / "policy.yaml"), "--ca-file", str(tmp_path / "ca.crt"), *flags])
    out, err = capsys.readouterr()
    assert code == 0, err
    return [d for d in yaml.safe_load_all(out) if d]


def without_chart_labels(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    labels = doc["metadata"].pop("labels")
    assert set(labels) == CHART_LABELS, labels  # the chart adds its labels and nothing else
    return doc


def cel_value(expression: str) -> Any:
    env = celpy.Environment()
    return to_python(env.program(env.compile(expression)).evaluate({}))


def policy_variable(doc: dict[str, Any]) -> dict[str, Any]:
    """The ``policy`` variable itself (not a copy)."""
    (variable,) = [v for v in doc["spec"]["variables"] if v["name"] == "policy"]
    return variable  # type: ignore[no-any-return]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("setting", SETTINGS, ids=[s[0] for s in SETTINGS])
def test_the_chart_renders_what_manifest_provider_policy_prints(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, engine: str, setting: tuple[str, Any, Any, list[str]]
) -> None:
    case, scope, policy, flags = setting
    docs = chart_docs(engine, scope, policy)
    ca = base64.b64decode(find(docs, "Secret")["data"]["ca.crt"]).decode()
    expected = generated(capsys, tmp_path, engine, policy=policy, flags=flags, ca=ca)
    kinds = {
        "gatekeeper": ["Provider", "K8sVerifyManifestSignature"],
        "kyverno": ["ClusterPolicy"],
        "kyverno-cel": ["ValidatingPolicy"],
    }[engine]
    assert [d["kind"] for d in expected] == kinds
    for want in expected:
        got = without_chart_labels(find(docs, want["kind"]))
        if want["kind"] == "ValidatingPolicy":
            got_policy, want_policy = policy_variable(got), policy_variable(want)
            assert cel_value(got_policy["expression"]) == cel_value(want_policy["expression"]) == policy
            if case != "text-cel-spells-differently":
                # Only the key order differs: the same text once the generator's keys are sorted.
                assert (
                    got_policy["expression"]
                    == policy_variable(generated_sorted(capsys, tmp_path, engine, policy=policy, flags=flags, ca=ca))[
                        "expression"
                    ]
                )
            got_policy["expression"] = want_policy["expression"]
        assert got == want, want["kind"]


def generated_sorted(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    engine: str,
    *,
    policy: dict[str, Any],
    flags: list[str],
    ca: str,
) -> dict[str, Any]:
    def sort(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: sort(value[k]) for k in sorted(value)}
        if isinstance(value, list):
            return [sort(v) for v in value]
        return value

    (doc,) = generated(capsys, tmp_path, engine, policy=sort(policy), flags=flags, ca=ca)
    return doc


def test_the_comparison_can_fail(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A setting the chart did not get is a difference the comparison sees."""
    _case, scope, policy, flags = SETTINGS[0]
    docs = chart_docs("kyverno", scope, policy)
    ca = base64.b64decode(find(docs, "Secret")["data"]["ca.crt"]).decode()
    (want,) = generated(capsys, tmp_path, "kyverno", policy=policy, flags=[*flags, "--enforce"], ca=ca)
    assert without_chart_labels(find(docs, "ClusterPolicy")) != want


@pytest.mark.parametrize("engine", ENGINES)
def test_the_rendered_policies_pass_the_shipped_policies_checks(engine: str) -> None:
    _case, scope, policy, _flags = SETTINGS[2]
    docs = chart_docs(engine, scope, policy)
    if engine == "gatekeeper":
        provider = find(docs, "Provider")
        assert provider_problems(provider) == []
        template = find(docs, "ConstraintTemplate")
        (shipped,) = load_yaml(GATEKEEPER / "template.yaml")
        assert without_chart_labels(template) == shipped
        ingest(template, parse_rego)  # Gatekeeper's ingestion rules: raises on what Gatekeeper refuses
        schema = template["spec"]["crd"]["spec"]["validation"]["openAPIV3Schema"]
        constraint = find(docs, "K8sVerifyManifestSignature")
        assert validate(constraint["spec"]["parameters"], schema) == []
        return
    doc = find(docs, "ClusterPolicy" if engine == "kyverno" else "ValidatingPolicy")
    assert validate_object(doc, KYVERNO_CRDS[doc["kind"]]) == []


@pytest.mark.parametrize(
    ("sample", "reason"),
    [("example_allowed.yaml", "verified"), ("example_disallowed_tampered.yaml", "content-mismatch")],
)
@pytest.mark.parametrize("engine", ["kyverno", "kyverno-cel"])
def test_the_rendered_kyverno_policies_send_a_policy_that_decides(engine: str, sample: str, reason: str) -> None:
    """The body the ClusterPolicy POSTs and the ValidatingPolicy's variables, evaluated as Kyverno would."""
    docs = chart_docs(
        engine, {"kinds": ["ConfigMap", "apps/Deployment"], "namespaces": ["demo"]}, {"keys": [SAMPLE_KEY]}
    )
    (obj,) = load_yaml(SAMPLES / sample)
    ca = base64.b64decode(find(docs, "Secret")["data"]["ca.crt"]).decode()
    if engine == "kyverno":
        doc = find(docs, "ClusterPolicy")
        body = json.loads(request_body(doc, admission_request(obj)))
        assert decide(Review.from_admission(body["request"]), Policy.from_dict(body["policy"])).reason == reason
        return
    doc = find(docs, "ValidatingPolicy")
    sent: list[str] = []

    def post(given_ca: str, url: str, body: Any, headers: Any) -> Any:
        sent.append(given_ca)
        return decide(Review.from_admission(body["request"]), Policy.from_dict(body["policy"])).to_dict()

    variables = cel_variables(doc, admission_request(obj), post)
    assert sent == [ca]
    assert to_python(variables["verdict"])["reason"] == reason
