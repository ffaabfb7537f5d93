"""A call that must not block, run with a bound: the tests of what a policy may make the server wait for.

Shared by the tests of a policy's files (``tests/unit/keyless/test_trust_files.py``) and of its
patterns (``tests/unit/test_regexes.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

#: Seconds a check that must not block may take before the test calls it blocked: far beyond any honest
#: answer on a loaded machine, far below "for ever" (what it took before).
BLOCKED = 30.0


def finishes(action: Callable[[], Any]) -> Any:
    """``action()``'s value or exception, or a failure if it is still running after :data:`BLOCKED` seconds.

    A thread stuck in ``open()`` of a FIFO cannot be stopped; it is a daemon, so the test
    run still ends, and the test fails instead of hanging.
    """
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(("value", action()))
        except BaseException as exc:
            outcome.append(("error", exc))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(BLOCKED)
    assert not worker.is_alive(), f"still blocked after {BLOCKED} s"
    kind, value = outcome[0]
    if kind == "error":
        raise value
    return value
