"""The garbage collector's finalizers: no exemption explains one outside a deletion.

From an attack pass without any signing key (docs/security.md). Each test is named by the attack; a table
row's id names the input.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from provider import Review, decide
from provider.errors import ContentMismatch
from provider.result import Result
from provider.verifier import verify
from tests.support.live import deployment, signed
from tests.support.live_verdicts import LIVE_POLICY, live, stored_deployment

# --- the garbage collector's finalizers: no exemption explains one outside a deletion ----------------------------


def _with_finalizers(obj: dict[str, Any], finalizers: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["finalizers"] = finalizers
    return out


def _live(finalizers: list[str]) -> Result:
    return live(_with_finalizers(stored_deployment(), finalizers))


def _gatekeeper_audit(finalizers: list[str]) -> Result:
    obj = _with_finalizers(stored_deployment(), finalizers)
    return decide(Review.from_admission({"object": obj, "namespace": "shop", "name": "web"}), LIVE_POLICY)


def _update_keeping_it(finalizers: list[str]) -> Result:
    obj = _with_finalizers(stored_deployment(), finalizers)
    request = {
        "operation": "UPDATE",
        "userInfo": {"username": "mallory", "groups": ["system:authenticated"]},
        "namespace": "shop",
        "name": "web",
        "object": obj,
        "oldObject": obj,
    }
    return decide(Review.from_admission(request), LIVE_POLICY)


@pytest.mark.parametrize("finalizers", [["orphan"], ["foregroundDeletion"], ["example.com/x", "orphan"]])
@pytest.mark.parametrize(
    "how",
    [
        pytest.param(_live, id="verify-resource-and-the-observer"),
        pytest.param(_gatekeeper_audit, id="gatekeeper-audit"),
        pytest.param(_update_keeping_it, id="update-that-keeps-the-old-objects-finalizer"),
    ],
)
def test_a_garbage_collector_finalizer_outside_a_deletion_is_not_excused_by_its_exemption(
    how: Callable[[list[str]], Result], finalizers: list[str]
) -> None:
    result = how(finalizers)
    assert not result.verified and not result.allowed, result.message
    assert result.reason == "content-mismatch" and "set only by a DELETE" in result.message


def test_a_controllers_own_finalizer_on_a_live_object_is_still_tolerated() -> None:
    # The rule names the garbage collector's two; any other finalizer stays what the profile says.
    assert live(_with_finalizers(stored_deployment(), ["example.com/cleanup"])).verified


@pytest.mark.parametrize(
    "finalizers",
    [pytest.param("orphan", id="a-string"), pytest.param({"0": "orphan"}, id="a-mapping")],
)
def test_finalizers_that_are_not_a_list_are_a_difference(finalizers: Any) -> None:
    # The API server refuses them; a file or a library caller's object must not verify with them either.
    with pytest.raises(ContentMismatch, match="set only by a DELETE"):
        verify(_with_finalizers(signed(deployment("web")), finalizers), LIVE_POLICY)
