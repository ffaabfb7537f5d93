"""Regenerate the signed samples shared by the Gatekeeper and Kyverno signature policies.

    python policies/gatekeeper/verify-manifest-signature/make_samples.py

Makes a fresh ECDSA P-256 key, signs two ConfigMaps with it (one message over
both, as ``manifest-provider sign`` does for a two-document file) and writes:

* ``samples/k8sverifymanifestsignature/``: the constraint (with the new public
  key), ``example_allowed.yaml`` (signed, unchanged),
  ``example_disallowed_tampered.yaml`` (signed, then its data edited) and
  ``example_disallowed_unsigned.yaml`` (no signature);
* ``.kyverno-test/resource.yaml`` of the three Kyverno signature policies (the
  same three objects), and the two ClusterPolicies' ``.kyverno-test/values.yaml``
  with the verdicts the verifier gives them (computed here in-process; the
  integration tests check the running service answers the same): for the
  admission policy, what an admission request for each gets; for the
  background variant, what a background scan of each stored object gets
  (Kyverno's scan sends ``{object, namespace, operation: CREATE}`` and nothing
  else, which the service reads as the stored object: its messages say
  "stored", not "admitted");
* the public key inside the three Kyverno policies and the observer overlay's
  policy, replacing the previous one.

``tests/policies/test_generators.py`` reruns this script on a copy of the
repository and compares what it writes with what is committed.

The private key is thrown away: these are examples, and a policy trusting a
key nobody holds admits nothing new.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))

from provider.keys.pem import generate_key, public_pem  # noqa: E402
from provider.policy.schema import Policy  # noqa: E402
from provider.review import Review  # noqa: E402
from provider.signatures.signing import sign_documents  # noqa: E402
from provider.verifier import decide  # noqa: E402

SAMPLES = HERE / "samples" / "k8sverifymanifestsignature"
KYVERNO = REPO / "policies" / "kyverno"
KYVERNO_POLICIES = {
    name: KYVERNO / name / f"{name}.yaml"
    for name in ("verify-manifest-signature", "verify-manifest-signature-cel", "verify-manifest-signature-background")
}
#: The observer overlay's policy trusts the same sample key.
OBSERVER_CONFIG = REPO / "manifests" / "overlays" / "observer" / "observer-config.yaml"
NAMESPACE = "demo"
#: The user the Kyverno values pretend made the request.
USER = {"username": "alice@example.com", "groups": ["system:authenticated"]}


def configmap(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE}, "data": data}


#: What the sample constraint protects: ConfigMaps and Deployments, and the Deployments' scale
#: subresource, whose requests carry an autoscaling/v1 Scale (a Deployment's status requests carry
#: the Deployment itself). docs/policy.md, "Subresources".
MATCH_KINDS = [
    {"apiGroups": [""], "kinds": ["ConfigMap"]},
    {"apiGroups": ["apps"], "kinds": ["Deployment"]},
    {"apiGroups": ["autoscaling"], "kinds": ["Scale"]},
]


def key_lines(pem: str) -> list[str]:
    return [line for line in pem.splitlines() if line and not line.startswith("-----")]


def constraint(public_key: str) -> dict[str, Any]:
    return {
        "apiVersion": "constraints.gatekeeper.sh/v1beta1",
        "kind": "K8sVerifyManifestSignature",
        "metadata": {"name": "verify-manifest-signature"},
        "spec": {
            "enforcementAction": "dryrun",
            "match": {
                "kinds": MATCH_KINDS,
                "namespaces": [NAMESPACE],
            },
            "parameters": {"keys": [public_key]},
        },
    }


CONSTRAINT_HEADER = (
    "# Audit first (enforcementAction: dryrun): violations are reported, nothing is\n"
    "# refused. Set enforcementAction: deny to enforce (docs/quickstart-gatekeeper.md).\n"
    "# Matches ConfigMaps and Deployments in demo, and Scale: `kubectl scale` writes a\n"
    "# Deployment through its scale subresource, with a Scale as the object. Gatekeeper\n"
    "# must be sent those requests at all: manifests/overlays/gatekeeper/gatekeeper-values.yaml\n"
    '# (docs/policy.md, "Subresources").\n'
)


def admission_request(obj: dict[str, Any]) -> dict[str, Any]:
    """``{{ request }}`` at admission: the API server's AdmissionRequest for a create by :data:`USER`."""
    return {
        "operation": "CREATE",
        "namespace": NAMESPACE,
        "name": obj["metadata"]["name"],
        "userInfo": USER,
        "object": obj,
    }


def background_scan_request(obj: dict[str, Any]) -> dict[str, Any]:
    """``{{ request }}`` in a background scan of a stored object: no uid, no userInfo.

    kyverno/kyverno ``pkg/controllers/report/utils/scanner.go`` (``validateResource``) and
    ``pkg/engine/policycontext/policy_context.go``; ``provider/review.py`` reads this shape.
    """
    return {"object": obj, "namespace": NAMESPACE, "operation": "CREATE"}


def verdicts(
    objects: list[dict[str, Any]], public_key: str, request: Any = admission_request
) -> dict[str, dict[str, Any]]:
    policy = Policy.from_dict({"keys": [public_key]})
    out = {}
    for obj in objects:
        review = Review.from_admission(request(obj))
        result = decide(review, policy).to_dict()
        out[obj["metadata"]["name"]] = {k: result[k] for k in ("allowed", "reason", "message")}
    return out


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (PEM keys) as literal blocks, the way people write them."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_BlockDumper.add_representer(str, _str)


def write_yaml(path: Path, docs: list[Any], header: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.dump_all(docs, Dumper=_BlockDumper, sort_keys=False, width=2**31 - 1))


def replace_key(path: Path, old: list[str], new: list[str]) -> None:
    text = path.read_text()
    if old and all(line in text for line in old):
        for before, after in zip(old, new, strict=True):
            text = text.replace(before, after)
        path.write_text(text)
    else:
        print(f"{path}: previous key not found; put this public key in by hand:\n{''.join(new)}", file=sys.stderr)


def main() -> None:
    old_constraint = SAMPLES / "constraint.yaml"
    old_key = (
        key_lines(yaml.safe_load(old_constraint.read_text())["spec"]["parameters"]["keys"][0])
        if old_constraint.exists()
        else []
    )

    key = generate_key("ecdsa-p256")
    public_key = public_pem(key).decode()
    signed = sign_documents(
        [
            configmap("app-config", {"mode": "production", "replicas": "3"}),
            configmap("app-settings", {"log-level": "info"}),
        ],
        key,
    )
    allowed = signed[0]
    tampered = copy.deepcopy(signed[1])
    tampered["data"]["log-level"] = "debug"
    unsigned = configmap("app-flags", {"feature-x": "on"})

    write_yaml(SAMPLES / "constraint.yaml", [constraint(public_key)], CONSTRAINT_HEADER)
    write_yaml(SAMPLES / "example_allowed.yaml", [allowed])
    write_yaml(SAMPLES / "example_disallowed_tampered.yaml", [tampered])
    write_yaml(SAMPLES / "example_disallowed_unsigned.yaml", [unsigned])

    header = "# Generated by policies/gatekeeper/verify-manifest-signature/make_samples.py\n"
    for policy_path in KYVERNO_POLICIES.values():
        write_yaml(policy_path.parent / ".kyverno-test" / "resource.yaml", [allowed, tampered, unsigned], header)
        replace_key(policy_path, old_key, key_lines(public_key))
    replace_key(OBSERVER_CONFIG, old_key, key_lines(public_key))

    for name, request in (
        ("verify-manifest-signature", admission_request),
        ("verify-manifest-signature-background", background_scan_request),
    ):
        answers = verdicts([allowed, tampered, unsigned], public_key, request)
        values = {
            "apiVersion": "cli.kyverno.io/v1alpha1",
            "kind": "Values",
            "metadata": {"name": "values"},
            "policies": [
                {
                    "name": name,
                    "resources": [
                        {"name": obj, "values": {f"verdict.{k}": v for k, v in verdict.items()}}
                        for obj, verdict in answers.items()
                    ],
                }
            ],
        }
        write_yaml(KYVERNO / name / ".kyverno-test" / "values.yaml", [values], header)


if __name__ == "__main__":
    main()
