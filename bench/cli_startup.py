"""The command line's start-up: whole processes against the interpreter starting and doing nothing.

Measures, in one run, round-robin (each round runs every command once, so a
neighbour's load falls on all of them alike), the wall time of each whole process:

* **floor**: ``python -c pass`` -- the interpreter of this environment starting
  (``site``, the installed packages' path hooks) and exiting;
* ``python -c 'import provider'`` -- the library's face;
* ``manifest-provider --version`` and ``--help``, and ``verify --help``;
* ``manifest-provider verify`` of one signed object with one key: upstream's own
  signed ConfigMap (``tests/data/interop/k8s-manifest-sigstore/manifests/cm-tarball-key-signed.yaml``,
  signed by ``kubectl sigstore sign``) and its key
  (``tests/data/interop/k8s-manifest-sigstore/keys/testpub.pem``), the file a
  ``kubectl sigstore verify`` of the Go reference is measured on.

Prints the median of ``--runs`` runs of each, its CPU time (user + system, median)
and its ratio to the floor (goal for ``verify``: at most 2.5x, docs/performance.md).
``--importtime`` also prints the top entries of ``python -X importtime`` for the
``verify`` run (cumulative microseconds, the modules that cost most with what they
import).

Every process runs with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` removed from
its environment), and one warm-up run of each command writes the caches first: an
installed package has its ``.pyc`` files (pip compiles a wheel's modules when it
installs it), and without them each start compiles every module it imports again.

Usage: ``python bench/cli_startup.py [--runs N] [--importtime [N]] [--json]``. To
measure another checkout, run it with ``PYTHONPATH=<that checkout>``: the commands
are started with this environment.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
CLI = Path(PYTHON).parent / "manifest-provider"
INTEROP = REPO / "tests" / "data" / "interop" / "k8s-manifest-sigstore"
SIGNED = INTEROP / "manifests" / "cm-tarball-key-signed.yaml"
KEY = INTEROP / "keys" / "testpub.pem"
FLOOR = "python -c pass (floor)"
VERIFY = "manifest-provider verify (1 object, 1 key)"
#: The goal for a whole-process verify, as a multiple of the floor (docs/performance.md, "CLI start-up").
GOAL = 2.5


def commands() -> dict[str, list[str]]:
    return {
        FLOOR: [PYTHON, "-c", "pass"],
        "python -c 'import provider'": [PYTHON, "-c", "import provider"],
        "manifest-provider --version": [str(CLI), "--version"],
        "manifest-provider --help": [str(CLI), "--help"],
        "manifest-provider verify --help": [str(CLI), "verify", "--help"],
        VERIFY: [str(CLI), "verify", "-f", str(SIGNED), "-k", str(KEY)],
    }


#: The commands' environment: this one, with bytecode caching on.
ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
#: Where the commands run: an empty directory, so that ``python -c`` and ``-m`` (which put the working
#: directory first on ``sys.path``) import the installed package, or the one ``PYTHONPATH`` names.
CWD = tempfile.mkdtemp(prefix="cli-startup-")


def run_once(cmd: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one whole process, which must exit 0."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True, cwd=CWD, env=ENV)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(runs: int) -> dict[str, dict[str, float]]:
    cmds = commands()
    walls: dict[str, list[float]] = {label: [] for label in cmds}
    cpus: dict[str, list[float]] = {label: [] for label in cmds}
    for cmd in cmds.values():  # one warm-up each: the page cache, not the code, is then measured alike
        run_once(cmd)
    for _ in range(runs):
        for label, cmd in cmds.items():
            wall, cpu = run_once(cmd)
            walls[label].append(wall)
            cpus[label].append(cpu)
    floor = statistics.median(walls[FLOOR])
    return {
        label: {
            "median_ms": statistics.median(walls[label]) * 1000,
            "cpu_ms": statistics.median(cpus[label]) * 1000,
            "ratio_to_floor": statistics.median(walls[label]) / floor,
        }
        for label in cmds
    }


def importtime(top: int) -> list[dict[str, Any]]:
    """The ``top`` entries of ``python -X importtime`` for the ``verify`` run, by cumulative time."""
    cmd = [PYTHON, "-X", "importtime", "-m", "provider.cli", *commands()[VERIFY][1:]]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=CWD, env=ENV)
    rows: list[dict[str, Any]] = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        _, self_us, cumulative_us, name = (part.strip() for part in line.replace("import time:", "|", 1).split("|"))
        rows.append({"module": name, "self_us": int(self_us), "cumulative_us": int(cumulative_us)})
    rows.sort(key=lambda row: -int(row["cumulative_us"]))
    return rows[:top]


def main() -> int:
    try:
        return report()
    finally:
        os.rmdir(CWD)


def report() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11, help="runs of each command (default 11); the median is shown")
    parser.add_argument(
        "--importtime", type=int, nargs="?", const=25, default=0, metavar="N", help="also the top N import times"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if not CLI.exists():
        sys.exit(f"{CLI} not found: run `make install` first")
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "runs": args.runs},
        "startup": measure(args.runs),
    }
    if args.importtime:
        report["importtime"] = importtime(args.importtime)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"machine: {report['machine']['cpus']} CPUs, Python {report['machine']['python']}; median of {args.runs} runs"
    )
    for label, row in report["startup"].items():
        print(
            f"  {label:<44}: {row['median_ms']:6.0f} ms wall  {row['cpu_ms']:6.0f} ms CPU  ({row['ratio_to_floor']:.2f}x)"
        )
    ratio = report["startup"][VERIFY]["ratio_to_floor"]
    print(f"verify: {ratio:.2f}x the floor (goal <= {GOAL}x): {'met' if ratio <= GOAL else 'NOT met'}")
    for row in report.get("importtime", []):
        print(f"  {row['cumulative_us'] / 1000:8.1f} ms  {row['self_us'] / 1000:7.1f} ms self  {row['module']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
