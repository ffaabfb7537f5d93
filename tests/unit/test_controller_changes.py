"""Changes by exempt controllers on live objects (docs/policy.md, "Changes by exempt controllers").

A Deployment the autoscaler scaled through ``scale`` verified at admission (the change was
exempt) and then failed every audit (``spec.replicas differs: signed 2, admitted 5``), and a
person's later harmless UPDATE was denied for the same reason. Now a difference that lies in
fields an exemption lets a trusted controller change is tolerated -- and named -- where nobody
in the request can have made it: on the stored object (audit, verify-resource, the observer)
and in an UPDATE that leaves the field as it was. Anything else is still a difference.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from provider import Policy, Review, decide
from tests.support.keys import make_key, public_key_pem
from tests.support.live import scaled
from tests.support.manifests import sign

KEY = make_key("ecdsa-p256", 71)
POLICY = Policy.from_dict({"keys": [public_key_pem(KEY)]})
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "shop"},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
        },
    },
}
(SIGNED,) = sign(DEPLOYMENT, KEY)


def live(obj: dict[str, Any]) -> Any:
    return decide(Review.for_object(obj, live=True), POLICY)


def test_a_deployment_the_autoscaler_scaled_is_verified_with_the_field_named() -> None:
    result = live(scaled(SIGNED))
    assert (result.allowed, result.verified, result.reason) == (True, True, "verified")
    assert "spec.replicas" in result.message and "horizontal pod autoscaler" in result.message


def test_a_changed_image_on_a_scaled_deployment_is_still_a_failure() -> None:
    changed = scaled(SIGNED)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "evil:latest"
    result = live(changed)
    assert (result.allowed, result.reason) == (False, "content-mismatch")


def test_a_file_is_not_a_live_object() -> None:
    """The CLI verifying a file: nothing but its author changed it, so nothing is tolerated."""
    assert decide(Review.for_object(scaled(SIGNED)), POLICY).reason == "content-mismatch"


def test_gatekeeper_audit_reviews_are_live() -> None:
    review = Review.from_admission({"object": scaled(SIGNED)})
    assert review.live and decide(review, POLICY).verified


def test_owner_references_the_garbage_collector_edited_are_tolerated_on_the_stored_object() -> None:
    orphaned = copy.deepcopy(SIGNED)
    orphaned["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Namespace", "name": "x", "uid": "1"}]
    result = live(orphaned)
    assert result.verified and "metadata.ownerReferences" in result.message


def update(old: dict[str, Any], new: dict[str, Any], user: str = "alice") -> Any:
    return decide(Review(object=new, old_object=old, operation="UPDATE", username=user), POLICY)


def test_a_later_harmless_update_of_a_scaled_deployment_is_verified() -> None:
    stored = scaled(SIGNED)
    relabelled = copy.deepcopy(stored)  # the person re-applies the signed manifest's other fields unchanged
    result = update(stored, relabelled)
    assert result.verified, result.message


def test_an_update_that_itself_changes_replicas_is_denied() -> None:
    """Not the controller: the person changed spec.replicas in this very request."""
    stored = scaled(SIGNED, 5)
    result = update(stored, scaled(SIGNED, 50))
    assert (result.allowed, result.reason) == (False, "content-mismatch")


def test_an_update_from_the_signed_value_to_another_is_denied() -> None:
    assert update(SIGNED, scaled(SIGNED, 9)).reason == "content-mismatch"


def test_a_create_with_other_replicas_is_denied() -> None:
    result = decide(Review(object=scaled(SIGNED), operation="CREATE", username="alice"), POLICY)
    assert result.reason == "content-mismatch"


@pytest.mark.parametrize(
    "kind",
    [{"apiVersion": "v1", "kind": "ConfigMap"}, {"apiVersion": "apps/v1", "kind": "DaemonSet"}],
    ids=["configmap", "daemonset"],
)
def test_replicas_are_tolerated_only_on_kinds_with_a_scale_subresource(kind: dict[str, str]) -> None:
    manifest = {**kind, "metadata": {"name": "x", "namespace": "shop"}, "spec": {"replicas": 1}}
    (signed,) = sign(manifest, KEY)
    assert live(scaled(signed, 3)).reason == "content-mismatch"


def test_a_policy_exemption_lends_its_fields_too() -> None:
    policy = Policy.from_dict({
        "keys": [public_key_pem(KEY)],
        "skipUsers": [{"users": ["system:serviceaccount:shop:tuner"], "objects": [{"group": "apps", "kind": "Deployment"}],
                       "fields": ["spec.template.metadata.annotations"], "description": "the tuner stamps rollout annotations"}],
    })  # fmt: skip
    stamped = copy.deepcopy(SIGNED)
    stamped["spec"]["template"]["metadata"]["annotations"] = {"tuner/at": "now"}
    result = decide(Review.for_object(stamped, live=True), policy)
    assert result.verified and "the tuner stamps rollout annotations" in result.message
