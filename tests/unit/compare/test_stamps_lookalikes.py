"""GitOps profiles: keys and values that look like the tool's are differences.

From an attack pass without any signing key (docs/security.md). Rows marked ``xfail(strict=True)`` are
attacks that still get in, left for a decision larger than a fix (their reason says which).
"""

from __future__ import annotations

from typing import Any

import pytest

from provider import Policy
from provider.errors import ContentMismatch
from provider.objects import ObjectIdentity
from provider.verifier import verify
from tests.support.delivery import MANAGED_BY, RELEASE_NAME, RELEASE_NAMESPACE, TRACKING, annotate, label
from tests.support.keys import make_key, public_key_pem
from tests.support.live import deployment
from tests.support.manifests import sign

#: The key tests.support.manifests.sign signs with when given none.
SIGNING_KEY = public_key_pem(make_key())


# --- GitOps profiles: keys and values that look like the tool's --------------------------------------------------


def _signed_without_namespace() -> tuple[dict[str, Any], Policy]:
    doc = deployment("web")
    del doc["metadata"]["namespace"]
    (obj,) = sign(doc)
    obj["metadata"]["namespace"] = "shop"
    return obj, tool_policy("argocd", "flux", "helm")


def tool_policy(*profiles: str) -> Policy:
    """The default profiles and ``profiles``, trusting the key ``sign`` signs with by default."""
    return Policy.from_dict({"keys": [SIGNING_KEY], "defaults": ["k8s-manifest-sigstore", "common", *profiles]})


#: (id, labels, annotations): none of these is the tool's metadata, so none verifies.
LOOKALIKES: list[tuple[str, dict[str, str], dict[str, str]]] = [
    ("cyrillic-a-in-the-tracking-id-key", {}, {"\u0430rgocd.argoproj.io/tracking-id": "g:apps/Deployment:shop/web"}),
    ("upper-case-tracking-id-key", {}, {"Argocd.argoproj.io/tracking-id": "g:apps/Deployment:shop/web"}),
    ("tracking-id-key-with-a-trailing-space", {}, {TRACKING + " ": "g:apps/Deployment:shop/web"}),
    ("fullwidth-digit-in-the-application", {}, {TRACKING: "g\uff11:apps/Deployment:shop/web"}),
    ("cyrillic-o-in-the-namespace", {}, {TRACKING: "g:apps/Deployment:sh\u043ep/web"}),
    ("tracking-id-with-a-trailing-newline", {}, {TRACKING: "g:apps/Deployment:shop/web\n"}),
    ("tracking-id-with-a-version-in-the-group", {}, {TRACKING: "g:apps/v1/Deployment:shop/web"}),
    ("tracking-id-lower-case-kind", {}, {TRACKING: "g:apps/deployment:shop/web"}),
    ("managed-by-with-a-trailing-space", {MANAGED_BY: "Helm "}, {RELEASE_NAME: "web", RELEASE_NAMESPACE: "shop"}),
    ("managed-by-fullwidth", {MANAGED_BY: "\uff28elm"}, {RELEASE_NAME: "web", RELEASE_NAMESPACE: "shop"}),
    ("release-namespace-with-a-newline", {MANAGED_BY: "Helm"}, {RELEASE_NAME: "web", RELEASE_NAMESPACE: "shop\n"}),
    ("release-name-with-a-dotless-i", {MANAGED_BY: "Helm"}, {RELEASE_NAME: "\u0131nfra", RELEASE_NAMESPACE: "shop"}),
    ("flux-name-with-a-newline", {"kustomize.toolkit.fluxcd.io/name": "apps\n",
                                  "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}, {}),
]  # fmt: skip


@pytest.mark.parametrize(("case", "labels", "annotations"), LOOKALIKES, ids=[c[0] for c in LOOKALIKES])
def test_a_lookalike_of_a_tools_key_or_value_is_a_difference(
    case: str, labels: dict[str, str], annotations: dict[str, str]
) -> None:
    obj, policy = _signed_without_namespace()
    label(obj, **labels)
    annotate(obj, **annotations)
    with pytest.raises(ContentMismatch):
        verify(obj, policy, namespace="shop")


@pytest.mark.xfail(
    strict=True,
    reason="the library does not know which kinds are namespaced: an object without a namespace is taken as "
    "cluster-scoped, whose tracking id may carry any namespace (only a file verified with no namespace; an "
    "admission request and a live object always name one)",
)
def test_the_tracking_id_of_a_namespaced_object_must_name_its_namespace_even_when_the_request_names_none() -> None:
    # An object read from a file carries no namespace and the caller names none: the check then cannot tell a
    # namespaced kind from a cluster-scoped one, and must not take a tracking id naming some namespace.
    doc = deployment("web")
    del doc["metadata"]["namespace"]
    (obj,) = sign(doc)
    annotate(obj, **{TRACKING: "g:apps/Deployment:prod/web"})
    ident = ObjectIdentity.of(obj, None)
    assert ident.namespace == ""
    with pytest.raises(ContentMismatch):
        verify(obj, tool_policy("argocd"))
