"""Every key in a policy's key text, with the OpenPGP reader loaded only for a text that holds OpenPGP keys.

A ``keys`` entry (and ``-k`` on the command line) may hold PEM blocks and armored
OpenPGP certificates side by side (:func:`provider.keys.openpgp.load_trusted_keys`).
Most hold PEM only, and reading them needs neither :mod:`provider.keys.openpgp` nor
its packet reader: a command that verifies with a cosign key starts without them
(``tests/integration/test_cli_imports.py``). Any ``-----BEGIN PGP`` line hands the
whole text to the OpenPGP-aware reader, which refuses what it must (an armored
private key) and reads the rest exactly as before.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TypeGuard

from ..errors import KeyLoadError
from .pem import load_public_keys

if TYPE_CHECKING:
    from .openpgp import OpenPGPKey

#: What starts every armored OpenPGP block (RFC 9580 section 6.2): a key, a private key, a signature.
_PGP_ARMOR = "-----BEGIN PGP "


def load_trusted_keys(text: str, name: str | None, max_keys: int) -> tuple[Any, ...]:
    """Every key in ``text``: PEM blocks, and armored OpenPGP certificates when there are any."""
    if not isinstance(text, str):
        raise KeyLoadError("a key must be a PEM or armored OpenPGP string")
    if _PGP_ARMOR not in text:
        return load_public_keys(text, name, max_keys)
    from .openpgp import load_trusted_keys as with_openpgp

    return with_openpgp(text, name, max_keys)


def is_openpgp_key(key: object) -> TypeGuard[OpenPGPKey]:
    """Whether ``key`` is an OpenPGP certificate; answered without loading the OpenPGP code, since no
    certificate can exist before it is loaded."""
    module = sys.modules.get("provider.keys.openpgp")
    return module is not None and isinstance(key, module.OpenPGPKey)
