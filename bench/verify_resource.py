"""Benchmark: ``manifest-provider verify-resource`` over a cluster's worth of objects, against in-process ``decide()``.

The fake API server (``tests/support/fakeapi.py``, in this process) holds 10 000
signed ConfigMaps and 2 000 signed Deployments (each signed on its own, so every
object costs a signature check), stored as the API server stores them (uid,
resourceVersion, creationTimestamp). Measured in one run:

* **floor**: in-process ``decide(Review.for_object(obj, live=True), policy)`` on the
  same stored objects, one core, no I/O -- the cost of the decisions alone;
* **verify-resource**: the real command, in its own process, as a user checks a
  cluster (``verify-resource configmaps,deployments.apps -A -o json``), listing
  both kinds in pages through the real kubernetes client (TLS, a kubeconfig) and
  verifying on ``--concurrency`` worker processes, its output drained; wall time
  from start to exit, interpreter and worker start-up included, the best of three
  runs (and the floor the best of three passes);

objects per second for both and the ratio (goal: >= 0.8 with ``--concurrency``
equal to the cores). And the command's peak memory -- the resident set of the
process and its workers, summed, sampled every 20 ms -- at two list sizes of the
same kind, which should not differ by more than noise (memory flat in the number
of objects: pages stream through a bounded pool).

The fake serves its pages from this process, so it shares the machine's cores
with the command it answers; a real API server would not.

Usage: ``python bench/verify_resource.py [--configmaps N] [--deployments N] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provider import Policy, Review, decide  # noqa: E402
from provider.keys.pem import generate_key, public_pem  # noqa: E402
from provider.signatures.signing import sign_documents  # noqa: E402
from tests.support.fakeapi import FakeApiServer  # noqa: E402

NAMESPACES = ("shop", "bank", "ledger", "web")


def configmap(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"settings-{i}", "namespace": NAMESPACES[i % 4], "labels": {"app": f"app-{i % 50}"}},
        "data": {"mode": "production", "replicas": str(i % 7), "endpoint": f"https://svc-{i}.example.com:8443/api"},
    }


def deployment(i: int) -> dict[str, Any]:
    name = f"web-{i}"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACES[i % 4], "labels": {"app": name}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": f"registry.example.com/team/app:1.4.{i}",
                            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                        }
                    ]
                },
            },
        },
    }


def populate(fake: FakeApiServer, key: Any, configmaps: int, deployments: int) -> None:
    for i in range(configmaps):
        fake.add(sign_documents([configmap(i)], key)[0])
    for i in range(deployments):
        fake.add(sign_documents([deployment(i)], key)[0])


def floor_rate(objects: list[dict[str, Any]], policy: Policy) -> dict[str, float]:
    """Objects per second of in-process decide(), the best of three passes over all of them."""
    best = 0.0
    for _ in range(3):
        started = time.perf_counter()
        for obj in objects:
            result = decide(Review.for_object(obj, live=True), policy)
            assert result.verified, result.message
        best = max(best, len(objects) / (time.perf_counter() - started))
    return {"objects": len(objects), "per_s": best}


def run_cli(args: list[str], *, sample: bool = False) -> dict[str, float]:
    """Wall time of one run; with ``sample``, its peak resident memory (the command and its workers, summed).

    Timed runs are not sampled: walking the process tree costs CPU the command would compete for.
    """
    command = [sys.executable, "-m", "provider.cli", "verify-resource", *args]
    peak = 0
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        parent = psutil.Process(proc.pid)
        tree, refreshed = [parent], 0.0
        while not done.is_set():
            try:
                if time.monotonic() - refreshed > 0.25:  # new workers appear; listing them is the costly part
                    tree, refreshed = [parent, *parent.children(recursive=True)], time.monotonic()
                peak = max(peak, sum(p.memory_info().rss for p in tree))
            except psutil.Error:
                pass
            done.wait(0.02)

    sampler = threading.Thread(target=watch, daemon=True)
    if sample:
        sampler.start()
    _, stderr = proc.communicate(timeout=900)
    seconds = time.perf_counter() - started
    done.set()
    if sample:
        sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"verify-resource exited {proc.returncode}: {stderr[-2000:]}")
    return {"seconds": seconds, "peak_rss_mib": peak / 2**20}


def measure(configmaps: int, deployments: int, concurrency: int) -> dict[str, Any]:
    key = generate_key("ecdsa-p256")
    policy = Policy.from_dict({"keys": [public_pem(key).decode()]})
    cores = concurrency or os.cpu_count() or 1
    with FakeApiServer() as fake, tempfile.TemporaryDirectory() as tmp:
        populate(fake, key, configmaps, deployments)
        Path(tmp, "key.pub").write_bytes(public_pem(key))
        kubeconfig = fake.kubeconfig(Path(tmp, "kubeconfig"))
        stored = fake.stored("v1", "ConfigMap") + fake.stored("apps/v1", "Deployment")
        floor = floor_rate(stored, policy)
        del stored

        def both(n: int) -> dict[str, float]:
            """One command for both kinds, as a user checks a cluster: ``configmaps,deployments.apps -A``."""
            # The best of three: on a shared machine the slow runs measure the neighbours.
            seconds = min(
                run_cli(["configmaps,deployments.apps", "-A", "-o", "json", "--concurrency", str(n),
                         "-k", f"{tmp}/key.pub", "--kubeconfig", str(kubeconfig)])["seconds"]
                for _ in range(3)
            )  # fmt: skip
            objects = configmaps + deployments
            return {
                "seconds": seconds,
                "objects": objects,
                "per_s": objects / seconds,
                "ratio": objects / seconds / floor["per_s"],
            }

        runs = {f"concurrency_{cores}": both(cores)}
        if cores != 1:
            runs["concurrency_1"] = both(1)
        # Memory against object count: the same kind, a quarter (one namespace of four) and all of it, same settings.
        small_ns = NAMESPACES[0]
        memory = {}
        for label, args in (
            (f"{configmaps // 4} ConfigMaps (one namespace)", ["configmaps", "-n", small_ns]),
            (f"{configmaps} ConfigMaps (all namespaces)", ["configmaps", "-A"]),
        ):
            row = run_cli(
                [
                    *args,
                    "-o",
                    "json",
                    "--concurrency",
                    str(cores),
                    "-k",
                    f"{tmp}/key.pub",
                    "--kubeconfig",
                    str(kubeconfig),
                ],
                sample=True,
            )
            memory[label] = row["peak_rss_mib"]
        sizes = list(memory.values())
        return {
            "cores": os.cpu_count(),
            "configmaps": configmaps,
            "deployments": deployments,
            "floor": floor,
            "runs": runs,
            "memory_mib": memory,
            "memory_growth": sizes[1] / sizes[0] - 1,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configmaps", type=int, default=10_000)
    parser.add_argument("--deployments", type=int, default=2_000)
    parser.add_argument("--concurrency", type=int, default=0, help="worker processes (default: the cores)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    report = measure(args.configmaps, args.deployments, args.concurrency)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    floor = report["floor"]
    print(f"{report['configmaps']} ConfigMaps + {report['deployments']} Deployments, {report['cores']} cores")
    print(f"  in-process decide() (floor): {floor['per_s']:8.0f} objects/s")
    for label, row in report["runs"].items():
        print(
            f"  verify-resource {label:<14}: {row['per_s']:8.0f} objects/s  {row['seconds']:6.1f} s  ratio {row['ratio']:.2f}"
        )
    for label, mib in report["memory_mib"].items():
        print(f"  peak memory, {label}: {mib:.0f} MiB")
    print(f"  growth from the smaller list to the larger: {report['memory_growth']:+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
