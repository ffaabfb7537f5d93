"""What a decision may use besides the review and the policy: one frozen :class:`Context`.

:func:`~provider.verifier.decide` and :func:`~provider.verifier.verify` pass these
on, untouched, to the steps that use them: the dry-run client to step 5, the
signature sources to step 1 (and the Secret-held keys of step 2), the clock to
the signature checks, the limits everywhere, the request's deadline to every
fetch. The service's :class:`provider.service.checks.CheckContext` extends it
with what only the service holds (its cluster client, the operator's bounds,
its compiled policies), so a check hands its own context straight to ``decide``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..compare.dryrun import DryRunner
from ..limits import DEFAULT_LIMITS, Limits
from ..signatures.sources import Sources


@dataclass(frozen=True)
class Context:
    """The pass-through inputs of :func:`~provider.verifier.decide` and :func:`~provider.verifier.verify`."""

    #: Server-side dry-runs (``None``: no cluster configured; a policy that enables dry-run then denies).
    dry_runner: DryRunner | None = None
    #: A fixed clock for tests; ``None`` means the verifier's own notion of now.
    now: datetime | None = None
    limits: Limits = DEFAULT_LIMITS
    #: Where signatures kept outside objects are fetched from (OCI bundles, signature ConfigMaps, key Secrets);
    #: ``None``: nowhere, and a policy that needs one denies.
    sources: Sources | None = None
    #: The request's deadline (a :func:`time.monotonic` instant): every read and fetch ends by it.
    deadline: float | None = None

    @classmethod
    def of(
        cls,
        context: Context | None,
        *,
        dry_runner: DryRunner | None = None,
        now: datetime | None = None,
        limits: Limits | None = None,
        sources: Sources | None = None,
        deadline: float | None = None,
    ) -> Context:
        """``context``, or one made of the keyword arguments ``decide`` and ``verify`` still accept.

        Both at once is a :class:`TypeError`: which would win is a guess, and a guess
        about the deadline or the limits is not one to make silently.
        """
        loose = (dry_runner, now, limits, sources, deadline)
        if context is None:
            return cls(dry_runner, now, DEFAULT_LIMITS if limits is None else limits, sources, deadline)
        if any(value is not None for value in loose):
            raise TypeError(
                "pass either a context or its fields (dry_runner, now, limits, sources, deadline), not both"
            )
        return context
