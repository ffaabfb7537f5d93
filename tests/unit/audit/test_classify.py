"""provider.audit.classify: every class of the paper's table from real signatures, bounded aggregation, suggestions."""

from __future__ import annotations

import copy
import io
from typing import Any

import pytest
import yaml

from provider.audit.classify import (
    OTHER,
    Classified,
    Classifier,
    GroupCounts,
    Skipped,
    Summary,
    TopCounter,
    suggestion_yaml,
    suggestions,
)
from provider.audit.events import Malformed, parse_event, read_events
from provider.objects import ObjectIdentity
from provider.policy.schema import Policy, UserRule
from provider.result import TRAFFIC_CLASSES
from provider.review import Review
from tests.support.audit import REAL_LOG, event, jsonl
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign

#: The table for the real log with the common profile alone (docs/classify.md).
REAL_LOG_TABLE = {
    "out-of-scope": 655,
    "common-profile": 459,
    "app-profile": 0,
    "valid-signature": 0,
    "invalid-signature": 1,  # kubectl scale: through the scale subresource, which carries no signature
    "unprocessed": 22,
}


def policy(**fields: Any) -> Policy:
    return Policy.from_dict({"keys": [public_key_pem(make_key())], **fields})


def classify(data: dict[str, Any], pol: Policy | None = None) -> Classified | Skipped:
    return Classifier(pol or policy()).classify(parse_event(data))


def verdict(data: dict[str, Any], pol: Policy | None = None) -> Classified:
    result = classify(data, pol)
    assert isinstance(result, Classified), result
    return result


def run_log(pol: Policy, stream: Any, **summary: Any) -> Summary:
    total = Summary(**summary)
    for item in Classifier(pol).classify_all(read_events(stream)):
        total.add(item)
    return total


# --- the real log -------------------------------------------------------------------------


def test_real_log_table_with_the_common_profile_alone() -> None:
    with REAL_LOG.open("rb") as stream:
        summary = run_log(policy(), stream, by=("user", "namespace", "kind"))
    report = summary.to_dict()
    assert report["total"] == 1137
    assert report["classes"] == REAL_LOG_TABLE
    assert summary.malformed == 0 and not summary.skipped
    assert report["by"]["user"]["kubernetes-admin"] == {
        "total": 23,
        "classes": {**dict.fromkeys(TRAFFIC_CLASSES, 0), "unprocessed": 22, "invalid-signature": 1},
    }
    assert sum(row["total"] for row in report["by"]["namespace"].values()) == 1137
    assert report["by"]["kind"]["Lease"]["classes"]["out-of-scope"] == 548
    top = report["topUnprocessed"]
    assert top[0] == {"user": "kubernetes-admin", "kind": "Namespace", "namespace": "", "count": 4}
    assert {e["user"] for e in top} == {"kubernetes-admin"}
    assert summary.needs_attention


def test_real_log_with_an_application_profile() -> None:
    # The operator trusts the person for namespace shop: class 3 instead of 6.
    pol = policy(skipUsers=[{"users": ["kubernetes-admin"], "objects": [{"namespace": "shop"}]}])
    with REAL_LOG.open("rb") as stream:
        report = run_log(pol, stream).to_dict()
    assert report["classes"]["app-profile"] == 10
    assert report["classes"]["unprocessed"] == 13
    assert report["total"] == 1137


# --- each class from real signatures --------------------------------------------------------


def test_each_class() -> None:
    (signed,) = sign(configmap("app-config", "shop", mode="prod"))
    tampered = copy.deepcopy(signed)
    tampered["data"]["mode"] = "debug"
    other_key = Policy.from_dict({"keys": [public_key_pem(make_key("ecdsa-p256", 7))]})
    app = policy(skipUsers=[{"users": ["system:serviceaccount:shop:operator"], "objects": [{"namespace": "shop"}]}])
    cases = [
        (
            event(body={"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"}}, resource="events"),
            None,
            "out-of-scope",
            "out-of-scope",
        ),
        (
            event(body=configmap("x", "ns"), requestURI="/api/v1/namespaces/ns/configmaps?dryRun=All"),
            None,
            "out-of-scope",
            "dry-run-request",
        ),
        (
            event(body=configmap("x", "ns"), user="system:serviceaccount:kube-system:replicaset-controller"),
            None,
            "unprocessed",
            "unsigned",
        ),
        (
            event(
                body={"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}},
                resource="pods",
                user="system:serviceaccount:kube-system:replicaset-controller",
            ),
            None,
            "common-profile",
            "skipped-user",
        ),
        (
            event(body=configmap("x", "shop"), namespace="shop", user="system:serviceaccount:shop:operator"),
            app,
            "app-profile",
            "skipped-user",
        ),
        (
            event(body=configmap("x", "shop"), namespace="shop"),
            policy(skipObjects=[{"kind": "ConfigMap", "name": "x"}]),
            "app-profile",
            "skipped-object",
        ),
        (event(body=signed, namespace="shop", name="app-config"), None, "valid-signature", "verified"),
        (event(body=tampered, namespace="shop", name="app-config"), None, "invalid-signature", "content-mismatch"),
        (event(body=signed, namespace="shop", name="app-config"), other_key, "invalid-signature", "signature-invalid"),
        (event(body=configmap("x", "ns")), None, "unprocessed", "unsigned"),
        (
            event("delete", resource="namespaces", namespace="", name="shop"),
            None,
            "unprocessed",
            "unverifiable-operation",
        ),
        (
            event("delete", resource="pods", user="system:node:n1", groups=("system:nodes",)),
            None,
            "common-profile",
            "skipped-user",
        ),
        (
            event("deletecollection", resource="leases", group="coordination.k8s.io", name="", user="alice"),
            None,
            "out-of-scope",
            "out-of-scope",
        ),
        (event(body=["not", "an", "object"], resource="configmaps"), None, "invalid-signature", "request-invalid"),
    ]
    for data, pol, traffic_class, reason in cases:
        v = verdict(data, pol)
        assert (v.traffic_class, v.result.reason) == (traffic_class, reason), (
            data["verb"],
            data["objectRef"],
            v.result.message,
        )


def test_patches_by_signature() -> None:
    (signed,) = sign(configmap("app-config", "shop", mode="prod"))
    reapply = {"metadata": {"annotations": signed["metadata"]["annotations"]}, "data": {"mode": "prod"}}
    assert verdict(event("patch", body=reapply, namespace="shop", name="app-config")).traffic_class == "valid-signature"
    # the same signature, brought along with a change it does not sign
    smuggled = {"metadata": {"annotations": signed["metadata"]["annotations"]}, "data": {"mode": "debug"}}
    v = verdict(event("patch", body=smuggled, namespace="shop", name="app-config"))
    assert (v.traffic_class, v.result.reason) == ("invalid-signature", "content-mismatch")
    # an unsigned patch by a person: in scope, unsigned
    v = verdict(event("patch", body={"data": {"mode": "debug"}}, namespace="shop", name="app-config"))
    assert (v.traffic_class, v.result.reason, v.evidence) == ("unprocessed", "unsigned", "patch")
    # ... and by a controller on its own objects: the common profile
    v = verdict(
        event(
            "patch",
            resource="pods",
            body={"metadata": {"finalizers": None}},
            user="system:serviceaccount:kube-system:job-controller",
        )
    )
    assert (v.traffic_class, v.kind) == ("common-profile", "Pod")


def test_writes_without_a_body_are_counted_only_when_the_body_does_not_matter() -> None:
    v = classify(event("create", resource="leases", group="coordination.k8s.io", level="Metadata"))
    assert isinstance(v, Classified) and v.traffic_class == "out-of-scope"
    v = classify(
        event(
            "create", resource="pods", user="system:serviceaccount:kube-system:replicaset-controller", level="Metadata"
        )
    )
    assert isinstance(v, Classified) and v.traffic_class == "common-profile"
    skipped = classify(event("create", level="Metadata"))
    assert isinstance(skipped, Skipped) and skipped.why == "no-body"


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (event("get", resource="pods"), "read"),
        (event("watch", resource="pods"), "read"),
        ({**event(body=configmap()), "stage": "RequestReceived"}, "repeated-stage"),
        ({**event("get"), "objectRef": None}, "non-resource"),
        (event("impersonate", resource="users"), "other-verb"),
    ],
    ids=["get", "watch", "request-received", "non-resource", "other-verb"],
)
def test_events_that_are_not_admission_requests_are_skipped(data: dict[str, Any], why: str) -> None:
    item = classify(data)
    assert isinstance(item, Skipped) and item.why == why


def test_events_lines() -> None:
    v = verdict(
        event(
            "update",
            resource="deployments",
            group="apps",
            subresource="status",
            name="web",
            body={"kind": "Deployment", "apiVersion": "apps/v1", "metadata": {"name": "web"}},
            user="system:serviceaccount:kube-system:deployment-controller",
        )
    )
    assert v.to_dict() == {
        "auditID": "id-update-deployments-web",
        "user": "system:serviceaccount:kube-system:deployment-controller",
        "verb": "update",
        "resource": "deployments/status",
        "namespace": "ns",
        "name": "web",
        "class": "common-profile",
        "reason": "skipped-user",
    }


# --- bounded aggregation --------------------------------------------------------------------


def test_top_counter_is_exact_within_capacity() -> None:
    top: TopCounter[str] = TopCounter(3)
    for key in "abacabaa":
        top.add(key)
    assert top.most_common(5) == [("a", 5, 0), ("b", 2, 0), ("c", 1, 0)]
    assert top.exact


def test_top_counter_keeps_heavy_hitters_beyond_capacity() -> None:
    top: TopCounter[str] = TopCounter(4)
    stream = ["heavy"] * 300 + [f"noise-{i}" for i in range(1000)] + ["late"] * 200
    for i, key in enumerate(stream):
        top.add(key if i % 2 else stream[-1 - i])  # interleave: heavy and late are spread out
    ranked = top.most_common(2)
    assert {key for key, _, _ in ranked} == {"heavy", "late"}
    n = len(stream)
    for key, count, error in ranked:
        true = stream.count(key)
        assert count - error <= true <= count <= true + n // top.capacity  # Space-Saving's guarantee
    assert not top.exact and len(top.counts) == 4 and len(top._heap) <= 2 * 4 + 64


def test_top_counter_refuses_no_capacity() -> None:
    with pytest.raises(ValueError, match="capacity"):
        TopCounter(0)


def test_group_counts_fold_the_rest_into_other() -> None:
    groups = GroupCounts(max_groups=2)
    for key in ["a", "b", "c", "d", "a", "c"]:
        groups.add(key, "unprocessed")
    rows = groups.to_dict()
    assert list(rows) == [OTHER, "a", "b"]
    assert rows[OTHER]["total"] == 3 and rows["a"]["total"] == 2
    assert groups.overflowed == 3  # c, d, c again: each arrival after the cap


def test_summary_counts_malformed_and_skipped_apart_from_the_table() -> None:
    stream = jsonl(event(body=configmap()), event("get"))
    stream = io.BytesIO(b"garbage\n" + stream.getvalue())
    summary = run_log(policy(), stream)
    assert summary.total == 1 and summary.malformed == 1 and summary.skipped == {"read": 1}
    assert summary.malformed_examples == [Malformed(1, summary.malformed_examples[0].message)]
    assert set(summary.to_dict()) == {"total", "classes", "by", "topUnprocessed"}


# --- suggestions ------------------------------------------------------------------------------


def app_log() -> io.BytesIO:
    operator = "system:serviceaccount:shop:operator"
    roamer = "system:serviceaccount:shop:roamer"
    return jsonl(
        event(body=configmap("a", "shop"), namespace="shop", user=operator),
        event(
            "patch",
            resource="deployments",
            group="apps",
            name="web",
            namespace="shop",
            body={"spec": {"replicas": 2}},
            user=operator,
        ),
        event(
            body={"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"}},
            resource="events",
            namespace="shop",
            user=operator,
        ),
        event(body=configmap("b", "shop"), namespace="shop", user=roamer),
        event(body=configmap("c", "data"), namespace="data", user=roamer),
        event(
            body={"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}},
            resource="pods",
            namespace="shop",
            user="system:serviceaccount:shop:quiet",
        ),
        event(body=configmap("d", "shop"), namespace="shop", user="system:serviceaccount:shop:*"),
        event(body=configmap("e", "x"), namespace="x", user="alice"),
    )


QUIET = {"users": ["system:serviceaccount:shop:quiet"]}  # already in the application profile


def test_suggestions_for_service_accounts_in_their_own_namespace() -> None:
    summary = run_log(policy(skipUsers=[QUIET]), app_log())
    found = {s.username: s for s in suggestions(summary)}
    assert set(found) == {
        "system:serviceaccount:shop:operator",
        "system:serviceaccount:shop:roamer",
        "system:serviceaccount:shop:*",
    }
    entry = found["system:serviceaccount:shop:operator"].entry
    assert entry is not None
    assert entry["users"] == ["system:serviceaccount:shop:operator"]
    assert entry["objects"] == [
        {"namespace": "shop", "group": "-", "kind": "ConfigMap"},
        {"namespace": "shop", "group": "apps", "kind": "Deployment"},
    ]
    assert entry["operations"] == ["CREATE", "UPDATE"]
    assert found["system:serviceaccount:shop:roamer"].entry is None
    assert "outside namespace shop" in found["system:serviceaccount:shop:roamer"].note
    assert found["system:serviceaccount:shop:*"].entry is None  # a pattern character would widen it


def test_suggestion_yaml_is_a_valid_tight_policy_fragment() -> None:
    summary = run_log(policy(skipUsers=[QUIET]), app_log())
    text = suggestion_yaml(summary, "app.audit.jsonl")
    assert text.startswith("# skipUsers proposed by")
    assert "# Not proposed:" in text and "roamer" in text
    fragment = yaml.safe_load(text)
    (rule_data,) = fragment["skipUsers"]
    rule = UserRule.from_dict(rule_data, "suggested")
    operator = "system:serviceaccount:shop:operator"

    def create(user: str, ident: ObjectIdentity, operation: str = "CREATE") -> Review:
        groups = ("system:serviceaccounts", "system:serviceaccounts:" + user.split(":")[2])
        return Review(object={}, operation=operation, username=user, groups=groups)

    assert rule.matches(create(operator, cm := ObjectIdentity("", "v1", "ConfigMap", "a", "shop")), cm)
    assert not rule.matches(create(operator, cm), ObjectIdentity("", "v1", "ConfigMap", "a", "data"))
    assert not rule.matches(create(operator, cm), ObjectIdentity("", "v1", "Secret", "a", "shop"))
    assert not rule.matches(create(operator, cm), ObjectIdentity("example.com", "v1", "ConfigMap", "a", "shop"))
    assert not rule.matches(create(operator, cm, "DELETE"), cm)
    assert not rule.matches(create("system:serviceaccount:shop:other", cm), cm)
    # applied, the proposal moves the operator's requests from class 6 to class 3
    after = run_log(policy(skipUsers=[QUIET, *fragment["skipUsers"]]), app_log()).to_dict()["classes"]
    before = summary.to_dict()["classes"]
    assert (before["unprocessed"] - after["unprocessed"], after["app-profile"] - before["app-profile"]) == (2, 2)


def test_no_suggestion_for_the_real_log() -> None:
    with REAL_LOG.open("rb") as stream:
        summary = run_log(policy(), stream)
    assert suggestions(summary) == []
    text = suggestion_yaml(summary, "install-apps.audit.jsonl")
    assert yaml.safe_load(text) == {"skipUsers": []}
    assert "No service account qualifies" in text


def test_suggestion_tracking_is_bounded() -> None:
    summary = Summary(max_accounts=1, max_kinds=1)
    pol = policy()
    classifier = Classifier(pol)
    for data in [
        event(body=configmap("a", "shop"), namespace="shop", user="system:serviceaccount:shop:one"),
        event(
            body={"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}},
            resource="secrets",
            namespace="shop",
            user="system:serviceaccount:shop:one",
        ),
        event(body=configmap("a", "shop"), namespace="shop", user="system:serviceaccount:shop:two"),
    ]:
        summary.add(classifier.classify(parse_event(data)))
    assert list(summary.accounts) == ["system:serviceaccount:shop:one"] and summary.accounts_untracked == 1
    (only,) = suggestions(summary)
    assert only.entry is None and "more than 1 kinds" in only.note
    assert "not tracked" in suggestion_yaml(summary, "x")
