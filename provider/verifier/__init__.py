"""``verify`` and ``decide``: the one decision every entry point shares.

The package's modules, in the order a decision runs through them:

* :mod:`~provider.verifier.admission` -- :func:`decide`, the verdict for one
  admission review: scope, exemptions, the control plane's objects, then
  :func:`verify`;
* :mod:`~provider.verifier.verification` -- :func:`verify`, the five steps of
  ``docs/architecture.md``;
* :mod:`~provider.verifier.context` -- :class:`Context`, what both pass on to
  the steps: the dry-run client, the clock, the limits, the signature sources
  and the request's deadline;
* :mod:`~provider.verifier.fetching` -- step 1, the signatures wherever the
  policy keeps them, and the keys kept in Secrets;
* :mod:`~provider.verifier.anchors` -- step 2, every key and signer against the
  signature sets, and the requirement (threshold, MustAll, attestors).

The modules are internal; the names below are what other modules, tests and
library callers import from ``provider.verifier``.
"""

from ..compare.dryrun import DryRunner
from ..keys.signers import Match
from ..signatures.envelope import without_envelope
from .admission import FOREIGN_SUBRESOURCE_OBJECTS, decide, find_exemption, identity_of
from .context import Context
from .fetching import INTEGRITY_SHIELD_DOMAIN
from .verification import DeletionFinalizersAdded, Verification, describe_diff, find_document, verify

__all__ = [
    "FOREIGN_SUBRESOURCE_OBJECTS",
    "INTEGRITY_SHIELD_DOMAIN",
    "Context",
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
