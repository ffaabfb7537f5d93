"""What the API server makes of a validating webhook's answer, rule by rule from its source.

There is no API server here, so the tests read the service's ``AdmissionReview``
answers as the API server would, and a stand-in must enforce at least what the
real thing enforces. Each rule cites where it is (kubernetes/kubernetes, the
commits the search index holds):

* the contract -- ``staging/src/k8s.io/api/admission/v1/types.go`` at
  01f7553b8cf2b75cb52eea311b5ff66bed6736f2: the JSON names and types of
  :data:`REQUEST_FIELDS`, :data:`RESPONSE_FIELDS` and metav1.Status's
  :data:`STATUS_FIELDS` (``staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go``);
* reading the answer -- ``staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/request/admissionreview.go``
  ``VerifyAdmissionResponse`` at c981c65c9013306d9a65aedbd30479b932e427b2: the
  response present, its uid the request's, apiVersion/kind exactly
  ``admission.k8s.io/v1``/``AdmissionReview``, no ``patch`` or ``patchType`` from
  a validating webhook -- any of these is a failed call (:class:`CallFailed`);
* using it -- ``.../webhook/validating/dispatcher.go`` ``callHook`` at
  7d81be8eab60304167de97ca801855ac6eb7da57: each audit annotation as
  ``<webhook name>/<key>`` through ``attributes.go`` ``checkKeyFormat``
  (f517ba95e1cb2cf7dd210439cdb93594b25bf9ae: exactly one ``/`` and a qualified
  name, else dropped); each warning through ``warning.AddWarning``, whose
  recorder (``pkg/endpoints/filters/warning.go``) skips empty and repeated
  texts, drops one ``NewWarningHeader`` refuses (k8s.io/apimachinery
  ``pkg/util/net/http.go`` at 627218a8e2e8dddc70312c04b0fd5a90bccb8022: invalid
  UTF-8 or a control character) and cuts each to 256 runes once the total
  passes 4096; a denial through ``webhook/errors/statuserror.go`` ``ToStatusErr``
  (3d7848758c5f79b1d313f52b584e925b32262c69): code 0 becomes 403, an empty
  status ``Failure``, the message ``<resource> "<name>" is forbidden: admission
  webhook "<webhook>" denied the request: <message>`` (``Internal error
  occurred: ...`` for a 500), the reason ``Forbidden`` only when none is given.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

#: AdmissionRequest's JSON fields and their JSON types ("object" for a struct or RawExtension).
REQUEST_FIELDS = {
    "uid": str, "kind": dict, "resource": dict, "subResource": str, "requestKind": dict, "requestResource": dict,
    "requestSubResource": str, "name": str, "namespace": str, "operation": str, "userInfo": dict,
    "object": (dict, type(None)), "oldObject": (dict, type(None)), "dryRun": bool, "options": (dict, type(None)),
}  # fmt: skip
#: AdmissionResponse's JSON fields; ``uid`` and ``allowed`` have no omitempty (always sent).
RESPONSE_FIELDS = {"uid": str, "allowed": bool, "status": dict, "patch": str, "patchType": str,
                   "auditAnnotations": dict, "warnings": list}  # fmt: skip
RESPONSE_REQUIRED = ("uid", "allowed")
#: metav1.Status's JSON fields (besides TypeMeta/ListMeta, which a response's status need not carry).
STATUS_FIELDS = {"apiVersion": str, "kind": str, "metadata": dict, "status": str, "message": str, "reason": str,
                 "details": dict, "code": int}  # fmt: skip
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")

TRUNCATE_AT_TOTAL_RUNES = 4 * 1024
TRUNCATE_ITEM_RUNES = 256
#: apimachinery validation.IsQualifiedName: an optional DNS-subdomain prefix, a name of at most 63 characters.
_QUALIFIED = re.compile(
    r"(?:(?P<prefix>[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*)/)?"
    r"(?P<name>[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)\Z"
)


class CallFailed(Exception):
    """The API server takes the answer for a failed call (with failurePolicy Fail: the write is denied)."""


def is_qualified_name(key: str) -> bool:
    found = _QUALIFIED.match(key)
    if found is None or len(found["name"]) > 63:
        return False
    return not (found["prefix"] and len(found["prefix"]) > 253)


def _valid_warning(text: str) -> bool:
    return not any(unicodedata.category(ch) == "Cc" for ch in text)


@dataclass
class Outcome:
    """What the client and the audit log get from one webhook answer."""

    allowed: bool
    #: The Status the client gets for a denial (None when allowed).
    status: dict[str, Any] | None
    #: The Warning headers' texts, in order.
    warnings: list[str] = field(default_factory=list)
    #: The audit annotations kept, with their webhook prefix.
    annotations: dict[str, str] = field(default_factory=dict)
    #: Audit annotations the API server dropped (logged "Failed to set admission audit annotation").
    dropped_annotations: list[str] = field(default_factory=list)
    dropped_warnings: list[str] = field(default_factory=list)


def read_answer(
    answer: Any, uid: str, *, webhook: str = "manifests.manifest-provider.io", resource: str = "configmaps",
    name: str = "app",
) -> Outcome:  # fmt: skip
    """The API server's reading of ``answer`` to the request ``uid`` (module docstring); :class:`CallFailed`."""
    if not isinstance(answer, dict) or answer.get("response") is None:
        raise CallFailed("webhook response was absent")
    response = answer["response"]
    if response.get("uid") != uid:
        raise CallFailed(f"expected response.uid={uid!r}, got {response.get('uid')!r}")
    if (answer.get("apiVersion"), answer.get("kind")) != ("admission.k8s.io/v1", "AdmissionReview"):
        raise CallFailed(
            f"expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {answer.get('apiVersion')}"
        )
    if response.get("patch"):
        raise CallFailed("validating webhook may not return response.patch")
    if response.get("patchType") is not None:
        raise CallFailed("validating webhook may not return response.patchType")
    for name_, kind in RESPONSE_FIELDS.items():
        if name_ in response and not isinstance(response[name_], kind):
            raise CallFailed(f"response.{name_}: not a {kind.__name__} (the JSON decoder refuses it)")
    outcome = Outcome(allowed=bool(response.get("allowed")), status=None)
    for key, value in (response.get("auditAnnotations") or {}).items():
        full = f"{webhook}/{key}"
        if full.count("/") != 1 or not is_qualified_name(full) or not isinstance(value, str):
            outcome.dropped_annotations.append(key)
        else:
            outcome.annotations[full] = value
    seen: set[str] = set()
    texts: list[str] = []
    for text in response.get("warnings") or []:
        if not text or text in seen:
            continue
        seen.add(text)
        if not _valid_warning(text):
            outcome.dropped_warnings.append(text)
            continue
        texts.append(text)
    if sum(len(t) for t in texts) > TRUNCATE_AT_TOTAL_RUNES:
        texts = [t[:TRUNCATE_ITEM_RUNES] for t in texts]
    outcome.warnings = texts
    if outcome.allowed:
        return outcome
    status = dict(response.get("status") or {})
    for name_, kind in STATUS_FIELDS.items():
        if name_ in status and not isinstance(status[name_], kind):
            raise CallFailed(f"response.status.{name_}: not a {kind.__name__}")
    if not status.get("code"):
        status["code"] = 403
    if not status.get("status"):
        status["status"] = "Failure"
    denied_by = f'admission webhook "{webhook}" denied the request'
    if status.get("message"):
        message = f"{denied_by}: {status['message']}"
    elif status.get("reason"):
        message = f"{denied_by}: {status['reason']}"
    else:
        message = f"{denied_by} without explanation"
    prefix = "Internal error occurred" if status["code"] == 500 else f'{resource} "{name or "Unknown"}" is forbidden'
    status["message"] = f"{prefix}: {message}"
    if not status.get("reason"):
        status["reason"] = "InternalError" if status["code"] == 500 else "Forbidden"
    outcome.status = status
    return outcome
