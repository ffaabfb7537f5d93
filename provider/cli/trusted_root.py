"""``manifest-provider trusted-root``: fetch sigstore's TrustedRoot through TUF, verified, into a file.

The service keeps its default root current by itself (``MANIFEST_PROVIDER_TUF_URL``,
:mod:`provider.service.trustroot`); this is the same client, run once, for the
CLI (``verify --trusted-root FILE``) and for air-gapped mirrors: the root of
trust is the ``root.json`` given with ``--tuf-root`` (default: the public-good
one sigstore-python ships), and what is written has passed TUF's checks and
parses as a TrustedRoot. Like ``cosign initialize --mirror --root``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from ..errors import ConfigError
from . import COMMANDS, EXIT_OK
from ._args import command_parser

HELP = COMMANDS["trusted-root"]
EXAMPLES = (
    "manifest-provider trusted-root -o trusted_root.json   # the public-good repository",
    "manifest-provider trusted-root --tuf-url https://tuf.mirror.internal --tuf-root root.json -o trusted_root.json",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = command_parser(sub, "trusted-root", HELP, EXAMPLES)
    p.add_argument("--tuf-url", default="https://tuf-repo-cdn.sigstore.dev", metavar="URL",
                   help="TUF repository (default: sigstore's public-good one)")  # fmt: skip
    p.add_argument(
        "--tuf-root",
        metavar="root.json",
        help="the pinned TUF root of trust (default: the public-good root.json sigstore-python ships)",
    )
    p.add_argument("-o", "--output", default="-", metavar="FILE", help="where to write it (default: standard output)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..service.trustroot import TrustRootRefresher, shipped_tuf_root

    root = Path(args.tuf_root).read_bytes() if args.tuf_root else shipped_tuf_root()
    with tempfile.TemporaryDirectory(prefix="manifest-provider-tuf-") as cache:
        refresher = TrustRootRefresher(args.tuf_url, root, cache_dir=cache)
        try:
            refresher.fetch_target()
        except Exception as exc:  # the network, the repository, TUF's refusals: one line, exit 2
            raise ConfigError(f"{args.tuf_url}: {type(exc).__name__}: {str(exc)[:300]}") from exc
        data = refresher.last_target
    if args.output == "-":
        sys.stdout.write(data.decode())
    else:
        Path(args.output).write_bytes(data)
        print(f"trusted root from {args.tuf_url} -> {args.output}", file=sys.stderr)
    return EXIT_OK
