"""Load and soak: the running service's capacity, then mixed traffic at 70% of it for a long time.

Starts the real server (``manifest-provider serve``: gunicorn gthread workers, TLS,
client certificates; :func:`tests.support.server.running_server`) and

1. **measures its capacity**: ``--clients`` kept-alive connections send the mixed
   traffic back to back for ``--capacity-seconds``; requests per second;
2. **holds ``--load`` (70%) of it** for ``--seconds`` on a fixed schedule (open loop:
   a request's latency counts from when it was *due*, so a stall is not hidden by
   the senders waiting), with the traffic mix below, checking every answer;
3. **samples resident memory** once a second, summed over gunicorn's worker processes,
   and compares the end of the run with the end of the warm-up.

Traffic, on both routes (Gatekeeper and Kyverno), by weight: a signed Deployment as
admitted (verified), the same with a changed field (content-mismatch), an unsigned
one (unsigned), and garbage bodies (request-invalid). Half of the verifiable requests
come from a fixed set of requesters (cache hits after the first), half from a new
requester each time (cache misses: a full verification).

Passes when no answer was 5xx, no verdict was wrong, no connection failed, and
memory grew by less than ``--max-growth`` (10%) after the warm-up. Prints latency
percentiles either way. ``make soak`` runs it for 10 minutes; ``make test`` runs a
short version (``tests/integration/test_load.py``).

Usage: ``python bench/soak.py [--seconds S] [--capacity-seconds S] [--load F] [--workers N] [--json]``
"""

from __future__ import annotations

import argparse
import copy
import http.client
import itertools
import json
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from verify import admitted, deployment  # bench/verify.py: the same workload as the other benches

from provider.keys.pem import generate_key, public_pem
from provider.signatures.signing import sign_documents
from tests.support.server import Server, running_server

GATEKEEPER = "/v1/gatekeeper/verify"
KYVERNO = "/v1/kyverno/verify"
#: Replaced in a pre-serialised body by each request's requester (cheap: no JSON per request).
USER = b"@@requester@@"
#: (kind, route, weight): the traffic mix.
MIX = (
    ("valid", GATEKEEPER, 30), ("valid", KYVERNO, 15),
    ("tampered", GATEKEEPER, 15), ("tampered", KYVERNO, 10),
    ("unsigned", GATEKEEPER, 10), ("unsigned", KYVERNO, 5),
    ("garbage", GATEKEEPER, 8), ("garbage", KYVERNO, 7),
)  # fmt: skip
EXPECTED = {"valid": "verified", "tampered": "content-mismatch", "unsigned": "unsigned", "garbage": "request-invalid"}
#: Requesters whose verdicts the service caches (Gatekeeper audit and repeated admissions look like this).
REPEATED_REQUESTERS = 64


class Traffic:
    """Pre-serialised request bodies by (kind, route); :meth:`body` fills in a requester."""

    def __init__(self) -> None:
        signer = generate_key("ecdsa-p256")
        (signed,) = sign_documents([deployment()], signer)
        valid = admitted(signed)
        tampered = copy.deepcopy(valid)
        tampered["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example.com/attacker/app:latest"
        unsigned = admitted(deployment())
        policy = {"keys": [public_pem(signer).decode()]}
        self.templates: dict[tuple[str, str], bytes] = {}
        for kind, obj in (("valid", valid), ("tampered", tampered), ("unsigned", unsigned)):
            review = {"uid": "soak", "operation": "UPDATE", "namespace": "shop", "name": "web",
                      "userInfo": {"username": USER.decode(), "groups": ["system:authenticated"]}, "object": obj}  # fmt: skip
            key = json.dumps({"review": review, "policy": policy})
            self.templates[kind, GATEKEEPER] = json.dumps(
                {
                    "apiVersion": "externaldata.gatekeeper.sh/v1beta1",
                    "kind": "ProviderRequest",
                    "request": {"keys": [key]},
                }
            ).encode()
            self.templates[kind, KYVERNO] = json.dumps({"request": review, "policy": policy}).encode()
        self.templates["garbage", GATEKEEPER] = (
            b'{"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "request": {"keys": [' + USER + b"]}"
        )
        self.templates["garbage", KYVERNO] = b"\x1f\x8b not even JSON " + USER
        self.schedule = [(kind, route) for kind, route, weight in MIX for _ in range(weight)]
        self._serial = itertools.count()

    def request(self, index: int) -> tuple[str, str, bytes]:
        """The ``index``-th request of the mix: (kind, route, body)."""
        kind, route = self.schedule[(index * 7919) % len(self.schedule)]  # a fixed, well-spread order
        serial = next(self._serial)
        requester = f"repeat-{serial % REPEATED_REQUESTERS}@example.com" if serial % 2 else f"new-{serial}@example.com"
        return kind, route, self.templates[kind, route].replace(USER, requester.encode())


def check(kind: str, route: str, status: int, data: bytes) -> str | None:
    """``None`` when the answer is right; else what is wrong with it."""
    if status >= 500:
        return f"HTTP {status}"
    if status != 200:
        return f"HTTP {status} (expected 200)"
    try:
        answer = json.loads(data)
        if route == GATEKEEPER:
            response = answer["response"]
            if kind == "garbage":
                ok = response["systemError"].startswith("request-invalid: ") and response["items"] == []
                return None if ok else f"expected a request-invalid systemError, got {response['systemError'][:80]!r}"
            if response["systemError"]:
                return f"systemError {response['systemError'][:80]!r}"
            verdict = response["items"][0]["value"]
        else:
            verdict = answer
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return f"malformed answer ({type(exc).__name__})"
    if verdict["reason"] != EXPECTED[kind] or verdict["allowed"] is not (kind == "valid"):
        return f"expected {EXPECTED[kind]}, got {verdict['reason']} (allowed={verdict['allowed']})"
    return None


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    by_kind: Counter[str] = field(default_factory=Counter)
    wrong: Counter[str] = field(default_factory=Counter)
    transport: Counter[str] = field(default_factory=Counter)
    server_errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, seconds: float, problem: str | None, status: int) -> None:
        with self.lock:
            self.latencies.append(seconds)
            self.by_kind[kind] += 1
            if status >= 500:
                self.server_errors += 1
            if problem is not None:
                self.wrong[problem] += 1


def send(conn: http.client.HTTPSConnection, route: str, body: bytes) -> tuple[int, bytes]:
    conn.request("POST", route, body=body)
    response = conn.getresponse()
    return response.status, response.read()


class Sender:
    """One kept-alive connection; reconnects after a failure (counted as a transport error)."""

    def __init__(self, server: Server, tally: Tally) -> None:
        self.server = server
        self.tally = tally
        self.conn = server.connection(timeout=30)

    def post(self, kind: str, route: str, body: bytes, started: float) -> None:
        try:
            status, data = send(self.conn, route, body)
        except (OSError, http.client.HTTPException) as exc:
            self.tally.transport[type(exc).__name__] += 1
            self.conn.close()
            self.conn = self.server.connection(timeout=30)
            return
        self.tally.add(kind, time.perf_counter() - started, check(kind, route, status, data), status)

    def close(self) -> None:
        self.conn.close()


def capacity(server: Server, traffic: Traffic, clients: int, seconds: float) -> float:
    """Requests per second with ``clients`` connections sending back to back."""
    tally = Tally()
    stop = threading.Event()
    counter = itertools.count()

    def client() -> None:
        sender = Sender(server, tally)
        try:
            while not stop.is_set():
                kind, route, body = traffic.request(next(counter))
                sender.post(kind, route, body, time.perf_counter())
        finally:
            sender.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if tally.wrong or tally.transport:
        raise RuntimeError(f"capacity run had failures: {dict(tally.wrong)} {dict(tally.transport)}")
    return len(tally.latencies) / elapsed


def worker_rss(server: Server) -> tuple[int, list[int]]:
    """Resident bytes summed over gunicorn's workers, and their pids."""
    total, pids = 0, []
    for child in psutil.Process(server.pid).children():
        try:
            total += child.memory_info().rss
            pids.append(child.pid)
        except psutil.NoSuchProcess:
            continue
    return total, sorted(pids)


def hold(
    server: Server, traffic: Traffic, rate: float, seconds: float, *, senders: int, on_second: Callable[[float], None]
) -> tuple[Tally, float]:
    """Send at ``rate`` per second for ``seconds`` (open loop); ``on_second(elapsed)`` runs once a second."""
    tally = Tally()
    counter = itertools.count()
    total = int(rate * seconds)
    start = time.perf_counter() + 0.05

    def sender_loop() -> None:
        sender = Sender(server, tally)
        try:
            while (index := next(counter)) < total:
                due = start + index / rate
                pause = due - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                kind, route, body = traffic.request(index)
                sender.post(kind, route, body, due)  # latency from when it was due
        finally:
            sender.close()

    threads = [threading.Thread(target=sender_loop) for _ in range(senders)]
    for thread in threads:
        thread.start()
    next_tick = 1.0
    while any(t.is_alive() for t in threads):
        time.sleep(0.05)
        elapsed = time.perf_counter() - start
        if elapsed >= next_tick:
            on_second(elapsed)
            next_tick += 1.0
    return tally, time.perf_counter() - start


def percentiles(values: list[float]) -> dict[str, float]:
    if len(values) < 2:
        return {}
    cuts = statistics.quantiles(values, n=1000, method="inclusive")
    return {
        "p50_ms": cuts[499] * 1000,
        "p90_ms": cuts[899] * 1000,
        "p99_ms": cuts[989] * 1000,
        "p999_ms": cuts[998] * 1000,
        "max_ms": max(values) * 1000,
    }


def run(
    *,
    seconds: float = 600.0,
    capacity_seconds: float = 10.0,
    load: float = 0.7,
    workers: int = 2,
    clients: int = 8,
    senders: int = 16,
    warmup: float | None = None,
    max_growth: float = 0.10,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Measure capacity, hold ``load`` of it for ``seconds``; the report (``report["passed"]``)."""
    traffic = Traffic()
    warmup = warmup if warmup is not None else max(10.0, min(60.0, seconds * 0.2))
    report: dict[str, Any] = {"seconds": seconds, "load": load, "workers": workers, "warmup_seconds": warmup}
    args = ("--workers", str(workers), "--threads", str(max(8, senders)))
    with running_server(env={"MANIFEST_PROVIDER_LOG_LEVEL": "info", **(env or {})}, args=args) as server:
        deadline = time.monotonic() + 30
        while len(worker_rss(server)[1]) < workers and time.monotonic() < deadline:
            time.sleep(0.05)
        capacity(server, traffic, clients, min(2.0, capacity_seconds))  # warm every worker: imports, policy, profiles
        report["capacity_rps"] = capacity(server, traffic, clients, capacity_seconds)
        rate = report["capacity_rps"] * load
        report["target_rps"] = rate
        _, pids_before = worker_rss(server)
        samples: list[tuple[float, int]] = []
        tally, elapsed = hold(
            server,
            traffic,
            rate,
            seconds,
            senders=senders,
            on_second=lambda t: samples.append((t, worker_rss(server)[0])),
        )
        _, pids_after = worker_rss(server)
    report["achieved_rps"] = len(tally.latencies) / elapsed
    report["requests"] = dict(tally.by_kind)
    report["answered"] = len(tally.latencies)
    report["server_errors_5xx"] = tally.server_errors
    report["wrong_verdicts"] = dict(tally.wrong)
    report["transport_errors"] = dict(tally.transport)
    report["latency"] = percentiles(tally.latencies)
    report["workers_replaced"] = pids_before != pids_after
    after = [rss for t, rss in samples if t >= warmup]
    baseline = statistics.median(after[:5]) if len(after) >= 5 else (after[0] if after else 0)
    final = statistics.median(after[-5:]) if len(after) >= 5 else (after[-1] if after else 0)
    report["memory"] = {
        "baseline_mib": baseline / 2**20, "final_mib": final / 2**20, "peak_mib": max((r for _, r in samples), default=0) / 2**20,
        "growth": (final - baseline) / baseline if baseline else 0.0, "samples": len(samples),
        "every_10s_mib": [round(rss / 2**20, 1) for t, rss in samples if int(t) % 10 == 0],
    }  # fmt: skip
    report["passed"] = (
        tally.server_errors == 0 and not tally.wrong and not tally.transport and not report["workers_replaced"]
        and report["memory"]["growth"] < max_growth and len(after) >= 2
        and report["achieved_rps"] >= 0.9 * rate
    )  # fmt: skip
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="how long to hold the load (default 600)")
    parser.add_argument("--capacity-seconds", type=float, default=10.0, help="how long to measure capacity")
    parser.add_argument(
        "--load", type=float, default=0.7, help="fraction of the measured capacity to hold (default 0.7)"
    )
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument("--clients", type=int, default=8, help="connections for the capacity run")
    parser.add_argument("--senders", type=int, default=16, help="connections for the held load")
    parser.add_argument(
        "--warmup", type=float, help="seconds before memory is compared (default 20%% of the run, 10-60 s)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    report = run(seconds=args.seconds, capacity_seconds=args.capacity_seconds, load=args.load, workers=args.workers,
                 clients=args.clients, senders=args.senders, warmup=args.warmup)  # fmt: skip
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        lat, mem = report["latency"], report["memory"]
        print(
            f"capacity: {report['capacity_rps']:.0f} req/s ({args.workers} workers, {args.clients} clients, mixed traffic, TLS + client certs)"
        )
        print(
            f"held {args.load:.0%}: {report['target_rps']:.0f} req/s for {args.seconds:.0f} s -> {report['achieved_rps']:.0f} req/s, {report['answered']} answers"
        )
        print(f"  mix: {report['requests']}")
        print(f"  latency (from when due): p50 {lat['p50_ms']:.1f} ms  p90 {lat['p90_ms']:.1f} ms  p99 {lat['p99_ms']:.1f} ms  "
              f"p99.9 {lat['p999_ms']:.1f} ms  max {lat['max_ms']:.1f} ms")  # fmt: skip
        print(f"  5xx: {report['server_errors_5xx']}  wrong verdicts: {report['wrong_verdicts'] or 0}  transport errors: {report['transport_errors'] or 0}"
              f"  workers replaced: {report['workers_replaced']}")  # fmt: skip
        print(f"  worker RSS: {mem['baseline_mib']:.1f} MiB after warm-up -> {mem['final_mib']:.1f} MiB at the end "
              f"({mem['growth']:+.1%}; peak {mem['peak_mib']:.1f} MiB)")  # fmt: skip
        print("PASSED" if report["passed"] else "FAILED")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
