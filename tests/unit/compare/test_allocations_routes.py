"""Values the server chooses: a Route's host is who receives the traffic.

From an attack pass without any signing key (docs/security.md): each test is named by the attack; a table
row's id names the input.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.manifests import sign
from tests.support.one_key import KEY, verdict

# --- values the server chooses: a Route's host is who receives the traffic -----------------------------------


ROUTE = {
    "apiVersion": "route.openshift.io/v1",
    "kind": "Route",
    "metadata": {"name": "shop", "namespace": "shop"},
    "spec": {"host": "shop.example.com", "to": {"kind": "Service", "name": "shop"}},
}


GENERATED_ROUTE = {**ROUTE, "spec": {"to": {"kind": "Service", "name": "shop"}}}


def _with_host(signed: dict[str, Any], host: Any) -> dict[str, Any]:
    changed = copy.deepcopy(signed)
    changed["spec"]["host"] = host
    return changed


@pytest.mark.parametrize(
    ("manifest", "host", "allowed"),
    [
        (ROUTE, "login.example.com", False),
        (ROUTE, "shop.example.com", True),
        (GENERATED_ROUTE, "shop-shop.apps.cluster.example", True),
        (GENERATED_ROUTE, "Not A Host!", False),
        (GENERATED_ROUTE, {"evil": 1}, False),
        (GENERATED_ROUTE, "login.example.com", False),
        (GENERATED_ROUTE, "other-shop.apps.cluster.example", False),
        (GENERATED_ROUTE, "shop-shop.", False),
    ],
    ids=[
        "signed-host-replaced-by-another",
        "signed-host-kept",
        "generated-host-where-the-signer-named-none",
        "generated-host-not-a-dns-name",
        "generated-host-not-a-string",
        "unsigned-host-claims-another-domain",
        "unsigned-host-named-for-another-route",
        "unsigned-host-with-no-router-suffix",
    ],
)
def test_a_signed_route_cannot_claim_another_host(manifest: dict[str, Any], host: Any, allowed: bool) -> None:
    # The default k8s-manifest-sigstore profile ignored spec.host on every Route (upstream's default-config.yaml):
    # a Route signed for shop.example.com could be admitted for login.example.com and take its traffic.
    (signed,) = sign(manifest, KEY)
    result = verdict(_with_host(signed, host))
    assert result.allowed is allowed, result.message
