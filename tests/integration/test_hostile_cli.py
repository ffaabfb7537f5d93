"""The hostile-input corpus through the real command line: exit codes, clear messages, bounded time and memory.

Every file of ``tests/assets/hostile/index.yaml`` is handed to ``manifest-provider
verify`` where its kind says (``-f`` for objects, reviews and raw bodies,
``--config`` for policies, ``-k`` for keys), each run in its own process under
an address-space limit, so a bomb that got through would kill that process, not
the test run. The runs go in parallel before the tests look at them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.assets.hostile import corpus
from tests.support.server import command

pytestmark = pytest.mark.integration

#: Address space one CLI run may map (the interpreter with cryptography and PyYAML maps ~300 MiB).
ADDRESS_SPACE = 1024 * 2**20
#: Resident memory one run may reach; a verification of a small object peaks at ~60 MiB.
MAX_RSS = 256 * 2**20
#: Seconds one run may take (startup ~0.2 s; the slowest file, 3 MB of JSON, ~2 s).
TIME_LIMIT = 20.0

FILES = corpus.load()


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str
    seconds: float
    max_rss: int


#: Runs the CLI as a child of a small interpreter and writes the child's peak RSS to argv[1].
#: The kernel carries a process's peak RSS across fork and exec (``exec_mmap`` folds the old
#: address space's high-water mark into ``signal->maxrss``), so a CLI started straight from
#: pytest would be charged with pytest's own few hundred MiB; started from this launcher, it
#: inherits the launcher's ~10 MiB instead.
LAUNCHER = """
import os, resource, sys
limit = int(sys.argv[2])
pid = os.fork()
if pid == 0:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.execvp(sys.argv[3], sys.argv[3:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss * 1024))
sys.exit(os.waitstatus_to_exitcode(status) % 256)
"""


def run_cli(args: list[str], directory: Path) -> Run:
    """One CLI run under :data:`ADDRESS_SPACE` with its own peak RSS, killed past :data:`TIME_LIMIT` * 2."""
    with (
        tempfile.TemporaryFile(dir=directory) as out,
        tempfile.TemporaryFile(dir=directory) as err,
        tempfile.NamedTemporaryFile(dir=directory) as rss,
    ):
        start = time.perf_counter()
        launcher = [sys.executable, "-c", LAUNCHER, rss.name, str(ADDRESS_SPACE)]
        process = subprocess.Popen(
            [*launcher, *command(), *args], stdout=out, stderr=err, cwd=directory, start_new_session=True
        )
        try:
            process.wait(2 * TIME_LIMIT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the launcher and the CLI under it
            process.wait()
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        measured = Path(rss.name).read_text()
        return Run(
            process.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            seconds,
            int(measured) if measured else MAX_RSS,  # not measured: counts as over the bound
        )


def arguments(item: corpus.CorpusFile, directory: Path) -> list[str]:
    key, control = str(corpus.TRUSTED_KEY), str(corpus.CONTROL)
    if item.kind == "policy":
        return ["verify", "-f", control, "--config", str(item.path), "-o", "json"]
    if item.kind == "key":
        return ["verify", "-f", control, "-k", str(item.path), "-o", "json"]
    target = corpus.admission_review_file(item, directory) if item.kind == "review" else item.path
    return ["verify", "-f", str(target), "-k", key, "-o", "json"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    directory = tmp_path_factory.mktemp("hostile-cli")
    files = corpus.materialize(directory)
    with ThreadPoolExecutor(max_workers=max(2, (os.cpu_count() or 2))) as pool:
        futures = {item.name: pool.submit(run_cli, arguments(item, directory), directory) for item in files}
        yield {name: future.result() for name, future in futures.items()}


@pytest.mark.parametrize("item", FILES, ids=[f.name for f in FILES])
def test_the_cli_answers_every_hostile_file_clearly_within_bounds(
    item: corpus.CorpusFile, runs: dict[str, Run]
) -> None:
    run = runs[item.name]
    output = run.stdout + run.stderr
    assert not corpus.has_traceback(output), output[-2000:]
    assert run.seconds < TIME_LIMIT, f"{item.name}: {run.seconds:.1f} s"
    assert run.max_rss < MAX_RSS, f"{item.name}: {run.max_rss / 2**20:.0f} MiB"
    expected = item.cli_expected
    if expected == "usage":
        assert run.code == 2, (run.code, output[-2000:])
        assert run.stderr.startswith("manifest-provider verify: ") and len(run.stderr.strip()) > len(
            "manifest-provider verify: "
        )
        if item.cli is None:  # the CLI reads the file as the library does
            assert item.says in run.stderr, run.stderr
        return
    results = json.loads(run.stdout)["results"]
    assert results, run.stdout
    for result in results:
        assert result["reason"] == expected, (item.name, result)
        assert result["message"]
        assert result["allowed"] is (result["reason"] in corpus.ALLOWING_REASONS)
        assert result["verified"] is (result["reason"] == "verified")
    assert run.code == (0 if expected in corpus.ALLOWING_REASONS else 1), run.code
    if item.cli is None and expected != "verified":
        assert item.says in results[0]["message"], results[0]["message"]
