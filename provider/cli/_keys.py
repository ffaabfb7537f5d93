"""Private keys on the command line, and their passwords.

A key reference (the value of ``-k``; read by :func:`provider.cli._common.read_key_ref`)
is

* a file path (``-`` for standard input);
* ``env://NAME``: the key text is the value of the environment variable
  ``NAME``, as cosign reads it (sigstore/cosign ``pkg/blob/load.go``
  ``LoadFileOrURL``, used by ``pkg/signature/keys.go`` for public and private
  keys alike) and ``kubectl sigstore verify -k`` documents it ("a
  comma-separated list of paths to public keys or environment variable names
  start with env://", sigstore/k8s-manifest-sigstore
  ``cmd/kubectl-sigstore/cli/verify.go``);
* for public keys, several of these separated by commas (``-k a.pub,b.pub``,
  ``kubectl sigstore``'s form), or the flag repeated. A value that names an
  existing file is that file, commas and all.

cosign's other schemes (``https://``, ``k8s://``, KMS URIs such as
``gcpkms://``) are refused by name: nothing here fetches a key from anywhere
but the local machine.

Passwords for private keys come from ``MANIFEST_PROVIDER_PASSWORD``, else
cosign's ``COSIGN_PASSWORD``. Without either, and only when standard input is
a terminal, the user is asked (:func:`getpass.getpass`, which reads the
controlling terminal with echo off), the way ``cosign`` asks
(``cmd/cosign/cli/generate/generate_key_pair.go`` ``readPasswordFn``). Unlike
cosign, a password is never read from a standard input that is not a
terminal: there it is the manifest stream (``sign -f -``), and a script that
forgot the variable must fail, not hang or sign with a guess.
"""

from __future__ import annotations

import getpass
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import KeyLoadError
from ._common import password, read_key_ref, split_key_refs

if TYPE_CHECKING:
    from ..keys.pem import PrivateKeyTypes

#: PEM markers of an encrypted private key: PKCS #8 (RFC 5958), OpenSSL's traditional form, cosign's two labels.
_ENCRYPTED = re.compile(
    rb"-----BEGIN (ENCRYPTED PRIVATE KEY|ENCRYPTED SIGSTORE PRIVATE KEY|ENCRYPTED COSIGN PRIVATE KEY)-----"
    rb"|Proc-Type: 4,ENCRYPTED"
)


def can_prompt() -> bool:
    """Whether the user may be asked: standard input is a terminal (never a pipe, a file or /dev/null)."""
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except ValueError:  # closed
        return False


def is_encrypted(pem: bytes) -> bool:
    return _ENCRYPTED.search(pem) is not None


def load_signing_key(ref: str) -> PrivateKeyTypes:
    """The private key ``ref`` names, asking for its password on a terminal when no variable gives one.

    A cosign key is first opened with the empty password, as cosign allows; it is
    asked for only when that fails.
    """
    from ..keys.pem import load_private_key

    refs = split_key_refs([ref])
    if len(refs) != 1:
        raise KeyLoadError(f"sign takes one private key, not {len(refs)}: {ref}")
    pem = read_key_ref(refs[0])
    secret = password()
    try:
        return load_private_key(pem, secret)
    except KeyLoadError as exc:
        if secret is not None or not is_encrypted(pem) or not can_prompt():
            raise KeyLoadError(f"{refs[0]}: {exc.message}") from exc
    asked = getpass.getpass(f"Enter password for private key {refs[0]}: ").encode()
    try:
        return load_private_key(pem, asked)
    except KeyLoadError as exc:
        raise KeyLoadError(f"{refs[0]}: {exc.message}") from exc


def ask_new_password(private_path: Path, *, cosign: bool) -> bytes | None:
    """On a terminal: a password for a new key (asked twice), or consent to write it without one.

    Returns the password, or None for an unencrypted PKCS #8 key (cosign's empty
    password with ``cosign``). Raises :class:`KeyLoadError` when the two entries
    differ and :class:`DeclinedError` when the user does not want an unprotected key.
    """
    first = getpass.getpass(f"Enter password for private key {private_path} (empty: none): ")
    if first:
        second = getpass.getpass(f"Enter password for private key {private_path} again: ")
        if first != second:
            raise KeyLoadError("passwords do not match; nothing written")
        return first.encode()
    how = "with cosign's empty password" if cosign else "unencrypted"
    sys.stderr.write(f"Write {private_path} {how}? Anyone who can read the file can sign as you. [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise DeclinedError(f"{private_path} not written")
    return None


class DeclinedError(Exception):
    """The user said no at a prompt: nothing was done (the command exits 1)."""
