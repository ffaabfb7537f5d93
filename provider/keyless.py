"""Keyless (Fulcio + Rekor) and certificate signers.

Placeholder until offline keyless verification lands: every signer entry
fails closed with ``certificate-untrusted``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .envelope import Envelope
    from .policy import SignerSpec
    from .verifier import Outcome


def check_signer(spec: SignerSpec, envelope: Envelope, trusted_root: Any, *, now: datetime | None = None) -> Outcome:
    from .verifier import Outcome

    return Outcome(False, None, "certificate-untrusted", f"signer {spec.describe()}: keyless verification is not available")
