"""Who a signer is: a policy's ``signers`` entry, the identity a certificate names, and the match between them.

A :class:`SignerSpec` is one ``signers`` entry: a subject (exact, or a regular
expression that must match the whole value -- RE2, :mod:`provider.regexes`), an issuer likewise, and for
certificate signers the PEM ``roots`` their certificates chain to. An
:class:`Identity` is what a certificate names (``docs/keyless.md``):
its SAN values and the OIDC issuer Fulcio recorded (or the issuing CA's
name). :func:`match_identity` is step 6 of a keyless check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import PolicyError, VerificationFailure
from ..readers import check_fields, read_str
from ..regexes import PolicyRegex

if TYPE_CHECKING:
    from .trust import SignerRoots


class IdentityMismatch(VerificationFailure):
    reason = "identity-mismatch"


@dataclass(frozen=True)
class Identity:
    """Who a certificate names: its SAN identities and its issuer (see the module docstring)."""

    subjects: tuple[str, ...]
    issuer: str


@dataclass(frozen=True)
class SignerSpec:
    """A keyless (Fulcio) or certificate signer identity; verified by :mod:`provider.keyless.signer`."""

    subject: str | None = None
    subject_regexp: PolicyRegex | None = None
    issuer: str | None = None
    issuer_regexp: PolicyRegex | None = None
    roots: str | None = None  # PEM CA bundle for certificate signers without Fulcio
    #: ``roots`` parsed (Policy.from_dict fills it in, so a verification never parses them).
    anchors: SignerRoots | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_value(cls, data: Any, where: str) -> SignerSpec:
        if isinstance(data, str):  # upstream's config: a list of signer names (any issuer)
            return cls(subject=data)
        data = check_fields(data, where, ("subject", "subjectRegExp", "issuer", "issuerRegExp", "roots"))
        if "subject" in data and "subjectRegExp" in data:
            raise PolicyError(f"{where}: give subject or subjectRegExp, not both")
        if "issuer" in data and "issuerRegExp" in data:
            raise PolicyError(f"{where}: give issuer or issuerRegExp, not both")
        if "subject" not in data and "subjectRegExp" not in data:
            raise PolicyError(
                f"{where}: subject or subjectRegExp is required; a signer without an identity would accept anyone"
            )

        def regexp(name: str) -> PolicyRegex | None:
            if name not in data:
                return None
            return PolicyRegex.compile(read_str(data[name], f"{where}.{name}"), f"{where}.{name}")

        subject = read_str(data["subject"], f"{where}.subject") if "subject" in data else None
        issuer = read_str(data["issuer"], f"{where}.issuer") if "issuer" in data else None
        roots = read_str(data["roots"], f"{where}.roots") if "roots" in data else None
        return cls(subject, regexp("subjectRegExp"), issuer, regexp("issuerRegExp"), roots)

    def describe(self) -> str:
        subject = (
            self.subject
            if self.subject is not None
            else f"/{self.subject_regexp.pattern if self.subject_regexp else ''}/"
        )
        issuer = (
            self.issuer
            if self.issuer is not None
            else (f"/{self.issuer_regexp.pattern}/" if self.issuer_regexp else "any issuer")
        )
        return f"{subject} ({issuer})"


def match_identity(spec: SignerSpec, identity: Identity) -> dict[str, str]:
    """Step 6: the signer entry's subject and issuer against the certificate's; full matches only."""
    if spec.subject is not None:
        subject = next((s for s in identity.subjects if s == spec.subject), None)
    else:
        pattern = spec.subject_regexp
        subject = next((s for s in identity.subjects if pattern is not None and pattern.fullmatch(s)), None)
    named = ", ".join(s[:80] for s in identity.subjects[:3]) or "no email or URI"
    if subject is None:
        wanted = (
            spec.subject
            if spec.subject is not None
            else f"/{spec.subject_regexp.pattern if spec.subject_regexp else ''}/"
        )
        raise IdentityMismatch(f"the certificate names {named}, not {wanted[:80]}")
    if spec.issuer is not None and identity.issuer != spec.issuer:
        raise IdentityMismatch(
            f"{subject[:80]} was certified by issuer {identity.issuer[:80]!r}, not {spec.issuer[:80]!r}"
        )
    if spec.issuer_regexp is not None and not spec.issuer_regexp.fullmatch(identity.issuer):
        raise IdentityMismatch(
            f"{subject[:80]} was certified by issuer {identity.issuer[:80]!r}, which does not match "
            f"/{spec.issuer_regexp.pattern[:80]}/"
        )
    return {"subject": subject, "issuer": identity.issuer}
