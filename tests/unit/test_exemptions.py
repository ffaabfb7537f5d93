"""Attack class 2 -- exemptions exempt only what they name (docs/security.md, docs/policy.md "Exemptions").

The built-in common profile used to check the user name alone and exempt whole objects:

* the garbage collector's identity could UPDATE a signed ClusterRoleBinding into a
  cluster-admin binding for anyone, and it was ``skipped-user``;
* a principal named like a controller but without the service-account groups (a client
  certificate with that CN, a token for an impersonated name) was exempted the same way;
* ``kind: Event`` was out of scope in any API group, so a custom resource of kind ``Event``
  passed unsigned; the replicaset-controller's Pod rule matched a ``Pod`` of any group.

Exemptions now name who (user and group), which operations, which objects (group, kind,
subresource) and, for an UPDATE, which fields.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from provider import Policy, PolicyError, Review, decide
from provider.review import GroupVersionResource
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import sign

KEY = make_key("ecdsa-p256", 21)
POLICY = Policy.from_dict({"keys": [public_key_pem(KEY)]})
SA = "system:serviceaccount:kube-system:"
KUBE_SYSTEM_SA = ("system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated")
GC = SA + "generic-garbage-collector"

BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": "readers"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
    "subjects": [{"kind": "Group", "name": "auditors", "apiGroup": "rbac.authorization.k8s.io"}],
}


def update(
    old: dict[str, Any], new: dict[str, Any], user: str = GC, groups: tuple[str, ...] = KUBE_SYSTEM_SA, **extra: Any
) -> Any:
    return decide(Review(object=new, old_object=old, operation="UPDATE", username=user, groups=groups, **extra), POLICY)


@pytest.fixture
def signed_binding() -> dict[str, Any]:
    (signed,) = sign(BINDING, KEY)
    return signed


def test_the_garbage_collector_cannot_turn_a_binding_into_cluster_admin(signed_binding: dict[str, Any]) -> None:
    escalated = copy.deepcopy(signed_binding)
    escalated["roleRef"]["name"] = "cluster-admin"
    escalated["subjects"] = [{"kind": "Group", "name": "system:authenticated", "apiGroup": "rbac.authorization.k8s.io"}]
    result = update(signed_binding, escalated)
    assert (result.allowed, result.reason) == (False, "content-mismatch"), result.message


def test_the_garbage_collector_may_edit_owner_references_and_finalizers(signed_binding: dict[str, Any]) -> None:
    orphaned = copy.deepcopy(signed_binding)
    orphaned["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Namespace", "name": "gone", "uid": "1"}]
    orphaned["metadata"]["finalizers"] = ["orphan"]
    orphaned["metadata"]["resourceVersion"] = "42"
    result = update(signed_binding, orphaned)
    assert (result.allowed, result.reason, result.traffic_class) == (True, "skipped-user", "common-profile"), (
        result.message
    )
    assert "metadata.ownerReferences" in result.message


def test_owner_references_plus_anything_else_is_verified(signed_binding: dict[str, Any]) -> None:
    both = copy.deepcopy(signed_binding)
    both["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Namespace", "name": "gone", "uid": "1"}]
    both["metadata"]["labels"] = {"sneaky": "yes"}
    assert update(signed_binding, both).reason == "content-mismatch"


def test_a_field_scoped_exemption_needs_the_old_object(signed_binding: dict[str, Any]) -> None:
    """At admission an UPDATE always carries oldObject; one without it is not exempted on trust."""
    orphaned = copy.deepcopy(signed_binding)
    orphaned["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Namespace", "name": "gone", "uid": "1"}]
    result = decide(Review(object=orphaned, operation="UPDATE", username=GC, groups=KUBE_SYSTEM_SA), POLICY)
    assert result.reason == "content-mismatch"


def test_replayed_cannot_be_claimed_over_the_wire(signed_binding: dict[str, Any]) -> None:
    request = {
        "object": signed_binding,
        "operation": "UPDATE",
        "userInfo": {"username": GC, "groups": list(KUBE_SYSTEM_SA)},
        "replayed": True,
    }
    assert Review.from_admission(request).replayed is False


@pytest.mark.parametrize(
    "groups",
    [
        (),
        ("system:authenticated",),
        ("system:serviceaccounts",),
        ("system:serviceaccounts:default", "system:serviceaccounts"),
        ("system:masters",),
    ],
    ids=["none", "authenticated", "no-namespace-group", "other-namespace", "masters"],
)
def test_a_controller_name_without_the_service_account_groups_is_nobody(groups: tuple[str, ...]) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "shop"},
        "spec": {"containers": [{"name": "c", "image": "evil"}]},
    }
    review = Review(object=pod, operation="CREATE", username=SA + "replicaset-controller", groups=groups)
    result = decide(review, POLICY)
    assert (result.allowed, result.reason) == (False, "unsigned"), result.message


def test_the_real_controller_identity_is_exempt_on_its_own_objects() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "shop"}}
    result = decide(
        Review(object=pod, operation="CREATE", username=SA + "replicaset-controller", groups=KUBE_SYSTEM_SA), POLICY
    )
    assert result.reason == "skipped-user"


@pytest.mark.parametrize(
    ("api_version", "expected"),
    [
        ("v1", "out-of-scope"),
        ("events.k8s.io/v1", "out-of-scope"),
        ("example.com/v1", "unsigned"),
        ("monitoring.evil.io/v1", "unsigned"),
    ],
)
def test_event_is_out_of_scope_only_in_its_own_groups(api_version: str, expected: str) -> None:
    event = {
        "apiVersion": api_version,
        "kind": "Event",
        "metadata": {"name": "e", "namespace": "shop"},
        "spec": {"run": "anything"},
    }
    result = decide(Review(object=event, operation="CREATE", username="alice"), POLICY)
    assert result.reason == expected


def test_a_pod_of_another_group_is_not_the_controllers() -> None:
    fake_pod = {"apiVersion": "example.com/v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "shop"}}
    result = decide(
        Review(object=fake_pod, operation="CREATE", username=SA + "replicaset-controller", groups=KUBE_SYSTEM_SA),
        POLICY,
    )
    assert result.reason == "unsigned"


def test_an_exemption_names_its_operations() -> None:
    """The ReplicaSet controller creates and deletes Pods; a wholesale UPDATE of a Pod is not its job."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "shop"},
        "spec": {"containers": [{"name": "c", "image": "a"}]},
    }
    changed = copy.deepcopy(pod)
    changed["spec"]["containers"][0]["image"] = "b"
    result = decide(
        Review(
            object=changed,
            old_object=pod,
            operation="UPDATE",
            username=SA + "replicaset-controller",
            groups=KUBE_SYSTEM_SA,
        ),
        POLICY,
    )
    assert result.reason == "unsigned"


# --- subresources ---------------------------------------------------------------------------

DEPLOYMENTS = GroupVersionResource("apps", "v1", "deployments")
SCALE = {
    "apiVersion": "autoscaling/v1",
    "kind": "Scale",
    "metadata": {"name": "web", "namespace": "shop"},
    "spec": {"replicas": 2},
    "status": {"replicas": 2},
}


def scale(
    user: str,
    new_replicas: int,
    groups: tuple[str, ...] = KUBE_SYSTEM_SA,
    *,
    policy: Policy = POLICY,
    resource: GroupVersionResource = DEPLOYMENTS,
    **changes: Any,
) -> Any:
    """``user`` writes ``shop/web``'s scale subresource (of ``resource``) to ``new_replicas``, decided under ``policy``."""
    new = {**copy.deepcopy(SCALE), "spec": {"replicas": new_replicas}, **changes}
    review = Review(
        object=new,
        old_object=SCALE,
        operation="UPDATE",
        username=user,
        groups=groups,
        sub_resource="scale",
        resource=resource,
        name="web",
        namespace="shop",
    )
    return decide(review, policy)


def test_kubectl_scale_of_a_protected_deployment_is_denied() -> None:
    result = scale("alice", 5, ())
    assert (result.allowed, result.reason) == (False, "unverifiable-subresource")
    assert "Deployment shop/web (scale subresource)" in result.message


def test_the_autoscaler_may_scale_through_scale() -> None:
    result = scale(SA + "horizontal-pod-autoscaler", 5)
    assert (result.allowed, result.reason) == (True, "skipped-user")


def test_the_autoscaler_changes_only_replicas() -> None:
    result = scale(
        SA + "horizontal-pod-autoscaler", 5, metadata={"name": "web", "namespace": "shop", "labels": {"a": "b"}}
    )
    assert result.reason == "unverifiable-subresource"


def test_skip_objects_for_the_deployment_covers_its_scale() -> None:
    policy = Policy.from_dict(
        {"keys": [public_key_pem(KEY)], "skipObjects": [{"group": "apps", "kind": "Deployment", "name": "web"}]}
    )
    assert scale("alice", 9, (), policy=policy).reason == "skipped-object"


def test_in_scope_objects_keep_a_custom_resource_scale_in_scope() -> None:
    """A custom resource's scale names its resource, not its kind: scope reads it as in scope (fail closed)."""
    policy = Policy.from_dict(
        {"keys": [public_key_pem(KEY)], "inScopeObjects": [{"group": "example.com", "kind": "Rollout"}]}
    )
    result = scale("alice", 9, (), policy=policy, resource=GroupVersionResource("example.com", "v1", "rollouts"))
    assert result.reason == "unverifiable-subresource", result.message


def test_status_updates_are_verified_like_any_write() -> None:
    """``status`` carries the parent's own object: it is verified (status is ignored by the default profile)."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"replicas": 2},
    }
    (signed,) = sign(deployment, KEY)
    with_status = {**copy.deepcopy(signed), "status": {"replicas": 2}}
    review = Review(
        object=with_status,
        old_object=signed,
        operation="UPDATE",
        username="alice",
        sub_resource="status",
        resource=DEPLOYMENTS,
    )
    assert decide(review, POLICY).verified
    tampered = copy.deepcopy(with_status)
    tampered["spec"]["replicas"] = 7
    assert (
        decide(
            Review(
                object=tampered,
                old_object=signed,
                operation="UPDATE",
                username="alice",
                sub_resource="status",
                resource=DEPLOYMENTS,
            ),
            POLICY,
        ).reason
        == "content-mismatch"
    )


def test_an_eviction_is_like_a_delete() -> None:
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-1", "namespace": "shop"}}
    pods = GroupVersionResource("", "v1", "pods")
    result = decide(
        Review(
            object=eviction, operation="CREATE", username="alice", sub_resource="eviction", resource=pods, name="web-1"
        ),
        POLICY,
    )
    assert (result.allowed, result.verified, result.reason) == (True, False, "unverifiable-operation")


# --- the schema of an exemption -------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"users": ["a"], "operations": []}, "operations: empty"),
        ({"users": ["a"], "operations": ["PATCH"]}, "is not one of"),
        ({"users": ["a"], "fields": []}, "fields: empty"),
        ({"users": ["a"], "fields": ["spec.replicas"], "operations": ["CREATE"]}, "fields scope an UPDATE"),
        ({"users": ["a"], "objects": [{"subresource": ""}]}, "empty alternative"),
    ],
)
def test_exemption_schema_errors(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        Policy.from_dict({"keys": [public_key_pem(KEY)], "skipUsers": [entry]})


def test_a_policy_exemption_scoped_to_fields() -> None:
    """An operator may scale its Deployment (spec.replicas) and nothing else."""
    policy = Policy.from_dict({
        "keys": [public_key_pem(KEY)],
        "skipUsers": [{"users": ["system:serviceaccount:shop:operator"], "objects": [{"group": "apps", "kind": "Deployment"}], "fields": ["spec.replicas"]}],
    })  # fmt: skip
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "a"}]}}},
    }
    (signed,) = sign(deployment, KEY)
    groups = ("system:serviceaccounts", "system:serviceaccounts:shop")
    scaled = copy.deepcopy(signed)
    scaled["spec"]["replicas"] = 4
    review = Review(
        object=scaled,
        old_object=signed,
        operation="UPDATE",
        username="system:serviceaccount:shop:operator",
        groups=groups,
    )
    assert decide(review, policy).reason == "skipped-user"
    retagged = copy.deepcopy(scaled)
    retagged["spec"]["template"]["spec"]["containers"][0]["image"] = "evil"
    review = Review(
        object=retagged,
        old_object=signed,
        operation="UPDATE",
        username="system:serviceaccount:shop:operator",
        groups=groups,
    )
    assert decide(review, policy).reason == "content-mismatch"
