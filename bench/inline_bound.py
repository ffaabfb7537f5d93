"""The most CPU one verification in a request's own thread can take, against the request's deadline.

The service answers a question that waits on nothing in the thread that read the
request (:mod:`provider.service.inline`), and that thread cannot leave a
verification it is in: what bounds it is the limits (:class:`provider.limits.Limits`)
and the inline threshold (:data:`provider.service.inline.MAX_PAIRS` signature
checks). This builds the costliest questions those bounds let through and times
reading the key plus :func:`provider.verifier.decide` on each (CPU seconds of this
thread, the worst of ``--repeat`` runs):

* **signature checks**: one key of the slowest kind the verifier accepts -- RSA-16384
  with a 64-bit public exponent, 2048-byte signatures -- against the most signature
  sets the threshold allows with it (15: with the message, 16 annotations);
* **largest object**: an object and its signed document as large as a key's JSON and
  the payload's YAML may be (:attr:`Limits.max_nodes` nodes between them), equal
  leaf by leaf, so every leaf is compared; with 7 signature sets, 2 keys (the slow
  RSA key first, then the signer's P-256 key);
* **largest object, every leaf different**: the same, with every value changed
  (a content-mismatch: the differences are all counted);
* **most documents**: a payload of :attr:`Limits.max_documents` documents, the
  object's being the last one;
* **field patterns**: a map of as many keys as a message carries, each tried against
  :data:`~provider.service.inline.INLINE_MAX_PATTERNS` ``ignoreFields`` patterns;

and, for comparison, the question the limits alone would allow without the
threshold -- 64 such RSA keys against 64 signature sets, 4096 checks -- estimated
from the time of one check (it would run for seconds). The deadline is the
service's default (``MANIFEST_PROVIDER_DEADLINE_SECONDS``, 1.5 s); a request is
answered by :data:`~provider.service.inline.INLINE_SHARE` of it plus one such
verification.

Usage: ``python bench/inline_bound.py [--repeat N] [--json]``
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from provider import Policy, decide
from provider.keys.pem import generate_key, load_public_keys, public_pem
from provider.limits import DEFAULT_LIMITS
from provider.service.checks import CheckContext
from provider.service.config import Config
from provider.service.inline import INLINE_MAX_PATTERNS, INLINE_SHARE, MAX_PAIRS, inline_answer
from provider.service.wire.gatekeeper import read_key
from provider.signatures.envelope import DEFAULT_DOMAIN, set_key
from provider.signatures.signing import sign_documents

LIMITS = DEFAULT_LIMITS


def slow_rsa_pem() -> str:
    """A public key of the slowest kind accepted: 16384 bits, a 64-bit odd exponent (only its public half exists)."""
    n = int.from_bytes(os.urandom(2048), "big") | (1 << 16383) | 1
    key = rsa.RSAPublicNumbers((1 << 64) - 1, n).public_key()
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def bogus_signature() -> str:
    """2048 bytes below any 16384-bit modulus: OpenSSL does the whole exponentiation before refusing it."""
    return base64.b64encode(b"\x00" + os.urandom(2047)).decode()


def widget(name: str, entries: int, value: str = "x") -> dict[str, Any]:
    """A custom resource holding ``entries`` equal values: the most nodes a message's bytes can carry
    (its YAML compresses about a thousandfold, so :attr:`Limits.max_nodes`, not the message size, binds)."""
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"items": [value] * entries},
    }


def question(obj: dict[str, Any], policy: dict[str, Any]) -> str:
    """The Gatekeeper key asking about ``obj`` under ``policy``, as text."""
    review = {"uid": "u", "operation": "CREATE", "namespace": "shop", "name": obj["metadata"]["name"],
              "userInfo": {"username": "alice"}, "object": obj}  # fmt: skip
    return json.dumps({"review": review, "policy": policy})


def with_sets(signed: dict[str, Any], extra: int) -> dict[str, Any]:
    """``signed`` carrying ``extra`` more signature sets (signature_1..), none of which verifies."""
    annotations = signed["metadata"]["annotations"]
    for index in range(1, extra + 1):
        annotations[set_key(DEFAULT_DOMAIN, "signature", index)] = bogus_signature()
    return signed


def scenarios() -> dict[str, tuple[str, str]]:
    """Each costliest question, as (key text, what it is)."""
    signer = generate_key("ecdsa-p256")
    slow = slow_rsa_pem()
    found: dict[str, tuple[str, str]] = {}

    (signed,) = sign_documents([widget("small", 10)], signer)
    crypto = with_sets(signed, MAX_PAIRS - 2)  # message + 15 sets = 16 annotations, 1 key: 15 checks
    del crypto["metadata"]["annotations"][set_key(DEFAULT_DOMAIN, "signature", 0)]
    crypto["metadata"]["annotations"][set_key(DEFAULT_DOMAIN, "signature", 0)] = bogus_signature()
    found["signature checks"] = (question(crypto, {"keys": [slow]}), "1 RSA-16384 key x 15 signature sets")

    two_keys = {"keys": [slow, public_pem(signer).decode()]}
    # The object (in the key's JSON) and the signed document (in the payload's YAML) are each read in
    # a parse of their own, so each may come near Limits.max_nodes alone.
    entries = LIMITS.max_nodes - 200
    big = widget("big", entries)
    (signed_big,) = sign_documents([big], signer)
    signed_big = with_sets(signed_big, 6)  # message + 7 sets = 8 annotations x 2 keys = 16
    found["largest object"] = (question(signed_big, two_keys), f"{entries} list items, 2 keys x 7 sets")
    changed = json.loads(json.dumps(signed_big))
    changed["spec"]["items"] = ["y"] * entries
    found["largest object, every leaf different"] = (question(changed, two_keys), "as above, every value changed")

    per_document = LIMITS.max_nodes // LIMITS.max_documents - 20
    documents = [widget(f"doc-{i}", per_document) for i in range(LIMITS.max_documents)]
    signed_all = sign_documents(documents, signer)
    found["most documents"] = (
        question(with_sets(signed_all[-1], 6), two_keys),
        f"{LIMITS.max_documents} documents of {per_document} items, the object's last; 2 keys x 7 sets",
    )
    # A map's keys are each tried against every pattern at the map: the most keys a message carries (distinct
    # names compress less than equal values), and the most patterns the calling thread takes (INLINE_MAX_PATTERNS).
    keyed = {**widget("keyed", 0), "spec": {"map": {f"k{i}": "x" for i in range(60_000)}}}
    (signed_keyed,) = sign_documents([keyed], signer)
    patterns = {"keys": [public_pem(signer).decode()],
                "ignoreFields": [{"fields": [f"spec.map.z{i}*" for i in range(INLINE_MAX_PATTERNS)]}]}  # fmt: skip
    found["field patterns"] = (
        question(signed_keyed, patterns),
        f"60000 map keys, each against {INLINE_MAX_PATTERNS} ignoreFields patterns; 1 key",
    )
    return found


def cpu(fn: Callable[[], Any]) -> float:
    start = time.thread_time()
    fn()
    return time.thread_time() - start


def measure(repeat: int) -> dict[str, Any]:
    deadline = Config().deadline_seconds
    report: dict[str, Any] = {"deadline_seconds": deadline, "inline_share": INLINE_SHARE, "max_pairs": MAX_PAIRS}
    rows: dict[str, Any] = {}
    ctx = CheckContext(limits=LIMITS)
    for name, (key, what) in scenarios().items():
        q = read_key(key, LIMITS)
        policy = ctx.policies.compile(q.policy, LIMITS)
        answered_inline = inline_answer(q, ctx) is not None

        def once(key: str = key, policy: Policy = policy) -> str:
            question = read_key(key, LIMITS)
            return decide(question.review, policy, limits=LIMITS).reason

        reason = once()
        seconds = [cpu(once) for _ in range(repeat)]
        rows[name] = {"what": what, "key_bytes": len(key), "reason": reason, "inline": answered_inline,
                      "worst_cpu_s": max(seconds), "median_cpu_s": sorted(seconds)[len(seconds) // 2]}  # fmt: skip
    report["scenarios"] = rows
    # Without the threshold: one check of the slow key, times 64 keys x 64 sets.
    (slow_key,) = load_public_keys(slow_rsa_pem())
    signature, data = base64.b64decode(bogus_signature()), os.urandom(4096)
    one = min(cpu(lambda: slow_key.verifies(signature, data)) for _ in range(5))
    report["one_slow_check_s"] = one
    pairs = LIMITS.max_keys * LIMITS.max_signatures
    report["unbounded_pairs"] = pairs
    report["unbounded_estimate_s"] = one * pairs
    worst = max(row["worst_cpu_s"] for row in rows.values())
    report["worst_inline_cpu_s"] = worst
    report["answered_by_s"] = INLINE_SHARE * deadline + worst
    report["ratio_to_deadline"] = worst / deadline
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each question (the worst is reported)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    report = measure(args.repeat)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"deadline {report['deadline_seconds']} s; inline threshold {report['max_pairs']} signature checks; "
          f"the calling thread starts verifications during the first {report['inline_share']:.0%} of it")  # fmt: skip
    for name, row in report["scenarios"].items():
        print(f"  {name:<38}: worst {row['worst_cpu_s'] * 1000:7.1f} ms CPU (median {row['median_cpu_s'] * 1000:.1f}); "
              f"{row['reason']}; inline: {row['inline']}; {row['key_bytes']} B key; {row['what']}")  # fmt: skip
    print(f"  worst inline verification: {report['worst_inline_cpu_s'] * 1000:.0f} ms = "
          f"{report['ratio_to_deadline']:.2f}x the deadline; a request is answered by "
          f"{report['answered_by_s']:.2f} s at most (deadline {report['deadline_seconds']} s)")  # fmt: skip
    print(f"  without the threshold: {report['unbounded_pairs']} checks x {report['one_slow_check_s'] * 1000:.1f} ms "
          f"= ~{report['unbounded_estimate_s']:.1f} s (handed to a verify thread: the deadline answers for it)")  # fmt: skip


if __name__ == "__main__":
    main()
