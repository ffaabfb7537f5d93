"""The suites of the two templates whose checks read the cluster, run against the real service.

``verify-cluster-info`` and ``verify-kubelet-serving-csr`` ask the service's
``cluster-info`` and ``kubelet-serving-csr`` checks, which read bootstrap-token
Secrets from the API server (here a fake one holding the samples' token
``07401b``). Each case is reviewed as Gatekeeper reviews it at admission: the
CSR created by the node it names, cluster-info updated by the bootstrap
signer (gator's own review carries no user, so gator could not run these).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.bootstrap import serving_with_sample_token
from tests.support.data import REPO
from tests.support.gator import review_as_created, run_suite
from tests.support.opa import GatekeeperExternalData, gatekeeper_client_context
from tests.support.server import VERDICT_CLIENT_TIMEOUT, Server

pytestmark = pytest.mark.integration

GATEKEEPER = REPO / "policies" / "gatekeeper"
#: The example token of the Kubernetes documentation, which the cluster-info samples are signed with.


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving_with_sample_token(Path(tmp_path_factory.mktemp("kube"))) as running:
        yield running


def review(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "CertificateSigningRequest":
        return review_as_created(obj, obj["spec"]["username"])
    return {**review_as_created(obj, "system:serviceaccount:kube-system:bootstrap-signer"), "operation": "UPDATE"}


@pytest.mark.parametrize("name", ["verify-cluster-info", "verify-kubelet-serving-csr"])
def test_the_suite_passes_against_the_service(server: Server, name: str) -> None:
    pki = server.pki
    # Verdicts, not timeouts: the stand-in waits as long as the server's VERDICT_DEADLINE allows.
    external = GatekeeperExternalData({"manifest-provider": f"{server.url}/v1/gatekeeper/verify"},
                                      gatekeeper_client_context(pki.ca_cert, pki.client_cert, pki.client_key),
                                      timeout=VERDICT_CLIENT_TIMEOUT)  # fmt: skip
    outcome = run_suite(GATEKEEPER / name / "suite.yaml", external, review)
    assert len(outcome) >= 3
    assert {case: why for case, why in outcome.items() if why} == {}
    assert external.sent, "the service was never asked"
