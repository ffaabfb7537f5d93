"""How held policies decide a request: which apply, how verdicts combine, and what a tenant cannot do.

Every verdict here is the real decision (``provider.service.checks.judge``, the
one call of ``decide()`` every route makes) on really signed objects; only the
set of held policies is built by hand.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from provider.bounds import SERVICE, Bounds
from provider.policy.schema import Policy
from provider.policystore.combine import MAX_WARNING_CHARS, Admission, admit, check_policy_object, warning_text
from provider.policystore.objects import HeldPolicy, read_policy_object
from provider.policystore.store import MAX_NAMESPACE_POLICIES, PolicySet
from provider.review import Review
from provider.service.checks import CheckContext, judge
from provider.signatures.signing import append_signature
from tests.support.heldpolicies import cluster_policy, review, tenant_policy
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign

CLUSTER_KEY = make_key("ecdsa-p256", 301)
TEAM_KEY = make_key("ecdsa-p256", 302)
OTHER_KEY = make_key("ecdsa-p256", 303)
(BY_CLUSTER,) = sign(configmap("app", "shop", mode="prod"), CLUSTER_KEY)
(BY_TEAM,) = sign(configmap("app", "shop", mode="prod"), TEAM_KEY)
UNSIGNED = configmap("app", "shop", mode="prod")
CONFIGMAPS = {"kinds": [{"apiGroups": [""], "kinds": ["ConfigMap"]}]}
NAMESPACE_LABELS = {"shop": {"kubernetes.io/metadata.name": "shop", "env": "prod"},
                    "lab": {"kubernetes.io/metadata.name": "lab", "env": "test"}}  # fmt: skip


def keys(*private: Any, **extra: Any) -> dict[str, Any]:
    return {"keys": [public_key_pem(k) for k in private], **extra}


def tampered(obj: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["data"]["mode"] = "debug"
    return changed


def held(obj: dict[str, Any], bounds: Bounds = SERVICE) -> HeldPolicy:
    return read_policy_object(obj, lambda raw, b: Policy.from_dict(raw, bounds=b), bounds)


def decide_with(
    request: dict[str, Any], *objects: dict[str, Any], labels: Mapping[str, Mapping[str, str]] = NAMESPACE_LABELS
) -> Admission:
    ctx = CheckContext()
    policies = PolicySet.of(held(o) for o in objects)

    def evaluate(policy: HeldPolicy, admitted: Review) -> Any:
        assert policy.policy is not None
        return judge(admitted, policy.policy, ctx)

    return admit(Review.from_admission(request, where="request"), policies, evaluate=evaluate, labels=labels.get)


# --- which policies apply ----------------------------------------------------------------------


def test_no_matching_policy_is_allowed_out_of_scope() -> None:
    answer = decide_with(review(UNSIGNED), cluster_policy("deployments", keys(CLUSTER_KEY),
                                                          match={"kinds": [{"apiGroups": ["apps"], "kinds": ["Deployment"]}]}))  # fmt: skip
    assert answer.allowed and answer.result.reason == "out-of-scope" and not answer.matched
    assert answer.result.message == "no ClusterManifestPolicy or ManifestPolicy matches ConfigMap shop/app"


def test_no_policy_at_all_is_allowed() -> None:
    answer = decide_with(review(UNSIGNED))
    assert answer.allowed and answer.result.reason == "out-of-scope"


def test_a_cluster_policy_without_match_applies_to_everything() -> None:
    answer = decide_with(review(UNSIGNED), cluster_policy("all", keys(CLUSTER_KEY)))
    assert not answer.allowed and answer.result.reason == "unsigned"
    assert answer.decided_by is not None and answer.decided_by.ref == "ClusterManifestPolicy all"


@pytest.mark.parametrize(
    ("match", "applies"),
    [
        ({"namespaces": ["shop"]}, True),
        ({"namespaces": ["lab"]}, False),
        ({"namespaceSelector": {"matchLabels": {"env": "prod"}}}, True),
        ({"namespaceSelector": {"matchLabels": {"env": "test"}}}, False),
        ({"namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["test"]}]}}, True),
        ({"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]}}, False),
        ({"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}}, True),
        ({"namespaces": ["shop"], "namespaceSelector": {"matchLabels": {"env": "test"}}}, False),
        ({"objectSelector": {"matchLabels": {"signed": "yes"}}}, False),
        ({"kinds": [{"apiGroups": ["*"], "kinds": ["ConfigMap"]}]}, True),
        ({"kinds": [{"apiGroups": ["apps"], "kinds": ["*"]}]}, False),
        ({"kinds": [{"apiGroups": [""], "kinds": ["*"]}]}, True),
    ],
    ids=lambda v: str(v)[:60],
)
def test_match_criteria(match: dict[str, Any], applies: bool) -> None:
    answer = decide_with(review(UNSIGNED), cluster_policy("p", keys(CLUSTER_KEY), match=match))
    assert answer.matched is applies
    assert answer.allowed is not applies


def test_object_selector_reads_the_old_object_too_so_removing_the_label_does_not_escape() -> None:
    labelled = copy.deepcopy(UNSIGNED)
    labelled["metadata"]["labels"] = {"signed": "yes"}
    policy = cluster_policy("p", keys(CLUSTER_KEY), match={"objectSelector": {"matchLabels": {"signed": "yes"}}})
    answer = decide_with(review(UNSIGNED, operation="UPDATE", old=labelled), policy)
    assert answer.matched and answer.result.reason == "unsigned"


def test_labels_not_known_yet_deny_when_the_policy_would_otherwise_apply() -> None:
    policy = cluster_policy("p", keys(CLUSTER_KEY), match={"namespaceSelector": {"matchLabels": {"env": "prod"}}})
    answer = decide_with(review(UNSIGNED), policy, labels={})
    assert not answer.allowed and answer.result.reason == "transient-error"
    assert "labels of namespace shop are not known yet" in answer.result.message


def test_a_cluster_scoped_object_is_not_left_out_by_namespace_criteria() -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}, "rules": []}
    policy = cluster_policy("p", keys(CLUSTER_KEY), match={"namespaces": ["shop"]})
    answer = decide_with(review(role), policy)
    assert answer.matched and answer.result.reason == "unsigned"


def test_a_namespace_is_matched_on_its_own_name_and_labels() -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lab", "labels": {"env": "test"}}}
    by_label = cluster_policy("p", keys(CLUSTER_KEY), match={"namespaceSelector": {"matchLabels": {"env": "prod"}}})
    assert not decide_with(review(namespace), by_label).matched
    by_name = cluster_policy("p", keys(CLUSTER_KEY), match={"namespaces": ["lab"]})
    assert decide_with(review(namespace), by_name).matched


# --- combining -------------------------------------------------------------------------------


def test_every_matching_cluster_policy_must_be_satisfied() -> None:
    first = cluster_policy("a-cluster-key", keys(CLUSTER_KEY))
    second = cluster_policy("b-team-key", keys(TEAM_KEY))
    answer = decide_with(review(BY_CLUSTER), first, second)
    assert not answer.allowed and answer.result.reason == "signature-invalid"
    assert answer.decided_by is not None and answer.decided_by.name == "b-team-key"
    assert [v.result.reason for v in answer.verdicts] == ["verified", "signature-invalid"]


def test_a_cluster_and_a_tenant_policy_must_both_be_satisfied() -> None:
    cluster = cluster_policy("platform", keys(CLUSTER_KEY))
    tenant = tenant_policy("team", "shop", keys(TEAM_KEY))
    assert decide_with(review(BY_CLUSTER), cluster).allowed
    answer = decide_with(review(BY_CLUSTER), cluster, tenant)
    assert not answer.allowed and answer.decided_by is not None and answer.decided_by.ref == "ManifestPolicy shop/team"
    (both,) = append_signature([copy.deepcopy(BY_CLUSTER)], TEAM_KEY)
    answer = decide_with(review(both), cluster, tenant)
    assert answer.allowed and answer.result.reason == "verified"
    assert [v.result.reason for v in answer.verdicts] == ["verified", "verified"]


def test_a_tenant_policy_applies_in_its_own_namespace_only() -> None:
    elsewhere = tenant_policy("team", "lab", keys(TEAM_KEY))
    assert not decide_with(review(UNSIGNED), elsewhere).matched
    assert decide_with(review(UNSIGNED), tenant_policy("team", "shop", keys(TEAM_KEY))).matched


def test_a_tenant_policy_never_applies_to_a_cluster_scoped_object_not_even_its_namespace() -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "labels": {"env": "prod"}}}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}, "rules": []}
    tenant = tenant_policy("team", "shop", keys(TEAM_KEY))
    # The API server sends a Namespace's own updates with the namespace's name as the request's namespace.
    update = review(namespace, operation="UPDATE", old=namespace, namespace="shop")
    assert update["namespace"] == "shop"
    assert not decide_with(update, tenant).matched
    assert not decide_with(review(role), tenant).matched  # a cluster-scoped write names no namespace


def test_audit_findings_are_warnings_and_never_deny() -> None:
    audit = cluster_policy("watch", keys(TEAM_KEY), action="Audit")
    answer = decide_with(review(BY_CLUSTER), audit)
    assert answer.allowed and answer.result.reason == "signature-invalid"
    (warning,) = answer.warnings
    assert warning.startswith("ClusterManifestPolicy watch (Audit): signature-invalid: ConfigMap shop/app")


def test_audit_plus_enforce_the_enforce_verdict_decides_and_the_audit_finding_is_a_warning() -> None:
    enforce = cluster_policy("enforce", keys(CLUSTER_KEY))
    audit = cluster_policy("watch", keys(TEAM_KEY), action="Audit")
    answer = decide_with(review(BY_CLUSTER), enforce, audit)
    assert answer.allowed and answer.result.reason == "verified"
    assert answer.decided_by is not None and answer.decided_by.name == "enforce"
    assert [w.split(":")[0] for w in answer.warnings] == ["ClusterManifestPolicy watch (Audit)"]
    denied = decide_with(review(tampered(BY_CLUSTER)), enforce, audit)
    assert not denied.allowed and denied.result.reason == "content-mismatch"
    assert len(denied.warnings) == 1 and "(Audit)" in denied.warnings[0]


def test_other_enforce_denials_are_warnings_beside_the_first() -> None:
    answer = decide_with(
        review(UNSIGNED), cluster_policy("a", keys(CLUSTER_KEY)), tenant_policy("b", "shop", keys(TEAM_KEY))
    )
    assert not answer.allowed and answer.decided_by is not None and answer.decided_by.name == "a"
    assert answer.warnings == ("ManifestPolicy shop/b (Enforce): unsigned: " + answer.verdicts[1].result.message,)


def test_warnings_fit_what_the_api_server_passes_on() -> None:
    text = warning_text("ConfigMap x: data.a differs: signed 'line\none', admitted 'tab\there'\u2028" + "y" * 400)
    assert len(text) == MAX_WARNING_CHARS and text.endswith("…")
    assert not any(ch in text for ch in "\n\t\u2028")


def test_a_policy_that_does_not_compile_denies_what_it_matches_and_says_why() -> None:
    broken = cluster_policy("broken", {"keys": []}, match=CONFIGMAPS)
    answer = decide_with(review(BY_CLUSTER), broken)
    assert not answer.allowed and answer.result.reason == "policy-invalid"
    assert answer.result.message.startswith("ClusterManifestPolicy broken cannot be used: spec.policy: no keys")


def test_a_broken_audit_policy_warns_and_does_not_deny() -> None:
    broken = cluster_policy("broken", {"keys": []}, action="Audit")
    answer = decide_with(review(BY_CLUSTER), broken, cluster_policy("ok", keys(CLUSTER_KEY)))
    assert answer.allowed and answer.result.reason == "verified"
    assert "policy-invalid" in answer.warnings[0]


def test_a_policy_whose_match_cannot_be_read_applies_to_everything_it_could() -> None:
    odd = cluster_policy("odd", keys(CLUSTER_KEY), match={"kinds": [{"apiGroups": [""], "kindz": ["Secret"]}]})
    answer = decide_with(review(BY_CLUSTER), odd)
    assert answer.matched and not answer.allowed and answer.result.reason == "policy-invalid"
    assert "unknown field 'kindz'" in answer.result.message


def test_a_dry_run_request_follows_the_admission_semantics() -> None:
    answer = decide_with(review(UNSIGNED, dry_run=True), cluster_policy("p", keys(CLUSTER_KEY)))
    assert answer.allowed and answer.result.reason == "dry-run-request"


def test_a_namespace_holding_too_many_policies_is_denied() -> None:
    many = [tenant_policy(f"p{i:02d}", "shop", keys(CLUSTER_KEY)) for i in range(MAX_NAMESPACE_POLICIES + 1)]
    answer = decide_with(review(BY_CLUSTER), *many)
    assert not answer.allowed and answer.result.reason == "policy-invalid"
    assert f"at most {MAX_NAMESPACE_POLICIES} are judged" in answer.result.message


# --- a tenant trying to loosen ---------------------------------------------------------------------

ATTACKER = {"username": "mallory@example.com", "groups": ["shop-admins", "system:authenticated"]}
LOOSENERS = [
    ("skipUsers", {"skipUsers": [{"users": ["mallory@example.com"]}]}),
    ("skipObjects", {"skipObjects": [{"group": "-", "kind": "ConfigMap", "name": "app"}]}),
    ("ignoreFields", {"ignoreFields": [{"fields": ["data"]}]}),
    ("inScopeObjects-elsewhere", {"inScopeObjects": [{"kind": "Secret"}]}),
    ("every-profile", {"defaults": ["k8s-manifest-sigstore", "common", "kyverno", "argocd", "flux", "helm", "openshift"]}),
    ("no-profile", {"defaults": []}),
    ("unanchored-ignore", {"unsafeUnanchoredIgnoreFields": True, "ignoreFields": [{"fields": ["data.*"]}]}),
    ("must-all", {"keyOperation": "MustAll"}),
    ("dry-run", {"dryRun": {"enabled": True}}),
]  # fmt: skip


@pytest.mark.parametrize(("case", "loosen"), LOOSENERS, ids=[c for c, _ in LOOSENERS])
def test_a_tenant_policy_cannot_loosen_a_cluster_policy(case: str, loosen: dict[str, Any]) -> None:
    """Whatever the tenant's policy exempts, the cluster policy still judges the write on its own."""
    cluster = cluster_policy("platform", keys(CLUSTER_KEY))
    tenant = tenant_policy("mine", "shop", keys(OTHER_KEY, **loosen), action="Enforce")
    for obj in (UNSIGNED, tampered(BY_CLUSTER)):
        alone = decide_with(review(obj, user=ATTACKER), cluster)
        together = decide_with(review(obj, user=ATTACKER), cluster, tenant)
        assert not alone.allowed
        assert not together.allowed
        assert together.result == alone.result and together.decided_by == alone.decided_by
        assert together.verdicts[0].result == alone.verdicts[0].result


def test_a_tenant_audit_policy_cannot_turn_a_cluster_denial_into_an_allow() -> None:
    cluster = cluster_policy("platform", keys(CLUSTER_KEY))
    tenant = tenant_policy(
        "mine", "shop", keys(OTHER_KEY, skipUsers=[{"users": ["mallory@example.com"]}]), action="Audit"
    )
    assert not decide_with(review(UNSIGNED, user=ATTACKER), cluster, tenant).allowed


# --- writes of the policy objects themselves -------------------------------------------------------


NOTHING_HELD = PolicySet()


def _check(obj: dict[str, Any], policies: PolicySet = NOTHING_HELD) -> Admission | None:
    compile_ = lambda raw, b: Policy.from_dict(raw, bounds=b)  # noqa: E731
    return check_policy_object(Review.from_admission(review(obj), where="request"), policies, compile_, SERVICE)


def test_a_policy_object_that_compiles_may_be_written() -> None:
    assert _check(tenant_policy("team", "shop", keys(TEAM_KEY))) is None


@pytest.mark.parametrize(
    ("case", "obj", "words"),
    [
        ("no-keys", tenant_policy("t", "shop", {"keys": []}), "no keys or signers"),
        ("unknown-field", tenant_policy("t", "shop", keys(TEAM_KEY, ignoreFeilds=[])), "did you mean 'ignoreFields'"),
        ("namespaces", tenant_policy("t", "shop", keys(TEAM_KEY), match={"namespaces": ["lab"]}), "own namespace only"),
        (
            "namespace-selector",
            tenant_policy("t", "shop", keys(TEAM_KEY), match={"namespaceSelector": {}}),
            "own namespace only",
        ),
        (
            "other-tenants-signatures",
            tenant_policy("t", "shop", keys(TEAM_KEY, signatureResourceRef="k8s://ConfigMap/lab/sigs")),
            "may read signature ConfigMaps in its own namespace",
        ),
        (
            "other-tenants-dry-run",
            tenant_policy("t", "shop", keys(TEAM_KEY, dryRun={"enabled": True, "namespace": "lab"})),
            "may dry-run in its own namespace",
        ),
        (
            "server-file",
            tenant_policy(
                "t",
                "shop",
                {
                    "signers": [{"subject": "a@b.c", "issuer": "https://x"}],
                    "trustedRoot": "/etc/manifest-provider/tls/tls.key",
                },
            ),
            "trustedRoot",
        ),
        (
            "registry",
            tenant_policy("t", "shop", keys(TEAM_KEY, resourceBundleRef={"repositories": ["evil.example/x"]})),
            "resourceBundleRef",
        ),
        (
            "bad-action",
            {**tenant_policy("t", "shop", keys(TEAM_KEY)), "spec": {"action": "Warn", "policy": keys(TEAM_KEY)}},
            "Warn",
        ),
        ("cluster-no-keys", cluster_policy("c", {"keys": []}), "no keys or signers"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_a_policy_object_that_does_not_compile_is_refused(case: str, obj: dict[str, Any], words: str) -> None:
    refused = _check(obj)
    assert refused is not None and not refused.allowed and refused.result.reason == "policy-invalid"
    assert words in refused.result.message


def test_a_policy_naming_the_server_file_gets_the_same_message_whatever_the_file_is() -> None:
    messages = set()
    for path in ("/etc/passwd", "/nonexistent", "/proc/self/fd/0", "/"):
        obj = tenant_policy(
            "t", "shop", {"signers": [{"subject": "a@b.c", "issuer": "https://x"}], "trustedRoot": path}
        )
        refused = _check(obj)
        assert refused is not None
        assert f"'{path}'" in refused.result.message
        messages.add(refused.result.message.replace(f"'{path}'", "PATH"))
    assert len(messages) == 1


def test_one_policy_too_many_in_a_namespace_is_refused_but_replacing_one_is_not() -> None:
    held_ones = PolicySet.of(
        held(tenant_policy(f"p{i:02d}", "shop", keys(TEAM_KEY))) for i in range(MAX_NAMESPACE_POLICIES)
    )
    refused = _check(tenant_policy("one-more", "shop", keys(TEAM_KEY)), held_ones)
    assert refused is not None and "at most" in refused.result.message
    assert _check(tenant_policy("p00", "shop", keys(TEAM_KEY)), held_ones) is None
    assert _check(tenant_policy("one-more", "lab", keys(TEAM_KEY)), held_ones) is None


def test_a_cluster_that_cannot_be_asked_is_the_policys_denial_naming_it_or_an_audit_warning() -> None:
    from provider.errors import TransientError

    def unreachable(policy: HeldPolicy, admitted: Review) -> Any:
        raise TransientError("the cluster did not answer the dry-run", reason="dry-run-failed")

    for action, allowed in (("Enforce", False), ("Audit", True)):
        policies = PolicySet.of([held(cluster_policy("p", keys(CLUSTER_KEY), action=action))])
        answer = admit(Review.from_admission(review(BY_CLUSTER), where="request"), policies, evaluate=unreachable,
                       labels=NAMESPACE_LABELS.get)  # fmt: skip
        assert answer.allowed is allowed and answer.result.reason == "dry-run-failed"
        assert answer.decided_by is not None and answer.decided_by.name == "p"
        assert bool(answer.warnings) is allowed
