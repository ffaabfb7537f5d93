"""``manifest-provider keygen``: make a signing key pair."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..errors import RequestError
from . import EXIT_OK
from ._common import password

KEY_TYPES = ("ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "rsa", "ed25519")
HELP = "generate a key pair: PREFIX.key (PKCS#8, encrypted with MANIFEST_PROVIDER_PASSWORD if set) and PREFIX.pub"
FORMATS = ("pkcs8", "cosign")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("keygen", help=HELP, description=HELP)
    p.add_argument(
        "--type", choices=KEY_TYPES, default="ecdsa-p256", help="key type (default ecdsa-p256; rsa is 3072 bits)"
    )
    p.add_argument("-o", "--output", required=True, metavar="PREFIX", help="write PREFIX.key and PREFIX.pub")
    p.add_argument(
        "--format", choices=FORMATS, default="pkcs8",
        help="private key file format: pkcs8 (default) or cosign (cosign's ENCRYPTED SIGSTORE PRIVATE KEY, "
        "usable with cosign and kubectl sigstore sign --key; empty password unless one is set)",
    )  # fmt: skip
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..keys import generate_key, private_pem, public_pem

    private_path, public_path = Path(f"{args.output}.key"), Path(f"{args.output}.pub")
    for path in (private_path, public_path):
        if path.exists() and not args.force:
            raise RequestError(f"{path} exists; pass --force to overwrite it")
    key = generate_key(args.type)
    secret = password()
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(private_pem(key, secret, cosign=args.format == "cosign"))
    public_path.write_bytes(public_pem(key))
    note = ""
    if not secret:
        unprotected = "cosign format, empty password" if args.format == "cosign" else "unencrypted"
        note = f" ({unprotected}: set MANIFEST_PROVIDER_PASSWORD to encrypt it)"
    print(f"wrote {private_path}{note} and {public_path}", file=sys.stderr)
    return EXIT_OK
