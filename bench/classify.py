"""Benchmark: ``manifest-provider classify`` streams an audit log in constant memory.

Generates a synthetic audit log lazily (nothing is written to disk: lines are
piped into the real CLI's standard input) and reports, for growing lengths,
the CLI's throughput and peak resident memory (``ru_maxrss`` of that child
alone, from ``os.wait4``). The log is the worst case for the bounded
structures: every event names a new namespace, user and unprocessed triple,
so the breakdowns, the top-N counter and the service-account tracker all
reach their caps early and must stay there.

    python bench/classify.py                 # 10k, 100k, 1M events
    python bench/classify.py --events 50000  # one length
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provider.keys.pem import generate_key, public_pem  # noqa: E402

# One line of each kind the installed cluster writes: control-plane lease renewals
# (out of scope), controller writes (common profile), a person's unsigned
# writes (unprocessed), a service account in its own namespace (--suggest).
TEMPLATE = {
    "kind": "Event",
    "apiVersion": "audit.k8s.io/v1",
    "level": "Request",
    "stage": "ResponseComplete",
    "userAgent": "bench",
    "sourceIPs": ["127.0.0.1"],
    "responseStatus": {"metadata": {}, "code": 200},
    "requestReceivedTimestamp": "2026-11-21T11:57:30.588932Z",
    "stageTimestamp": "2026-11-21T11:57:30.596579Z",
    "annotations": {"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""},
}


def event(i: int) -> dict[str, object]:
    n = i % 4
    ns = f"ns-{i}"
    if n == 0:
        user, verb = "system:kube-scheduler", "update"
        ref = {
            "resource": "leases",
            "namespace": "kube-system",
            "name": "kube-scheduler",
            "apiGroup": "coordination.k8s.io",
            "apiVersion": "v1",
        }
        body: object = {
            "kind": "Lease",
            "apiVersion": "coordination.k8s.io/v1",
            "metadata": {"name": "kube-scheduler", "namespace": "kube-system"},
            "spec": {
                "holderIdentity": f"vm_{i}",
                "leaseDurationSeconds": 15,
                "renewTime": "2026-11-21T11:57:30.624955Z",
            },
        }
    elif n == 1:
        user, verb = "system:serviceaccount:kube-system:replicaset-controller", "create"
        ref = {"resource": "pods", "namespace": ns, "name": f"web-{i}", "apiVersion": "v1"}
        body = {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"generateName": "web-", "namespace": ns, "labels": {"app": "web"}},
            "spec": {
                "containers": [{"name": "web", "image": "nginx:1.25", "resources": {}}],
                "restartPolicy": "Always",
            },
        }
    elif n == 2:
        user, verb = f"user-{i}", "create"
        ref = {"resource": "configmaps", "namespace": ns, "name": f"cm-{i}", "apiVersion": "v1"}
        body = {
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "metadata": {"name": f"cm-{i}", "namespace": ns},
            "data": {"key": "x" * 200},
        }
    else:
        user, verb = f"system:serviceaccount:{ns}:operator", "patch"
        ref = {"resource": "deployments", "namespace": ns, "name": "web", "apiGroup": "apps", "apiVersion": "v1"}
        body = {"spec": {"replicas": i % 7}}
    return {
        **TEMPLATE,
        "auditID": f"00000000-0000-0000-0000-{i:012d}",
        "verb": verb,
        "requestURI": "/bench",
        "user": {"username": user, "groups": ["system:authenticated"]},
        "objectRef": ref,
        "requestObject": body,
    }


def lines(count: int) -> Iterator[bytes]:
    for i in range(count):
        yield json.dumps(event(i), separators=(",", ":")).encode() + b"\n"


def run(count: int, policy: str) -> tuple[float, int, int]:
    """(seconds, peak RSS in KiB, exit code) of one CLI run over ``count`` generated events."""
    cmd = [
        sys.executable,
        "-m",
        "provider.cli",
        "classify",
        "-f",
        "-",
        "--config",
        policy,
        "--by",
        "namespace",
        "--by",
        "user",
        "-o",
        "json",
        "--suggest",
    ]
    start = time.perf_counter()
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    assert child.stdin is not None
    batch: list[bytes] = []
    for line in lines(count):
        batch.append(line)
        if len(batch) == 512:
            child.stdin.write(b"".join(batch))
            batch.clear()
    child.stdin.write(b"".join(batch))
    child.stdin.close()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - start, usage.ru_maxrss, child.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, action="append", help="log length (repeatable; default 10k, 100k, 1M)")
    args = parser.parse_args()
    counts = args.events or [10_000, 100_000, 1_000_000]
    with tempfile.TemporaryDirectory() as tmp:
        policy = Path(tmp, "policy.yaml")
        policy.write_text(json.dumps({"keys": [public_pem(generate_key("ecdsa-p256")).decode()]}))
        print(f"{'events':>10} {'seconds':>8} {'events/s':>9} {'peak RSS MiB':>12}")
        for count in counts:
            seconds, rss_kib, code = run(count, str(policy))
            if code != 1:  # the log holds unprocessed writes: exit 1 is the expected verdict
                print(f"classify exited {code}", file=sys.stderr)
                return 1
            print(f"{count:>10} {seconds:>8.1f} {count / seconds:>9.0f} {rss_kib / 1024:>12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
