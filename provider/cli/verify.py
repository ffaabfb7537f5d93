"""``manifest-provider verify``: verify every document of a file against a policy."""

from __future__ import annotations

import argparse

from . import COMMANDS
from ._args import add_output_flag, add_policy_flags, command_parser

HELP = COMMANDS["verify"]
EXAMPLES = (
    "manifest-provider verify -f app.yaml.signed -k team.pub",
    "manifest-provider verify -f app.yaml.signed -k team.pub,ops.pub --key-operation MustAll -o yaml",
    "manifest-provider verify -f deploy/ -f extra.yaml -k team.pub -o json   # .results[].object names each file",
    "kustomize build . | manifest-provider verify -f - -k env://TEAM_PUBLIC_KEY",
    "manifest-provider verify -f app.yaml.signed -c policy.yaml --dry-run --kubeconfig ~/.kube/config",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = command_parser(sub, "verify", HELP, EXAMPLES)
    p.add_argument(
        "-f",
        "--filename",
        required=True,
        action="append",
        metavar="FILE",
        help="YAML/JSON file with the objects to verify, or a directory of them (- for stdin; repeatable: each "
        "result's object then names its file); AdmissionRequest/AdmissionReview JSON is accepted too",
    )
    add_policy_flags(p)
    p.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig for --dry-run (default: $KUBECONFIG or ~/.kube/config)"
    )
    add_output_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: building the parser (``verify --help``) needs none of this.
    from ..bounds import LOCAL
    from ..policy.schema import Policy
    from ..verifier import decide
    from ._common import build_policy, evaluate_documents, policy_where, signature_sources

    # The person running the CLI wrote the policy: it may name their files, namespaces and registries.
    policy = Policy.from_dict(build_policy(args), bounds=LOCAL, where=policy_where(args))
    runner = None
    if args.dry_run or (policy.dry_run.enabled and args.kubeconfig):
        from ..kube.dryrun import dry_runner_for

        runner = dry_runner_for(args.kubeconfig)
    sources = signature_sources(args.kubeconfig, policy)
    return evaluate_documents(
        "verify",
        args.filename,
        args.output,
        lambda review: decide(review, policy, dry_runner=runner, sources=sources),
        admission=args.admission,
    )
