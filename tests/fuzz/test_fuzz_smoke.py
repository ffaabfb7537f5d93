"""The fuzz targets in ``make test``: the kept corpus replays cleanly, and a short fuzzing run finds nothing.

``make fuzz`` runs the same targets for minutes (``tests/fuzz/run.py``).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fuzz.run import fuzz
from tests.fuzz.targets import CORPUS, TARGETS, seeds

#: Seconds of fuzzing per target in ``make test`` (each run also pays ~1 s of start-up).
SMOKE_SECONDS = 3
#: Seconds one replayed input may take (the fuzzer's own hang limit).
INPUT_TIME = 5.0

KEPT = sorted((target, path) for target in TARGETS for path in (CORPUS / target).iterdir())


def test_every_target_has_a_kept_corpus() -> None:
    for target in TARGETS:
        assert any((CORPUS / target).iterdir()), f"corpus/{target}/ is empty"


@pytest.mark.parametrize(("target", "path"), KEPT, ids=[f"{t}/{p.name}" for t, p in KEPT])
def test_the_kept_corpus_replays_without_an_unexpected_error(target: str, path: Path) -> None:
    start = time.perf_counter()
    TARGETS[target](path.read_bytes())
    assert time.perf_counter() - start < INPUT_TIME


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_the_hostile_corpus_seeds_replay_without_an_unexpected_error(target: str) -> None:
    count = 0
    for seed in seeds(target):
        start = time.perf_counter()
        TARGETS[target](seed)
        assert time.perf_counter() - start < INPUT_TIME, seed[:80]
        count += 1
    assert count >= 10


@pytest.mark.slow
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_short_fuzzing_run_finds_no_crash_and_no_hang(target: str, tmp_path: Path) -> None:
    outcome = fuzz(target, SMOKE_SECONDS, tmp_path / "artifacts")
    assert outcome.ok, f"{outcome.artifacts}\n{outcome.output[-3000:]}"
    assert "stat::number_of_executed_units" in outcome.output
