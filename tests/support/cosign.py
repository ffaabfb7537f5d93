"""What cosign writes, reproduced independently of ``provider``: encrypted key files, Ed25519ph signatures.

:func:`seal` and :func:`unseal` write and read cosign's encrypted private keys
(scrypt from hashlib, NaCl secretbox from PyNaCl, the JSON of
go-securesystemslib's ``encrypted`` format), so ``provider.keys.cosign`` is
checked against a second implementation of the format; :func:`ed25519ph_sign`
signs as cosign >= 2.4 does with Ed25519 keys.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from nacl.secret import SecretBox

from provider.keys.cosign import PEM_LABELS


def seal(
    der: bytes, password: bytes, *, label: str = PEM_LABELS[0], n: int = 32768, r: int = 8, p: int = 1, **override: Any
) -> bytes:
    """A cosign key file, written independently of provider.keys.cosign."""
    salt, nonce = os.urandom(32), os.urandom(24)
    sane = n & (n - 1) == 0 and 128 * n * r <= 2**25  # otherwise the reader must refuse before deriving anything
    key = hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, maxmem=2**26, dklen=32) if sane else os.urandom(32)
    body: dict[str, Any] = {
        "kdf": {"name": "scrypt", "params": {"N": n, "r": r, "p": p}, "salt": base64.b64encode(salt).decode()},
        "cipher": {"name": "nacl/secretbox", "nonce": base64.b64encode(nonce).decode()},
        "ciphertext": base64.b64encode(SecretBox(key).encrypt(der, nonce).ciphertext).decode(),
    }
    body.update(override)
    text = base64.encodebytes(json.dumps(body).encode()).decode()
    return f"-----BEGIN {label}-----\n{text}-----END {label}-----\n".encode()


def pkcs8_der(key: Any) -> bytes:
    return key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )  # type: ignore[no-any-return]


def unseal(pem: bytes, password: bytes) -> bytes:
    """The tests' own reader, for files provider.keys.cosign writes."""
    lines = pem.decode().strip().splitlines()
    assert lines[0] == f"-----BEGIN {PEM_LABELS[0]}-----" and lines[-1] == f"-----END {PEM_LABELS[0]}-----"
    assert all(len(line) <= 64 for line in lines[1:-1])  # Go's pem.Encode line length
    body = json.loads(base64.b64decode("".join(lines[1:-1])))
    params = body["kdf"]["params"]
    key = hashlib.scrypt(
        password,
        salt=base64.b64decode(body["kdf"]["salt"]),
        n=params["N"],
        r=params["r"],
        p=params["p"],
        maxmem=2**26,
        dklen=32,
    )
    return bytes(
        SecretBox(key).decrypt(base64.b64decode(body["ciphertext"]), base64.b64decode(body["cipher"]["nonce"]))
    )


def ed25519ph_sign(key: ed25519.Ed25519PrivateKey, data: bytes) -> bytes:
    """Ed25519ph as cosign >= 2.4 signs with Ed25519 keys (libsodium's, through PyNaCl)."""
    from nacl.bindings import (
        crypto_sign_ed25519ph_final_create,
        crypto_sign_ed25519ph_state,
        crypto_sign_ed25519ph_update,
        crypto_sign_seed_keypair,
    )

    seed = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    _, secret = crypto_sign_seed_keypair(seed)
    state = crypto_sign_ed25519ph_state()
    crypto_sign_ed25519ph_update(state, data)
    return bytes(crypto_sign_ed25519ph_final_create(state, secret))
