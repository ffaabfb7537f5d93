"""The chart's policies are what ``manifest-provider policy`` prints for the same settings.

Both read the shipped policies (the chart through the links in its ``files/``)
and replace the same fields: the policy, the CA, the kinds and namespaces, the
enforcement. For a matrix of settings the chart is rendered by the real Helm
engine and the command is run with the equivalent flags (``-c`` the policy,
``--match-kind``, ``--match-namespace``, ``--enforce``, ``--ca-file`` the CA
the chart generated, for the two engines whose policy carries one); the
documents must be equal, but for the chart's labels. The ValidatingPolicy
carries no CA (Kyverno's CEL ``http.Client(ca)`` cannot call, 1.17 to 1.19, so
it calls the global ``http.Post``): the chart puts the CA where Kyverno then
needs it, ConfigMap ``manifest-provider-ca`` in Kyverno's namespace, which must
be what ``manifests/scripts/ca-bundle.sh --kyverno-trust`` applies and what
``manifests/overlays/kyverno-cel/kyverno-values.yaml`` mounts.
The one field compared by value is the ValidatingPolicy's ``policy``
variable: a CEL expression whose map keys Helm writes sorted and whose
escapes may be spelled differently (``\\t`` for ``\\u0009``), so both are
evaluated with cel-python and the values compared. With the release named
``manifest-provider`` in each overlay's namespace the service URL is the
shipped one, so it is compared too; ``test_chart.py`` checks that another
release calls its own Service.

The rendered policies then pass what the shipped ones pass: the CRDs of each
supported Kyverno release (1.17 to 1.19), the type check of every CEL
expression in each release's environment (``tests/support/kyverno_cel.py``),
Gatekeeper's Provider rules, the template's parameter schema, Gatekeeper's
ingestion of the ConstraintTemplate. And they decide as the shipped ones do, in
each release's evaluation model with the project's verifier as the service: the
ClusterPolicy through Kyverno's admission flow (``tests/support/kyverno.py``,
``admit``: a tampered UPDATE is denied, not skipped as a pre-existing
violation), the ValidatingPolicy through its variables with Kyverno's
``http.Post`` overloads (``cel_admit``).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import celpy
import helm_python
import pytest
import yaml

from provider.policy.schema import Policy
from provider.review import Review
from provider.verifier import decide
from tests.support.chart_policies import GATEKEEPER, SAMPLE_KEY, SAMPLES, SETTINGS, generated, without_chart_labels
from tests.support.data import REPO, load_yaml
from tests.support.gatekeeper_framework import ingest, provider_problems
from tests.support.helm import CHART, OVERLAY_NAMESPACES, find, render
from tests.support.kube_schema import validate, validate_object
from tests.support.kyverno import (
    VERSIONS,
    admission_request,
    admit,
    cel_admit,
    cel_variables,
    crds,
    request_body,
    resource_request,
    to_python,
)
from tests.support.kyverno_cel import type_check
from tests.support.live import PUBLIC_KEY, deployment, reimaged, signed, signed_configmap
from tests.support.opa import parse_rego

#: Every supported Kyverno release: each rendered Kyverno policy is checked against each one's CRDs and rules.
KYVERNO_VERSIONS = list(VERSIONS)
KYVERNO_CRDS = {version: crds(version) for version in KYVERNO_VERSIONS}
#: What engine=kyverno-cel fills in for Kyverno's trust store (manifests/scripts/ca-bundle.sh --kyverno-trust).
CA_SCRIPT = REPO / "manifests" / "scripts" / "ca-bundle.sh"
KYVERNO_VALUES = REPO / "manifests" / "overlays" / "kyverno-cel" / "kyverno-values.yaml"

ENGINES = ["gatekeeper", "kyverno", "kyverno-cel"]
#: The engines whose policy carries the service CA (``--ca-file``); kyverno-cel refuses one.
CA_IN_POLICY = {"gatekeeper", "kyverno"}


def chart_values(engine: str, scope: dict[str, Any], policy: dict[str, Any]) -> dict[str, Any]:
    return {"engine": engine, "policies": {"enabled": True, **scope}, "policy": policy}


def chart_docs(engine: str, scope: dict[str, Any], policy: dict[str, Any]) -> list[dict[str, Any]]:
    return render(chart_values(engine, scope, policy), namespace=OVERLAY_NAMESPACES[engine])


def secret_ca(docs: list[dict[str, Any]]) -> str:
    """The CA of the chart's generated Secret (PEM)."""
    return base64.b64decode(find(docs, "Secret")["data"]["ca.crt"]).decode()


def holds_certificate(doc: dict[str, Any], pem: str) -> bool:
    """Whether any line of the certificate's base64 is in the document, however it is quoted or escaped."""
    text = json.dumps(doc)
    lines = [line for line in pem.splitlines() if line and not line.startswith("-----")]
    assert lines
    return any(line in text for line in lines)


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
    ca = secret_ca(docs) if engine in CA_IN_POLICY else None
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
            # No CA anywhere in it: Kyverno's trust store holds it (test_the_ca_goes_to_kyvernos_trust_store).
            assert not holds_certificate(got, secret_ca(docs))
        assert got == want, want["kind"]


def generated_sorted(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    engine: str,
    *,
    policy: dict[str, Any],
    flags: list[str],
    ca: str | None,
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
    (want,) = generated(capsys, tmp_path, "kyverno", policy=policy, flags=[*flags, "--enforce"], ca=secret_ca(docs))
    assert without_chart_labels(find(docs, "ClusterPolicy")) != want


def test_the_rendered_gatekeeper_objects_pass_the_shipped_policies_checks() -> None:
    _case, scope, policy, _flags = SETTINGS[2]
    docs = chart_docs("gatekeeper", scope, policy)
    provider = find(docs, "Provider")
    assert provider_problems(provider) == []
    template = find(docs, "ConstraintTemplate")
    (shipped,) = load_yaml(GATEKEEPER / "template.yaml")
    assert without_chart_labels(template) == shipped
    ingest(template, parse_rego)  # Gatekeeper's ingestion rules: raises on what Gatekeeper refuses
    schema = template["spec"]["crd"]["spec"]["validation"]["openAPIV3Schema"]
    constraint = find(docs, "K8sVerifyManifestSignature")
    assert validate(constraint["spec"]["parameters"], schema) == []


@pytest.mark.parametrize("version", KYVERNO_VERSIONS)
@pytest.mark.parametrize("setting", SETTINGS, ids=[s[0] for s in SETTINGS])
@pytest.mark.parametrize("engine", ["kyverno", "kyverno-cel"])
def test_the_rendered_kyverno_policies_pass_each_releases_crd(
    engine: str, setting: tuple[str, Any, Any, list[str]], version: str
) -> None:
    _case, scope, policy, _flags = setting
    doc = find(chart_docs(engine, scope, policy), "ClusterPolicy" if engine == "kyverno" else "ValidatingPolicy")
    assert validate_object(doc, KYVERNO_CRDS[version][doc["kind"]]) == []


@pytest.mark.parametrize("version", KYVERNO_VERSIONS)
@pytest.mark.parametrize("setting", SETTINGS, ids=[s[0] for s in SETTINGS])
def test_the_rendered_validating_policy_type_checks_on_each_release(
    setting: tuple[str, Any, Any, list[str]], version: str
) -> None:
    """Kyverno compiles a ValidatingPolicy on create and refuses one that does not type-check (its policy webhook)."""
    _case, scope, policy, _flags = setting
    doc = find(chart_docs("kyverno-cel", scope, policy), "ValidatingPolicy")
    checked = {c.where: c.output for c in type_check(doc, version)}
    assert len(checked) == len(doc["spec"]["variables"]) + 2  # every variable, the validation and its message
    assert checked["spec.validations[0].expression"] == "BOOL"


def test_the_rendered_cluster_policy_judges_an_update_on_the_new_object() -> None:
    """``allowExistingViolations: false`` on every rule, as shipped: Kyverno's default would skip a tampered UPDATE."""
    doc = find(chart_docs("kyverno", *SETTINGS[1][1:3]), "ClusterPolicy")
    rules = doc["spec"]["rules"]
    assert rules and all(rule["validate"]["allowExistingViolations"] is False for rule in rules)


# --- the rendered policies decide, as each Kyverno release evaluates them --------------------------


#: The chart's policy for the tests below: the live test key, the shipped scope, enforcing.
DECIDING_SCOPE = {"kinds": ["ConfigMap", "apps/Deployment"], "namespaces": ["demo"], "enforce": True}


def verdict(body: Any) -> Any:
    """The service: the project's verifier on the body a policy posts."""
    return decide(Review.from_admission(body["request"]), Policy.from_dict(body["policy"])).to_dict()


def writes() -> dict[str, tuple[dict[str, Any], bool]]:
    """(AdmissionRequest, admitted?) for a signed CREATE, tampered UPDATEs and a re-signed UPDATE, in ``demo``."""
    old = signed_configmap("app-config", namespace="demo", mode="production")
    tampered = copy.deepcopy(old)
    tampered["data"]["mode"] = "debug"
    resigned = signed(
        {k: v for k, v in tampered.items() if k != "metadata"}
        | {"metadata": {"name": "app-config", "namespace": "demo"}}
    )
    stored = signed(deployment(namespace="demo"))
    return {
        "signed-create": (resource_request(old), True),
        "tampered-create": (resource_request(tampered), False),
        "tampered-update": (resource_request(tampered, "UPDATE", old=old), False),
        "reimaged-update": (resource_request(reimaged(stored), "UPDATE", old=stored), False),
        "resigned-update": (resource_request(resigned, "UPDATE", old=old), True),
    }


WRITES = list(writes())


@pytest.mark.parametrize("version", KYVERNO_VERSIONS)
@pytest.mark.parametrize("write", WRITES)
def test_the_rendered_cluster_policy_decides_in_kyvernos_admission_flow(version: str, write: str) -> None:
    """Through ``admit`` (match, context loaded once, deny, the old object's re-evaluation): a tampered UPDATE
    is denied with the service's reason, not skipped as a pre-existing violation."""
    doc = find(chart_docs("kyverno", DECIDING_SCOPE, {"keys": [PUBLIC_KEY]}), "ClusterPolicy")
    request, admitted = writes()[write]
    calls: list[tuple[str, dict[str, str]]] = []

    def service(url: str, body: bytes, headers: dict[str, str]) -> Any:
        calls.append((url, headers))
        return verdict(json.loads(body))

    decision = admit(doc, request, service, version)
    assert decision.allowed is admitted, decision
    (rule,) = decision.rules
    assert rule.status == ("pass" if admitted else "fail"), rule
    if not admitted:
        assert "(reason: content-mismatch)" in rule.message
    assert calls == [("https://manifest-provider.manifest-provider.svc:8443/v1/kyverno/verify", CONTENT_TYPE)]


CONTENT_TYPE = {"Content-Type": "application/json"}


@pytest.mark.parametrize("version", KYVERNO_VERSIONS)
@pytest.mark.parametrize("write", WRITES)
def test_the_rendered_validating_policy_decides_through_http_post(version: str, write: str) -> None:
    """The variables evaluated with Kyverno's http library as each release has it (``cel_variables``): the
    global ``http.Post(url, body, headers)`` reaches the chart's Service, and the validation decides."""
    doc = find(chart_docs("kyverno-cel", DECIDING_SCOPE, {"keys": [PUBLIC_KEY]}), "ValidatingPolicy")
    type_check(doc, version)
    request, admitted = writes()[write]
    calls: list[tuple[str, dict[str, str]]] = []

    def post(url: str, body: Any, headers: dict[str, str]) -> Any:
        calls.append((url, headers))
        return verdict(body)

    allowed, message = cel_admit(doc, request, post, version)
    assert allowed is admitted, message
    if not admitted:
        assert message.endswith("(reason: content-mismatch)"), message
    assert calls == [("https://manifest-provider.manifest-provider.svc:8443/v1/kyverno/verify", CONTENT_TYPE)]


@pytest.mark.parametrize(
    ("sample", "reason"),
    [("example_allowed.yaml", "verified"), ("example_disallowed_tampered.yaml", "content-mismatch")],
)
@pytest.mark.parametrize("engine", ["kyverno", "kyverno-cel"])
def test_the_rendered_kyverno_policies_send_the_policy_of_the_values(engine: str, sample: str, reason: str) -> None:
    """The body the ClusterPolicy POSTs and the one the ValidatingPolicy's Post sends hold the values' policy."""
    docs = chart_docs(
        engine, {"kinds": ["ConfigMap", "apps/Deployment"], "namespaces": ["demo"]}, {"keys": [SAMPLE_KEY]}
    )
    (obj,) = load_yaml(SAMPLES / sample)
    if engine == "kyverno":
        body = json.loads(request_body(find(docs, "ClusterPolicy"), admission_request(obj)))
        assert body["policy"] == {"keys": [SAMPLE_KEY]}
        assert verdict(body)["reason"] == reason
        return
    sent: list[Any] = []

    def post(url: str, body: Any, headers: dict[str, str]) -> Any:
        sent.append(body)
        return verdict(body)

    variables = cel_variables(find(docs, "ValidatingPolicy"), admission_request(obj), post)
    assert [body["policy"] for body in sent] == [{"keys": [SAMPLE_KEY]}]
    assert to_python(variables["verdict"])["reason"] == reason


# --- the CA, where the CEL policy's http.Post looks for it -----------------------------------------


def kyverno_trust_by_the_script(ca: str, tmp_path: Path, kyverno_namespace: str) -> dict[str, Any]:
    """What ``ca-bundle.sh --kyverno-trust`` applies, with a ``kubectl`` whose Secret holds ``ca`` (as cert-manager
    and the chart write it: base64 of the PEM) and that keeps what ``apply -f -`` reads."""
    bindir, applied = tmp_path / "bin", tmp_path / "applied.yaml"
    bindir.mkdir()
    kubectl = bindir / "kubectl"
    kubectl.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *"get secret manifest-provider-tls"*) printf "%s" "{base64.b64encode(ca.encode()).decode()}" ;;'
        f' *"apply -f -"*) cat > {applied} ;; *) exit 1 ;; esac\n'
    )
    kubectl.chmod(kubectl.stat().st_mode | stat.S_IEXEC)
    command = ["sh", str(CA_SCRIPT), "--namespace", "manifest-provider", "--kyverno-trust"]
    subprocess.run(
        [*command, "--kyverno-namespace", kyverno_namespace],
        env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (doc,) = load_yaml(applied)
    return dict(doc)


@pytest.mark.parametrize("kyverno_namespace", [None, "kyverno-system"])
def test_the_ca_goes_to_kyvernos_trust_store(tmp_path: Path, kyverno_namespace: str | None) -> None:
    """engine=kyverno-cel renders ConfigMap manifest-provider-ca in Kyverno's namespace (``kyverno.namespace``,
    default ``kyverno``): what ``ca-bundle.sh --kyverno-trust`` applies for the same CA, the chart's labels apart,
    and what Kyverno's values mount."""
    values = chart_values("kyverno-cel", *SETTINGS[0][1:3])
    if kyverno_namespace:
        values["kyverno"] = {"namespace": kyverno_namespace}
    docs = render(values, namespace="manifest-provider")
    ca = secret_ca(docs)
    configmap = find(docs, "ConfigMap", "manifest-provider-ca")
    assert configmap["metadata"]["namespace"] == (kyverno_namespace or "kyverno")
    assert configmap["data"] == {"ca.crt": ca.strip() + "\n"} and holds_certificate(configmap, ca)
    by_script = kyverno_trust_by_the_script(ca, tmp_path, kyverno_namespace or "kyverno")
    labels = configmap["metadata"]["labels"]
    assert by_script["metadata"]["labels"].items() <= labels.items()  # the script's label, and Helm's
    assert without_chart_labels(configmap) == {**by_script, "metadata": without_labels(by_script["metadata"])}
    # Kyverno's values mount that ConfigMap's key into a directory SSL_CERT_DIR names (test_kyverno_http.py).
    (volume,) = yaml.safe_load(KYVERNO_VALUES.read_text())["admissionController"]["extraVolumes"]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert [item["key"] for item in volume["configMap"]["items"]] == list(configmap["data"])


def without_labels(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k != "labels"}


@pytest.mark.parametrize("engine", ENGINES)
def test_only_the_cel_engine_writes_into_kyvernos_namespace(engine: str) -> None:
    docs = chart_docs(engine, *SETTINGS[0][1:3])
    kyverno = [(d["kind"], d["metadata"]["name"]) for d in docs if d["metadata"].get("namespace") == "kyverno"]
    assert kyverno == ([("ConfigMap", "manifest-provider-ca")] if engine == "kyverno-cel" else [])
    values = {**chart_values(engine, *SETTINGS[0][1:3]), "kyverno": {"caConfigMap": {"enabled": False}}}
    off = render(values, namespace=OVERLAY_NAMESPACES[engine])
    assert not [d for d in off if d["metadata"].get("namespace") == "kyverno"]


def test_a_shipped_cel_policy_without_the_variables_the_chart_fills_is_refused(tmp_path: Path) -> None:
    """If policies/kyverno/verify-manifest-signature-cel lost its serviceURL variable, the chart would render a
    policy calling the shipped URL instead of this release's Service: it refuses instead."""
    copy_of_chart = tmp_path / "manifest-provider"
    shutil.copytree(CHART, copy_of_chart, symlinks=False)  # the links in files/ become the files
    values = chart_values("kyverno-cel", *SETTINGS[0][1:3])

    def render_copy() -> dict[str, str]:
        with helm_python.Chart.load(copy_of_chart) as chart:
            return dict(chart.render(values, name="manifest-provider", namespace="manifest-provider", is_install=True))

    assert "ValidatingPolicy" in "".join(render_copy().values())  # the control: the copy renders as the chart does
    cel = copy_of_chart / "files" / "kyverno-cel.yaml"
    (doc,) = load_yaml(cel)
    doc["spec"]["variables"] = [v for v in doc["spec"]["variables"] if v["name"] != "serviceURL"]
    cel.write_text(yaml.safe_dump(doc))
    with pytest.raises(helm_python.HelmRenderError, match="expected one variable policy and one variable serviceURL"):
        render_copy()
