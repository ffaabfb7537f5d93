"""The API server's own call: an ``admission.k8s.io/v1`` ``AdmissionReview`` in, the same kind out.

The contract (kubernetes/kubernetes ``staging/src/k8s.io/api/admission/v1/types.go``
at 01f7553b8cf2b75cb52eea311b5ff66bed6736f2; what the API server checks of an
answer: ``staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/request/admissionreview.go``
``VerifyAdmissionResponse`` at c981c65c9013306d9a65aedbd30479b932e427b2)::

    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
     "request": {"uid": "...", "kind": {...}, "resource": {...}, "operation": "CREATE", "userInfo": {...},
                 "namespace": "...", "object": {...}, "oldObject": ..., "dryRun": false, ...}}

    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
     "response": {"uid": "<the request's>", "allowed": false,
                  "status": {"status": "Failure", "code": 403, "reason": "content-mismatch", "message": "..."},
                  "warnings": ["..."], "auditAnnotations": {"reason": "...", "signers": "...", "policy": "..."}}}

* ``response.uid`` must be the request's and ``apiVersion``/``kind`` exactly
  these, or the API server takes the answer for a failed call ("expected
  response.uid=..."; with ``failurePolicy: Fail`` the write is denied without
  our reason). A validating webhook must not answer ``patch`` or ``patchType``.
* ``status`` is read only when ``allowed`` is false (the field's comment: "IS
  NOT consulted in any way if Allowed is true"). The API server keeps our
  ``code`` (0 would become 403), ``reason`` and ``message``, and says
  ``<resource> "<name>" is forbidden: admission webhook "<name>" denied the
  request: <message>`` (``webhook/errors/statuserror.go`` ``ToStatusErr``), so
  ``message`` is the verdict's one sentence, as every other face says it, and
  ``reason`` its code: kubectl shows ``Error from server (content-mismatch)``.
* ``warnings`` go to the client as ``Warning`` headers: one holding a control
  character is dropped, and once a response's warnings pass 4096 characters
  each is cut to 256 (k8s.io/apimachinery ``pkg/util/net/http.go``
  ``NewWarningHeader``; k8s.io/apiserver ``pkg/endpoints/filters/warning.go``,
  ``truncateAtTotalRunes``/``truncateItemRunes``): :func:`provider.policystore.combine.warning_text`
  makes each fit.
* ``auditAnnotations`` are prefixed with the webhook's name and ``/`` and must
  then be a qualified name (``staging/src/k8s.io/apiserver/pkg/admission/attributes.go``
  ``checkKeyFormat``, at f517ba95e1cb2cf7dd210439cdb93594b25bf9ae: a key that is
  not is dropped with a log line): our keys are ``reason``, ``policy``,
  ``action`` and ``signers``, each at most 63 characters of ``[a-z]``.

A body that cannot be read as such a request is answered like any verdict
(HTTP 200, ``allowed: false``, reason ``request-invalid``) with whatever uid
could be read, so the denial says why wherever it can; the API server sends a
``uid``, an ``operation`` and a ``kind`` in every request (required fields),
and with a CREATE or UPDATE the ``object`` converted to that ``kind``
(``staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/generic/conversion.go`` at
b484f3924952490e3ed6ff733453a275cc536927):
a request without them, or whose object is of another kind, is refused here
(policies match the object's kind: a missing or misspelt one would match none).
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from ...errors import RequestError
from ...limits import DEFAULT_LIMITS, Limits
from ...parsing import load_json
from ...policystore.combine import Admission
from ...result import Signer
from ...review import Review

API_GROUP = "admission.k8s.io"
API_VERSION = f"{API_GROUP}/v1"
KIND = "AdmissionReview"
#: Characters of an audit annotation's value (the audit log keeps them for every write).
MAX_ANNOTATION_CHARS = 512
#: The HTTP status the API server reports for each kind of denial (``status.code``).
_CODES = {"request-invalid": 400, "transient-error": 503, "deadline-exceeded": 503, "dry-run-failed": 503,
          "internal-error": 500}  # fmt: skip


class Status(TypedDict):
    status: Literal["Failure"]
    code: int
    reason: str
    message: str


class Response(TypedDict):
    uid: str
    allowed: bool
    status: NotRequired[Status]
    warnings: NotRequired[list[str]]
    auditAnnotations: NotRequired[dict[str, str]]


class AdmissionReview(TypedDict):
    apiVersion: str
    kind: Literal["AdmissionReview"]
    response: Response


def peek_uid(data: Any) -> str:
    """The request's uid when it can be read ("" otherwise): what even a refusal must echo."""
    request = data.get("request") if isinstance(data, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    return uid if isinstance(uid, str) else ""


def read_review(body: bytes, limits: Limits = DEFAULT_LIMITS, *, seen_uid: Any = None) -> tuple[str, Review]:
    """The request's uid and its :class:`~provider.review.Review`; :class:`RequestError` when it is not usable.

    ``seen_uid`` (a callable) is told the uid as soon as it is read, before anything else is checked.
    """
    data = load_json(body, limits=limits, error=RequestError, what="the AdmissionReview")
    uid = peek_uid(data)
    if seen_uid is not None:
        seen_uid(uid)
    if not isinstance(data, dict):
        raise RequestError(f"the AdmissionReview is a JSON {type(data).__name__}, not an object")
    api_version, kind = data.get("apiVersion"), data.get("kind")
    if api_version != API_VERSION or kind != KIND:
        raise RequestError(
            f"expected apiVersion {API_VERSION} and kind {KIND}, got {str(api_version)[:40]!r} and {str(kind)[:40]!r} "
            "(set admissionReviewVersions: [v1])"
        )
    request = data.get("request")
    if not isinstance(request, dict):
        raise RequestError("the AdmissionReview has no request")
    if not uid:
        raise RequestError("request.uid: required (the API server sends one with every request)")
    if not isinstance(request.get("operation"), str) or not request.get("operation"):
        raise RequestError("request.operation: required")
    if not isinstance(request.get("userInfo"), dict):
        raise RequestError("request.userInfo: required")
    read = Review.from_admission(request, where="request")
    _check_object_kind(request, read)
    return uid, read


def _api_version(gvk: dict[str, Any]) -> str:
    group, version = gvk.get("group") or "", gvk.get("version") or ""
    return f"{group}/{version}" if group else str(version)


def _check_object_kind(request: dict[str, Any], read: Review) -> None:
    """A CREATE or UPDATE carries an object, and it is of the request's ``kind`` (module docstring).

    Policies match the object by its ``apiVersion`` and ``kind``; the API server
    converts the object to the request's ``kind`` before sending it, so anything
    else is not the API server's request, and judging it would let a missing or
    misspelt kind match no policy (allowed, out of scope) or a missing object
    match nothing at all.
    """
    gvk = request.get("kind")
    if not isinstance(gvk, dict) or not all(isinstance(gvk.get(k, ""), str) for k in ("group", "version", "kind")):
        raise RequestError("request.kind: required ({group, version, kind}; the API server always sends it)")
    if read.operation not in ("CREATE", "UPDATE"):
        return  # a DELETE's old object, a CONNECT's options: never verified (decide() allows them unverified)
    obj = read.object
    if obj is None:
        article = "an" if read.operation == "UPDATE" else "a"
        raise RequestError(f"request.object: required for {article} {read.operation} (the object written)")
    for field in ("apiVersion", "kind"):
        if not isinstance(obj.get(field), str) or not obj.get(field):
            raise RequestError(f"request.object.{field}: required (the API server sends the object with it)")
    expected = (_api_version(gvk), gvk.get("kind"))
    if (obj["apiVersion"], obj["kind"]) != expected:
        raise RequestError(
            f"request.object is {str(obj['apiVersion'])[:80]} {str(obj['kind'])[:80]}, which is not the request's kind "
            f"({str(expected[0])[:80]} {str(expected[1])[:80]}); the API server sends the object converted to it"
        )


def _signers(signers: tuple[Signer, ...]) -> str:
    names = [s if isinstance(s, str) else s.get("subject", "?") for s in signers]
    return ", ".join(names)


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_ANNOTATION_CHARS else text[: MAX_ANNOTATION_CHARS - 1] + "…"


def response(uid: str, admission: Admission) -> AdmissionReview:
    """The answer to one request (module docstring)."""
    result = admission.result
    answer: Response = {"uid": uid, "allowed": admission.allowed}
    if not admission.allowed:
        answer["status"] = {
            "status": "Failure",
            "code": _CODES.get(result.reason, 403),
            "reason": result.reason,
            "message": result.message,
        }
    if admission.warnings:
        answer["warnings"] = list(admission.warnings)
    annotations: dict[str, str] = {"reason": result.reason}
    if admission.decided_by is not None:
        annotations["policy"] = _bounded(admission.decided_by.ref)
        annotations["action"] = admission.decided_by.action
    if result.signers:
        annotations["signers"] = _bounded(_signers(result.signers))
    answer["auditAnnotations"] = annotations
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": answer}


def denial(uid: str, reason: str, message: str) -> AdmissionReview:
    """``allowed: false`` for a problem that is not a policy's verdict (an unusable request, a deadline, a bug)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "AdmissionReview",
        "response": {
            "uid": uid,
            "allowed": False,
            "status": {"status": "Failure", "code": _CODES.get(reason, 403), "reason": reason, "message": message},
            "auditAnnotations": {"reason": reason},
        },
    }
