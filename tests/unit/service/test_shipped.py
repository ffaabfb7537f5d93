"""What ships for callers and for cheap handshakes: the manifests and the dev PKI agree with the service's defaults.

* The base Deployment names the same callers as :class:`provider.service.config.Config`'s
  default, so the manifests and ``manifest-provider serve`` without settings
  admit exactly Gatekeeper's webhook certificate and Kyverno's admission controller.
* Server keys are ECDSA P-256 (the serving Certificate, its CA, the dev PKI):
  the cheapest signature a full handshake makes (docs/performance.md).
* The TLS context issues no session tickets, lets a half-closed client read
  its answer, and wraps every socket with a deadline.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from provider.deadlines import DeadlineSSLSocket
from provider.service.config import ENV_PREFIX, Config
from provider.service.devcerts import make_dev_pki
from provider.service.serve import tls_context

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "manifests" / "base"


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((BASE / name).read_text()) if d]


def test_the_base_deployment_names_the_default_callers() -> None:
    (deployment,) = docs("deployment.yaml")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env[f"{ENV_PREFIX}CALLERS"].split(",") == list(Config().callers)
    assert f"{ENV_PREFIX}METRICS_CALLERS" not in env


@pytest.mark.parametrize("name", ["manifest-provider-tls", "manifest-provider-ca"])
def test_shipped_certificates_have_ecdsa_p256_keys(name: str) -> None:
    (certificate,) = [
        d for d in docs("certificate.yaml") if d["kind"] == "Certificate" and d["metadata"]["name"] == name
    ]
    assert (
        certificate["spec"]["privateKey"]["algorithm"] == "ECDSA" and certificate["spec"]["privateKey"]["size"] == 256
    )


def test_dev_keys_are_ecdsa_p256(tmp_path: Path) -> None:
    pki = make_dev_pki(tmp_path)
    for path in (pki.server_key, pki.client_key):
        key = load_pem_private_key(path.read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1)


def test_the_tls_context_issues_no_tickets_tolerates_a_half_close_and_arms_deadlines(tmp_path: Path) -> None:
    pki = make_dev_pki(tmp_path)
    context = tls_context(str(pki.server_cert), str(pki.server_key), str(pki.ca_cert))
    assert context.num_tickets == 0 and context.options & ssl.OP_NO_TICKET
    assert context.options & ssl.OP_IGNORE_UNEXPECTED_EOF
    assert context.sslsocket_class is DeadlineSSLSocket
