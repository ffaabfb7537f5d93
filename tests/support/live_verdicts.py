"""A stored Deployment and its live verdict under the live objects' policy (``tests/support/live.py``).

Shared by the tests of what live verification tolerates (``tests/unit/audit/test_live_tolerance.py``),
the garbage collector's finalizers (``tests/unit/test_exemptions_finalizers.py``), the observer's
reports and the Kyverno verdict cache.
"""

from __future__ import annotations

from typing import Any

from provider import Policy
from provider.audit.live import check
from provider.result import Result
from tests.support.live import POLICY, deployment, signed, stored

LIVE_POLICY = Policy.from_dict(POLICY)


def live(obj: dict[str, Any]) -> Result:
    checked = check(obj, LIVE_POLICY)
    assert not checked.error, checked.result.message
    return checked.result


def stored_deployment() -> dict[str, Any]:
    return stored(signed(deployment("web")), "10", "uid-web")
