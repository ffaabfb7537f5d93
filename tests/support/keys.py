"""Real keys for tests, generated once per run."""

from __future__ import annotations

import functools

from provider.keys.pem import PrivateKeyTypes, generate_key, public_pem


@functools.cache
def make_key(key_type: str = "ecdsa-p256", n: int = 0) -> PrivateKeyTypes:
    """A real private key, generated once per (type, n) per test run."""
    return generate_key(key_type)


def public_key_pem(key: PrivateKeyTypes) -> str:
    return public_pem(key).decode()
