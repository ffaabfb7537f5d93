"""The HTTPS service's cost per verification against in-process ``decide()``, measured in the same run.

Starts the real server (``manifest-provider serve``: gunicorn gthread workers,
TLS 1.3, client certificates; :func:`tests.support.server.running_server`) and
sends it Gatekeeper requests about the signed Deployment of ``bench/verify.py``;
every key is distinct (a different requesting user), so nothing is answered
from the cache. The figures:

* **floor**: ``decide()`` on the same object in this process, one thread: its
  CPU seconds per call (``time.process_time``);
* **server CPU per verification** for three kinds of call: 1 key per request
  and 50 keys per request over kept-alive connections, and 1 key per request on
  a fresh TLS 1.3 connection with a client certificate per call (as
  Gatekeeper's client makes it without its connection cache): the user and
  system CPU seconds of the gunicorn master and its workers (``psutil``, from
  the kernel's accounting of those processes) over the verifications answered,
  so the load generator's share of the machine does not count.

The machine is shared, and its speed drifts by more than the differences
measured. So the run is made of ``--rounds`` rounds, each measuring the floor
and then each kind of call for ``--seconds``, and every ratio is the median
over the rounds of that round's figure against that round's floor.

Goals: at most 1.5x the floor
with 1 key per request, 1.1x with 50 keys, and a fresh-connection call at most
2x a kept-alive one. Also measured: latency at 100 requests/s, a cache hit, and
verifications per second with ``--clients`` connections back to back.

``--profile DIR`` records one worker with py-spy (``pip install py-spy``; it must
be allowed to read the worker's memory) during each kind of call, writes
the raw stacks to ``DIR`` and prints where the worker's samples fall by stage of
the request path (:data:`STAGES`).

Usage: ``python bench/service.py [--seconds S] [--rounds N] [--clients N] [--workers N] [--threads N]
[--verify-threads N] [--profile DIR] [--baseline DIR] [--json]``

``--baseline DIR`` runs a second server from another checkout's ``provider/`` beside this
one and measures it in the same rounds against the same floor: before and after a change,
in one run.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import http.client
import json
import shutil
import ssl
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from verify import admitted, deployment  # bench/verify.py: the same workload as the library's bench

from provider import Policy, Review, decide
from provider.keys.pem import generate_key, public_pem
from provider.signatures.signing import sign_documents
from tests.support.server import Server, running_server

PATH = "/v1/gatekeeper/verify"
#: The kinds of call measured: (name, keys per request, a fresh connection per request).
KINDS = (("1 key", 1, False), ("50 keys", 50, False), ("1 key, fresh TLS", 1, True))


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
        """CPU seconds per ``decide()`` on this object, in this process and thread."""
        policy = Policy.from_dict(self.policy)
        review = Review.from_admission(self.review("floor@example.com"))
        assert decide(review, policy).verified
        calls, started = 0, time.process_time()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            for _ in range(10):
                decide(review, policy)
            calls += 10
        return (time.process_time() - started) / calls


def send(conn: http.client.HTTPSConnection, body: bytes) -> bytes:
    conn.request("POST", PATH, body=body)
    response = conn.getresponse()
    data = response.read()
    if response.status != 200 or b'"systemError":""' not in data:
        raise RuntimeError(f"HTTP {response.status}: {data[:300]!r}")
    return data


def server_cpu(server: Server) -> float:
    """User + system CPU seconds of the server: the gunicorn master and every worker, from the kernel's accounting."""
    master = psutil.Process(server.pid)
    return sum(sum(p.cpu_times()[:2]) for p in [master, *master.children(recursive=True)])


def gatekeeper_context(server: Server) -> ssl.SSLContext:
    """A client as Gatekeeper's: TLS 1.3 at least, a client certificate, no session cache (frameworks ``request.go``)."""
    context = server.ssl_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    return context


def run_load(
    server: Server, workload: Workload, *, keys: int, fresh: bool, clients: int, seconds: float
) -> dict[str, float]:
    """``clients`` threads sending ``keys``-key requests back to back for ``seconds``: what the server spent."""
    # Bodies are built before the clock starts, so the client spends its CPU on TLS, not JSON.
    per_second = 400 if fresh else 3000
    count = max(4, int(seconds * per_second / keys / clients) + 2)
    bodies = [[workload.body(keys) for _ in range(count)] for _ in range(clients)]
    done = [0] * clients
    stop = threading.Event()
    errors: list[BaseException] = []
    context = gatekeeper_context(server)

    def connect() -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=30)

    def client(index: int) -> None:
        conn = connect()
        try:
            for body in bodies[index]:
                if stop.is_set():
                    break
                send(conn, body)
                done[index] += keys
                if fresh:
                    conn.close()
                    conn = connect()
        except BaseException as exc:  # reported after the run
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    cpu_before, started = server_cpu(server), time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed, cpu = time.perf_counter() - started, server_cpu(server) - cpu_before
    if errors:
        raise errors[0]
    if any(d == len(b) * keys for d, b in zip(done, bodies, strict=True)):
        print(f"  (note: a client ran out of pre-built requests; measured {elapsed:.1f} s)", file=sys.stderr)
    verifications = sum(done)
    return {
        "verifications": verifications,
        "per_s": verifications / elapsed,
        "cpu_per_verification": cpu / verifications,
    }


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


# --- the profile --------------------------------------------------------------------------

#: Stages of the request path, each matched by the frames it owns (``function (file``), most
#: specific first: a sample counts for the first stage one of its frames belongs to, looking
#: from the innermost frame out.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("decide(): the check itself", ("provider/verifier/", "provider/policy/schema.py", "provider/signatures/envelope.py",
                                    "provider/compare/diff.py", "provider/parsing.py (_build", "yaml/")),
    ("reading each key (JSON)", ("read_key (", "read_question (", "provider/review.py")),
    ("compiled-policy cache", ("PolicyCache.compile",)),
    ("encoding the verdict", ("Verdict.of", "encode_response", "encode_answer")),
    ("logging", ("logging/", "JsonFormatter", "RepeatLimiter")),
    ("metrics", ("prometheus_client/", "provider/service/metrics.py")),
    ("reading the request body and its keys", ("read_body", "read_request", "provider/service/body.py")),
    ("authentication", ("provider/service/auth.py", "provider/service/clientcerts.py")),
    ("thread hand-offs (gunicorn's pool, the verify threads)", ("Dispatcher.", "_drain", "concurrent/futures",
                                                                  "threading.py")),
    ("Flask and werkzeug", ("flask/", "werkzeug/", "provider/service/app.py", "provider/service/routes.py")),
    ("gunicorn: HTTP parsing, WSGI, response", ("gunicorn/http/", "handle_request", "gunicorn/util.py")),
    ("TLS and socket calls", ("ssl.py", "provider/deadlines.py", "socket.py")),
    ("the event loop (handshake, head, keep-alive)", ("provider/service/worker.py", "gunicorn/workers/",
                                                      "selectors.py")),
)  # fmt: skip


def stage_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        for stage, marks in STAGES:
            if any(mark in frame for mark in marks):
                return stage
    return "other"


def summarise(raw: Path) -> tuple[dict[str, float], int]:
    """Shares of a py-spy raw (collapsed-stack) file by :data:`STAGES`, and the number of samples."""
    shares: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            shares[stage_of(stack.split(";"))] += int(count)
    total = sum(shares.values())
    return {stage: shares[stage] / (total or 1) for stage, _ in (*STAGES, ("other", ()))}, total


#: py-spy's samples per second.
SAMPLE_RATE = 200


def profile(server: Server, workload: Workload, directory: Path, seconds: float, clients: int) -> dict[str, Any]:
    """Where one worker's Python time goes, by stage, for each kind of call: shares of py-spy's samples.

    py-spy samples only the thread holding the GIL (``--gil``): the Python work and
    the C code that keeps the GIL (the ECDSA verify, the YAML scanner, json). Work
    done without the GIL -- OpenSSL's records and handshakes, zlib, the kernel's
    side of sockets, epoll and futexes -- is not sampled; it is the worker's CPU
    time (``psutil``, same window) beyond the GIL's, reported as ``cpu_beyond_gil``
    when positive. py-spy names the GIL's *last* holder, so time in which no thread
    runs Python right after a hand-off (``Event.set``, ``submit``) is counted there:
    the stage "thread hand-offs" is an upper bound.
    """
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    worker = psutil.Process(psutil.Process(server.pid).children()[0].pid)
    directory.mkdir(parents=True, exist_ok=True)
    found: dict[str, Any] = {}
    for name, keys, fresh in KINDS:
        raw = directory / f"{name.replace(' ', '-').replace(',', '')}.txt"
        duration = max(2, round(seconds))
        command = [spy, "record", "--pid", str(worker.pid), "--duration", str(duration), "--rate", str(SAMPLE_RATE),
                   "--gil", "--nonblocking", "--format", "raw", "--output", str(raw)]  # fmt: skip
        recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(0.5)  # py-spy attaches; the load then runs inside the recording
        before = sum(worker.cpu_times()[:2])
        run_load(server, workload, keys=keys, fresh=fresh, clients=clients, seconds=duration - 1)
        worker_cpu = sum(worker.cpu_times()[:2]) - before
        _, err = recorder.communicate(timeout=60)
        if recorder.returncode != 0:
            raise RuntimeError(f"py-spy failed: {err.decode(errors='replace')[-500:]}")
        shares, samples = summarise(raw)
        found[name] = {
            "shares": shares,
            "samples": samples,
            "worker_cpu_seconds": worker_cpu,
            "cpu_beyond_gil": max(0.0, 1 - samples / SAMPLE_RATE / worker_cpu) if worker_cpu > 0 else 0.0,
        }
    return found


# --- the run ------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> dict[str, Any]:
    # Others' processes share the machine: say how busy it was, so the figures can be read.
    report: dict[str, Any] = {"machine_busy_percent_before": psutil.cpu_percent(interval=1.0)}
    workload = Workload()
    floors: list[float] = []
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name, *_ in KINDS}
    env = {"MANIFEST_PROVIDER_VERIFY_THREADS": str(args.verify_threads)}
    serving = ("--workers", str(args.workers), "--threads", str(args.threads))
    baseline_rounds: dict[str, list[dict[str, float]]] = {name: [] for name, *_ in KINDS}
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(running_server(env=env, args=serving))
        baseline = None
        if args.baseline:  # the same server from another checkout's provider/, measured in the same rounds
            baseline_env = {**env, "PYTHONPATH": str(Path(args.baseline).resolve())}
            baseline = stack.enter_context(running_server(env=baseline_env, args=serving))
        for _, keys, fresh in KINDS:  # warm up every worker: imports, the compiled policy, profiles
            for each in (server, baseline):
                if each is not None:
                    run_load(each, workload, keys=keys, fresh=fresh, clients=args.clients, seconds=0.5)
        for _ in range(args.rounds):
            floor = workload.floor(min(args.seconds, 1.0))
            floors.append(floor)
            for name, keys, fresh in KINDS:
                for each, into in ((server, rounds), (baseline, baseline_rounds)):
                    if each is None:
                        continue
                    row = run_load(each, workload, keys=keys, fresh=fresh, clients=args.clients, seconds=args.seconds)
                    row["ratio_to_floor"] = row["cpu_per_verification"] / floor
                    into[name].append(row)
        kept = rounds["1 key"]
        fresh_ratios = [f["cpu_per_verification"] / k["cpu_per_verification"]
                        for f, k in zip(rounds["1 key, fresh TLS"], kept, strict=True)]  # fmt: skip
        if args.profile:
            report["profile"] = profile(server, workload, Path(args.profile), args.seconds * 2, args.clients)
        latency_bodies = [workload.body(1) for _ in range(int(100 * args.seconds))]
        report["single_key_at_100_rps"] = percentiles(paced_latencies(server, latency_bodies, 100))
        hit = workload.body(1, user="cached@example.com")
        paced_latencies(server, [hit] * 20, 200)  # every worker has it cached now
        before = server_seconds(server)
        report["cache_hit"] = percentiles(paced_latencies(server, [hit] * int(100 * args.seconds), 100))
        after = server_seconds(server)
        report["cache_hit"]["server_mean_ms"] = (after[0] - before[0]) / max(1.0, after[1] - before[1]) * 1000
        report["cache_hit_back_to_back"] = percentiles(back_to_back(server, hit, int(100 * args.seconds)))
        report["healthz_at_100_rps"] = percentiles(
            paced_latencies(server, [b""] * int(100 * args.seconds), 100, "GET", "/healthz")
        )
    report["floor_cpu_us"] = statistics.median(floors) * 1e6
    report["floors_cpu_us"] = [f * 1e6 for f in floors]
    report["kinds"] = {
        name: {
            "cpu_us_per_verification": statistics.median(r["cpu_per_verification"] for r in rows) * 1e6,
            "ratio_to_floor": statistics.median(r["ratio_to_floor"] for r in rows),
            "ratios": [round(r["ratio_to_floor"], 3) for r in rows],
            "verifications_per_s": statistics.median(r["per_s"] for r in rows),
        }
        for name, rows in rounds.items()
    }
    if args.baseline:
        report["baseline"] = {
            "path": args.baseline,
            "kinds": {
                name: {
                    "cpu_us_per_verification": statistics.median(r["cpu_per_verification"] for r in rows) * 1e6,
                    "ratio_to_floor": statistics.median(r["ratio_to_floor"] for r in rows),
                    "ratios": [round(r["ratio_to_floor"], 3) for r in rows],
                    "verifications_per_s": statistics.median(r["per_s"] for r in rows),
                }
                for name, rows in baseline_rounds.items()
            },
        }
    report["fresh_over_kept_alive"] = statistics.median(fresh_ratios)
    report["fresh_over_kept_alive_rounds"] = [round(r, 3) for r in fresh_ratios]
    report["setup"] = {
        "workers": args.workers,
        "threads": args.threads,
        "verify_threads": args.verify_threads,
        "clients": args.clients,
        "seconds": args.seconds,
        "rounds": args.rounds,
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measuring time per kind of call and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of floor + each kind of call")
    parser.add_argument("--clients", type=int, default=4, help="concurrent connections (spread over the workers)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=8, help="gunicorn threads per worker (the shipped default: 8)")
    parser.add_argument(
        "--verify-threads", type=int, default=4, help="verification threads per worker (the shipped default: 4)"
    )
    parser.add_argument("--profile", metavar="DIR", help="record a worker with py-spy; raw stacks go to DIR")
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="a directory holding another checkout's provider/ (e.g. git archive REV provider | tar -x -C DIR): "
        "its server runs beside this one and is measured in the same rounds",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    report = measure(args)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print_report(report)


def print_report(report: dict[str, Any]) -> None:
    setup = report["setup"]
    print(f"workload: signed Deployment (bench/verify.py), 1 ECDSA P-256 key; {setup['workers']} workers, "
          f"{setup['threads']} threads and {setup['verify_threads']} verify threads each, {setup['clients']} clients, TLS 1.3 + client certificates; {setup['rounds']} rounds")  # fmt: skip
    print(f"  floor: decide() in process          : {report['floor_cpu_us']:7.0f} us CPU per call")
    goals: dict[str, Callable[[float], str]] = {
        "1 key": lambda r: f"goal <= 1.5x: {'met' if r <= 1.5 else 'NOT met'}",
        "50 keys": lambda r: f"goal <= 1.1x: {'met' if r <= 1.1 else 'NOT met'}",
        "1 key, fresh TLS": lambda r: "",
    }
    for name, row in report["kinds"].items():
        print(f"  server CPU per verification, {name:<17}: {row['cpu_us_per_verification']:7.0f} us  "
              f"{row['ratio_to_floor']:.2f}x the floor  (rounds {row['ratios']}; {goals[name](row['ratio_to_floor'])}; "
              f"{row['verifications_per_s']:.0f} verifications/s)")  # fmt: skip
    for name, row in report.get("baseline", {}).get("kinds", {}).items():
        print(f"  baseline ({report['baseline']['path']}), {name:<17}: {row['cpu_us_per_verification']:7.0f} us  "
              f"{row['ratio_to_floor']:.2f}x the floor  (rounds {row['ratios']})")  # fmt: skip
    ratio = report["fresh_over_kept_alive"]
    print(f"  fresh TLS connection / kept-alive    : {ratio:.2f}x  (goal <= 2x: {'met' if ratio <= 2 else 'NOT met'})")
    lat, hit, b2b, probe = (report["single_key_at_100_rps"], report["cache_hit"], report["cache_hit_back_to_back"],
                            report["healthz_at_100_rps"])  # fmt: skip
    print(f"  single key at 100 req/s              : p50 {lat['p50_ms']:.2f} ms  p99 {lat['p99_ms']:.2f} ms")
    print(f"  cache hit                            : p50 {hit['p50_ms']:.2f} ms  p99 {hit['p99_ms']:.2f} ms round trip; "
          f"{hit['server_mean_ms']:.2f} ms in the server")  # fmt: skip
    print(f"  cache hit, back to back              : p50 {b2b['p50_ms']:.2f} ms  p99 {b2b['p99_ms']:.2f} ms")
    print(f"  GET /healthz at 100 req/s            : p50 {probe['p50_ms']:.2f} ms  p99 {probe['p99_ms']:.2f} ms")
    for name, found in report.get("profile", {}).items():
        print(f"  profile of one worker, {name}: {found['samples']} samples under the GIL; "
              f"{100 * found['cpu_beyond_gil']:.0f}% of its CPU beyond them")  # fmt: skip
        for stage, share in sorted(found["shares"].items(), key=lambda item: -item[1]):
            print(f"    {100 * share:5.1f}%  {stage}")
    print(f"  (the machine was {report['machine_busy_percent_before']:.0f}% busy with other work just before the run)")


if __name__ == "__main__":
    main()
