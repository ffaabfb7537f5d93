"""``verify`` and ``decide``: the one decision every entry point shares.

The package's modules are internal; these are the names other modules, tests and
library callers import from ``provider.verifier``.
"""

from ..compare.dryrun import DryRunner
from ..keys.signers import Match
from ..signatures.envelope import without_envelope
from .verification import (
    FOREIGN_SUBRESOURCE_OBJECTS,
    INTEGRITY_SHIELD_DOMAIN,
    DeletionFinalizersAdded,
    Verification,
    decide,
    describe_diff,
    find_document,
    find_exemption,
    identity_of,
    verify,
)

__all__ = [
    "FOREIGN_SUBRESOURCE_OBJECTS",
    "INTEGRITY_SHIELD_DOMAIN",
    "DeletionFinalizersAdded",
    "DryRunner",
    "Match",
    "Verification",
    "decide",
    "describe_diff",
    "find_document",
    "find_exemption",
    "identity_of",
    "verify",
    "without_envelope",
]
