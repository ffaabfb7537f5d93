"""What an OCI resource bundle costs at admission, relative to a signature on the object itself.

Measures, on one core, against a real registry (Debian's ``docker-registry``,
started on loopback as the tests start it) holding a bundle pushed by
``manifest-provider sign --image``:

* **floor**: ``decide()`` on the same ConfigMap signed in its own annotations
  with the same ECDSA P-256 key -- what a verification costs without a bundle;
* **first fetch**: ``decide()`` on the object that carries only
  ``resourceBundleRef`` (a tag), with an empty bundle cache every call: resolve
  the tag, read the image manifest, its cosign signature, the layer, then verify;
* **tag, warm**: the same with the cache kept -- a tag may move, so each call
  still resolves it (one manifest request), the rest comes from the cache;
* **digest, warm**: the reference pinned by digest -- no request at all.

Prints microseconds per call and each figure as a ratio to the floor. The
registry runs on the same two cores, which a real one would not.
Usage: ``python bench/bundles.py [--seconds S] [--json]``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import rate

from provider import Policy, Review, decide
from provider.cli import main as cli
from provider.keys.pem import private_pem
from provider.oci.bundles import OciBundleSource
from provider.signatures.signing import dump_yaml
from provider.signatures.sources import Reference, Sources
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign
from tests.support.registry import Registry

KEY = make_key("ecdsa-p256", 40)
OBJECT = configmap("app", mode="production")
ANNOTATION = "cosign.sigstore.dev/resourceBundleRef"


def signed_into(registry: Registry, directory: Path, ref: str) -> dict[str, Any]:
    """``manifest-provider sign --image ref`` on :data:`OBJECT`: the object it writes."""
    source, key_file, out = directory / "app.yaml", directory / "key.pem", directory / "app.signed.yaml"
    source.write_text(dump_yaml([OBJECT]))
    key_file.write_bytes(private_pem(KEY, None))
    if cli(["sign", "-f", str(source), "--key", str(key_file), "--image", ref, "-o", str(out)]) != 0:
        raise SystemExit("sign --image failed")
    (signed, *_) = yaml.safe_load_all(out.read_text())
    return dict(signed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per figure")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        registry = Registry(directory)
        try:
            figures = measure(registry, directory, args.seconds)
        finally:
            registry.stop()
    base = figures["floor"]
    report = {
        name: {"per_s": round(value), "us": round(1e6 / value, 1), "vs_floor": round(base / value, 2)}
        for name, value in figures.items()
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    labels = {
        "floor": "decide(), signature on the object",
        "first_fetch": "decide(), bundle, first fetch",
        "tag_warm": "decide(), bundle by tag, warm",
        "digest_warm": "decide(), bundle by digest, warm",
    }
    for name, row in report.items():
        print(f"{labels[name]:>36}: {row['per_s']:8d}/s  {row['us']:9.1f} us  {row['vs_floor']:7.2f}x the floor")


def measure(registry: Registry, directory: Path, seconds: float) -> dict[str, float]:
    repository = f"{registry.host}/bundles/app"
    ref = f"{repository}:v1"
    by_tag = signed_into(registry, directory, ref)
    policy = Policy.from_dict({"keys": [public_key_pem(KEY)], "resourceBundleRef": {"repositories": [repository]}})
    warm = OciBundleSource()
    pinned_digest = warm.fetch(Reference.parse(ref), time.monotonic() + 5).digest
    by_digest = {
        **by_tag,
        "metadata": {**by_tag["metadata"], "annotations": {ANNOTATION: f"{repository}@{pinned_digest}"}},
    }
    (own,) = sign(OBJECT, KEY)
    floor_policy = Policy.from_dict({"keys": [public_key_pem(KEY)]})

    def checked(review: Review, chosen: Policy, sources: Sources | None = None) -> None:
        result = decide(review, chosen, sources=sources)
        if not result.verified:
            raise SystemExit(f"not verified: {result.reason}: {result.message}")

    tag_review, digest_review, own_review = (Review.for_object(o) for o in (by_tag, by_digest, own))
    warm_sources = Sources(bundles=warm)
    return {
        "floor": rate(lambda: checked(own_review, floor_policy), seconds, batch=10),
        "first_fetch": rate(lambda: checked(tag_review, policy, Sources(bundles=OciBundleSource())), seconds, batch=2),
        "tag_warm": rate(lambda: checked(tag_review, policy, warm_sources), seconds, batch=5),
        "digest_warm": rate(lambda: checked(digest_review, policy, warm_sources), seconds, batch=10),
    }


if __name__ == "__main__":
    main()
