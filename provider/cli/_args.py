"""The CLI's parser declarations: every sub-command's parser, the policy flags and the output flags.

Nothing here but argparse, so that building a command's parser (``manifest-provider verify --help``)
loads no verification code; :mod:`provider.cli._common` reads and acts on what these flags say.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

#: The built-in profile that is k8s-manifest-sigstore's default ignore list: what
#: ``kubectl sigstore verify-resource --disable-default-config`` leaves out
#: (sigstore/k8s-manifest-sigstore pkg/k8smanifest/resources/default-config.yaml).
UPSTREAM_DEFAULT_PROFILE = "k8s-manifest-sigstore"
#: Where ``--help`` examples start; :class:`HelpFormatter` prints what follows line for line.
EXAMPLES = "examples:"


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that the examples epilog keeps its lines (commands must not be re-wrapped)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(EXAMPLES):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def command_parser(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    name: str,
    help_text: str,
    examples: Sequence[str],
    *,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """A sub-command's parser; ``examples`` (one command line each, ``# comment`` allowed) end its ``--help``."""
    if not examples:
        raise ValueError(f"{name}: every command shows examples")
    epilog = EXAMPLES + "\n" + "".join(f"  {line}\n" for line in examples)
    return sub.add_parser(  # type: ignore[no-any-return]
        name,
        help=help_text,
        description=description or help_text,
        epilog=epilog,
        formatter_class=HelpFormatter,
    )


def add_policy_flags(parser: argparse.ArgumentParser, *, dry_run: bool = True) -> None:
    """The flags :func:`build_policy` reads: keys, signers, how many must sign, the policy file, profiles, dry-run.

    Short forms and meanings follow ``kubectl sigstore verify``/``verify-resource``
    (``-k`` takes a comma list and ``env://``, ``-c`` is the config file,
    ``--disable-default-config`` drops upstream's default ignore list): docs/cli.md
    maps them flag by flag.
    """
    parser.add_argument(
        "-k",
        "--key",
        action="append",
        default=[],
        metavar="KEY",
        help="trusted public key or certificate: a PEM file, env://VAR, k8s://NAMESPACE/NAME (the Secret's cosign.pub, "
        "read with --kubeconfig), or a comma-separated list of them (repeatable; several PEM blocks in one file are "
        "several keys)",
    )
    parser.add_argument(
        "--key-operation", choices=("AtLeastOne", "MustAll"), help="AtLeastOne (default) or MustAll of the keys"
    )
    parser.add_argument("--threshold", type=int, metavar="N", help="at least N distinct keys/signers must verify")
    parser.add_argument(
        "-c", "--config", metavar="POLICY.yaml", help="policy file (docs/policy.md); the flags are added to it"
    )
    parser.add_argument(
        "--disable-default-config",
        action="store_true",
        help=f"leave out the {UPSTREAM_DEFAULT_PROFILE} profile (upstream's default ignore list), as kubectl "
        "sigstore does; other profiles stay",
    )
    parser.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="NAME",
        help="a built-in profile to add to the defaults, e.g. argocd, flux, helm, kyverno (repeatable; comma "
        "lists allowed; docs/policy.md)",
    )
    parser.add_argument(
        "--annotation-domain", metavar="D", help="signature annotation domain (default cosign.sigstore.dev)"
    )
    parser.add_argument(
        "--signer",
        action="append",
        default=[],
        metavar="SUBJECT[,ISSUER]",
        help="trusted keyless signer identity, e.g. jane@example.com,https://accounts.google.com (repeatable)",
    )
    parser.add_argument(
        "--trusted-root",
        metavar="FILE",
        help="sigstore TrustedRoot JSON for keyless signers (default: the public-good root shipped with this package)",
    )
    if dry_run:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="when the object differs from its manifest, ask the cluster (server-side dry-run) what it makes "
            "of the signed manifest",
        )
        parser.add_argument(
            "--dry-run-namespace", metavar="NS", help="namespace for dry-run creates (default: the object's own)"
        )


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", choices=("text", "json", "yaml"), default="text", help="output format (default: text)"
    )
    parser.add_argument(
        "--admission",
        action="store_true",
        help="admission semantics for the exit code: 0 when every document is allowed, verified or not "
        "(default: 0 only when every document verified, 3 when some were allowed unverified)",
    )
