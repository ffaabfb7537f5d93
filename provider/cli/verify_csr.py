"""``manifest-provider verify-csr``: kubelet-csr-approver's checks on kubelet-serving CertificateSigningRequests."""

from __future__ import annotations

import argparse
from typing import Any

from . import COMMANDS
from ._args import add_output_flag, command_parser
from ._common import evaluate_documents

HELP = COMMANDS["verify-csr"]
EXAMPLES = (
    "kubectl get csr -o yaml | manifest-provider verify-csr -f - --provider-regex '^worker-\\d+\\.example\\.com$' "
    "--ip-prefixes 10.0.0.0/16",
    "manifest-provider verify-csr -f csr.yaml --bypass-hostname-check --allowed-dns-names 2 -o json",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = command_parser(sub, "verify-csr", HELP, EXAMPLES)
    p.add_argument(
        "-f",
        "--filename",
        required=True,
        metavar="FILE",
        help="YAML/JSON file with the CertificateSigningRequest(s) (- for stdin), e.g. kubectl get csr -o yaml; CSRs "
        "for other signers pass as out of scope",
    )
    p.add_argument(
        "--provider-regex",
        metavar="RE",
        help="every DNS SAN must match this regular expression (searched, so anchor it: ^node-\\w*\\.example\\.com$)",
    )
    p.add_argument(
        "--ip-prefixes",
        metavar="CIDR,...",
        help="every IP SAN must lie in one of these prefixes, e.g. 192.168.0.0/16,fc00::/7 (default: any)",
    )
    p.add_argument(
        "--max-expiration-sec",
        type=int,
        metavar="N",
        help="largest spec.expirationSeconds allowed (default and maximum: 367 days)",
    )
    p.add_argument("--allowed-dns-names", type=int, metavar="N", help="most DNS SANs allowed (default 1)")
    p.add_argument(
        "--bypass-hostname-check", action="store_true", help="do not require DNS SANs to be the node name or under it"
    )
    p.add_argument(
        "--resolve-dns-names",
        action="store_true",
        help="also resolve every DNS SAN: it must resolve, inside --ip-prefixes, and every IP SAN must be among the "
        "answers (off by default)",
    )
    p.add_argument(
        "--dns-timeout", type=float, metavar="SECONDS", help="deadline for all lookups together (default 1, at most 2)"
    )
    add_output_flag(p)
    p.set_defaults(run=run)


def build_policy(args: argparse.Namespace) -> dict[str, Any]:
    """The flags as a kubelet-serving-csr policy (the same fields Gatekeeper and Kyverno policies use)."""
    policy: dict[str, Any] = {}
    if args.provider_regex is not None:
        policy["providerRegex"] = args.provider_regex
    if args.ip_prefixes is not None:
        policy["providerIpPrefixes"] = args.ip_prefixes
    if args.max_expiration_sec is not None:
        policy["maxExpirationSeconds"] = args.max_expiration_sec
    if args.allowed_dns_names is not None:
        policy["allowedDnsNames"] = args.allowed_dns_names
    if args.bypass_hostname_check:
        policy["bypassHostnameCheck"] = True
    if args.resolve_dns_names:
        policy["resolveDnsNames"] = True
    if args.dns_timeout is not None:
        policy["dnsTimeoutSeconds"] = args.dns_timeout
    return policy


def run(args: argparse.Namespace) -> int:
    from ..neighbours.csr import CsrPolicy, evaluate_csr

    policy = CsrPolicy.from_dict(build_policy(args))
    return evaluate_documents(
        "verify-csr",
        args.filename,
        args.output,
        lambda review: evaluate_csr(review, policy, scoped=False),
        admission=args.admission,
    )
