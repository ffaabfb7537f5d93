"""``manifest-provider verify``: verify every document of a file against a policy."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..errors import PolicyError
from ._common import add_output_flag, evaluate_documents, read_key_files, read_policy_file, read_text

HELP = "verify signed manifests (exit 0: all verified, 1: some denied, 2: usage error, 3: some allowed unverified)"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("verify", help=HELP, description=HELP)
    p.add_argument(
        "-f",
        "--filename",
        required=True,
        metavar="FILE",
        help="YAML/JSON file with the objects to verify (- for stdin); AdmissionRequest/AdmissionReview JSON is "
        "accepted too",
    )
    add_policy_flags(p)
    p.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig for --dry-run (default: $KUBECONFIG or ~/.kube/config)"
    )
    add_output_flag(p)
    p.set_defaults(run=run)


def add_policy_flags(p: argparse.ArgumentParser) -> None:
    """The flags :func:`build_policy` reads; ``verify-resource`` and ``observe`` take the same ones."""
    p.add_argument(
        "-k",
        "--key",
        action="append",
        default=[],
        metavar="PUBLIC.pem",
        help="trusted public key or certificate PEM file (repeatable; several PEM blocks in one file are several keys)",
    )
    p.add_argument(
        "--key-operation", choices=("AtLeastOne", "MustAll"), help="AtLeastOne (default) or MustAll of the keys"
    )
    p.add_argument("--threshold", type=int, metavar="N", help="at least N distinct keys/signers must verify")
    p.add_argument("--config", metavar="POLICY.yaml", help="policy file (docs/policy.md); flags are added to it")
    p.add_argument("--annotation-domain", metavar="D", help="signature annotation domain (default cosign.sigstore.dev)")
    p.add_argument(
        "--signer",
        action="append",
        default=[],
        metavar="SUBJECT[,ISSUER]",
        help="trusted keyless signer identity, e.g. jane@example.com,https://accounts.google.com (repeatable)",
    )
    p.add_argument(
        "--trusted-root",
        metavar="FILE",
        help="sigstore TrustedRoot JSON for keyless signers (default: the public-good root shipped with this package)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="when the object differs from its manifest, ask the cluster (server-side dry-run) what it makes of the "
        "signed manifest",
    )
    p.add_argument(
        "--dry-run-namespace", metavar="NS", help="namespace for dry-run creates (default: the object's own)"
    )


def build_policy(args: argparse.Namespace) -> dict[str, Any]:
    policy = read_policy_file(args.config) if args.config else {}
    keys = read_key_files(args.key)
    if keys:
        policy["keys"] = list(policy.get("keys") or []) + keys
    if args.signer:
        signers = list(policy.get("signers") or [])
        for text in args.signer:
            subject, _, issuer = text.partition(",")
            signers.append({"subject": subject, **({"issuer": issuer} if issuer else {})})
        policy["signers"] = signers
    if args.trusted_root:
        try:
            policy["trustedRoot"] = json.loads(read_text(args.trusted_root))
        except ValueError as exc:
            raise PolicyError(f"{args.trusted_root}: not a TrustedRoot JSON document ({exc})") from exc
    if args.key_operation:
        policy["keyOperation"] = args.key_operation
    if args.threshold is not None:
        policy["threshold"] = args.threshold
    if args.annotation_domain:
        policy["annotationDomain"] = args.annotation_domain
    if args.dry_run or args.dry_run_namespace:
        dry_run = dict(policy.get("dryRun") or {})
        dry_run["enabled"] = True
        if args.dry_run_namespace:
            dry_run["namespace"] = args.dry_run_namespace
        policy["dryRun"] = dry_run
    return policy


def run(args: argparse.Namespace) -> int:
    from ..policy import Policy
    from ..verifier import decide

    policy = Policy.from_dict(build_policy(args))
    runner = None
    if args.dry_run or (policy.dry_run.enabled and args.kubeconfig):
        from ..kube.dryrun import dry_runner_for

        runner = dry_runner_for(args.kubeconfig)
    return evaluate_documents(
        "verify",
        args.filename,
        args.output,
        lambda review: decide(review, policy, dry_runner=runner),
        admission=args.admission,
    )
