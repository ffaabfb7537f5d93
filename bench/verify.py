"""In-process verification speed against the floor the hardware allows.

Measures, in one run and on one core:

* **ours**: ``decide()`` on a signed ~3 KB Deployment as it is admitted (the
  signature annotations on it, server-populated metadata and status added),
  with a one-key ECDSA P-256 policy and the default profiles;
* **floor**: what any verifier must do at least -- one ECDSA P-256 verification
  of the payload plus a libyaml C-loader parse of the same payload
  (``yaml.load(P, CSafeLoader)``);

and prints verifications per second for both and the ratio (goal: <= 1.5).
Also reports how the cost grows with object size and with keys per policy.

Usage: ``python bench/verify.py [--seconds S] [--json]``
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import rate

from provider import Policy, Review, decide
from provider.keys.pem import generate_key, load_public_keys, public_pem
from provider.signatures.envelope import read_envelope
from provider.signatures.signing import sign_documents


def deployment(containers: int = 2, env: int = 12) -> dict[str, Any]:
    """A realistic Deployment; the default is about 3 KB of YAML."""

    def container(i: int) -> dict[str, Any]:
        return {
            "name": f"app-{i}",
            "image": f"registry.example.com/team/app-{i}:1.4.{i}",
            "imagePullPolicy": "IfNotPresent",
            "args": ["--config=/etc/app/config.yaml", "--log-level=info", f"--port={8080 + i}"],
            "env": [{"name": f"SETTING_{j}", "value": f"value-{j}"} for j in range(env)],
            "ports": [{"name": "http", "containerPort": 8080 + i, "protocol": "TCP"}],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080 + i}, "periodSeconds": 10},
            "securityContext": {
                "runAsNonRoot": True,
                "readOnlyRootFilesystem": True,
                "allowPrivilegeEscalation": False,
            },
            "volumeMounts": [{"name": "config", "mountPath": "/etc/app", "readOnly": True}],
        }

    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "shop",
            "labels": {"app": "web", "team": "payments", "tier": "frontend"},
        },
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web", "team": "payments"}},
                "spec": {
                    "serviceAccountName": "web",
                    "containers": [container(i) for i in range(containers)],
                    "volumes": [{"name": "config", "configMap": {"name": "web-config"}}],
                },
            },
        },
    }


def admitted(signed: dict[str, Any]) -> dict[str, Any]:
    """The signed object as the API server hands it to admission on update."""
    obj = copy.deepcopy(signed)
    obj["metadata"].update(
        {
            "uid": "3f0c9a1e-6c1e-4a53-9d6f-0b2d1f0e7c11",
            "resourceVersion": "812734",
            "generation": 4,
            "creationTimestamp": "2026-11-02T09:14:11Z",
            "managedFields": [
                {
                    "manager": "kubectl-client-side-apply",
                    "operation": "Update",
                    "apiVersion": "apps/v1",
                    "time": "2026-11-02T09:14:11Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:replicas": {}}},
                }
            ],
        }
    )
    obj["status"] = {"observedGeneration": 4, "replicas": 3, "readyReplicas": 3, "availableReplicas": 3}
    return obj


def measure(doc: dict[str, Any], keys: int, seconds: float) -> dict[str, float]:
    signer = generate_key("ecdsa-p256")
    others = [public_pem(generate_key("ecdsa-p256")).decode() for _ in range(keys - 1)]
    (signed,) = sign_documents([doc], signer)
    obj = admitted(signed)
    policy = Policy.from_dict({"keys": [*others, public_pem(signer).decode()]})
    review = Review.for_object(obj)
    assert decide(review, policy).verified

    envelope = read_envelope(signed["metadata"]["annotations"])
    payload, signature = envelope.payload.data, envelope.sets[0].signature
    (key,) = load_public_keys(public_pem(signer).decode())
    loader = yaml.CSafeLoader

    def floor() -> None:
        assert key.verifies(signature, payload)
        yaml.load(payload, Loader=loader)

    ours_rate = rate(lambda: decide(review, policy), seconds)
    floor_rate = rate(floor, seconds)
    return {
        "payload_bytes": len(payload),
        "ours_per_s": ours_rate,
        "floor_per_s": floor_rate,
        "ratio": floor_rate / ours_rate,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per figure")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()

    report: dict[str, Any] = {"headline": measure(deployment(), 1, args.seconds)}
    report["by_size"] = {f"{c} containers": measure(deployment(containers=c), 1, args.seconds / 2) for c in (1, 4, 16)}
    report["by_keys"] = {f"{k} keys": measure(deployment(), k, args.seconds / 2) for k in (4, 16)}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    head = report["headline"]
    print(f"signed Deployment, payload {head['payload_bytes']} bytes, 1 ECDSA P-256 key")
    print(f"  ours : {head['ours_per_s']:8.0f} verifications/s  ({1e6 / head['ours_per_s']:.0f} us each)")
    print(
        f"  floor: {head['floor_per_s']:8.0f} /s  (1 ECDSA P-256 verify + C-loader parse, {1e6 / head['floor_per_s']:.0f} us)"
    )
    print(f"  ratio: {head['ratio']:.2f}x the floor (goal <= 1.5x)")
    for section in ("by_size", "by_keys"):
        for label, row in report[section].items():
            print(
                f"  {label:>14}: payload {row['payload_bytes']:6d} B  ours {row['ours_per_s']:7.0f}/s  floor {row['floor_per_s']:7.0f}/s  ratio {row['ratio']:.2f}x"
            )


if __name__ == "__main__":
    main()
