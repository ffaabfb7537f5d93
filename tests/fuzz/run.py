"""Run every fuzz target for a while: ``python tests/fuzz/run.py [--seconds S] [--target T] [--artifacts DIR]``.

``make test`` runs a smoke run of a few seconds per target (``test_fuzz_smoke.py``);
``make fuzz`` runs each for ``FUZZ_SECONDS`` (default 300). Each target starts from
its committed corpus (``corpus/<target>/``: seeds and every input that once crashed
or hung) plus seeds made from the hostile-input corpus, and writes what it learns
to a scratch directory that is thrown away.

A crash or a hang leaves ``crash-*`` / ``timeout-*`` / ``oom-*`` files in the artifacts
directory and a non-zero exit status. Fix the bug, then copy the file into
``corpus/<target>/`` so the replay test keeps it fixed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from tests.fuzz.targets import CORPUS, TARGETS, seeds  # noqa: E402

#: Seconds one input may take before libFuzzer calls it a hang (the service's deadline is 2.5 s).
INPUT_TIMEOUT = 5
#: Resident memory the fuzzing process may reach (it idles at ~60 MiB).
RSS_LIMIT_MB = 1024
#: Longest input the fuzzer builds (seeds may be longer).
MAX_LEN = 64 * 1024


@dataclass(frozen=True)
class Outcome:
    target: str
    code: int
    artifacts: list[Path]
    output: str

    @property
    def ok(self) -> bool:
        return self.code == 0 and not self.artifacts


def write_seeds(target: str, directory: Path) -> int:
    count = 0
    for seed in seeds(target):
        (directory / hashlib.sha256(seed).hexdigest()[:16]).write_bytes(seed)
        count += 1
    return count


def fuzz(target: str, seconds: float, artifacts: Path) -> Outcome:
    artifacts.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{target}-") as scratch:
        work, seed_dir = Path(scratch, "work"), Path(scratch, "seeds")
        work.mkdir()
        seed_dir.mkdir()
        write_seeds(target, seed_dir)
        committed = CORPUS / target
        before = set(artifacts.iterdir())
        cmd = [
            sys.executable, str(HERE / "fuzz.py"), target,
            f"-max_total_time={max(1, round(seconds))}", f"-timeout={INPUT_TIMEOUT}", f"-rss_limit_mb={RSS_LIMIT_MB}",
            f"-max_len={MAX_LEN}", f"-artifact_prefix={artifacts}{os.sep}", "-print_final_stats=1",
            str(work), str(seed_dir), *([str(committed)] if committed.is_dir() else []),
        ]  # fmt: skip
        result = subprocess.run(
            cmd, capture_output=True, text=True, errors="replace", cwd=REPO, check=False, timeout=seconds + 120
        )
        found = sorted(
            p
            for p in set(artifacts.iterdir()) - before
            if p.name.startswith(("crash-", "timeout-", "oom-", "leak-", "slow-unit-"))
        )
        return Outcome(target, result.returncode, found, result.stdout + result.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=float(os.environ.get("FUZZ_SECONDS", "300")), help="fuzzing time per target"
    )
    parser.add_argument("--target", choices=sorted(TARGETS), action="append", help="only this target (repeatable)")
    parser.add_argument(
        "--artifacts",
        type=Path,
        default=Path(tempfile.gettempdir()) / "manifest-provider-fuzz",
        help="where crashing inputs go",
    )
    args = parser.parse_args()
    failed = 0
    for target in args.target or sorted(TARGETS):
        outcome = fuzz(target, args.seconds, args.artifacts)
        stats = [
            line
            for line in outcome.output.splitlines()
            if line.startswith(("stat::number_of_executed_units", "stat::new_units_added")) or " DONE " in line
        ]
        print(f"{target}: {'ok' if outcome.ok else 'FAILED'} ({'; '.join(stats) or 'no statistics'})")
        for path in outcome.artifacts:
            print(f"  {path}: copy it into {CORPUS / target}/ once the bug is fixed")
        if not outcome.ok:
            failed += 1
            print(outcome.output[-3000:], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
