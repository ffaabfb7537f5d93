"""Attack class 16 (docs/security.md): the operator's registry list bounds the policy's ``resourceBundleRef``
repositories.

Every test here failed on the code before the fix.
"""

from __future__ import annotations

import pytest

from provider import Bounds, Policy
from provider.errors import PolicyError
from tests.support.keys import make_key, public_key_pem

KEY = make_key("ecdsa-p256", 250)


# --- the operator's registry list bounds the policy's ----------------------------------------------------------


@pytest.mark.parametrize(
    ("operator", "policy_prefix", "allowed"),
    [
        ((), "registry.example.com/team", False),
        (("registry.example.com/team",), "registry.example.com/team/app", True),
        (("registry.example.com/team",), "registry.example.com/team", True),
        (("registry.example.com/team",), "registry.example.com", False),
        (("registry.example.com/team",), "registry.example.com/team-evil", False),
        (("registry.example.com",), "registry.example.com:5000/team", False),
        (("registry.example.com",), "kubernetes.default.svc/x", False),
        (("docker.io/myorg",), "index.docker.io/myorg/bundles", True),
    ],
    ids=["operator-lists-none", "under", "equal", "wider", "not-a-path-boundary", "other-port", "cluster-internal",
         "docker-hub-normalised"],
)  # fmt: skip
def test_a_policys_repositories_narrow_the_operators_never_widen_them(
    operator: tuple[str, ...], policy_prefix: str, allowed: bool
) -> None:
    from provider.signatures.sources import parse_repository_prefix

    bounds = Bounds(bundle_repositories=tuple(parse_repository_prefix(p, "operator", PolicyError) for p in operator))
    raw = {"keys": [public_key_pem(KEY)], "resourceBundleRef": {"repositories": [policy_prefix]}}
    if allowed:
        Policy.from_dict(raw, bounds=bounds)
    else:
        with pytest.raises(PolicyError, match="MANIFEST_PROVIDER_BUNDLE_REPOSITORIES"):
            Policy.from_dict(raw, bounds=bounds)
