"""manifest-provider: prove a Kubernetes object is exactly what its author signed.

Verifies manifests signed in the k8s-manifest-sigstore format (``kubectl
sigstore sign``) against a policy -- trusted keys or keyless signers, which
fields the cluster may change, who may write unsigned -- and explains every
verdict. The library needs neither Flask nor a cluster::

    from provider import Policy, Review, decide

    policy = Policy.from_dict({"keys": [open("cosign.pub").read()]})
    result = decide(Review.for_object(obj), policy)
    result.allowed, result.reason, result.message

The names in :data:`__all__` are the stable API (``docs/library.md``, one
example each); every module under ``provider`` is internal and may change.
They are loaded on first use (PEP 562 ``__getattr__``), so ``import provider``
costs next to nothing and a program pays only for what it touches: a key-only
``decide`` never loads the keyless, OpenPGP, OCI or cluster code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:  # what mypy and editors see; at run time __getattr__ below loads each on first use
    from .bounds import LOCAL, SERVICE, Bounds
    from .compare.dryrun import DryRunner
    from .errors import (
        DataError,
        KeyLoadError,
        PolicyError,
        ProviderError,
        RequestError,
        TransientError,
        VerificationFailure,
    )
    from .keys.pem import (
        KEY_TYPES,
        PublicKey,
        generate_key,
        load_private_key,
        load_public_keys,
        private_pem,
        public_pem,
    )
    from .keys.refs import KeySecretReader
    from .limits import DEFAULT_LIMITS, Limits
    from .policy.schema import Policy
    from .result import REASONS, Reason, Result, Signer
    from .review import Review
    from .signatures.signing import append_signature, dump_yaml
    from .signatures.signing import sign_documents as sign
    from .signatures.sources import BundleSource, ConfigMapReader, FetchedBundle, ImageSignature, Reference, Sources
    from .verifier import Verification, decide, verify

#: Each public name -> (the module that defines it, its name there). The one list of the stable API.
_EXPORTS: dict[str, tuple[str, str]] = {
    # verifying
    "decide": ("verifier", "decide"),
    "verify": ("verifier", "verify"),
    "Policy": ("policy.schema", "Policy"),
    "Review": ("review", "Review"),
    "Result": ("result", "Result"),
    "Verification": ("verifier", "Verification"),
    "Reason": ("result", "Reason"),
    "REASONS": ("result", "REASONS"),
    "Signer": ("result", "Signer"),
    "Bounds": ("bounds", "Bounds"),
    "LOCAL": ("bounds", "LOCAL"),
    "SERVICE": ("bounds", "SERVICE"),
    "Limits": ("limits", "Limits"),
    "DEFAULT_LIMITS": ("limits", "DEFAULT_LIMITS"),
    # the ports: what decide() and verify() ask the caller's world through
    "DryRunner": ("compare.dryrun", "DryRunner"),
    "Sources": ("signatures.sources", "Sources"),
    "BundleSource": ("signatures.sources", "BundleSource"),
    "ConfigMapReader": ("signatures.sources", "ConfigMapReader"),
    "KeySecretReader": ("keys.refs", "KeySecretReader"),
    "Reference": ("signatures.sources", "Reference"),
    "FetchedBundle": ("signatures.sources", "FetchedBundle"),
    "ImageSignature": ("signatures.sources", "ImageSignature"),
    # signing and keys
    "sign": ("signatures.signing", "sign_documents"),
    "append_signature": ("signatures.signing", "append_signature"),
    "dump_yaml": ("signatures.signing", "dump_yaml"),
    "generate_key": ("keys.pem", "generate_key"),
    "KEY_TYPES": ("keys.pem", "KEY_TYPES"),
    "load_private_key": ("keys.pem", "load_private_key"),
    "load_public_keys": ("keys.pem", "load_public_keys"),
    "private_pem": ("keys.pem", "private_pem"),
    "public_pem": ("keys.pem", "public_pem"),
    "PublicKey": ("keys.pem", "PublicKey"),
    # errors: one root, each with a stable ``reason``
    "ProviderError": ("errors", "ProviderError"),
    "DataError": ("errors", "DataError"),
    "VerificationFailure": ("errors", "VerificationFailure"),
    "PolicyError": ("errors", "PolicyError"),
    "KeyLoadError": ("errors", "KeyLoadError"),
    "RequestError": ("errors", "RequestError"),
    "TransientError": ("errors", "TransientError"),
}

#: The stable names: every key of _EXPORTS, and __version__ (tests/unit/test_library.py checks both lists agree).
__all__ = [
    "DEFAULT_LIMITS",
    "KEY_TYPES",
    "LOCAL",
    "REASONS",
    "SERVICE",
    "Bounds",
    "BundleSource",
    "ConfigMapReader",
    "DataError",
    "DryRunner",
    "FetchedBundle",
    "ImageSignature",
    "KeyLoadError",
    "KeySecretReader",
    "Limits",
    "Policy",
    "PolicyError",
    "ProviderError",
    "PublicKey",
    "Reason",
    "Reference",
    "RequestError",
    "Result",
    "Review",
    "Signer",
    "Sources",
    "TransientError",
    "Verification",
    "VerificationFailure",
    "__version__",
    "append_signature",
    "decide",
    "dump_yaml",
    "generate_key",
    "load_private_key",
    "load_public_keys",
    "private_pem",
    "public_pem",
    "sign",
    "verify",
]


def __getattr__(name: str) -> Any:
    """Load a public name on first use and keep it in the module, so the next lookup is a plain attribute."""
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
