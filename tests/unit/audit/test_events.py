"""provider.audit.events: reading audit events within bounds, and the review admission would have seen."""

from __future__ import annotations

import gzip
import io
import json
from dataclasses import replace
from typing import Any

import pytest

from provider.audit.events import (
    BUILTIN_KINDS,
    AuditEvent,
    KindIndex,
    Malformed,
    apply_patch,
    parse_event,
    read_events,
    to_review,
)
from provider.errors import RequestError
from provider.limits import Limits
from tests.support.audit import REAL_LOG, event
from tests.support.manifests import configmap, sign

DOMAIN = "cosign.sigstore.dev"


def review_of(data: dict[str, Any], kinds: KindIndex | None = None) -> Any:
    built = to_review(parse_event(data), kinds or KindIndex(), domain=DOMAIN)
    assert built is not None
    return built


# --- reading ------------------------------------------------------------------------


def test_reads_the_real_log_completely() -> None:
    with REAL_LOG.open("rb") as stream:
        items = list(read_events(stream))
    assert len(items) == 1137
    assert all(isinstance(item, AuditEvent) for item in items)
    events = [item for item in items if isinstance(item, AuditEvent)]
    assert sum(e.has_body for e in events) == 1105  # the README: every write but deletecollection
    assert {e.verb for e in events if not e.has_body} == {"deletecollection"}
    assert sum(e.username == "kubernetes-admin" for e in events) == 23


def test_malformed_lines_are_reported_and_reading_goes_on() -> None:
    good = json.dumps(event()).encode()
    stream = io.BytesIO(
        b"\n".join([b"{not json", good, b"[1, 2]", b"", b"   ", b'{"kind": "Event"}', b'{"a": 1, "a": 2}', good])
        + b"\n"
    )
    items = list(read_events(stream))
    assert [type(i).__name__ for i in items] == [
        "Malformed",
        "AuditEvent",
        "Malformed",
        "Malformed",
        "Malformed",
        "AuditEvent",
    ]
    lines = [i.line for i in items]
    assert lines == [1, 2, 3, 6, 7, 8]
    messages = [i.message for i in items if isinstance(i, Malformed)]
    assert "not valid JSON" in messages[0]
    assert "duplicate key" in messages[3]


def test_an_overlong_line_is_skipped_without_being_held() -> None:
    limits = Limits(max_audit_line_bytes=1000)
    huge = json.dumps(event(body=configmap(data="x" * 50_000))).encode()
    good = json.dumps(event()).encode()
    items = list(read_events(io.BytesIO(huge + b"\n" + good + b"\n" + huge), limits))
    assert isinstance(items[0], Malformed) and "longer than 1000 bytes" in items[0].message
    assert isinstance(items[1], AuditEvent) and items[1].line == 2
    assert isinstance(items[2], Malformed) and items[2].line == 3  # the last line, without a newline


def test_last_line_without_newline_and_gzip_streams() -> None:
    raw = json.dumps(event()).encode()
    assert len(list(read_events(io.BytesIO(raw)))) == 1
    with gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(raw + b"\n" + raw))) as stream:
        assert len(list(read_events(stream))) == 2


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "Policy", "apiVersion": "audit.k8s.io/v1"}, "not an audit.k8s.io Event"),
        ({**event(), "apiVersion": "v1"}, "not an audit.k8s.io Event"),
        ({**event(), "verb": 7}, "verb"),
        ({**event(), "user": {"groups": []}}, "user.username"),
        ({**event(), "user": {"username": "u", "groups": "g"}}, "user.groups"),
        ({**event(), "objectRef": ["pods"]}, "objectRef"),
        ({**event(), "objectRef": {"resource": 1}}, "objectRef.resource"),
        ({**event(), "auditID": {}}, "event.auditID"),
        ({**event(), "impersonatedUser": {"username": 5}}, "impersonatedUser.username"),
    ],
    ids=[
        "not-event",
        "wrong-api-version",
        "verb-type",
        "no-username",
        "groups-type",
        "objectref-type",
        "resource-type",
        "auditid-type",
        "impersonated-type",
    ],
)
def test_event_shape_is_checked(data: dict[str, Any], message: str) -> None:
    with pytest.raises(RequestError, match=message):
        parse_event(data)


def test_event_fields() -> None:
    e = parse_event(
        event(
            "patch",
            resource="deployments",
            group="apps",
            subresource="scale",
            body={"spec": {"replicas": 3}},
            requestURI="/apis/apps/v1/namespaces/ns/deployments/cm/scale?dryRun=All&fieldManager=kubectl",
        )
    )
    assert (e.verb, e.resource_path, e.group, e.version, e.namespace, e.name) == (
        "patch",
        "deployments/scale",
        "apps",
        "v1",
        "ns",
        "cm",
    )
    assert e.dry_run and e.operation == "UPDATE"
    assert e.received is not None and e.received.year == 2026
    assert not parse_event(event(requestURI="/api/v1/namespaces/ns/configmaps?fieldManager=dryRun")).dry_run


def test_impersonation_is_what_admission_sees() -> None:
    e = parse_event(
        event(impersonatedUser={"username": "system:serviceaccount:ns:app", "groups": ["system:serviceaccounts"]})
    )
    assert (e.username, e.groups) == ("system:serviceaccount:ns:app", ("system:serviceaccounts",))


@pytest.mark.parametrize(
    ("verb", "subresource", "operation"),
    [
        ("create", "", "CREATE"),
        ("update", "status", "UPDATE"),
        ("patch", "", "UPDATE"),
        ("delete", "", "DELETE"),
        ("deletecollection", "", "DELETE"),
        ("get", "", None),
        ("list", "", None),
        ("watch", "", None),
        ("create", "exec", "CONNECT"),
        ("get", "portforward", "CONNECT"),
        ("update", "proxy", "CONNECT"),
        ("impersonate", "", None),
    ],
    ids=lambda v: v or "-",
)
def test_verbs_map_to_admission_operations(verb: str, subresource: str, operation: str | None) -> None:
    assert parse_event(event(verb, resource="pods", subresource=subresource)).operation == operation


def test_non_resource_requests_are_no_admission_requests() -> None:
    e = parse_event({**event("get"), "objectRef": None, "requestURI": "/healthz"})
    assert e.operation is None
    assert to_review(e, KindIndex(), domain=DOMAIN) is None


# --- kinds --------------------------------------------------------------------------


def test_kinds_of_builtin_resources_and_subresources() -> None:
    kinds = KindIndex()
    assert kinds.kind_of("apps", "deployments") == "Deployment"
    assert kinds.kind_of("", "configmaps") == "ConfigMap"
    assert kinds.kind_of("example.com", "widgets") == ""
    assert len(BUILTIN_KINDS) > 60
    target = kinds.target(parse_event(event("update", resource="deployments", group="apps", subresource="scale")))
    assert (target["apiVersion"], target["kind"]) == ("autoscaling/v1", "Scale")
    target = kinds.target(
        parse_event(event("patch", resource="nodes", subresource="status", namespace="", name="node-1"))
    )
    assert target == {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}


def test_kinds_of_custom_resources_are_learned_from_the_log_within_a_bound() -> None:
    kinds = KindIndex(capacity=1)
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    kinds.learn(parse_event(event("create", resource="widgets", group="example.com", body=widget)))
    assert kinds.kind_of("example.com", "widgets") == "Widget"
    # a body whose group does not match the resource's teaches nothing; nor does a full index
    kinds.learn(parse_event(event("create", resource="gadgets", group="other.io", body=widget)))
    kinds.learn(parse_event(event("create", resource="gizmos", group="example.com", body={**widget, "kind": "Gizmo"})))
    assert kinds.kind_of("other.io", "gadgets") == kinds.kind_of("example.com", "gizmos") == ""
    # subresources and patches name other kinds or none
    kinds = KindIndex()
    kinds.learn(
        parse_event(
            event(
                "create", resource="widgets", group="example.com", subresource="scale", body={**widget, "kind": "Scale"}
            )
        )
    )
    kinds.learn(parse_event(event("patch", resource="widgets", group="example.com", body=widget)))
    assert kinds.kind_of("example.com", "widgets") == ""


# --- reviews ------------------------------------------------------------------------


def test_create_and_update_review_the_request_body() -> None:
    cm = configmap("cm", "ns")
    review, evidence = review_of(event("create", body=cm))
    assert evidence == "object"
    assert (review.object, review.operation, review.username, review.namespace, review.name) == (
        cm,
        "CREATE",
        "alice",
        "ns",
        "cm",
    )
    review, _ = review_of(
        event("update", resource="deployments", group="apps", subresource="status", body={"metadata": {"name": "cm"}})
    )
    assert (review.object["kind"], review.object["apiVersion"], review.sub_resource) == (
        "Deployment",
        "apps/v1",
        "status",
    )


def test_deletes_review_the_identity_of_what_they_remove() -> None:
    review, evidence = review_of(
        event(
            "delete",
            resource="pods",
            name="web-1",
            body={"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/__internal"},
        )
    )
    assert evidence == "identity"
    assert review.object is None and review.operation == "DELETE"
    assert review.old_object == {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1", "namespace": "ns"}}
    review, _ = review_of(event("deletecollection", resource="jobs", group="batch", name=""))
    assert review.old_object == {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"namespace": "ns"}}


def test_writes_without_a_body_review_only_the_identity() -> None:
    review, evidence = review_of(event("create", level="Metadata"))
    assert evidence == "identity"
    assert review.object == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}}


def test_dry_run_requests_stay_dry_run() -> None:
    review, _ = review_of(event(body=configmap(), requestURI="/api/v1/namespaces/ns/configmaps?dryRun=All"))
    assert review.dry_run


# --- patches --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "patch", "expected"),
    [
        ({"a": 1, "b": {"c": 2}}, {"b": {"d": 3}}, {"a": 1, "b": {"c": 2, "d": 3}}),
        ({"a": 1, "b": 2}, {"b": None}, {"a": 1}),
        ({"a": [1, 2]}, {"a": [3]}, {"a": [3]}),
        ({"a": 1}, {"$retainKeys": ["a"], "$patch": "replace"}, {"a": 1}),
        (
            {
                "c": [
                    {"name": "web", "image": "nginx:1.25", "ports": [{"containerPort": 80}]},
                    {"name": "side", "image": "s"},
                ]
            },
            {"$setElementOrder/c": [{"name": "web"}, {"name": "side"}], "c": [{"name": "web", "image": "nginx:1.27"}]},
            {
                "c": [
                    {"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80}]},
                    {"name": "side", "image": "s"},
                ]
            },
        ),
        (
            {"c": [{"name": "a"}, {"name": "b"}]},
            {"c": [{"name": "b", "$patch": "delete"}, {"name": "z"}]},
            {"c": [{"name": "a"}, {"name": "z"}]},
        ),
        ({"c": [{"name": "a"}, {"port": 1}]}, {"c": [{"name": "x"}]}, {"c": [{"name": "x"}]}),
        ({"a": "scalar"}, {"a": {"b": 1}}, {"a": {"b": 1}}),
        ("not a mapping", {"a": 1}, {"a": 1}),
    ],
    ids=[
        "nested-merge",
        "null-removes",
        "list-replaced",
        "directives-dropped",
        "merge-by-name",
        "delete-directive",
        "no-common-key",
        "scalar-to-map",
        "base-not-mapping",
    ],
)
def test_apply_patch(base: Any, patch: Any, expected: Any) -> None:
    before = json.dumps(base)
    assert apply_patch(base, patch) == expected
    assert json.dumps(base) == before  # the base is not modified


def test_a_plain_patch_is_applied_to_the_identity() -> None:
    review, evidence = review_of(
        event("patch", resource="deployments", group="apps", name="web", body={"spec": {"replicas": 4}})
    )
    assert evidence == "patch"
    assert review.object == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"replicas": 4},
    }
    # the URL decides what is patched, whatever the body claims
    review, _ = review_of(
        event(
            "patch",
            name="cm",
            body={"kind": "Secret", "metadata": {"name": "other", "namespace": "x", "labels": {"a": "b"}}},
        )
    )
    assert (review.object["kind"], review.object["metadata"]) == (
        "ConfigMap",
        {"name": "cm", "namespace": "ns", "labels": {"a": "b"}},
    )
    # a JSON patch (operations) cannot be applied without the stored object
    review, _ = review_of(event("patch", body=[{"op": "replace", "path": "/data/key", "value": "x"}]))
    assert review.object == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}}


def test_a_patch_carrying_a_signature_is_applied_to_the_document_it_signs() -> None:
    (signed,) = sign(configmap("cm", "ns", key="value", other="kept"))
    annotations = signed["metadata"]["annotations"]
    review, _ = review_of(event("patch", body={"metadata": {"annotations": annotations}, "data": {"key": "value"}}))
    assert review.object["data"] == {"key": "value", "other": "kept"}
    assert review.object["metadata"]["annotations"] == annotations
    # a message that is not one cannot be a base: the identity is
    review, _ = review_of(
        event("patch", body={"metadata": {"annotations": {f"{DOMAIN}/message": "!!"}}, "data": {"k": "v"}})
    )
    assert review.object["data"] == {"k": "v"}
    # nor is a document signed for another object
    review, _ = review_of(event("patch", name="other", body={"metadata": {"annotations": annotations}}))
    assert "data" not in review.object


def test_reviews_carry_the_requester() -> None:
    review, _ = review_of(
        event(body=configmap(), user="system:node:n1", groups=("system:nodes", "system:authenticated"))
    )
    assert (review.username, review.groups, review.is_audit) == (
        "system:node:n1",
        ("system:nodes", "system:authenticated"),
        False,
    )
    e = replace(parse_event(event(body=configmap())), namespace="")
    built = to_review(e, KindIndex(), domain=DOMAIN)
    assert built is not None and built[0].namespace is None


def test_a_body_that_is_no_object_is_left_for_decide_to_refuse() -> None:
    review, evidence = review_of(event(body=["not", "an", "object"]))
    assert (review.object, evidence) == (None, "object")
