"""Attacks on the admission route's input: AdmissionReviews no API server sends, which must not be allowed.

The route's callers are authenticated (the API server's client certificate), but
a request that is not what the API server sends is still refused with why, not
judged as if it were: fail closed. What the API server sends
(kubernetes/kubernetes ``staging/src/k8s.io/api/admission/v1/types.go`` at
01f7553b8cf2b75cb52eea311b5ff66bed6736f2): ``kind`` is "the fully-qualified type
of object being submitted (for example, v1.Pod or autoscaling.v1.Scale)" and
``object`` "the object from the incoming request" -- converted to that kind
(``staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/generic/conversion.go`` at
b484f3924952490e3ed6ff733453a275cc536927),
so its ``apiVersion`` and ``kind`` are the request's; a CREATE and an UPDATE
always carry one.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from provider.errors import RequestError
from provider.service.wire import admission
from tests.support.heldpolicies import admission_review, review
from tests.support.manifests import configmap

UNSIGNED = configmap("app", "shop", mode="prod")


def body(request: dict[str, Any]) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def with_object(obj: Any, **fields: Any) -> dict[str, Any]:
    return {**review(UNSIGNED, **fields), "object": obj}


def renamed(**fields: Any) -> dict[str, Any]:
    obj = copy.deepcopy(UNSIGNED)
    for name, value in fields.items():
        if value is None:
            obj.pop(name)
        else:
            obj[name] = value
    return obj


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (with_object(None), "request.object: required for a CREATE"),
        (with_object(None, operation="UPDATE", old=UNSIGNED), "request.object: required for an UPDATE"),
        (with_object(renamed(kind=None)), "request.object.kind"),
        (with_object(renamed(apiVersion=None)), "request.object.apiVersion"),
        (with_object(renamed(kind="configmap")), "is not the request's kind"),
        (with_object(renamed(kind="Secret")), "is not the request's kind"),
        (with_object(renamed(apiVersion="example.com/v1")), "is not the request's kind"),
        ({**review(UNSIGNED), "kind": None}, "request.kind: required"),
        ({**review(UNSIGNED), "kind": {"group": "", "version": "v1", "kind": "Secret"}}, "is not the request's kind"),
    ],
    ids=["create-without-object", "update-without-object", "object-without-kind", "object-without-apiversion",
         "kind-in-lower-case", "kind-another", "apiversion-another", "request-without-kind", "request-kind-another"],
)  # fmt: skip
def test_a_write_whose_object_is_not_the_requests_is_refused(request_: dict[str, Any], words: str) -> None:
    """Before: a CREATE without an object was allowed (nothing to match), and an object whose kind
    differs from the request's matched no policy naming the kind: allowed, out-of-scope."""
    with pytest.raises(RequestError, match=words):
        admission.read_review(body(request_))


def test_what_the_api_server_sends_still_reads() -> None:
    for request in (
        admission_review(UNSIGNED)["request"],
        admission_review(UNSIGNED, operation="UPDATE", old=UNSIGNED)["request"],
        admission_review(None, operation="DELETE", old=UNSIGNED)["request"],
    ):
        uid, read = admission.read_review(body(request))
        assert uid == request["uid"] and read.operation == request["operation"]
