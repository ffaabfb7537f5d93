"""Every benchmark in one run, and the figures ``docs/performance.md`` quotes.

Runs, one after the other (each in its own process, so none warms another's caches):

* ``bench/verify.py``   -- in-process ``decide()`` against its floor; growth with object size and keys;
* ``bench/service.py``  -- the HTTPS service: server CPU per verification, latency, cache hits;
* ``bench/inline_bound.py`` -- the costliest verification the request thread may take on, against the deadline;
* ``bench/dryrun.py``   -- what a server-side dry-run adds;
* ``bench/keyless.py``  -- keyless verification against a key verification;
* ``bench/bundles.py``  -- OCI resource bundles from a real local registry against a signature on the object;
* ``bench/classify.py`` -- audit-log classification throughput and memory;
* ``bench/verify_resource.py`` -- ``verify-resource`` over 12 000 objects of a fake API
  server against in-process ``decide()``, and its memory at two list sizes;
* ``bench/cli_startup.py`` -- the CLI's start-up: a one-object ``verify``, ``--version`` and
  ``--help`` against the interpreter's own start-up;
* ``bench/soak.py``     -- capacity and latency under mixed traffic at 70% of it
  (``--soak-seconds``, 60 by default; ``make soak`` holds it for 10 minutes).

Prints the figures grouped as the document has them (``--json`` for all the raw
numbers). Figures are ratios to a floor measured in the same run wherever a floor
exists, so they can be compared across machines.

Usage: ``python bench/run_all.py [--seconds S] [--soak-seconds S] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PYTHON = sys.executable
CLI = Path(PYTHON).parent / "manifest-provider"


def run_json(script: str, *args: str) -> Any:
    result = subprocess.run(
        [PYTHON, str(BENCH / script), *args, "--json"], capture_output=True, text=True, cwd=REPO, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"{script} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return json.loads(result.stdout)


def classify(events: int) -> dict[str, float]:
    result = subprocess.run(
        [PYTHON, str(BENCH / "classify.py"), "--events", str(events)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    for line in result.stdout.splitlines():
        fields = line.split()
        if fields and fields[0] == str(events):
            return {
                "events": events,
                "seconds": float(fields[1]),
                "events_per_s": float(fields[2]),
                "peak_rss_mib": float(fields[3]),
            }
    raise RuntimeError(f"classify.py printed no row for {events} events:\n{result.stdout}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, help="measuring time per figure, passed to every bench (each has its own default)"
    )
    parser.add_argument(
        "--soak-seconds", type=float, default=60.0, help="how long the soak holds 70%% of capacity (0: skip)"
    )
    parser.add_argument("--classify-events", type=int, default=100_000, help="audit events for the classify bench")
    parser.add_argument("--json", action="store_true", help="print every figure as one JSON document")
    args = parser.parse_args()
    seconds = ["--seconds", str(args.seconds)] if args.seconds else []
    report: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "busy_percent_before": psutil.cpu_percent(interval=1.0),
        },
    }
    steps = [
        ("verify", lambda: run_json("verify.py", *seconds)),
        ("service", lambda: run_json("service.py", *seconds)),
        ("inline_bound", lambda: run_json("inline_bound.py")),
        ("dryrun", lambda: run_json("dryrun.py", *seconds)),
        ("keyless", lambda: run_json("keyless.py", *seconds)),
        ("bundles", lambda: run_json("bundles.py", *seconds)),
        ("classify", lambda: classify(args.classify_events)),
        ("verify_resource", lambda: run_json("verify_resource.py")),
        ("startup", lambda: run_json("cli_startup.py")["startup"]),
    ]
    if args.soak_seconds > 0:
        steps.append(("soak", lambda: run_json("soak.py", "--seconds", str(args.soak_seconds))))
    for name, step in steps:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        report[name] = step()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print_report(report)
    return 0


def print_report(r: dict[str, Any]) -> None:
    m = r["machine"]
    print(f"machine: {m['cpus']} CPUs, Python {m['python']}, {m['busy_percent_before']:.0f}% busy before the run")
    v = r["verify"]
    head = v["headline"]
    print("\n## In-process verification (bench/verify.py)")
    print(f"  decide(), ~{head['payload_bytes']} B Deployment, 1 ECDSA P-256 key: {head['ours_per_s']:.0f}/s ({1e6 / head['ours_per_s']:.0f} us); "
          f"floor {head['floor_per_s']:.0f}/s; ratio {head['ratio']:.2f}x")  # fmt: skip
    for section in ("by_size", "by_keys"):
        for label, row in v[section].items():
            print(
                f"  {label:>14}: payload {row['payload_bytes']:6d} B  ours {1e6 / row['ours_per_s']:7.0f} us  floor {1e6 / row['floor_per_s']:7.0f} us  ratio {row['ratio']:.2f}x"
            )
    s = r["service"]
    print("\n## The HTTPS service (bench/service.py)")
    print(f"  floor: decide() in process: {s['floor_cpu_us']:.0f} us CPU per call")
    for name, row in s["kinds"].items():
        print(f"  server CPU per verification, {name}: {row['cpu_us_per_verification']:.0f} us "
              f"({row['ratio_to_floor']:.2f}x the floor)")  # fmt: skip
    print(f"  fresh TLS connection / kept-alive: {s['fresh_over_kept_alive']:.2f}x")
    for key, label in (("single_key_at_100_rps", "1 key at 100 req/s"), ("cache_hit", "cache hit at 100 req/s"),
                       ("cache_hit_back_to_back", "cache hit back to back"), ("healthz_at_100_rps", "GET /healthz at 100 req/s")):  # fmt: skip
        row = s[key]
        extra = f"; {row['server_mean_ms']:.2f} ms inside the server" if "server_mean_ms" in row else ""
        print(f"  {label:<26}: p50 {row['p50_ms']:.2f} ms  p99 {row['p99_ms']:.2f} ms{extra}")
    b = r["inline_bound"]
    print(f"  costliest verification in the request thread: {b['worst_inline_cpu_s'] * 1000:.0f} ms CPU, "
          f"{b['ratio_to_deadline']:.2f}x the {b['deadline_seconds']} s deadline (bench/inline_bound.py)")  # fmt: skip
    d = r["dryrun"]
    print("\n## Dry-run path (bench/dryrun.py)")
    for key in ("floor", "dry_run_warm", "dry_run_cold", "create_only", "compare_only"):
        print(f"  {key:<14}: median {d[key]['median_ms']:.2f} ms  p95 {d[key]['p95_ms']:.2f} ms")
    print(
        f"  dry-run adds {d['added_ms']['warm']:.2f} ms warm ({d['ratio_to_floor']['warm']}x), {d['added_ms']['cold']:.2f} ms cold ({d['ratio_to_floor']['cold']}x)"
    )
    print("\n## Keyless (bench/keyless.py)")
    for key, row in r["keyless"].items():
        print(
            f"  {key:<22}: {row['per_s']:7d}/s  {row['us']:9.1f} us  {row['cost_vs_key_decide']:6.2f}x a key decide()"
        )
    print("\n## OCI resource bundles (bench/bundles.py)")
    for key, row in r["bundles"].items():
        print(f"  {key:<12}: {row['per_s']:7d}/s  {row['us']:9.1f} us  {row['vs_floor']:6.2f}x the floor")
    c = r["classify"]
    print("\n## classify (bench/classify.py)")
    print(f"  {c['events']} audit events: {c['events_per_s']:.0f} events/s, peak RSS {c['peak_rss_mib']:.1f} MiB")
    vr = r["verify_resource"]
    print("\n## verify-resource (bench/verify_resource.py)")
    print(
        f"  {vr['configmaps']} ConfigMaps + {vr['deployments']} Deployments; in-process decide(): {vr['floor']['per_s']:.0f} objects/s"
    )
    for label, row in vr["runs"].items():
        print(
            f"  {label:<14}: {row['per_s']:6.0f} objects/s  {row['seconds']:5.1f} s  ratio {row['ratio']:.2f} (goal >= 0.8 at the cores)"
        )
    for label, mib in vr["memory_mib"].items():
        print(f"  peak memory, {label}: {mib:.0f} MiB")
    print("\n## CLI start-up")
    for label, row in r["startup"].items():
        print(f"  {label:<44}: {row['median_ms']:6.0f} ms  ({row['ratio_to_floor']:.1f}x)")
    if "soak" in r:
        k = r["soak"]
        lat, mem = k["latency"], k["memory"]
        print(f"\n## Load (bench/soak.py, {k['seconds']:.0f} s)")
        print(
            f"  capacity {k['capacity_rps']:.0f} req/s (mixed traffic); held {k['target_rps']:.0f} req/s -> {k['achieved_rps']:.0f} req/s"
        )
        print(
            f"  latency p50 {lat['p50_ms']:.1f} ms  p90 {lat['p90_ms']:.1f} ms  p99 {lat['p99_ms']:.1f} ms  p99.9 {lat['p999_ms']:.1f} ms  max {lat['max_ms']:.1f} ms"
        )
        print(f"  5xx {k['server_errors_5xx']}, wrong verdicts {sum(k['wrong_verdicts'].values())}, transport errors {sum(k['transport_errors'].values())}; "
              f"worker RSS {mem['baseline_mib']:.0f} -> {mem['final_mib']:.0f} MiB ({mem['growth']:+.1%}); {'passed' if k['passed'] else 'FAILED'}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
