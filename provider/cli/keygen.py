"""``manifest-provider keygen``: make a signing key pair.

The private key is encrypted with ``MANIFEST_PROVIDER_PASSWORD`` (or
``COSIGN_PASSWORD``) when one is set. Without either, on a terminal the
password is asked for twice, as ``cosign generate-key-pair`` asks; an empty
answer writes the key unprotected only after the user says yes. Without a
terminal (a script, CI) nothing is asked: the key is written unprotected and
standard error says so, as before.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..errors import RequestError
from . import COMMANDS, EXIT_DENIED, EXIT_OK
from ._args import command_parser
from ._common import password

KEY_TYPES = ("ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "rsa", "ed25519")
HELP = COMMANDS["keygen"]
DESCRIPTION = (
    HELP + ". The password is MANIFEST_PROVIDER_PASSWORD (or COSIGN_PASSWORD); without either it is asked for on a "
    "terminal, and an unencrypted key is written only when you agree (without a terminal: with a note)."
)
FORMATS = ("pkcs8", "cosign")
EXAMPLES = (
    "manifest-provider keygen -o team   # team.key (keep it secret) and team.pub",
    "manifest-provider keygen -o cosign --format cosign --type ecdsa-p256   # for cosign and kubectl sigstore too",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = command_parser(sub, "keygen", HELP, EXAMPLES, description=DESCRIPTION)
    p.add_argument(
        "--type", choices=KEY_TYPES, default="ecdsa-p256", help="key type (default ecdsa-p256; rsa is 3072 bits)"
    )
    p.add_argument("-o", "--output", required=True, metavar="PREFIX", help="write PREFIX.key and PREFIX.pub")
    p.add_argument(
        "--format", choices=FORMATS, default="pkcs8",
        help="private key file format: pkcs8 (default) or cosign (cosign's ENCRYPTED SIGSTORE PRIVATE KEY, "
        "usable with cosign and kubectl sigstore sign --key; empty password unless one is given)",
    )  # fmt: skip
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..keys.pem import generate_key, private_pem, public_pem
    from ._keys import DeclinedError, ask_new_password, can_prompt

    private_path, public_path = Path(f"{args.output}.key"), Path(f"{args.output}.pub")
    for path in (private_path, public_path):
        if path.exists() and not args.force:
            raise RequestError(f"{path} exists; pass --force to overwrite it")
    cosign = args.format == "cosign"
    secret = password()
    asked = secret is None and can_prompt()
    if asked:
        try:
            secret = ask_new_password(private_path, cosign=cosign)
        except DeclinedError as exc:
            print(f"manifest-provider keygen: {exc}", file=sys.stderr)
            return EXIT_DENIED
    key = generate_key(args.type)
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(private_pem(key, secret, cosign=cosign))
    public_path.write_bytes(public_pem(key))
    note = ""
    if not secret:
        unprotected = "cosign format, empty password" if cosign else "unencrypted"
        hint = "" if asked else ": set MANIFEST_PROVIDER_PASSWORD, or run on a terminal, to encrypt it"
        note = f" ({unprotected}{hint})"
    print(f"wrote {private_path}{note} and {public_path}", file=sys.stderr)
    return EXIT_OK
