"""``manifest-provider``: the command-line face of the library.

Each sub-command lives in its own module here with two functions:
``register(subparsers)`` adds its parser (and sets ``run``), ``run(args)``
returns the exit code. Modules import heavy dependencies inside ``run`` so
that ``manifest-provider --help`` and commands that need no cluster start fast.

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

#: Sub-command modules, in the order ``--help`` lists them.
COMMANDS = (
    "verify",
    "verify-resource",
    "observe",
    "sign",
    "keygen",
    "policy",
    "serve",
    "verify-cluster-info",
    "verify-csr",
    "classify",
    "completion",
    "version",
    "convert-policy",
    "trusted-root",
)

EXIT_OK, EXIT_DENIED, EXIT_USAGE, EXIT_UNVERIFIED = 0, 1, 2, 3
#: 128 + SIGPIPE (13): the reader of standard output went away.
EXIT_BROKEN_PIPE = 141


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="manifest-provider",
        description="Verify and sign Kubernetes manifests in the k8s-manifest-sigstore format.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name.replace('-', '_')}").register(sub)
    return parser


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
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
    except BrokenPipeError:
        raise
    except ProviderError as exc:
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
