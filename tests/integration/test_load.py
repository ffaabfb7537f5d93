"""A short soak in ``make test``: mixed traffic at 70% of the measured capacity (``bench/soak.py``).

``make soak`` holds the load for ten minutes; this run holds it for 20 seconds, with
a verdict cache small enough (256 entries per worker instead of 4096) to fill during
the warm-up, so that "memory is flat after the warm-up" is tested at the cache's
steady state and not while it fills.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "bench"
#: The service's deadline: even the slowest answer under 70% load must come well within it.
DEADLINE_MS = 2500


def soak_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_soak", BENCH / "soak.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_mixed_traffic_at_70_percent_of_capacity_gets_right_verdicts_in_flat_memory() -> None:
    report = soak_module().run(seconds=20, capacity_seconds=4, warmup=8, env={"MANIFEST_PROVIDER_CACHE_ENTRIES": "256"})
    print(json.dumps(report, indent=2))  # the figures, for whoever reads the test log
    assert report["server_errors_5xx"] == 0
    assert report["wrong_verdicts"] == {}
    assert report["transport_errors"] == {}
    assert not report["workers_replaced"]
    assert set(report["requests"]) == {"valid", "tampered", "unsigned", "garbage"}
    # The load was applied. Holding 90% of the target is the soak's goal (`make soak`, report["passed"]):
    # here the capacity is measured in 4 s and a busy machine may take cores from the load generator
    # after that, so this asks only that most of the load arrived -- what the other checks need.
    assert report["achieved_rps"] >= 0.5 * report["target_rps"]
    assert report["memory"]["growth"] < 0.10, report["memory"]
    assert report["latency"]["p99_ms"] < DEADLINE_MS
