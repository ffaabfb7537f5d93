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
"""

from __future__ import annotations

import argparse
import importlib
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
    "serve",
    "verify-cluster-info",
    "verify-csr",
    "classify",
)

EXIT_OK, EXIT_DENIED, EXIT_USAGE, EXIT_UNVERIFIED = 0, 1, 2, 3


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
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
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
