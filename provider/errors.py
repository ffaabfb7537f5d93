"""The project's error hierarchy.

Every error carries a stable, machine-readable ``reason`` (the same codes that
appear in :class:`provider.result.Result`) and a human message that says what
was expected and what was found.

Two questions decide how an error is answered, so the hierarchy has two roots
under :class:`ProviderError`:

* "Is the *data* bad?" -- :class:`DataError`. Deterministic: the same input
  gives the same answer, so callers may cache it.

  * :class:`VerificationFailure` -- the object under review is not what its
    signer signed (or carries a malformed envelope). Answered as a *deny*
    verdict for that object.
  * :class:`PolicyError` -- the policy (constraint parameters, config file) is
    invalid. Answered as a per-key error: the policy author must fix it.
  * :class:`RequestError` -- the request itself is unusable (not JSON, wrong
    shape). Answered as a per-key error or a 400.

* "Did the *transport* fail?" -- :class:`TransientError`. The API server was
  down, a deadline passed. Never cached; answered as a whole-request
  ``systemError`` so Gatekeeper retries.

The CLI catches only :class:`ProviderError`.
"""

from __future__ import annotations

from typing import Any


class ProviderError(Exception):
    """Root of every error this package raises on purpose."""

    reason: str = "error"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason

    def __str__(self) -> str:
        return self.message


class DataError(ProviderError):
    """The input is bad; asking again gives the same answer."""


class VerificationFailure(DataError):
    """The object under review failed verification (deny)."""

    reason = "verification-failed"

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        diff: tuple[Any, ...] = (),
        signers: tuple[Any, ...] = (),
        used_cluster: bool = False,
    ) -> None:
        super().__init__(message, reason=reason)
        self.diff = diff
        self.signers = signers
        #: The verdict consulted the live cluster (a dry-run): it must not be cached.
        self.used_cluster = used_cluster


class MalformedMessage(VerificationFailure):
    """The signature envelope could not be decoded within the limits."""

    reason = "malformed-message"


class Unsigned(VerificationFailure):
    """The object carries no message or no signature."""

    reason = "unsigned"


class NoMatchingManifest(VerificationFailure):
    """The signed message holds no document for this object."""

    reason = "no-matching-manifest"


class SignatureInvalid(VerificationFailure):
    """No trusted key or signer verifies any signature set."""

    reason = "signature-invalid"


class ThresholdNotMet(VerificationFailure):
    """Some, but not enough, of the listed keys/signers verified."""

    reason = "key-threshold-not-met"


class ContentMismatch(VerificationFailure):
    """The signature is good, but the object differs from what was signed."""

    reason = "content-mismatch"


class PolicyError(DataError):
    """The policy is invalid; it must be fixed by its author."""

    reason = "policy-invalid"


class KeyLoadError(PolicyError):
    """A key in the policy is unusable (bad PEM, weak, unsupported type)."""


class RequestError(DataError):
    """The request is unusable (not JSON, wrong shape, over a limit)."""

    reason = "request-invalid"


class ConfigError(ProviderError):
    """A setting of the service or the CLI is missing, unknown or does not parse (the CLI exits 2)."""

    reason = "config-invalid"


class TransientError(ProviderError):
    """A dependency failed or a deadline passed; retrying may succeed."""

    reason = "transient-error"
