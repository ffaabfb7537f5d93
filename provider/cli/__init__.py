"""``manifest-provider``: the command-line face of the library.

Each sub-command lives in its own module here with two functions:
``register(subparsers)`` adds its parser (and sets ``run``), ``run(args)``
returns the exit code. :data:`COMMANDS` declares them (name and one-line help),
and :func:`main` imports only the module of the command it is asked for, so
``--help`` and ``--version`` import none. A command module's top level needs
only argparse (its parser: :mod:`provider.cli._args`); ``run`` imports what the
command uses, so a key-only ``verify`` loads no cluster, keyless, OpenPGP, OCI,
service or audit code (``tests/integration/test_cli_imports.py``; start-up in
``bench/cli_startup.py`` and docs/performance.md).

Exit codes, for every command that judges objects (``verify``,
``verify-resource``, ``verify-cluster-info``, ``verify-csr``):

* 0 -- every document **verified**;
* 1 -- some document denied;
* 2 -- a usage or configuration error;
* 3 -- nothing denied, but some document was allowed **without** being verified
  (a skipped user or object, out of scope, a dry-run request, a DELETE): a CI
  gate over untrusted files must not pass on an AdmissionReview that says
  ``dryRun: true``. ``--admission`` asks for admission semantics instead: 0 when
  every document is allowed, verified or not.

Other commands: 0 success, 1 failure, 2 usage or configuration error.

Every command that prints exits quietly with 141 (128 + SIGPIPE, what a shell
shows for a program the signal ended) when the reader of its standard output
goes away (``manifest-provider verify ... | head``): never a traceback, and
never 0 for output nobody read to the end.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from ..errors import ProviderError
from ..version import __version__

#: Every sub-command, in the order ``--help`` lists them, with its one-line help: the light-weight declaration
#: the top-level parser is built from. A command's module (``provider.cli.<name with _>``: its ``register``
#: and ``run``) is imported only when that command is asked for, so ``--help``, ``--version`` and each command
#: load only what they use (``tests/integration/test_cli_imports.py``).
COMMANDS: dict[str, str] = {
    "verify": "verify signed manifests (exit 0: all verified, 1: some denied, 2: usage error, 3: some allowed "
    "unverified)",
    "verify-resource": "verify the objects of a kind in a cluster (exit 0: all verified, 1: some denied, 2: usage "
    "error, 3: some allowed unverified)",
    "observe": "re-verify the objects of a cluster on a schedule, keep their PolicyReports current and export metrics",
    "sign": "sign a manifest file or directory (writes <file>.signed), or standard input (-f -)",
    "keygen": "generate a key pair: PREFIX.key (PKCS#8, encrypted with a password) and PREFIX.pub",
    "policy": "print a ready Gatekeeper Constraint and Provider, Kyverno ClusterPolicy or ValidatingPolicy, or the "
    "service's own ClusterManifestPolicy, for your keys",
    "serve": "serve the HTTPS verification API for Gatekeeper, Kyverno and the API server itself (gunicorn, TLS only)",
    "verify-cluster-info": "verify the bootstrap-token (JWS) signatures of a cluster-info ConfigMap (exit 0: all "
    "valid, 1: some refused, 2: usage error, 3: some allowed unchecked)",
    "verify-csr": "check kubelet-serving CertificateSigningRequests like kubelet-csr-approver (exit 0: all "
    "compliant, 1: some not, 2: usage error, 3: some allowed unchecked)",
    "classify": "classify an audit log's writes in the paper's six traffic classes (exit 0: none denied or "
    "unprotected, 1: some, 2: usage error)",
    "completion": "print a shell completion script (bash, zsh or fish)",
    "version": "print the version of manifest-provider and of the libraries it verifies with",
    "convert-policy": "convert a Kyverno manifests rule, an Integrity Shield constraint or a kubectl sigstore config "
    "to a policy",
    "trusted-root": "fetch the keyless TrustedRoot from a TUF repository, verified against a pinned root.json",
}

EXIT_OK, EXIT_DENIED, EXIT_USAGE, EXIT_UNVERIFIED = 0, 1, 2, 3
#: 128 + SIGPIPE (13): the reader of standard output went away.
EXIT_BROKEN_PIPE = 141


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every command's own parser, or with ``only`` just that command's.

    With ``only`` a command, only its module is imported, and only its parser
    added: a command's ``--help``, usage and errors name no other. With ``only``
    not a command (a typo, or ``""`` when the arguments name none: ``--help``,
    ``--version``) every command is declared by name and help alone (what the
    top-level ``--help`` and argparse's "invalid choice" list show), and no
    command module is imported.
    """
    parser = argparse.ArgumentParser(
        prog="manifest-provider",
        description="Verify and sign Kubernetes manifests in the k8s-manifest-sigstore format.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if only in COMMANDS:  # the others never show: a command's own help and errors name only itself
        importlib.import_module(f"{__name__}.{only.replace('-', '_')}").register(sub)
        return parser
    for name, help_text in COMMANDS.items():
        if only is None:
            importlib.import_module(f"{__name__}.{name.replace('-', '_')}").register(sub)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def command_of(argv: Sequence[str]) -> str | None:
    """The sub-command ``argv`` asks for: its first word, unless that is an option. The top-level parser has
    only ``-h``/``--help`` and ``--version``, and each ends the program where it stands, so a word after one
    of them is never run (``-h verify`` prints the top-level help, listing every command)."""
    if argv and not argv[0].startswith("-"):
        return argv[0]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            code = _main(argv)
        except SystemExit:  # argparse after --help, --version or a usage error
            sys.stdout.flush()
            raise
        sys.stdout.flush()  # here, not at exit: a reader gone away is an exception this function handles
    except BrokenPipeError:
        # Python's documentation ("Note on SIGPIPE", signal module): point standard output at
        # /dev/null so the interpreter's own flush at exit does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    return code


def _main(argv: Sequence[str] | None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(only=command_of(words) or "")  # "": no command named (--help, --version), none imported
    args = parser.parse_args(words)
    try:
        code: int = args.run(args)
    except BrokenPipeError:
        raise
    except ProviderError as exc:  # the one root of the project's errors (provider/errors.py)
        print(f"manifest-provider {args.command}: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(
            f"manifest-provider {args.command}: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "),
            file=sys.stderr,
        )
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
