"""verify() and decide(): real signatures, every verdict with its reason code."""

from __future__ import annotations

import base64
import copy
import zlib
from typing import Any

import pytest

from provider import Policy, Review, decide
from provider.keys.pem import KEY_TYPES
from provider.result import REASONS
from provider.signatures.envelope import encode_message
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign

KEY = make_key()
OTHER = make_key("ecdsa-p256", 1)
D = "cosign.sigstore.dev"


def pol(*keys: Any, **fields: Any) -> Policy:
    return Policy.from_dict({"keys": [public_key_pem(k) for k in (keys or (KEY,))], **fields})


def check(obj: dict[str, Any], policy: Policy | None = None, **review: Any) -> Any:
    """``decide`` on one review; a service account gets the groups every real one has unless ``groups`` is given."""
    user = review.get("username") or ""
    if user.startswith("system:serviceaccount:") and "groups" not in review:
        review["groups"] = ("system:serviceaccounts", "system:serviceaccounts:" + user.split(":")[2])
    rv = Review(object=obj, **review) if review else Review.for_object(obj)
    result = decide(rv, policy or pol())
    assert result.reason in REASONS
    return result


def signed_cm(**data: str) -> dict[str, Any]:
    return sign(configmap("cm", "ns", **(data or {"key": "value"})))[0]


def annotations(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["metadata"]["annotations"]


def deployment(name: str = "web") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": name}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.25", "imagePullPolicy": "IfNotPresent"}]},
            },
        },
    }


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_sign_and_verify_with_every_key_type(key_type: str) -> None:
    key = make_key(key_type)
    (obj,) = sign(deployment(), key)
    result = check(obj, pol(key))
    assert (result.allowed, result.verified, result.reason) == (True, True, "verified")
    assert result.signers == (Policy.from_dict({"keys": [public_key_pem(key)]}).keys[0].fingerprint,)


def mutate(change: Any) -> dict[str, Any]:
    obj = copy.deepcopy(sign(deployment())[0])
    change(obj)
    return obj


def replay(field: str, value: str) -> dict[str, Any]:
    """A correctly signed object whose identity is then changed: its message was signed for another object."""
    obj = copy.deepcopy(sign(deployment())[0])
    if field == "kind":
        obj["kind"] = value
    else:
        obj["metadata"][field] = value
    return obj


def set_annotation(name: str, value: Any) -> Any:
    return lambda o: annotations(o).__setitem__(f"{D}/{name}", value)


BILLION_LAUGHS = (
    "a0: &a0 ["
    + ", ".join(['"lol"'] * 9)
    + "]\n"
    + "".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 10))
).encode()


def gzip_bomb(size: int) -> bytes:
    """gzip of ``size`` zero bytes (16 MiB -> 16 KB), made a MiB at a time."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = b"".join(compressor.compress(b"\0" * (1 << 20)) for _ in range(size >> 20))
    return body + compressor.flush()


def billion_laughs_message() -> str:
    return encode_message(BILLION_LAUGHS)


def sign_payload(payload: bytes) -> Any:
    """A hostile payload signed by the trusted key itself (a compromised or careless signer)."""
    from provider.keys.pem import sign_bytes

    def change(obj: dict[str, Any]) -> None:
        annotations(obj)[f"{D}/message"] = encode_message(payload)
        annotations(obj)[f"{D}/signature"] = base64.b64encode(sign_bytes(KEY, payload)).decode()

    return change


NEGATIVE: list[tuple[str, Any, Policy | None, str]] = [
    (
        "tampered-field",
        mutate(lambda o: o["spec"]["template"]["spec"]["containers"][0].__setitem__("image", "nginx:latest")),
        None,
        "content-mismatch",
    ),
    (
        "added-field",
        mutate(lambda o: o["spec"]["template"]["spec"].__setitem__("hostNetwork", True)),
        None,
        "content-mismatch",
    ),
    ("removed-field", mutate(lambda o: o["spec"].pop("replicas")), None, "content-mismatch"),
    (
        "added-label-named-status",
        mutate(lambda o: o["metadata"]["labels"].__setitem__("status", "pwned")),
        None,
        "content-mismatch",
    ),
    (
        "changed-defaulted-field",
        mutate(lambda o: o["spec"]["template"]["spec"]["containers"][0].__setitem__("imagePullPolicy", "Always")),
        None,
        "content-mismatch",
    ),
    ("wrong-key", sign(deployment())[0], pol(OTHER), "signature-invalid"),
    ("replay-other-name", replay("name", "api"), None, "no-matching-manifest"),
    ("replay-other-namespace", replay("namespace", "prod"), None, "no-matching-manifest"),
    ("replay-other-kind", replay("kind", "StatefulSet"), None, "no-matching-manifest"),
    ("mustall-key-missing", sign(deployment())[0], pol(KEY, OTHER, keyOperation="MustAll"), "key-threshold-not-met"),
    ("threshold-not-met", sign(deployment())[0], pol(KEY, OTHER, threshold=2), "key-threshold-not-met"),
    ("unsigned", deployment(), None, "unsigned"),
    ("signature-without-message", mutate(lambda o: annotations(o).pop(f"{D}/message")), None, "unsigned"),
    (
        "gzip-bomb-16mib",
        mutate(set_annotation("message", base64.b64encode(gzip_bomb(16 << 20)).decode())),
        None,
        "malformed-message",
    ),
    (
        "alias-bomb-message-unsigned",
        mutate(set_annotation("message", billion_laughs_message())),
        None,
        "signature-invalid",
    ),
    ("alias-bomb-message-signed", mutate(sign_payload(BILLION_LAUGHS)), None, "malformed-message"),
    ("deep-nesting-message-signed", mutate(sign_payload(b"[" * 50_000 + b"]" * 50_000)), None, "malformed-message"),
    (
        "duplicate-keys-message-signed",
        mutate(sign_payload(b"apiVersion: apps/v1\nkind: Deployment\nkind: Deployment\n")),
        None,
        "malformed-message",
    ),
    (
        "truncated-base64-message",
        mutate(lambda o: annotations(o).__setitem__(f"{D}/message", annotations(o)[f"{D}/message"][:-5])),
        None,
        "malformed-message",
    ),
    (
        "truncated-base64-signature",
        mutate(lambda o: annotations(o).__setitem__(f"{D}/signature", annotations(o)[f"{D}/signature"][:-3])),
        None,
        "malformed-message",
    ),
    (
        "signature-wrong-length",
        mutate(set_annotation("signature", base64.b64encode(b"\x01\x02\x03").decode())),
        None,
        "signature-invalid",
    ),
    (
        "signature-gap",
        mutate(lambda o: annotations(o).__setitem__(f"{D}/signature_2", annotations(o).pop(f"{D}/signature"))),
        None,
        "unsigned",
    ),
    (
        "annotations-not-a-map",
        mutate(lambda o: o["metadata"].__setitem__("annotations", ["x"])),
        None,
        "malformed-message",
    ),
    ("metadata-not-a-map", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": "x"}, None, "malformed-message"),
]


@pytest.mark.parametrize(("name", "obj", "policy", "reason"), NEGATIVE, ids=[n[0] for n in NEGATIVE])
def test_negative_cases(name: str, obj: dict[str, Any], policy: Policy | None, reason: str) -> None:
    result = check(obj, policy)
    assert (result.allowed, result.verified, result.reason) == (False, False, reason), result.message
    assert result.message
    if name.startswith("gzip-bomb"):  # refused for its size, not as corrupt gzip
        assert "inflates to more than" in result.message, result.message


def test_numbering_gap_with_a_valid_first_signature_names_the_unread_one() -> None:
    obj = copy.deepcopy(sign(deployment())[0])
    other = sign(deployment(), OTHER)[0]
    annotations(obj)[f"{D}/signature_2"] = annotations(other)[f"{D}/signature"]
    result = check(obj, pol(OTHER))
    assert result.reason == "signature-invalid"
    assert "signature_2 not read" in result.message


def test_messages_say_what_differs() -> None:
    obj = mutate(lambda o: o["spec"]["template"]["spec"]["containers"][0].__setitem__("image", "nginx:latest"))
    result = check(obj)
    assert (
        "spec.template.spec.containers.0.image differs: signed 'nginx:1.25', admitted 'nginx:latest'" in result.message
    )
    assert [d.to_dict() for d in result.diff] == [
        {"key": "spec.template.spec.containers.0.image", "values": {"before": "nginx:1.25", "after": "nginx:latest"}}
    ]
    assert result.signers  # the signature itself was good


def test_ignore_fields_are_anchored() -> None:
    obj = mutate(lambda o: o["metadata"]["labels"].__setitem__("modes", "x"))
    assert check(obj, pol(ignoreFields=[{"fields": ["metadata.labels.mode"]}])).reason == "content-mismatch"
    assert check(obj, pol(ignoreFields=[{"fields": ["metadata.labels.modes"]}])).reason == "verified"
    assert (
        check(obj, pol(ignoreFields=[{"fields": ["metadata.labels.mode"]}], unsafeUnanchoredIgnoreFields=True)).reason
        == "verified"
    )


def test_ignore_fields_scoped_to_objects() -> None:
    obj = mutate(lambda o: o["spec"].__setitem__("replicas", 5))
    scoped = [{"objects": [{"kind": "Deployment", "name": "web"}], "fields": ["spec.replicas"]}]
    other = [{"objects": [{"kind": "Deployment", "name": "api"}], "fields": ["spec.replicas"]}]
    assert check(obj, pol(ignoreFields=scoped)).reason == "verified"
    assert check(obj, pol(ignoreFields=other)).reason == "content-mismatch"


def test_one_message_for_several_objects() -> None:
    docs = sign([deployment("web"), deployment("api"), configmap("cfg", "shop")])
    assert [check(d).reason for d in docs] == ["verified"] * 3


def test_two_documents_for_one_object_are_ambiguous() -> None:
    a, b = deployment(), deployment()
    b["spec"]["replicas"] = 9
    assert check(sign([a, b])[0]).reason == "malformed-message"


def test_namespace_free_manifest_fits_any_namespace() -> None:
    cm = configmap("cm", None)
    (obj,) = sign(cm)
    obj["metadata"]["namespace"] = "anywhere"
    assert check(obj).reason == "verified"


def test_generate_name_objects_match_on_generate_name() -> None:
    cm = configmap("x", "ns")
    cm["metadata"] = {"generateName": "job-", "namespace": "ns"}
    (obj,) = sign(cm)
    assert check(obj).reason == "verified"


def test_server_side_fields_are_masked_by_default_profile() -> None:
    obj = signed_cm()
    obj["metadata"].update(
        {
            "uid": "u",
            "resourceVersion": "1",
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
        }
    )
    obj["status"] = {"anything": True}
    assert check(obj).reason == "verified"
    assert check(obj, pol(defaults=[])).reason == "content-mismatch"


def test_unknown_envelope_annotations_are_not_masked() -> None:
    obj = signed_cm()
    annotations(obj)[f"{D}/signatureX"] = "x"
    annotations(obj)[f"{D}/resourceBundleRef"] = "registry/evil"
    result = check(obj)
    assert result.reason == "content-mismatch"
    assert {d.key for d in result.diff} == {
        f"metadata.annotations.{D}/signatureX",
        f"metadata.annotations.{D}/resourceBundleRef",
    }


def test_custom_annotation_domain() -> None:
    (obj,) = sign(configmap(), domain="integrity.example.com")
    assert check(obj, pol(annotationDomain="integrity.example.com")).reason == "verified"
    assert check(obj).reason == "unsigned"


def test_multiple_signers_any_and_all() -> None:
    from provider.signatures.signing import append_signature

    (obj,) = append_signature(sign(deployment()), OTHER)
    assert check(obj, pol(KEY, OTHER, keyOperation="MustAll")).reason == "verified"
    assert len(check(obj, pol(KEY, OTHER, keyOperation="MustAll")).signers) == 2
    assert check(obj, pol(KEY, OTHER, threshold=2)).reason == "verified"


# --- decide: scope and profiles ---------------------------------------------------

USER = {"operation": "CREATE", "username": "alice", "groups": ("dev",)}


def test_dry_run_requests_are_allowed() -> None:
    result = check(deployment(), dry_run=True, operation="CREATE", username="alice")
    assert (result.allowed, result.verified, result.reason) == (True, False, "dry-run-request")


def test_delete_is_an_unverifiable_operation() -> None:
    """A DELETE carries no new object: allowed, and said to be unverified (docs/api.md, docs/policy.md)."""
    result = check(deployment(), operation="DELETE", username="alice")
    assert (result.allowed, result.verified, result.reason) == (True, False, "unverifiable-operation")
    no_object = decide(Review(object=None, operation="DELETE", username="alice"), pol())
    assert (no_object.allowed, no_object.reason) == (True, "unverifiable-operation")


def test_in_scope_objects() -> None:
    p = pol(inScopeObjects=[{"kind": "Secret"}])
    assert check(deployment(), p, **USER).reason == "out-of-scope"
    assert check({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}, p, **USER).reason == "unsigned"


def test_skip_objects() -> None:
    result = check(deployment(), pol(skipObjects=[{"kind": "Deployment", "name": "we*"}]), **USER)
    assert (result.allowed, result.reason, result.profile, result.traffic_class) == (
        True,
        "skipped-object",
        "policy",
        "app-profile",
    )


def test_skip_users_policy_and_common_profile() -> None:
    p = pol(skipUsers=[{"users": ["system:serviceaccount:shop:operator"], "objects": [{"kind": "Deployment"}]}])
    by_operator = check(deployment(), p, operation="UPDATE", username="system:serviceaccount:shop:operator")
    assert (by_operator.reason, by_operator.profile, by_operator.traffic_class) == (
        "skipped-user",
        "policy",
        "app-profile",
    )
    assert (
        check(configmap(), p, operation="UPDATE", username="system:serviceaccount:shop:operator").reason == "unsigned"
    )
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-abc", "namespace": "shop"}}
    by_rs = check(pod, p, operation="CREATE", username="system:serviceaccount:kube-system:replicaset-controller")
    assert (by_rs.reason, by_rs.profile, by_rs.traffic_class) == ("skipped-user", "common", "common-profile")
    assert (
        check(
            pod,
            pol(defaults=["k8s-manifest-sigstore"]),
            operation="CREATE",
            username="system:serviceaccount:kube-system:replicaset-controller",
        ).reason
        == "unsigned"
    )
    # a controller outside its own objects is verified like anyone else
    assert (
        check(
            configmap(), p, operation="CREATE", username="system:serviceaccount:kube-system:replicaset-controller"
        ).reason
        == "unsigned"
    )


def test_skip_users_by_group_and_all_criteria_must_hold() -> None:
    p = pol(skipUsers=[{"users": ["bob"], "groups": ["ops"]}])
    assert check(deployment(), p, operation="UPDATE", username="bob", groups=("ops",)).reason == "skipped-user"
    assert check(deployment(), p, operation="UPDATE", username="bob", groups=("dev",)).reason == "unsigned"
    assert (
        check(
            deployment(), pol(skipUsers=[{"groups": ["ops"]}]), operation="UPDATE", username="eve", groups=("ops",)
        ).reason
        == "skipped-user"
    )


def test_audit_reviews_are_verified_without_skip_users() -> None:
    p = pol(skipUsers=[{"users": ["alice"]}])
    assert check(deployment(), p, **USER).reason == "skipped-user"
    assert check(deployment(), p).reason == "unsigned"  # no operation, no user: Gatekeeper audit


def test_common_profile_out_of_scope_kinds() -> None:
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "shop"}}
    result = check(event, **USER)
    assert (result.allowed, result.reason, result.traffic_class) == (True, "out-of-scope", "out-of-scope")


def test_admission_request_fixture_shape() -> None:
    rv = Review.from_admission(
        {
            "operation": "CREATE",
            "userInfo": {"username": "u", "groups": ["g"]},
            "object": signed_cm(),
            "namespace": "ns",
            "dryRun": False,
        }
    )
    assert decide(rv, pol()).reason == "verified"


@pytest.mark.parametrize(
    "bad",
    [
        {"object": []},
        {"object": {}, "userInfo": "x"},
        {"object": {}, "userInfo": {"groups": "g"}},
        {"object": {}, "dryRun": "true"},
        {"object": {}, "operation": "PATCH"},
        {"object": {}, "namespace": 5},
        "review",
    ],
    ids=[
        "object-list",
        "userinfo-string",
        "groups-string",
        "dryrun-string",
        "bad-operation",
        "namespace-int",
        "not-a-map",
    ],
)
def test_reviews_of_the_wrong_shape_are_refused(bad: Any) -> None:
    from provider.errors import RequestError

    with pytest.raises(RequestError):
        Review.from_admission(bad)


def test_review_without_object_is_a_request_error() -> None:
    from provider.errors import RequestError

    with pytest.raises(RequestError, match="no object"):
        decide(Review(object=None, operation="CREATE", username="u"), pol())


# --- the context: the pass-through inputs in one object -------------------------------


def test_a_context_carries_what_the_keyword_arguments_carry() -> None:
    """``decide(review, policy, Context(...))`` reaches the same steps as the keyword arguments it replaces."""
    from provider.limits import Limits
    from provider.verifier import Context, verify

    obj = signed_cm()
    obj["data"]["key"] = "changed"
    tight = Limits(max_diff_items=0, max_quoted_value=8)
    by_keywords = decide(Review.for_object(obj), pol(), limits=tight)
    by_context = decide(Review.for_object(obj), pol(), Context(limits=tight))
    assert by_context == by_keywords
    assert by_context.reason == "content-mismatch" and by_context.diff == () and by_context.diff_count == 1
    assert "'changed'" not in by_context.message  # the context's max_quoted_value, not the default's
    assert verify(signed_cm(), pol(), Context(limits=tight)).signers


def test_a_context_and_its_fields_at_once_is_a_type_error() -> None:
    """Which would win is a guess: a deadline or limits given twice is refused, not silently dropped."""
    from provider.limits import Limits
    from provider.verifier import Context, verify

    with pytest.raises(TypeError, match="either a context or its fields"):
        decide(Review.for_object(signed_cm()), pol(), Context(), limits=Limits())
    with pytest.raises(TypeError, match="either a context or its fields"):
        verify(signed_cm(), pol(), Context(), deadline=1.0)


def test_the_service_check_context_is_a_verifier_context() -> None:
    """The service's context extends the verifier's: ``judge`` hands it to ``decide`` whole, limits and all."""
    from provider.limits import Limits
    from provider.service.checks import CheckContext, judge
    from provider.verifier import Context

    obj = signed_cm()
    obj["data"]["key"] = "changed"
    ctx = CheckContext(limits=Limits(max_diff_items=0))
    assert isinstance(ctx, Context)
    result = judge(Review.for_object(obj), pol(), ctx)
    assert result.reason == "content-mismatch" and result.diff == () and result.diff_count == 1
