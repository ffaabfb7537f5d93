"""The Kyverno verdict cache: a background scan's verdict is never served to an admission request.

From an attack pass without any signing key (docs/security.md).
"""

from __future__ import annotations

from provider import Review, decide
from provider.service.wire import kyverno
from tests.support.live import POLICY
from tests.support.live_verdicts import LIVE_POLICY, stored_deployment

# --- the Kyverno verdict cache: a background scan's verdict for an admission request -----------------------------


def test_a_background_scans_verdict_is_never_served_to_a_request_with_a_uid() -> None:
    # The cache key left out the uid (fresh on every AdmissionRequest), but whether there is one decides: a body
    # without uid or userInfo is a background scan, judged as the stored object (an exempt controller's change
    # tolerated); the same body with a uid is an admission request, where the change is the requester's.
    obj = stored_deployment()
    obj["spec"]["replicas"] = 9
    scan = {"operation": "CREATE", "object": obj, "namespace": "shop", "name": "web"}
    admission = {**scan, "uid": "4f1c2a1e-0000-4000-8000-000000000001"}
    assert decide(Review.from_admission(scan), LIVE_POLICY).verified
    assert not decide(Review.from_admission(admission), LIVE_POLICY).verified
    assert kyverno.cache_key(scan, POLICY, "manifest") != kyverno.cache_key(admission, POLICY, "manifest")
    again = {**admission, "uid": "4f1c2a1e-0000-4000-8000-000000000002"}
    assert kyverno.cache_key(admission, POLICY, "manifest") == kyverno.cache_key(again, POLICY, "manifest")
