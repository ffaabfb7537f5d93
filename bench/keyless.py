"""What a keyless verification costs, relative to a key verification measured in the same run.

Measures, on one core, with upstream's real fixtures (signed by the public-good
Fulcio and logged in Rekor) and the trusted root of the interop data:

* **key**: ``decide()`` on ``cm-tarball-key-signed.yaml`` with its ECDSA P-256
  key -- the cost every keyed verification pays;
* **keyless, first sight**: ``decide()`` on ``cm-tarball-keyless-signed.yaml``
  with its signer, the per-set cache cleared before every call (SET, logged
  entry, Fulcio chain, validity, signature, identity);
* **keyless, seen before**: the same with the cache warm (Gatekeeper's audit
  and repeated admissions of one object);
* the bare primitives: one ECDSA P-256 signature check (the key floor) and
  one uncached ``check_signer``.

Prints verifications per second and each figure's cost relative to the key
verification. Usage: ``python bench/keyless.py [--seconds S] [--json]``
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import rate

from provider import Policy, Review, decide
from provider.keyless.signer import check_signer, clear_cache
from provider.keyless.trust import load_trusted_root
from provider.signatures.envelope import read_envelope

UPSTREAM = Path(__file__).resolve().parents[1] / "tests" / "data" / "interop" / "k8s-manifest-sigstore"
TRUST = UPSTREAM / "trust" / "sigstore-public-good-trusted_root.json"


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((UPSTREAM / "manifests" / name).read_text())
    return doc


def no_network(*args: Any, **kwargs: Any) -> Any:
    raise OSError("network access attempted")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per figure")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    # Offline by construction: any connection attempt would fail the run.
    socket.socket = no_network  # type: ignore[assignment,misc]
    socket.create_connection = no_network

    keyed = Review.for_object(load("cm-tarball-key-signed.yaml"))
    key_policy = Policy.from_dict({"keys": [(UPSTREAM / "keys" / "testpub.pem").read_text()]})
    keyless_obj = load("cm-tarball-keyless-signed.yaml")
    keyless = Review.for_object(keyless_obj)
    root = json.loads(TRUST.read_text())
    signer_policy = Policy.from_dict({"signers": ["hirokuni.kitahara1@gmail.com"], "trustedRoot": root})
    assert decide(keyed, key_policy).verified
    assert decide(keyless, signer_policy).verified

    envelope = read_envelope(keyless_obj["metadata"]["annotations"])
    key_envelope = read_envelope(keyed.object["metadata"]["annotations"]) if isinstance(keyed.object, dict) else None
    assert key_envelope is not None
    (key,) = key_policy.keys
    spec = signer_policy.signers[0]

    def keyless_cold() -> None:
        clear_cache()
        decide(keyless, signer_policy)

    def check_signer_cold() -> None:
        clear_cache()
        assert check_signer(spec, envelope, root).verified

    def one_key_signature() -> None:
        assert key.verifies(key_envelope.sets[0].signature, key_envelope.payload.data)

    figures = {
        "key_decide": rate(lambda: decide(keyed, key_policy), args.seconds, batch=10),
        "keyless_decide_cold": rate(keyless_cold, args.seconds, batch=10),
        "keyless_decide_warm": rate(lambda: decide(keyless, signer_policy), args.seconds, batch=10),
        "key_signature": rate(one_key_signature, args.seconds, batch=10),
        "check_signer_cold": rate(check_signer_cold, args.seconds, batch=10),
        "trusted_root_lookup": rate(lambda: load_trusted_root(root), args.seconds, batch=10),
    }
    base = figures["key_decide"]
    report = {
        name: {"per_s": round(value), "us": round(1e6 / value, 1), "cost_vs_key_decide": round(base / value, 2)}
        for name, value in figures.items()
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    labels = {
        "key_decide": "decide(), 1 ECDSA P-256 key",
        "keyless_decide_cold": "decide(), keyless, first sight",
        "keyless_decide_warm": "decide(), keyless, seen before",
        "key_signature": "one ECDSA P-256 signature check",
        "check_signer_cold": "check_signer(), uncached",
        "trusted_root_lookup": "trusted root lookup (inline, cached)",
    }
    for name, row in report.items():
        print(
            f"{labels[name]:>38}: {row['per_s']:8d}/s  {row['us']:8.1f} us  {row['cost_vs_key_decide']:6.2f}x a key decide()"
        )


if __name__ == "__main__":
    main()
