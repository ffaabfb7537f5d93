"""The ConstraintTemplate end to end: its Rego under OPA, ``external_data`` calling the real service.

``external_data`` is :class:`tests.support.opa.GatekeeperExternalData`: Gatekeeper's
builtin, reproduced from its source -- a ``ProviderRequest`` POSTed over TLS
1.3 with a client certificate, the answer turned into ``{responses, errors,
status_code, system_error}``, a per-key response cache. The service is the
real one (gunicorn, TLS, client certificates required).
"""

from __future__ import annotations

import copy
import json
import socket
import ssl
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provider.service.devcerts import make_dev_pki
from tests.support.controlplane import TAMPERINGS, stored, tampered, written
from tests.support.data import REPO, load_yaml
from tests.support.gator import review_as_audited
from tests.support.opa import (
    PROVIDER_API_VERSION,
    ConstraintTemplateEngine,
    GatekeeperExternalData,
    gatekeeper_client_context,
    template_rego,
)
from tests.support.server import Server
from tests.support.subresources import SUBRESOURCES, admission_request, gatekeeper_matches

pytestmark = pytest.mark.integration

POLICY = REPO / "policies" / "gatekeeper" / "verify-manifest-signature"
SAMPLES = POLICY / "samples" / "k8sverifymanifestsignature"
PROVIDER_NAME = "manifest-provider"


def provider_path() -> str:
    (provider,) = load_yaml(POLICY / "provider.yaml")
    return str(urllib.parse.urlsplit(provider["spec"]["url"]).path)


def parameters() -> dict[str, Any]:
    (constraint,) = load_yaml(SAMPLES / "constraint.yaml")
    return dict(constraint["spec"]["parameters"])


def sample(name: str) -> dict[str, Any]:
    (obj,) = load_yaml(SAMPLES / f"example_{name}.yaml")
    return dict(obj)


def review(obj: dict[str, Any], **fields: Any) -> dict[str, Any]:
    meta = obj["metadata"]
    base = {
        "uid": "3c1e5d5a-0000-4000-8000-000000000000",
        "kind": {"group": "", "version": "v1", "kind": obj["kind"]},
        "name": meta["name"],
        "namespace": meta.get("namespace"),
        "operation": "CREATE",
        "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
    }
    base.update(fields)
    return base


def gatekeeper_context(server: Server) -> ssl.SSLContext:
    pki = server.pki
    return gatekeeper_client_context(pki.ca_cert, pki.client_cert, pki.client_key)


class Gatekeeper:
    """The template's Rego in OPA, with external_data pointed at a provider URL."""

    def __init__(self, url: str, context: ssl.SSLContext) -> None:
        self.external_data = GatekeeperExternalData({PROVIDER_NAME: url}, context)
        self.engine = ConstraintTemplateEngine(template_rego(POLICY / "template.yaml"), self.external_data)

    def violations(self, rev: dict[str, Any], params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        return self.engine.violations(rev, parameters() if params is None else params)


@pytest.fixture
def gatekeeper(provider_server: Server) -> Iterator[Gatekeeper]:
    gk = Gatekeeper(provider_server.url + provider_path(), gatekeeper_context(provider_server))
    yield gk
    gk.engine.close()


def only_reason(violations: list[dict[str, Any]]) -> str:
    assert len(violations) == 1, violations
    return str(violations[0]["details"]["reason"])


# --- the samples -------------------------------------------------------------------


def test_signed_sample_is_allowed(gatekeeper: Gatekeeper) -> None:
    assert gatekeeper.violations(review(sample("allowed"))) == []


@pytest.mark.parametrize(
    ("name", "reason"),
    [("disallowed_tampered", "content-mismatch"), ("disallowed_unsigned", "unsigned")],
    ids=["tampered", "unsigned"],
)
def test_disallowed_samples_are_denied_with_the_providers_reason(
    gatekeeper: Gatekeeper, name: str, reason: str
) -> None:
    violations = gatekeeper.violations(review(sample(name)))
    assert only_reason(violations) == reason
    assert f"(reason: {reason})" in violations[0]["msg"]
    assert sample(name)["metadata"]["name"] in violations[0]["msg"]


def test_tampered_sample_reports_the_difference(gatekeeper: Gatekeeper) -> None:
    (violation,) = gatekeeper.violations(review(sample("disallowed_tampered")))
    assert violation["details"]["diff"] == [{"key": "data.log-level", "values": {"before": "info", "after": "debug"}}]
    assert "debug" in violation["msg"]


def test_request_is_one_provider_request_with_one_key(gatekeeper: Gatekeeper) -> None:
    gatekeeper.violations(review(sample("allowed")))
    (sent,) = gatekeeper.external_data.sent
    assert sent["apiVersion"] == PROVIDER_API_VERSION
    assert sent["kind"] == "ProviderRequest"
    assert len(sent["request"]["keys"]) == 1


def test_audit_review_without_user_or_operation(gatekeeper: Gatekeeper) -> None:
    """Gatekeeper's audit sends the stored object alone."""
    assert gatekeeper.violations({"object": sample("allowed")}) == []
    assert only_reason(gatekeeper.violations({"object": sample("disallowed_unsigned")})) == "unsigned"


def test_an_audit_names_the_difference_in_the_stored_object(gatekeeper: Gatekeeper) -> None:
    """The review Gatekeeper's audit really sends (``review_as_audited``): the object is stored, not admitted."""
    (violation,) = gatekeeper.violations(review_as_audited(sample("disallowed_tampered")))
    assert "data.log-level differs: signed 'info', stored 'debug' (reason: content-mismatch)" in violation["msg"]
    (violation,) = gatekeeper.violations(review(sample("disallowed_tampered")))
    assert "signed 'info', admitted 'debug'" in violation["msg"]


def fresh_namespace(match: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What the control plane wrote into one namespace of the real audit log, moved to ``demo`` and stored,
    as Gatekeeper's audit reviews it: the objects ``match`` selects, by name."""
    reviews = {}
    for _, obj in written():
        if obj["metadata"]["namespace"] == "shop":
            rev = review_as_audited(stored(obj, "demo"))
            if gatekeeper_matches(match, rev):
                reviews[obj["metadata"]["name"]] = rev
    return reviews


def test_an_audit_of_a_fresh_namespace_lists_nothing_the_user_cannot_fix(gatekeeper: Gatekeeper) -> None:
    """The shipped sample constraint over what the control plane writes into a new namespace.

    The recording is of an OpenShift-derived control plane: besides upstream's
    kube-root-ca.crt its namespaces hold openshift-service-ca.crt. The sample
    matches both ConfigMaps (not the ServiceAccount). kube-root-ca.crt is never
    listed; openshift-service-ca.crt is, until the policy enables the openshift
    profile, and its violation says so.
    """
    (constraint,) = load_yaml(SAMPLES / "constraint.yaml")
    reviews = fresh_namespace(constraint["spec"]["match"])
    assert sorted(reviews) == ["kube-root-ca.crt", "openshift-service-ca.crt"]
    assert gatekeeper.violations(reviews["kube-root-ca.crt"]) == []
    (violation,) = gatekeeper.violations(reviews["openshift-service-ca.crt"])
    assert "enable the built-in profile 'openshift'" in violation["msg"]
    openshift = {**parameters(), "defaults": ["k8s-manifest-sigstore", "common", "openshift"]}
    for name, rev in reviews.items():
        assert gatekeeper.violations(rev, openshift) == [], name


@pytest.mark.parametrize("name", ["label", "another-data-key", "ca-not-pem"])
def test_an_audit_lists_a_tampered_control_plane_object_with_the_field(gatekeeper: Gatekeeper, name: str) -> None:
    tampering = next(t for t in TAMPERINGS if t.name == name)
    (violation,) = gatekeeper.violations(review_as_audited(tampered(tampering)))
    assert violation["details"]["reason"] == "control-plane-object-changed"
    assert tampering.field in [item["key"] for item in violation["details"]["diff"]]
    assert tampering.field in violation["msg"][:256]  # what the constraint's status keeps of it


def test_dry_run_request_is_allowed(gatekeeper: Gatekeeper) -> None:
    assert gatekeeper.violations(review(sample("disallowed_unsigned"), dryRun=True)) == []


# --- subresources --------------------------------------------------------------------------------


def test_kubectl_scale_of_a_deployment_is_a_violation(gatekeeper: Gatekeeper) -> None:
    """``kubectl scale``: the sample constraint matches the Scale, the key says which resource, the service denies.

    A Scale carries no signature; the service's reason for it is ``unverifiable-subresource``
    (docs/policy.md, "Subresources"). Whatever the reason, a rescale of a protected Deployment by
    someone not exempt is never admitted.
    """
    scale = next(s for s in SUBRESOURCES if s.name == "scale")
    rev = admission_request("Deployment", scale)
    rev["object"]["spec"] = {"replicas": 5}
    rev["oldObject"] = {**rev["object"], "spec": {"replicas": 2}}
    (constraint,) = load_yaml(SAMPLES / "constraint.yaml")
    assert gatekeeper_matches(constraint["spec"]["match"], rev)
    (violation,) = gatekeeper.violations(rev)
    assert violation["details"]["reason"] == "unverifiable-subresource"  # the service judged it
    (sent,) = gatekeeper.external_data.sent
    (key,) = sent["request"]["keys"]
    review_sent = json.loads(key)["review"]
    assert (review_sent["subResource"], review_sent["resource"]["resource"], review_sent["kind"]["kind"]) == (
        "scale",
        "deployments",
        "Scale",
    )


# --- Gatekeeper's cache: status_code 0 ----------------------------------------------------------


def test_cache_hits_answer_without_a_call_and_status_code_zero(gatekeeper: Gatekeeper) -> None:
    allowed, unsigned = review(sample("allowed")), review(sample("disallowed_unsigned"))
    assert gatekeeper.violations(allowed) == []
    assert only_reason(gatekeeper.violations(unsigned)) == "unsigned"
    calls = len(gatekeeper.external_data.sent)
    # Again: every key from the cache, no request, status_code 0.
    response = gatekeeper.external_data(
        {"provider": PROVIDER_NAME, "keys": [next(iter(gatekeeper.external_data.cache))[1]]}
    )
    assert response["status_code"] == 0
    assert gatekeeper.violations(allowed) == []
    assert only_reason(gatekeeper.violations(unsigned)) == "unsigned"
    assert len(gatekeeper.external_data.sent) == calls


# --- failures are violations ------------------------------------------------------------------


def test_invalid_policy_is_a_per_key_error_and_a_violation(gatekeeper: Gatekeeper) -> None:
    params = {**parameters(), "keyOperaton": "MustAll"}
    (violation,) = gatekeeper.violations(review(sample("allowed")), params)
    assert violation["details"]["reason"] == "request-invalid"
    assert "keyOperaton" in violation["msg"]


def test_policy_without_keys_is_a_violation(gatekeeper: Gatekeeper) -> None:
    (violation,) = gatekeeper.violations(review(sample("allowed")), {})
    assert violation["details"]["reason"] == "request-invalid"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_provider_is_a_violation(provider_server: Server) -> None:
    gk = Gatekeeper(f"https://127.0.0.1:{closed_port()}{provider_path()}", gatekeeper_context(provider_server))
    try:
        (violation,) = gk.violations(review(sample("allowed")))
    finally:
        gk.engine.close()
    assert violation["details"]["reason"] == "provider-error"
    assert "could not verify" in violation["msg"]


def test_provider_with_an_untrusted_certificate_is_a_violation(provider_server: Server, tmp_path: Path) -> None:
    """A Provider whose caBundle is another CA's (a CA renewed but the Provider not re-applied, say)."""
    other = make_dev_pki(tmp_path / "other")
    context = gatekeeper_client_context(other.ca_cert, provider_server.pki.client_cert, provider_server.pki.client_key)
    gk = Gatekeeper(provider_server.url + provider_path(), context)
    try:
        (violation,) = gk.violations(review(sample("allowed")))
    finally:
        gk.engine.close()
    assert "certificate" in violation["msg"].lower()


def test_gatekeeper_without_a_client_certificate_is_refused(provider_server: Server) -> None:
    context = ssl.create_default_context(cafile=str(provider_server.pki.ca_cert))
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    gk = Gatekeeper(provider_server.url + provider_path(), context)
    try:
        (violation,) = gk.violations(review(sample("allowed")))
    finally:
        gk.engine.close()
    assert "401" in violation["msg"]


def test_parameters_reach_the_provider_unchanged(gatekeeper: Gatekeeper) -> None:
    """skipUsers in the constraint lets a listed user through unsigned: the parameters are the policy."""
    params = copy.deepcopy(parameters())
    params["skipUsers"] = [{"users": ["ci-bot"], "description": "CI applies generated ConfigMaps"}]
    unsigned = sample("disallowed_unsigned")
    assert gatekeeper.violations(review(unsigned, userInfo={"username": "ci-bot", "groups": []}), params) == []
    assert only_reason(gatekeeper.violations(review(unsigned), params)) == "unsigned"
