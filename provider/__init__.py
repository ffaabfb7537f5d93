"""manifest-provider: prove a Kubernetes object is exactly what its author signed.

Verifies manifests signed in the k8s-manifest-sigstore format (``kubectl
sigstore sign``) against a policy -- trusted keys or keyless signers, which
fields the cluster may change, who may write unsigned -- and explains every
verdict. The library needs neither Flask nor a cluster::

    from provider import Policy, Review, decide

    policy = Policy.from_dict({"keys": [open("cosign.pub").read()]})
    result = decide(Review.for_object(obj), policy)
    result.allowed, result.reason, result.message
"""

from .bounds import LOCAL, Bounds
from .errors import (
    DataError,
    PolicyError,
    ProviderError,
    RequestError,
    TransientError,
    VerificationFailure,
)
from .limits import DEFAULT_LIMITS, Limits
from .policy.schema import Policy
from .result import REASONS, Result
from .review import Review
from .verifier import Verification, decide, verify
from .version import __version__

__all__ = [
    "DEFAULT_LIMITS",
    "LOCAL",
    "REASONS",
    "Bounds",
    "DataError",
    "Limits",
    "Policy",
    "PolicyError",
    "ProviderError",
    "RequestError",
    "Result",
    "Review",
    "TransientError",
    "Verification",
    "VerificationFailure",
    "__version__",
    "decide",
    "verify",
]
