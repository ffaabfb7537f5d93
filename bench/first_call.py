"""What the first cluster call of a freshly started service costs, idle and with both cores busy.

For each kind of cluster call (:mod:`tests.support.cluster_calls`) -- a
``cluster-info`` key (a bootstrap-token Secret read), a dry-run, a signature
ConfigMap read, a TokenReview -- a fresh server is started
(``manifest-provider serve``, one worker, the fake API server of
``tests/support/fakeapi.py`` behind it, a client-certificate identity, which
every version of the service can use) and, once ``/readyz`` answers, that one
call is made, then a second like it. Printed per kind: the time from starting
the server to ``/readyz``, the first call's and the second's round trip
(medians over ``--runs`` starts, and the worst), and how many first calls
missed the service's deadline (1.5 s): a ``systemError`` or a 503 instead of
an answer.

``--busy`` keeps both cores busy with CPU hogs of this script's own for the
whole run (two processes spinning at the default priority), the load the
deadline must survive on a busy node.

``--phases`` measures instead what each piece of a first cluster call costs in a
fresh interpreter (the imports, loading the kubeconfig, building the clients, the
first connection and request of each kind), without a server.

Usage: ``python bench/first_call.py [--runs N] [--busy] [--phases] [--json]``. To
measure another checkout of the service, run it with ``PYTHONPATH=<that checkout>``:
the server is started with this environment.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import cluster_calls
from tests.support.server import Server, running_server

CALLS: dict[str, tuple[Callable[[Server], str], tuple[str, ...]]] = {
    # kind -> (the call, the outcomes that mean "answered in time")
    "cluster-info": (cluster_calls.cluster_info, ("verified",)),
    "dry-run": (cluster_calls.dry_run, ("verified",)),
    "signature ConfigMap": (cluster_calls.configmap_signature, ("verified",)),
    "TokenReview": (cluster_calls.token_review, ("unsigned",)),
}


def one_start(kubeconfig: Path, kind: str) -> dict[str, Any]:
    call, good = CALLS[kind]
    env = cluster_calls.service_env(MANIFEST_PROVIDER_KUBECONFIG=str(kubeconfig))
    started = time.perf_counter()
    with running_server(env=env) as server:
        ready = time.perf_counter() - started
        times, outcomes = [], []
        for _ in range(2):
            begin = time.perf_counter()
            outcomes.append(call(server))
            times.append(time.perf_counter() - begin)
    return {"ready": ready, "first": times[0], "second": times[1], "first_ok": outcomes[0] in good,
            "outcome": outcomes[0]}  # fmt: skip


def measure(runs: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with cluster_calls.fake_cluster() as fake, tempfile.TemporaryDirectory() as tmp:
        kubeconfig = fake.kubeconfig(Path(tmp) / "kubeconfig", user=fake.client_certificate(Path(tmp) / "pki"))
        for kind in CALLS:
            samples = [one_start(kubeconfig, kind) for _ in range(runs)]
            results[kind] = {
                "ready_s": statistics.median(s["ready"] for s in samples),
                "first_ms": statistics.median(s["first"] for s in samples) * 1000,
                "first_worst_ms": max(s["first"] for s in samples) * 1000,
                "second_ms": statistics.median(s["second"] for s in samples) * 1000,
                "late": sum(not s["first_ok"] for s in samples),
                "runs": runs,
                "outcomes": sorted({s["outcome"] for s in samples}),
            }
    return results


#: Run in a fresh interpreter: each piece of a first cluster call, timed (milliseconds, as JSON).
PHASES = r"""
import importlib, json, sys, time
import provider.service.app  # the master has imported this anyway
kubeconfig, token, audience = sys.argv[1:4]
times = {}
def step(name, fn):
    start = time.perf_counter(); value = fn(); times[name] = (time.perf_counter() - start) * 1000; return value
step("import kubernetes.client and kubernetes.config", lambda: [importlib.import_module(m) for m in
     ("kubernetes.client", "kubernetes.config")])
step("import CoreV1Api's module", lambda: importlib.import_module("kubernetes.client.api.core_v1_api"))
from provider.kube import credentials
from provider.kube.dryrun import KubeDryRunner
from provider.kube.tokenreview import KubeTokenReviewer
from provider.kube.tokens import KubeTokenSource, api_client_for
identity = step("load the kubeconfig", lambda: credentials.from_kubeconfig(kubeconfig))
runner = step("ApiClient and dry-runner", lambda: KubeDryRunner.for_identity(identity))
reviewer = step("TokenReviewer", lambda: KubeTokenReviewer(credentials.from_kubeconfig(kubeconfig).configuration))
step("first request: connection and discovery GET /api/v1", lambda: runner.resource_for("v1", "ConfigMap"))
runner.forget("v1")
step("the same on the kept-alive connection", lambda: runner.resource_for("v1", "ConfigMap"))
secrets = KubeTokenSource(api_client_for(kubeconfig))
step("first Secret read", lambda: secrets.lookup("abcdef"))
step("second Secret read", lambda: secrets.lookup("abcdef"))
step("first TokenReview", lambda: reviewer.review(token, audience, time.monotonic() + 5))
step("second TokenReview", lambda: reviewer.review(token, audience, time.monotonic() + 5))
print(json.dumps(times))
"""


def phases(runs: int) -> dict[str, Any]:
    from tests.support.tokenreview import AUDIENCE

    samples = []
    with cluster_calls.fake_cluster() as fake, tempfile.TemporaryDirectory() as tmp:
        kubeconfig = fake.kubeconfig(Path(tmp) / "kubeconfig", user=fake.client_certificate(Path(tmp) / "pki"))
        for _ in range(runs):
            done = subprocess.run([sys.executable, "-c", PHASES, str(kubeconfig), cluster_calls.KYVERNO_TOKEN, AUDIENCE],
                                  capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[1])  # fmt: skip
            samples.append(json.loads(done.stdout.splitlines()[-1]))
    return {name: {"median_ms": statistics.median(s[name] for s in samples), "worst_ms": max(s[name] for s in samples)}
            for name in samples[0]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--busy", action="store_true", help="keep both cores busy with two CPU hogs")
    parser.add_argument("--phases", action="store_true", help="time each piece of a first call, without a server")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with cluster_calls.cpu_hogs(2 if args.busy else 0):
        results = phases(args.runs) if args.phases else measure(args.runs)
    if args.phases:
        if args.json:
            print(json.dumps(results, indent=2))
            return
        print(f"pieces of a first cluster call ({'both cores busy' if args.busy else 'idle'}; load average {load:.1f} "
              f"before; medians of {args.runs})")  # fmt: skip
        for name, r in results.items():
            print(f"  {name:<55}{r['median_ms']:>9.1f} ms  (worst {r['worst_ms']:.1f})")
        return
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"first cluster call after a start ({'both cores busy' if args.busy else 'idle'}; load average {load:.1f} "
          f"before; medians of {args.runs})")  # fmt: skip
    print(f"{'call':<20}{'to /readyz':>12}{'first':>10}{'worst':>10}{'second':>10}  missed the deadline")
    for kind, r in results.items():
        print(f"{kind:<20}{r['ready_s']:>10.2f} s{r['first_ms']:>7.0f} ms{r['first_worst_ms']:>7.0f} ms"
              f"{r['second_ms']:>7.0f} ms  {r['late']} of {r['runs']} {', '.join(r['outcomes'])}")  # fmt: skip


if __name__ == "__main__":
    main()
