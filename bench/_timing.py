"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def rate(fn: Callable[[], Any], seconds: float, batch: int = 20) -> float:
    """Calls per second: the best of five runs of about ``seconds / 5`` each.

    The best run, not the mean: on a shared machine the slow runs measure the
    neighbours, the fast ones what the code costs.
    """
    fn()
    best = 0.0
    for _ in range(5):
        calls, started = 0, time.perf_counter()
        deadline = started + seconds / 5
        while True:
            for _ in range(batch):
                fn()
            calls += batch
            now = time.perf_counter()
            if now >= deadline:
                break
        best = max(best, calls / (now - started))
    return best
