"""Where the server's CPU goes per request, stage by stage, timed inside a real worker.

``bench/service.py`` gives the server's CPU per verification against ``decide()``;
this bench splits it. It starts the same server (``manifest-provider serve``, TLS
1.3, client certificates, one worker so every request is seen) with a
``sitecustomize`` module on its ``PYTHONPATH`` that wraps the functions of the
request path -- gunicorn's event loop callbacks, its head parser, the WSGI environ,
the response writes, the pool's work item, the app, ``decide()`` -- and adds up the
*thread CPU time* (``time.thread_time``: user + system of the calling thread, so a
thread waiting for the GIL or a socket costs nothing) spent in each, over a
window of steady load. Wrapping costs about a microsecond a call, so the stages
are a little high; the total of the worker (``psutil``, same window) is given beside
them, and the floor (``decide()`` in this process) is measured in the same run.

Stages nest: ``work item`` holds ``handle``, which holds ``head parse``, ``environ``,
``app`` and ``response write``; ``app`` holds ``read body`` and ``decide``. The event
loop's stages (``loop: ...``) run in the worker's main thread.

Usage: ``python bench/service_stages.py [--seconds S] [--kind healthz|1|50 ...]``
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from service import Workload, gatekeeper_context, run_load  # bench/service.py: the same workload and client

from tests.support.server import Server, running_server

#: The module the server imports at start (``sitecustomize``): it wraps the stages and, once
#: ``STAGES_START`` seconds have passed, adds up thread CPU for ``STAGES_SECONDS``, then writes the
#: sums to ``STAGES_OUT``-<pid>.json.
SITECUSTOMIZE = r"""
import collections, json, os, threading, time
if os.environ.get("STAGES_OUT"):
    from concurrent.futures import thread as _pool
    from gunicorn.http import parser as _parser, wsgi as _wsgi
    from gunicorn.workers import gthread as _gthread
    from provider.service import body as _body, checks as _checks, routes as _routes, worker as _worker

    _cpu = time.thread_time
    _sums, _calls, _lock, _on = collections.Counter(), collections.Counter(), threading.Lock(), threading.Event()

    def _timed(name, function):
        def timed(*args, **kwargs):
            if not _on.is_set():
                return function(*args, **kwargs)
            started = _cpu()
            try:
                return function(*args, **kwargs)
            finally:
                spent = _cpu() - started
                with _lock:
                    _sums[name] += spent
                    _calls[name] += 1
        return timed

    W = _worker.GuardedThreadWorker
    for owner, attribute, name in (
        (_pool._WorkItem, "run", "work item (pool thread)"), (W, "handle", "handle"),
        (_parser.Parser, "__next__", "head parse (gunicorn)"), (_wsgi, "create", "environ (gunicorn)"),
        (_wsgi.Response, "write", "response write"), (_wsgi.Response, "close", "response close"),
        (_checks, "decide", "decide()"), (_routes, "read_body", "read body"),
        (W, "wait_for_and_dispatch_events", "loop: events, all"), (W, "on_client_socket_readable", "loop: next request"),
        (W, "finish_request", "loop: request done"), (W, "enqueue_req", "loop: hand to pool"),
        (_gthread.PollableMethodQueue, "defer", "pool: hand back to loop"),
    ):
        setattr(owner, attribute, _timed(name, getattr(owner, attribute)))
    _load = W.load_wsgi

    def load_wsgi(self):
        _load(self)
        self.wsgi = _timed("app", self.wsgi)

        def window():
            time.sleep(float(os.environ["STAGES_START"]))
            me = __import__("psutil").Process()
            before = sum(me.cpu_times()[:2])
            _on.set()
            time.sleep(float(os.environ["STAGES_SECONDS"]))
            _on.clear()
            total = sum(me.cpu_times()[:2]) - before
            with _lock:
                found = {"worker_cpu": total, "sums": dict(_sums), "calls": dict(_calls)}
            with open(f"{os.environ['STAGES_OUT']}-{os.getpid()}.json", "w") as out:
                json.dump(found, out)

        threading.Thread(target=window, daemon=True).start()

    W.load_wsgi = load_wsgi
"""


def healthz_load(server: Server, seconds: float, clients: int) -> int:
    """``GET /healthz`` back to back on ``clients`` kept-alive connections: requests answered."""
    stop, done = threading.Event(), [0] * clients
    context = gatekeeper_context(server)

    def client(index: int) -> None:
        conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=30)
        while not stop.is_set():
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            done[index] += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    return sum(done)


def measure(kind: str, seconds: float, clients: int, workload: Workload) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "sitecustomize.py").write_text(SITECUSTOMIZE)
        out = str(Path(scratch) / "stages")
        start = 2.0  # imports, the compiled policy and the profiles are warm by then
        env = {"MANIFEST_PROVIDER_VERIFY_THREADS": "4", "STAGES_OUT": out, "STAGES_START": str(start),
               "STAGES_SECONDS": str(seconds), "PYTHONPATH": os.pathsep.join([scratch, str(Path.cwd())])}  # fmt: skip
        with running_server(env=env, args=("--workers", "1", "--threads", "8")) as server:
            total = start + seconds + 1.0
            if kind == "healthz":
                healthz_load(server, total, clients)
            else:
                run_load(server, workload, keys=int(kind), fresh=False, clients=clients, seconds=total)
            worker = psutil.Process(server.pid).children()[0].pid
        found: dict[str, Any] = json.loads(Path(f"{out}-{worker}.json").read_text())
    requests = found["calls"].get("handle", 0)
    if not requests:
        raise RuntimeError("no request was timed: the window missed the load")
    keys = 1 if kind == "healthz" else int(kind)
    return {
        "requests": requests,
        "keys_per_request": keys,
        "worker_cpu_us_per_request": found["worker_cpu"] / requests * 1e6,
        "stages_us_per_request": {name: spent / requests * 1e6 for name, spent in found["sums"].items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="the timed window per kind")
    parser.add_argument("--clients", type=int, default=2, help="concurrent kept-alive connections")
    parser.add_argument("--kind", action="append", choices=["healthz", "1", "50"], help="default: all three")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    workload = Workload()
    report: dict[str, Any] = {"floor_cpu_us": workload.floor(1.0) * 1e6, "kinds": {}}
    for kind in args.kind or ["healthz", "1", "50"]:
        report["kinds"][kind] = measure(kind, args.seconds, args.clients, workload)
    report["floor_cpu_us_after"] = workload.floor(1.0) * 1e6
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"floor: decide() in process, {report['floor_cpu_us']:.0f} us before, {report['floor_cpu_us_after']:.0f} us after"
    )
    for kind, row in report["kinds"].items():
        name = "GET /healthz" if kind == "healthz" else f"{kind} key(s) per request"
        print(
            f"{name}: {row['requests']} requests timed; the worker's CPU {row['worker_cpu_us_per_request']:.0f} us a request"
        )
        for stage, spent in sorted(row["stages_us_per_request"].items(), key=lambda item: -item[1]):
            print(f"  {spent:9.1f} us  {stage}")


if __name__ == "__main__":
    main()
