"""cosign's encrypted private keys: read them to sign, write them from ``keygen``.

``cosign generate-key-pair`` (and so most teams that sign with
``kubectl sigstore sign --key cosign.key``) keeps the private key in one PEM
block, ``ENCRYPTED SIGSTORE PRIVATE KEY`` (``ENCRYPTED COSIGN PRIVATE KEY``
in older releases, still read by cosign), whose body is JSON in
go-securesystemslib's ``encrypted`` format::

    {"kdf": {"name": "scrypt", "params": {"N": 32768, "r": 8, "p": 1}, "salt": B64},
     "cipher": {"name": "nacl/secretbox", "nonce": B64},
     "ciphertext": B64}

``B64`` is standard base64 (Go's encoding of ``[]byte``); the key is
``scrypt(password, salt, N, r, p)``, 32 bytes; the ciphertext is NaCl's
``secretbox`` (XSalsa20-Poly1305, tag first) of the PKCS #8 DER private key.
An empty password is allowed, as cosign allows it.

PyNaCl supplies ``secretbox`` (``cryptography`` has no XSalsa20); ``hashlib``
supplies scrypt. A key file is the user's own input, but its parameters are
still bounded: scrypt's cost is chosen by whoever wrote the file.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from typing import Any

from ..errors import DataError, KeyLoadError
from ..parsing import load_json

#: PEM labels of cosign's encrypted keys: the current one first (written by keygen).
PEM_LABELS = ("ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY")
#: go-securesystemslib's defaults (``encrypted.Encrypt``), which cosign uses.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 32768, 8, 1
SALT_BYTES, NONCE_BYTES, KEY_BYTES = 32, 24, 32
#: scrypt needs 128 * N * r bytes: refuse parameters past 256 MiB (cosign's take 32 MiB).
MAX_SCRYPT_MEMORY = 256 * 1024 * 1024
MAX_SCRYPT_P = 16


def is_cosign_key(pem: bytes) -> bool:
    return any(f"-----BEGIN {label}-----".encode() in pem for label in PEM_LABELS)


def _pem_body(pem: bytes) -> bytes:
    text = pem.decode("ascii", "replace")
    for label in PEM_LABELS:
        begin, end = f"-----BEGIN {label}-----", f"-----END {label}-----"
        start = text.find(begin)
        if start < 0:
            continue
        stop = text.find(end, start)
        if stop < 0:
            raise KeyLoadError(f"the {label} block has no END line")
        try:
            return base64.b64decode("".join(text[start + len(begin) : stop].split()), validate=True)
        except binascii.Error as exc:
            raise KeyLoadError(f"the {label} block is not base64: {exc}") from None
    raise KeyLoadError("not a cosign encrypted private key")


def _field(data: Any, *path: str) -> Any:
    for name in path:
        if not isinstance(data, dict) or name not in data:
            raise KeyLoadError(f"cosign private key: '{'.'.join(path)}' is missing")
        data = data[name]
    return data


def _bytes(data: Any, *path: str) -> bytes:
    value = _field(data, *path)
    if not isinstance(value, str):
        raise KeyLoadError(f"cosign private key: '{'.'.join(path)}' is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise KeyLoadError(f"cosign private key: '{'.'.join(path)}' is not base64") from None


def _scrypt_key(password: bytes, salt: bytes, n: Any, r: Any, p: Any) -> bytes:
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (n, r, p)):
        raise KeyLoadError("cosign private key: scrypt parameters N, r and p must be positive integers")
    if n < 2 or n & (n - 1) or p > MAX_SCRYPT_P or 128 * n * r > MAX_SCRYPT_MEMORY:
        raise KeyLoadError(f"cosign private key: scrypt parameters N={n}, r={r}, p={p} are out of bounds")
    return hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, maxmem=2 * MAX_SCRYPT_MEMORY, dklen=KEY_BYTES)


def decrypt(pem: bytes, password: bytes | None) -> bytes:
    """The PKCS #8 DER private key inside a cosign key file; ``None`` is the empty password."""
    from nacl.exceptions import CryptoError
    from nacl.secret import SecretBox

    body = _pem_body(pem)
    try:
        # load_json, not json.loads: RecursionError (a deep body) is not a ValueError.
        sealed = load_json(body, what="the PEM body")
    except (DataError, ValueError, UnicodeDecodeError):
        raise KeyLoadError("cosign private key: the PEM body is not JSON") from None
    kdf, cipher = _field(sealed, "kdf", "name"), _field(sealed, "cipher", "name")
    if kdf != "scrypt" or cipher != "nacl/secretbox":
        raise KeyLoadError(
            f"cosign private key: unsupported kdf {kdf!r} or cipher {cipher!r} (expected scrypt, nacl/secretbox)"
        )
    params = _field(sealed, "kdf", "params")
    salt, nonce, ciphertext = (
        _bytes(sealed, "kdf", "salt"),
        _bytes(sealed, "cipher", "nonce"),
        _bytes(sealed, "ciphertext"),
    )
    if len(nonce) != NONCE_BYTES:
        raise KeyLoadError(f"cosign private key: the nonce is {len(nonce)} bytes, not {NONCE_BYTES}")
    key = _scrypt_key(password or b"", salt, _field(params, "N"), _field(params, "r"), _field(params, "p"))
    try:
        return bytes(SecretBox(key).decrypt(ciphertext, nonce))
    except CryptoError:
        hint = "set MANIFEST_PROVIDER_PASSWORD (or COSIGN_PASSWORD)" if not password else "is the password right?"
        raise KeyLoadError(f"cosign private key: decryption failed; {hint}") from None


def encrypt(pkcs8_der: bytes, password: bytes | None) -> bytes:
    """A cosign key file (``ENCRYPTED SIGSTORE PRIVATE KEY``) holding ``pkcs8_der``."""
    from nacl.secret import SecretBox

    salt, nonce = os.urandom(SALT_BYTES), os.urandom(NONCE_BYTES)
    key = _scrypt_key(password or b"", salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    sealed = {
        "kdf": {
            "name": "scrypt",
            "params": {"N": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P},
            "salt": base64.b64encode(salt).decode(),
        },
        "cipher": {"name": "nacl/secretbox", "nonce": base64.b64encode(nonce).decode()},
        "ciphertext": base64.b64encode(SecretBox(key).encrypt(pkcs8_der, nonce).ciphertext).decode(),
    }
    body = base64.b64encode(json.dumps(sealed, separators=(",", ":")).encode()).decode()
    lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN {PEM_LABELS[0]}-----\n{lines}\n-----END {PEM_LABELS[0]}-----\n".encode()
