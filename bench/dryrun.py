"""What the dry-run path adds to one verification, over the fake API server.

Measures, in one run, ``decide()`` on the seed paper's Figure 1 Deployment
(signed by this script, admitted as the recorded API-server answer says the
cluster made it):

* **floor**: the same object admitted *exactly* as signed, so it verifies by
  direct comparison without asking the cluster (the cost of verification
  itself);
* **dry-run, warm**: the admitted object carries the cluster's defaults, so
  verification needs the dry-run; discovery is cached (the steady state);
* **dry-run, cold**: a fresh runner each time (discovery + create: what the
  first object of a kind costs after a start or a cache expiry);
* **create only**: ``runner.dry_run()`` alone -- the HTTPS POST, the fake
  server's replay and our JSON handling;
* **compare only**: planning the manifest and the by-value comparison on a
  dry-run result fetched once -- what dry-run costs in this library itself;

and prints medians and 95th percentiles and the latency dry-run adds over the
floor. The API server is
``tests.support.fakeapi.FakeApiServer`` on loopback (HTTPS, keep-alive): a real
cluster adds its own admission chain and network to the round trip.

Usage: ``python bench/dryrun.py [--seconds S] [--json]``
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from provider import Policy, Review, decide
from provider.compare.diff import diff
from provider.compare.dryrun import plan_dry_run, reference_and_admitted
from provider.keys.pem import generate_key, public_pem
from provider.objects import ObjectIdentity
from provider.signatures.signing import sign_documents
from provider.verifier import without_envelope
from tests.support.fakeapi import FakeApiServer, recording, runner_for


def measure(run: Callable[[], Any], seconds: float) -> list[float]:
    """Latencies in milliseconds of ``run()`` repeated for about ``seconds``."""
    for _ in range(5):
        run()
    samples: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(samples) < 20:
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "median_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1], 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time per measurement (default 3)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()

    key = generate_key("ecdsa-p256")
    rec = recording("deployment-seed-paper-figure1")
    (signed,) = sign_documents([copy.deepcopy(rec.request_body)], key)
    as_signed = copy.deepcopy(signed)
    as_signed["metadata"]["namespace"] = "default"
    defaulted = copy.deepcopy(rec.body)
    defaulted["metadata"]["annotations"] = signed["metadata"]["annotations"]
    policy = Policy.from_dict({"keys": [public_pem(key).decode()], "dryRun": {"enabled": True}})
    workdir = Path(tempfile.mkdtemp(prefix="bench-dryrun-"))

    with FakeApiServer() as fake, runner_for(fake, workdir) as runner:

        def verify(obj: dict[str, Any], dry_runner: Any) -> None:
            result = decide(Review.for_object(obj), policy, dry_runner=dry_runner)
            assert result.verified, result.message

        def cold() -> None:
            with runner_for(fake, workdir) as fresh:
                verify(defaulted, fresh)

        plan = plan_dry_run(rec.request_body, "default")
        fetched = runner.dry_run(plan.manifest, plan.namespace)
        ignore = policy.ignore_set_for(ObjectIdentity.of(defaulted, "default"))

        def create_only() -> None:
            runner.dry_run(plan.manifest, plan.namespace)

        def compare_only() -> None:
            again = plan_dry_run(rec.request_body, "default")
            reference, real = reference_and_admitted(fetched, defaulted, rec.request_body, again)
            assert not diff(
                without_envelope(reference, policy.annotation_domain),
                without_envelope(real, policy.annotation_domain),
                ignore,
            )

        results = {
            "floor": summary(measure(lambda: verify(as_signed, runner), args.seconds)),
            "dry_run_warm": summary(measure(lambda: verify(defaulted, runner), args.seconds)),
            "dry_run_cold": summary(measure(cold, args.seconds)),
            "create_only": summary(measure(create_only, args.seconds)),
            "compare_only": summary(measure(compare_only, args.seconds)),
        }
    floor, warm, cold_ms = (results[k]["median_ms"] for k in ("floor", "dry_run_warm", "dry_run_cold"))
    results["added_ms"] = {"warm": round(warm - floor, 3), "cold": round(cold_ms - floor, 3)}
    results["ratio_to_floor"] = {"warm": round(warm / floor, 2), "cold": round(cold_ms / floor, 2)}

    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print("decide() on the seed paper's Figure 1 Deployment; fake API server on loopback (HTTPS, keep-alive)")
    for name in ("floor", "dry_run_warm", "dry_run_cold", "create_only", "compare_only"):
        r = results[name]
        print(f"  {name:<14} median {r['median_ms']:8.3f} ms   p95 {r['p95_ms']:8.3f} ms   (n={r['n']})")
    print(
        f"  dry-run adds {results['added_ms']['warm']:.3f} ms warm ({results['ratio_to_floor']['warm']}x the floor), "
        f"{results['added_ms']['cold']:.3f} ms cold ({results['ratio_to_floor']['cold']}x)"
    )
    print(
        f"  of the warm addition: the create {results['create_only']['median_ms']:.3f} ms, "
        f"planning and comparing by value {results['compare_only']['median_ms']:.3f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
