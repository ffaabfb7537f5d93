"""The HTTPS service's speed against the in-process floor, measured in the same run.

Starts the real server (``manifest-provider serve``: gunicorn gthread workers,
TLS 1.3, client certificates; :func:`tests.support.server.running_server`)
and drives it over kept-alive TLS connections with Gatekeeper requests about
the signed Deployment of ``bench/verify.py``:

* **floor**: ``decide()`` in this process, on one core -- what the service
  can at best do per core;
* **single-key** and **50-key** throughput: verifications per second with
  ``--clients`` connections sending back to back; every key is distinct (a
  different requesting user), so nothing is answered from the cache;
* **latency at 100 requests/s**: single-key requests on a fixed schedule,
  p50/p99 (goal: p99 < 20 ms);
* **cache hit**: the same key again, p50/p99 (goal: < 1 ms).

The goal for batched throughput on this 2-core machine is at least half of
(2 x the single-core floor). The client runs on the same machine and takes
its share of the two cores.

Usage: ``python bench/service.py [--seconds S] [--clients N] [--workers N] [--json]``
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from verify import admitted, deployment, rate  # bench/verify.py: the same workload as the library's bench

from provider import Policy, Review, decide
from provider.keys import generate_key, public_pem
from provider.signing import sign_documents
from tests.support.server import Server, running_server

PATH = "/v1/gatekeeper/verify"


class Workload:
    """A signed, admitted Deployment and a one-key policy; keys differ only in who asks."""

    def __init__(self) -> None:
        signer = generate_key("ecdsa-p256")
        (signed,) = sign_documents([deployment()], signer)
        self.obj = admitted(signed)
        self.policy = {"keys": [public_pem(signer).decode()]}
        self._serial = 0
        self._lock = threading.Lock()

    def review(self, user: str) -> dict[str, Any]:
        return {"uid": user, "operation": "UPDATE", "namespace": "shop", "name": "web",
                "userInfo": {"username": user, "groups": ["system:authenticated"]}, "object": self.obj}  # fmt: skip

    def key(self, user: str | None = None) -> str:
        if user is None:
            with self._lock:
                self._serial += 1
                user = f"bench-user-{self._serial}@example.com"
        return json.dumps({"review": self.review(user), "policy": self.policy})

    def body(self, keys: int, user: str | None = None) -> bytes:
        request = {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest",
                   "request": {"keys": [self.key(user) for _ in range(keys)]}}  # fmt: skip
        return json.dumps(request).encode()

    def floor(self, seconds: float) -> float:
        policy = Policy.from_dict(self.policy)
        review = Review.from_admission(self.review("floor@example.com"))
        assert decide(review, policy).verified
        return rate(lambda: decide(review, policy), seconds)


def send(conn: http.client.HTTPSConnection, body: bytes) -> bytes:
    conn.request("POST", PATH, body=body)
    response = conn.getresponse()
    data = response.read()
    if response.status != 200 or b'"systemError":""' not in data:
        raise RuntimeError(f"HTTP {response.status}: {data[:300]!r}")
    return data


def throughput(server: Server, workload: Workload, keys: int, clients: int, seconds: float) -> float:
    """Verifications per second, ``clients`` connections sending ``keys``-key requests back to back."""
    # Bodies are built before the clock starts, so the client spends its CPU on TLS, not JSON.
    count = max(4, int(seconds * 3000 / keys / clients) + 2)
    bodies = [[workload.body(keys) for _ in range(count)] for _ in range(clients)]
    done = [0] * clients
    stop = threading.Event()
    errors: list[BaseException] = []

    def client(index: int) -> None:
        conn = server.connection()
        try:
            for body in bodies[index]:
                if stop.is_set():
                    break
                send(conn, body)
                done[index] += keys
        except BaseException as exc:  # reported after the run
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    if any(d == len(b) * keys for d, b in zip(done, bodies, strict=True)):
        print(f"  (note: a client ran out of pre-built requests; measured {elapsed:.1f} s)", file=sys.stderr)
    return sum(done) / elapsed


def back_to_back(server: Server, body: bytes, count: int) -> list[float]:
    """Seconds each request took, sent one after another over one kept-alive connection."""
    conn = server.connection()
    latencies = []
    try:
        for _ in range(count):
            sent = time.perf_counter()
            send(conn, body)
            latencies.append(time.perf_counter() - sent)
    finally:
        conn.close()
    return latencies


def paced_latencies(
    server: Server, bodies: list[bytes], per_second: float, method: str = "POST", path: str = PATH
) -> list[float]:
    """Seconds each request took, sent on a fixed schedule over one kept-alive connection."""
    conn = server.connection()
    latencies = []
    interval = 1 / per_second
    start = time.perf_counter()
    try:
        for index, body in enumerate(bodies):
            due = start + index * interval
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            sent = time.perf_counter()
            if method == "POST":
                send(conn, body)
            else:
                conn.request(method, path)
                conn.getresponse().read()
            latencies.append(time.perf_counter() - sent)
    finally:
        conn.close()
    return latencies


def server_seconds(server: Server) -> tuple[float, float]:
    """(sum, count) of the server's own request-duration histogram for the Gatekeeper route."""
    status, _, body = server.get("/metrics")
    assert status == 200
    total = count = 0.0
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.labels.get("route") == PATH and sample.name.startswith(
                "manifest_provider_request_duration_seconds"
            ):
                if sample.name.endswith("_sum"):
                    total += sample.value
                elif sample.name.endswith("_count"):
                    count += sample.value
    return total, count


def percentiles(values: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50_ms": cuts[49] * 1000, "p99_ms": cuts[98] * 1000, "n": len(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measuring time per throughput figure")
    parser.add_argument(
        "--clients", type=int, default=8, help="concurrent kept-alive connections (spread over the workers)"
    )
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument(
        "--log-level", default="info", help="the server's log level (info logs every decision, as in production)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()

    # Others' processes share the machine: say how busy it was, so the figures can be read.
    busy = psutil.cpu_percent(interval=1.0)
    workload = Workload()
    report: dict[str, Any] = {
        "machine_busy_percent_before": busy,
        "floor_per_s": workload.floor(min(args.seconds, 3.0)),
    }
    env = {"MANIFEST_PROVIDER_LOG_LEVEL": args.log_level}
    with running_server(
        env=env, args=("--workers", str(args.workers), "--threads", str(max(8, args.clients * 2)))
    ) as server:
        # Warm up every worker (imports, the compiled policy, profiles).
        throughput(server, workload, 1, args.clients, 1.0)
        report["single_key_per_s"] = throughput(server, workload, 1, args.clients, args.seconds)
        report["batch_50_per_s"] = throughput(server, workload, 50, args.clients, args.seconds)
        latency_bodies = [workload.body(1) for _ in range(int(100 * args.seconds))]
        report["single_key_at_100_rps"] = percentiles(paced_latencies(server, latency_bodies, 100))
        hit = workload.body(1, user="cached@example.com")
        paced_latencies(server, [hit] * 20, 200)  # every worker has it cached now
        before = server_seconds(server)
        report["cache_hit"] = percentiles(paced_latencies(server, [hit] * int(100 * args.seconds), 100))
        after = server_seconds(server)
        report["cache_hit"]["server_mean_ms"] = (after[0] - before[0]) / max(1.0, after[1] - before[1]) * 1000
        report["cache_hit_back_to_back"] = percentiles(back_to_back(server, hit, int(100 * args.seconds)))
        # What any request pays on an idle connection: gunicorn hands it from its poller to a thread and back.
        report["healthz_at_100_rps"] = percentiles(
            paced_latencies(server, [b""] * int(100 * args.seconds), 100, "GET", "/healthz")
        )
    two_cores = 2 * report["floor_per_s"]
    report["batch_vs_two_core_floor"] = report["batch_50_per_s"] / two_cores
    report["single_vs_two_core_floor"] = report["single_key_per_s"] / two_cores
    if args.json:
        print(json.dumps(report, indent=2))
        return
    lat, hit, b2b, probe = (
        report["single_key_at_100_rps"],
        report["cache_hit"],
        report["cache_hit_back_to_back"],
        report["healthz_at_100_rps"],
    )
    print(
        f"workload: signed Deployment (bench/verify.py), 1 ECDSA P-256 key; {args.workers} workers, {args.clients} clients, TLS 1.3 + client certs"
    )
    print(f"  floor (in-process decide, 1 core) : {report['floor_per_s']:8.0f} verifications/s")
    print(
        f"  single-key requests               : {report['single_key_per_s']:8.0f} verifications/s  ({report['single_vs_two_core_floor']:.2f} x 2-core floor)"
    )
    print(
        f"  50-key requests                   : {report['batch_50_per_s']:8.0f} verifications/s  ({report['batch_vs_two_core_floor']:.2f} x 2-core floor; goal >= 0.5)"
    )
    print(
        f"  single key at 100 req/s           : p50 {lat['p50_ms']:.2f} ms  p99 {lat['p99_ms']:.2f} ms  (goal p99 < 20 ms)"
    )
    print(
        f"  cache hit                         : p50 {hit['p50_ms']:.2f} ms  p99 {hit['p99_ms']:.2f} ms round trip; "
        f"{hit['server_mean_ms']:.2f} ms in the server (goal < 1 ms)"
    )
    print(f"  cache hit, back to back           : p50 {b2b['p50_ms']:.2f} ms  p99 {b2b['p99_ms']:.2f} ms round trip")
    print(
        f"  GET /healthz at 100 req/s         : p50 {probe['p50_ms']:.2f} ms  p99 {probe['p99_ms']:.2f} ms (the idle-connection baseline)"
    )
    print(f"  (the machine was {report['machine_busy_percent_before']:.0f}% busy with other work just before the run)")


if __name__ == "__main__":
    main()
