"""The built-in common profile, tuned on a real control plane's audit log.

With the common profile alone (a policy with keys and no skipUsers), every
request by the control plane's own components lands in class 1 or 2 and every
request by the person in class 4, 5 or 6 -- and each entry stays tight: an
identity outside its own objects is verified like anyone else.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest

from provider.audit.classify import Classified, Classifier
from provider.audit.events import read_events
from provider.policy.schema import Policy, load_profile
from provider.review import GroupVersionResource, Review
from provider.verifier import decide
from tests.support.audit import REAL_LOG
from tests.support.keys import make_key, public_key_pem

PERSON = "kubernetes-admin"
SA = "system:serviceaccount:kube-system:"
#: Who wrote in the real log besides the person (its README, "Reading the identities").
COMPONENTS = {
    "system:apiserver", "system:kube-controller-manager", "system:kube-scheduler", "system:node:node-1",
    *(SA + c for c in (
        "job-controller", "namespace-controller", "horizontal-pod-autoscaler", "deployment-controller",
        "replicaset-controller", "cronjob-controller", "statefulset-controller", "persistent-volume-binder",
        "root-ca-cert-publisher", "service-ca-cert-publisher", "clusterrole-aggregation-controller",
        "service-account-controller", "daemon-set-controller", "node-controller", "endpoint-controller",
        "endpointslice-controller", "service-cidrs-controller", "generic-garbage-collector", "ttl-controller",
    )),
}  # fmt: skip
#: Events per identity in the real log (its README's table, summed per user).
EVENTS = {
    "system:kube-controller-manager": 284,
    "system:apiserver": 266,
    "system:kube-scheduler": 259,
    "system:node:node-1": 53,
    PERSON: 23,
}

POLICY = Policy.from_dict({"keys": [public_key_pem(make_key())]})


@pytest.fixture(scope="module")
def classes_by_user() -> dict[str, Counter[str]]:
    found: dict[str, Counter[str]] = defaultdict(Counter)
    classifier = Classifier(POLICY)
    with REAL_LOG.open("rb") as stream:
        for item in classifier.classify_all(read_events(stream)):
            assert isinstance(item, Classified), item
            found[item.event.username][item.traffic_class] += 1
    return found


def test_every_identity_of_the_log_is_accounted_for(classes_by_user: dict[str, Counter[str]]) -> None:
    assert set(classes_by_user) == COMPONENTS | {PERSON}
    assert sum(sum(c.values()) for c in classes_by_user.values()) == 1137
    for user, count in EVENTS.items():
        assert sum(classes_by_user[user].values()) == count, user


@pytest.mark.parametrize("user", sorted(COMPONENTS))
def test_control_plane_requests_are_out_of_scope_or_common_profile(
    classes_by_user: dict[str, Counter[str]], user: str
) -> None:
    classes = classes_by_user[user]
    assert set(classes) <= {"out-of-scope", "common-profile"}, dict(classes)


def test_the_persons_requests_are_verified_or_stopped(classes_by_user: dict[str, Counter[str]]) -> None:
    classes = classes_by_user[PERSON]
    assert set(classes) <= {"valid-signature", "invalid-signature", "unprocessed"}
    # Nothing in the log is signed: 20 creates, a patch and a namespace deletion are unprocessed;
    # `kubectl scale` goes through the scale subresource, whose Scale object carries no signature.
    assert classes == {"unprocessed": 22, "invalid-signature": 1}


def test_without_the_common_profile_the_control_plane_would_be_stopped() -> None:
    bare = Policy.from_dict({"keys": [public_key_pem(make_key())], "defaults": ["k8s-manifest-sigstore"]})
    counts: Counter[str] = Counter()
    with REAL_LOG.open("rb") as stream:
        for item in Classifier(bare).classify_all(read_events(stream)):
            assert isinstance(item, Classified)
            counts[item.traffic_class] += 1
    assert counts["common-profile"] == counts["out-of-scope"] == 0
    # The scheduler's 13 bindings, the autoscaler's and the person's scale are changes
    # through a subresource whose object carries no signature: denied, not merely unsigned.
    assert counts == {"unprocessed": 1122, "invalid-signature": 15}


# --- the profile itself ------------------------------------------------------------------


def test_every_entry_says_why_and_is_narrowed_unless_it_cannot_be() -> None:
    profile = load_profile("common")
    unnarrowed: set[str] = set()
    for rule in profile.skip_users:
        assert len(rule.description) > 30, rule
        assert rule.users or rule.groups
        assert rule.operations, f"{rule.description}: every operation"
        if not rule.objects:
            unnarrowed.update(p.text for p in rule.users)
        for ref in rule.objects:
            if ref.kind.matches_anything:
                # Only a subresource-wide entry whose job is named field by field (the autoscaler's scale).
                assert not ref.subresource.matches_anything and rule.fields, f"{rule.description}: every kind"
            else:
                assert not ref.group.matches_anything, f"{rule.description}: {ref.kind.text} in any API group"
    # The two that act on objects of every kind (docs/classify.md explains why): the garbage
    # collector deletes anything and edits owner references and finalizers only; the namespace
    # controller empties a namespace.
    assert unnarrowed == {SA + "generic-garbage-collector", SA + "namespace-controller"}


def test_the_out_of_scope_kinds_name_their_group() -> None:
    for ref in load_profile("common").out_of_scope:
        assert not ref.group.matches_anything and not ref.kind.matches_anything, ref


BROAD_GROUPS = (
    "system:serviceaccounts",
    "system:serviceaccounts:kube-system",
    "system:authenticated",
    "system:masters",
)


def test_no_entry_skips_a_namespace_or_every_service_account() -> None:
    for rule in load_profile("common").skip_users:
        for pattern in rule.users:
            assert "," not in pattern.text, pattern.text
            assert "*" not in pattern.text or pattern.text == "system:node:*", pattern.text
        for pattern in rule.groups:
            # A broad group may narrow a named user (the API server is in system:masters), never stand alone.
            assert pattern.text not in BROAD_GROUPS or rule.users, pattern.text


def check(
    user: str, obj: dict[str, Any], groups: tuple[str, ...] = (), operation: str = "CREATE", **request: Any
) -> str:
    """The class of one request; a service account gets the groups every real one has, unless ``groups`` is given."""
    if not groups and user.startswith("system:serviceaccount:"):
        groups = ("system:serviceaccounts", "system:serviceaccounts:" + user.split(":")[2])
    old = request.pop("old_object", obj if operation == "DELETE" else None)
    review = Review(
        object=None if operation == "DELETE" else obj,
        old_object=old,
        operation=operation,
        username=user,
        groups=groups,
        **request,
    )
    return decide(review, POLICY).traffic_class


def obj(kind: str, name: str = "x", namespace: str = "", api_version: str = "v1") -> dict[str, Any]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


RBAC = "rbac.authorization.k8s.io/v1"
MASTERS = ("system:masters", "system:authenticated")


@pytest.mark.parametrize(
    ("user", "groups", "thing", "expected"),
    [
        # the API server: its bootstrap objects only
        (
            "system:apiserver",
            MASTERS,
            obj("ClusterRole", "system:aggregate-to-edit", api_version=RBAC),
            "common-profile",
        ),
        (
            "system:apiserver",
            (),
            obj("ClusterRole", "system:aggregate-to-edit", api_version=RBAC),
            "unprocessed",
        ),  # without its group
        ("system:apiserver", MASTERS, obj("ClusterRole", "my-role", api_version=RBAC), "unprocessed"),
        (
            "system:apiserver",
            MASTERS,
            obj("Role", "system:controller:token-cleaner", "kube-system", RBAC),
            "common-profile",
        ),
        ("system:apiserver", MASTERS, obj("Role", "system:controller:token-cleaner", "shop", RBAC), "unprocessed"),
        ("system:apiserver", MASTERS, obj("Service", "kubernetes", "default"), "common-profile"),
        ("system:apiserver", MASTERS, obj("Service", "web", "default"), "unprocessed"),
        ("system:apiserver", MASTERS, obj("Namespace", "shop"), "unprocessed"),
        ("system:apiserver", MASTERS, obj("Deployment", "web", "kube-system", "apps/v1"), "unprocessed"),
        # kube-controller-manager and kube-scheduler
        (
            "system:kube-controller-manager",
            (),
            obj("ServiceAccount", "job-controller", "kube-system"),
            "common-profile",
        ),
        ("system:kube-controller-manager", (), obj("ServiceAccount", "default", "shop"), "unprocessed"),
        ("system:kube-controller-manager", (), obj("Secret", "s", "kube-system"), "unprocessed"),
        ("system:kube-scheduler", (), obj("Deployment", "web", "shop", "apps/v1"), "unprocessed"),
        # nodes
        ("system:node:n1", ("system:nodes",), obj("Node", "n1"), "common-profile"),
        ("system:node:n1", ("system:nodes",), obj("Secret", "s", "shop"), "unprocessed"),
        ("system:node:n1", (), obj("Node", "n1"), "unprocessed"),  # the group, not the name, is trusted
        # controllers on their own kinds only
        (SA + "replicaset-controller", (), obj("Pod", "web-1", "shop"), "common-profile"),
        (SA + "replicaset-controller", (), obj("ConfigMap", "c", "shop"), "unprocessed"),
        (SA + "root-ca-cert-publisher", (), obj("ConfigMap", "kube-root-ca.crt", "shop"), "common-profile"),
        (SA + "root-ca-cert-publisher", (), obj("ConfigMap", "openshift-service-ca.crt", "shop"), "unprocessed"),
        (SA + "service-account-controller", (), obj("ServiceAccount", "default", "shop"), "common-profile"),
        (SA + "service-account-controller", (), obj("ServiceAccount", "admin", "shop"), "unprocessed"),
        (SA + "cronjob-controller", (), obj("Job", "report-1", "batch", "batch/v1"), "common-profile"),
        (SA + "cronjob-controller", (), obj("Pod", "report-1", "batch"), "unprocessed"),
        (SA + "horizontal-pod-autoscaler", (), obj("Deployment", "web", "shop", "apps/v1"), "unprocessed"),
        # a look-alike identity outside kube-system is nobody
        ("system:serviceaccount:shop:replicaset-controller", (), obj("Pod", "web-1", "shop"), "unprocessed"),
        # out of scope for everyone
        ("alice", (), obj("Lease", "l", "shop", "coordination.k8s.io/v1"), "out-of-scope"),
        ("alice", (), obj("Event", "e", "shop", "events.k8s.io/v1"), "out-of-scope"),
    ],
    ids=lambda v: (
        v
        if isinstance(v, str)
        else (v["kind"] + "/" + v["metadata"]["name"] if isinstance(v, dict) else ",".join(v) or "-")
    ),
)
def test_each_identity_only_on_its_own_objects(
    user: str, groups: tuple[str, ...], thing: dict[str, Any], expected: str
) -> None:
    assert check(user, thing, groups) == expected


def test_subresource_entries() -> None:
    """The scheduler binds through pods/binding, the autoscaler scales through */scale (replicas only)."""
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "web-1", "namespace": "shop"},
        "target": {"kind": "Node", "name": "n1"},
    }
    pods = GroupVersionResource("", "v1", "pods")
    assert (
        check("system:kube-scheduler", binding, sub_resource="binding", resource=pods, name="web-1") == "common-profile"
    )
    assert check("alice", binding, sub_resource="binding", resource=pods, name="web-1") == "invalid-signature"
    old = {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"replicas": 2},
    }
    new = {**old, "spec": {"replicas": 5}}
    deployments = GroupVersionResource("apps", "v1", "deployments")
    hpa = SA + "horizontal-pod-autoscaler"
    review = {"sub_resource": "scale", "resource": deployments, "name": "web", "old_object": old}
    assert check(hpa, new, operation="UPDATE", **review) == "common-profile"
    assert check("alice", new, operation="UPDATE", **review) == "invalid-signature"
    assert (
        check(hpa, {**new, "metadata": {**new["metadata"], "labels": {"x": "y"}}}, operation="UPDATE", **review)
        == "invalid-signature"
    )


def test_deletes_follow_the_same_entries() -> None:
    assert (
        check(SA + "token-cleaner", obj("Secret", "bootstrap-token-abcdef", "kube-system"), (), "DELETE")
        == "common-profile"
    )
    assert check(SA + "token-cleaner", obj("Secret", "db-password", "kube-system"), (), "DELETE") == "unprocessed"
    assert check("system:node:n1", obj("Pod", "web-1", "shop"), ("system:nodes",), "DELETE") == "common-profile"
    assert check(SA + "namespace-controller", obj("Secret", "", "shop"), (), "DELETE") == "common-profile"
    assert check("alice", obj("Pod", "web-1", "shop"), (), "DELETE") == "unprocessed"
    assert check("alice", obj("Lease", "l", "shop", "coordination.k8s.io/v1"), (), "DELETE") == "out-of-scope"
