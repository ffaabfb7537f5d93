"""``manifest-provider verify-cluster-info``: check the bootstrap-token signatures of a cluster-info ConfigMap."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import PolicyError
from . import COMMANDS
from ._args import add_output_flag, command_parser
from ._common import evaluate_documents, read_documents

HELP = COMMANDS["verify-cluster-info"]
EXAMPLES = (
    "kubectl get cm -n kube-public cluster-info -o yaml | manifest-provider verify-cluster-info -f - "
    "--token-secret token.yaml",
    "manifest-provider verify-cluster-info -f cluster-info.yaml --token 07401b.f395accd246ae52d --require-signature",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = command_parser(sub, "verify-cluster-info", HELP, EXAMPLES)
    p.add_argument(
        "-f",
        "--filename",
        required=True,
        metavar="FILE",
        help="YAML/JSON file with the ConfigMap(s) to verify (- for stdin), e.g. kubectl get cm -n kube-public "
        "cluster-info -o yaml",
    )
    p.add_argument(
        "--token",
        action="append",
        default=[],
        metavar="ID.SECRET",
        help="a bootstrap token that may sign, as kubeadm token create prints it (repeatable); it never expires here",
    )
    p.add_argument(
        "--token-secret",
        action="append",
        default=[],
        metavar="FILE",
        help="a bootstrap-token-<id> Secret (YAML/JSON, e.g. from kubectl get secret -n kube-system -o yaml); "
        "its expiration and usage-bootstrap-signing are honoured (repeatable; Lists are read whole)",
    )
    p.add_argument(
        "--ca-cert-hash",
        action="append",
        default=[],
        metavar="sha256:HEX",
        help="the kubeconfig's CA must have this public-key hash, as kubeadm join --discovery-token-ca-cert-hash "
        "(repeatable)",
    )
    p.add_argument(
        "--require-signature", action="store_true", help="refuse a ConfigMap that carries no signature at all"
    )
    add_output_flag(p)
    p.set_defaults(run=run)


def _tokens(args: argparse.Namespace) -> list[Any]:
    from ..neighbours.bootstrap import TOKEN_SECRET_PREFIX, BootstrapToken

    tokens = [BootstrapToken.parse(text) for text in args.token]
    for path in args.token_secret:
        for index, doc in enumerate(read_documents(path)):
            meta = doc.get("metadata") if isinstance(doc, dict) else None
            name = meta.get("name") if isinstance(meta, dict) else None
            token_id = name.removeprefix(TOKEN_SECRET_PREFIX) if isinstance(name, str) else ""
            token = BootstrapToken.from_secret(doc, token_id)
            if token is None:
                raise PolicyError(
                    f"{path}: document {index + 1} is not a usable {TOKEN_SECRET_PREFIX}<id> Secret of type "
                    "bootstrap.kubernetes.io/token"
                )
            tokens.append(token)
    return tokens


def run(args: argparse.Namespace) -> int:
    from ..neighbours.bootstrap import ClusterInfoPolicy, InlineTokenSource, evaluate_cluster_info

    policy_data: dict[str, Any] = {"requireSignature": args.require_signature}
    if args.ca_cert_hash:
        policy_data["caCertHashes"] = args.ca_cert_hash
    policy = ClusterInfoPolicy.from_dict(policy_data)
    source = InlineTokenSource(_tokens(args))
    return evaluate_documents(
        "verify-cluster-info",
        args.filename,
        args.output,
        lambda review: evaluate_cluster_info(review, policy, source, scoped=False),
        admission=args.admission,
    )
