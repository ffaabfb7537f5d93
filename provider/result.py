"""The verdict: what was decided, why, and what it rests on.

``to_dict()`` gives the wire shape every entry point returns::

    {"allowed": bool, "verified": bool, "reason": "<code>", "message": "<one sentence>",
     "signers": ["sha256:<key fingerprint>" | {"subject": ..., "issuer": ..., "key": "sha256:..."}, ...],
     "diff": [{"key": "data.key1", "values": {"before": "val1", "after": "val2"}}, ...]}

``allowed`` is true when the object verified, or when the policy does not ask
for a signature (skipped user or object, out of scope, a dry-run request, a
stored object that is exactly what a control-plane controller writes).
``reason`` is a stable code (see :data:`REASONS`); ``message`` is for people.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast

from .compare.diff import DiffItem
from .errors import ProviderError

Reason = Literal[
    # allowed
    "verified",
    "skipped-user",
    "skipped-object",
    "out-of-scope",
    "dry-run-request",
    "no-signatures",
    "unverifiable-operation",  # a DELETE/CONNECT no profile covers: no new object, nothing to verify
    # no request, and exactly what a control-plane controller writes (provider/compare/controlplane.py)
    "control-plane-object",
    # denied: the object
    "unsigned",
    "no-matching-manifest",
    "signature-invalid",
    "key-threshold-not-met",
    "content-mismatch",
    "unverifiable-subresource",  # a change through scale or binding: its object carries no signature
    "control-plane-object-changed",  # a control-plane object, unsigned, not as its writer writes it
    "malformed-message",
    "certificate-untrusted",
    "tlog-entry-invalid",
    "certificate-expired-at-signing",
    "identity-mismatch",
    "openpgp-key-expired",  # the OpenPGP certificate or signing subkey expired (provider/keys/openpgp.py)
    "openpgp-key-revoked",
    "openpgp-key-not-for-signing",  # the key that signed is not flagged for signing
    "bundle-not-allowed",  # the object's resourceBundleRef is malformed or outside the policy's repositories
    "bundle-unavailable",  # the registry could not be asked, refused, or did not answer in time
    "bundle-invalid",  # the registry answered with something that is not a bundle within the limits
    "signature-configmap-unavailable",  # the signature ConfigMap could not be read
    "key-secret-unavailable",  # a key kept in a Secret could not be read (the cluster could not be asked)
    # denied: a bootstrap-token signed cluster-info ConfigMap (provider/neighbours/bootstrap.py)
    "cluster-info-invalid",
    "jws-malformed",
    "jws-header-invalid",
    "token-unknown",
    "token-expired",
    "token-not-for-signing",
    "ca-pin-mismatch",
    # denied: a kubelet-serving CertificateSigningRequest (provider/neighbours/csr.py)
    "csr-malformed",
    "csr-requester-mismatch",
    "csr-username-not-node",
    "csr-common-name-mismatch",
    "csr-organization-invalid",
    "csr-usages-invalid",
    "csr-expiration-too-long",
    "csr-san-missing",
    "csr-san-forbidden",
    "csr-too-many-dns-names",
    "csr-dns-name-invalid",
    "csr-dns-name-not-prefixed",
    "csr-dns-name-not-allowed",
    "csr-ip-not-allowed",
    "csr-dns-unresolvable",
    "csr-resolved-ip-not-allowed",
    "csr-ip-not-resolved",
    # denied: the request, the policy, or the cluster
    "policy-invalid",
    "request-invalid",
    "dry-run-failed",
    # denied by the service itself, never by the library (whole-request failures)
    "deadline-exceeded",
    "transient-error",
    "internal-error",
]

#: The reasons that let an object through: the "allowed" section of :data:`Reason`.
ALLOWING_REASONS: frozenset[str] = frozenset(
    {"verified", "skipped-user", "skipped-object", "out-of-scope", "dry-run-request", "no-signatures",
     "unverifiable-operation", "control-plane-object"}
)  # fmt: skip
REASONS: tuple[str, ...] = Reason.__args__  # type: ignore[attr-defined]


def reason_of(error: ProviderError) -> Reason:
    """An error's reason as a verdict's: every error class carries a listed code (a test keeps it so)."""
    return cast(Reason, error.reason)


#: Which part of a policy let an unsigned request through.
AllowedBy = Literal["common", "policy"]

Signer = str | dict[str, str]

#: The paper's six classes of admission traffic (section 4, Table 2).
TrafficClass = Literal[
    "out-of-scope", "common-profile", "app-profile", "valid-signature", "invalid-signature", "unprocessed"
]
TRAFFIC_CLASSES: tuple[str, ...] = TrafficClass.__args__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Result:
    allowed: bool
    verified: bool
    reason: Reason
    message: str
    signers: tuple[Signer, ...] = ()
    diff: tuple[DiffItem, ...] = ()
    #: Total differences found (``diff`` may be truncated to ``Limits.max_diff_items``).
    diff_count: int = 0
    #: For skipped/out-of-scope verdicts: the built-in common profile, or the policy itself.
    profile: AllowedBy | None = None
    #: True when the verdict depends on the live cluster (a dry-run was made): not cacheable.
    used_cluster: bool = False

    @classmethod
    def allow(cls, reason: Reason, message: str, profile: AllowedBy | None = None) -> Result:
        """Allowed without verification: a skipped user or object, out of scope, a dry-run request, a DELETE."""
        return cls(allowed=True, verified=False, reason=reason, message=message, profile=profile)

    @classmethod
    def deny(
        cls,
        reason: Reason,
        message: str,
        *,
        signers: tuple[Signer, ...] = (),
        diff: tuple[DiffItem, ...] = (),
        diff_count: int | None = None,
        used_cluster: bool = False,
    ) -> Result:
        """Denied, with the reason; ``diff`` may be truncated, ``diff_count`` counts all (default: ``len(diff)``)."""
        return cls(
            allowed=False,
            verified=False,
            reason=reason,
            message=message,
            signers=signers,
            diff=diff,
            diff_count=len(diff) if diff_count is None else diff_count,
            used_cluster=used_cluster,
        )

    @classmethod
    def proven(cls, message: str, signers: tuple[Signer, ...] = (), *, used_cluster: bool = False) -> Result:
        """Verified: what the signers signed (or, for a neighbouring check, what its rules require)."""
        return cls(
            allowed=True, verified=True, reason="verified", message=message, signers=signers, used_cluster=used_cluster
        )

    @classmethod
    def from_error(cls, error: ProviderError, message: str | None = None) -> Result:
        """The denial an error stands for: its reason, and its message (or ``message``)."""
        return cls.deny(reason_of(error), error.message if message is None else message)

    @property
    def traffic_class(self) -> TrafficClass:
        """Where this verdict falls in the paper's table.

        Unsigned objects are "unprocessed" (in scope, unsigned, matched by no
        profile), and so is anything else let through unverified without a
        profile or scope rule saying so -- a person's DELETE (the paper counts
        by object and requester, not by verb: a deletion of an in-scope object
        that no profile covers is in scope and unprotected). Every other
        denial -- a bad signature, a changed object, a request or policy that
        could not be read -- is "invalid-signature", a control-plane object
        that is not as its writer writes it included. A control-plane object
        that is exactly so (``control-plane-object``, only ever for a review
        without a request) is the common profile's, as its writer's request is
        at admission.
        """
        if self.reason in ("out-of-scope", "dry-run-request"):
            return "out-of-scope"
        if self.reason in ("skipped-user", "skipped-object", "control-plane-object"):
            return "common-profile" if self.profile == "common" else "app-profile"
        if self.verified:
            return "valid-signature"
        if self.reason == "unsigned" or self.allowed:
            return "unprocessed"
        return "invalid-signature"

    def to_dict(self) -> dict[str, Any]:
        return {
            "allowed": self.allowed,
            "verified": self.verified,
            "reason": self.reason,
            "message": self.message,
            "signers": list(self.signers),
            "diff": [item.to_dict() for item in self.diff],
        }
