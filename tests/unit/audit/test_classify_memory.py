"""classify streams: memory does not grow with the log's length (measured).

The synthetic log comes from ``bench/classify.py`` (the full million-event
measurement lives there): every event names a new namespace, user and
unprocessed triple, the worst case for the bounded structures.
"""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from provider.audit.classify import Classifier, Summary
from provider.audit.events import read_events
from provider.policy.schema import Policy
from tests.support.data import REPO
from tests.support.keys import make_key, public_key_pem

pytestmark = pytest.mark.slow


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_classify", REPO / "bench" / "classify.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Lines(io.RawIOBase):
    """Generated lines as a readable stream, produced only as they are read."""

    def __init__(self, lines: Iterator[bytes]) -> None:
        self._lines = lines
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            self._pending = next(self._lines, b"")
            if not self._pending:
                return 0
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def test_python_heap_stays_flat_once_the_bounded_structures_are_full() -> None:
    policy = Policy.from_dict({"keys": [public_key_pem(make_key())]})
    caps = {"top_capacity": 200, "max_groups": 200, "max_accounts": 200}
    summary = Summary(by=("namespace", "user", "kind"), **caps)
    classifier = Classifier(policy)
    stream = io.BufferedReader(Lines(bench().lines(10_000)))
    marks: dict[int, int] = {}
    tracemalloc.start()
    try:
        for i, item in enumerate(classifier.classify_all(read_events(stream)), start=1):
            summary.add(item)
            if i in (2_500, 10_000):  # full after ~800 events; then 7,500 more
                marks[i] = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert summary.total == 10_000
    assert not summary.unprocessed.exact and summary.accounts_untracked > 0
    growth = marks[10_000] - marks[2_500]
    print(
        f"\nheap after 2,500 events {marks[2_500] / 1024:.0f} KiB, after 10,000 {marks[10_000] / 1024:.0f} KiB",
        file=sys.stderr,
    )
    assert growth < 32 * 1024, f"the heap grew by {growth} bytes over 7,500 events"


def test_cli_peak_rss_is_independent_of_the_log_length(tmp_path: Path) -> None:
    module = bench()
    policy = tmp_path / "policy.yaml"
    policy.write_text(json.dumps({"keys": [public_key_pem(make_key())]}))
    figures = {}
    for count in (45_000, 120_000):
        seconds, rss_kib, code = module.run(count, str(policy))
        assert code == 1
        figures[count] = rss_kib
        print(
            f"\n{count} events: {seconds:.1f} s, {count / seconds:.0f} events/s, peak RSS {rss_kib / 1024:.1f} MiB",
            file=sys.stderr,
        )
    # Every cap (10,000 groups, triples, accounts) is reached by 40,000 events; a longer log may not cost more.
    assert figures[120_000] - figures[45_000] < 8 * 1024, figures
