"""Kubelet-serving CertificateSigningRequests: an auto-approver's checks, at admission.

A kubelet asks for its serving certificate with a CSR for the signer
``kubernetes.io/kubelet-serving``; controllers such as kubelet-csr-approver
approve it when it passes a list of checks, and the kube-controller-manager
signs whatever was approved. Running the same checks in the admission path
means a CSR that would forge a serving certificate (a DNS name or IP the node
does not own) is never even stored.

:func:`evaluate_csr` parses the PKCS#10 request with ``cryptography`` and checks,
in this order, reporting every broken rule (the first one is the reason):

====================================  =============================================================
reason                                rule
====================================  =============================================================
``csr-malformed``                     ``spec.request`` is one PEM ``CERTIFICATE REQUEST`` block,
                                      within ``Limits.max_csr_bytes``, whose self-signature verifies
``csr-requester-mismatch``            on CREATE, ``spec.username`` is the requesting user
``csr-username-not-node``             ``spec.username`` is ``system:node:<node-name>``
``csr-common-name-mismatch``          the subject has one CN, equal to ``spec.username``
``csr-organization-invalid``          the subject's O is exactly ``[system:nodes]`` *
``csr-usages-invalid``                usages are {digital signature, [key encipherment,] server auth} *
``csr-expiration-too-long``           ``expirationSeconds``, if set, is at most ``maxExpirationSeconds``
``csr-san-forbidden``                 no email, URI or other SAN types *
``csr-san-missing``                   at least one DNS or IP SAN
``csr-too-many-dns-names``            at most ``allowedDnsNames`` DNS SANs
``csr-dns-name-invalid``              each DNS SAN is an RFC 1123 host name (no wildcard), <= 253
``csr-dns-name-not-prefixed``         each DNS SAN is the node name or ``<node-name>.<domain>``
                                      (unless ``bypassHostnameCheck``)
``csr-dns-name-not-allowed``          each DNS SAN matches ``providerRegex`` (RE2 search, like Go's
                                      ``MatchString``: anchor it with ``^...$``)
``csr-ip-not-allowed``                each IP SAN lies in ``providerIpPrefixes``
``csr-dns-unresolvable``              (``resolveDnsNames`` only) each DNS SAN resolves
``csr-resolved-ip-not-allowed``       (``resolveDnsNames`` only) and to addresses in the prefixes
``csr-ip-not-resolved``               (``resolveDnsNames`` only) each IP SAN is one of them
====================================  =============================================================

\\* checks the signer itself makes (``ValidateKubeletServingCSR``), repeated
here so the CSR is refused at once instead of failing later.

Differences from kubelet-csr-approver, all stricter: the node-name check ends at
a label boundary (upstream's plain string prefix lets node ``a`` claim
``auth.example.com``); the name and regex checks apply with or without DNS
resolution (upstream skips both when resolution is bypassed); DNS names must
be valid host names. DNS resolution is *off* by default (upstream: on): an
admission webhook should not wait on DNS. When on, all lookups share one
deadline (``dnsTimeoutSeconds``, default 1 s as upstream, at most 2 s) and a
lookup that does not finish in time is a :class:`~provider.errors.TransientError`.

CSRs for other signers, and other kinds, are out of scope (allowed), as the
approver ignores them.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..deadlines import resolve
from ..errors import PolicyError, RequestError, TransientError, VerificationFailure
from ..limits import DEFAULT_LIMITS, Limits
from ..readers import check_fields, read_bool, read_int
from ..regexes import PolicyRegex
from ..result import Reason, Result
from ..review import Review

# From k8s.io/api/certificates/v1 and pkg/apis/certificates (ValidateKubeletServingCSR).
KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving"
NODE_USER_PREFIX = "system:node:"
NODES_ORGANIZATION = "system:nodes"
USAGES_RSA = frozenset({"digital signature", "key encipherment", "server auth"})
USAGES_NO_RSA = frozenset({"digital signature", "server auth"})
#: kubelet-csr-approver's default and hard maximum for --max-expiration-sec: 367 days.
MAX_EXPIRATION_SECONDS = 367 * 24 * 3600
#: kubelet-csr-approver's --allowed-dns-names default.
DEFAULT_ALLOWED_DNS_NAMES = 1
#: kubelet-csr-approver's DNS deadline (one second for all lookups); ours may be raised to 2 s,
#: still inside Gatekeeper's 3 s webhook budget.
DEFAULT_DNS_TIMEOUT, MAX_DNS_TIMEOUT = 1.0, 2.0

_PEM = re.compile(
    r"\s*-----BEGIN CERTIFICATE REQUEST-----\r?\n([A-Za-z0-9+/=\r\n]+)-----END CERTIFICATE REQUEST-----\s*\Z"
)
_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
#: ``(name, timeout seconds) -> addresses`` (empty: the name does not resolve).
Resolver = Callable[[str, float], tuple[str, ...]]


class CsrMalformed(VerificationFailure):
    reason = "csr-malformed"


# --- the policy ---------------------------------------------------------------------

_POLICY_FIELDS = (
    "providerRegex", "providerIpPrefixes", "maxExpirationSeconds", "allowedDnsNames",
    "bypassHostnameCheck", "resolveDnsNames", "dnsTimeoutSeconds",
)  # fmt: skip


@dataclass(frozen=True)
class CsrPolicy:
    """The ``kubelet-serving-csr`` check's policy: kubelet-csr-approver's settings, by their Helm value names."""

    provider_regex: PolicyRegex | None = None
    #: ``None``: every address (upstream's default ``0.0.0.0/0,::/0``).
    ip_prefixes: tuple[Network, ...] | None = None
    max_expiration_seconds: int = MAX_EXPIRATION_SECONDS
    allowed_dns_names: int = DEFAULT_ALLOWED_DNS_NAMES
    bypass_hostname_check: bool = False
    resolve_dns_names: bool = False
    dns_timeout_seconds: float = DEFAULT_DNS_TIMEOUT

    @classmethod
    def from_dict(cls, data: Any) -> CsrPolicy:
        data = check_fields({} if data is None else data, "the kubelet-serving-csr policy", _POLICY_FIELDS)
        regex = None
        if data.get("providerRegex") is not None:
            text = data["providerRegex"]
            if not isinstance(text, str) or not text or len(text) > 1024:
                raise PolicyError("providerRegex: expected a regular expression of 1 to 1024 characters")
            # RE2 (provider/regexes.py): linear time, and Go's regexp syntax, as kubelet-csr-approver reads it.
            regex = PolicyRegex.compile(text, "providerRegex")
        prefixes = None
        if data.get("providerIpPrefixes") is not None:
            prefixes = parse_prefixes(data["providerIpPrefixes"])
        return cls(
            provider_regex=regex,
            ip_prefixes=prefixes,
            max_expiration_seconds=read_int(
                data.get("maxExpirationSeconds", MAX_EXPIRATION_SECONDS),
                "maxExpirationSeconds",
                low=0,
                high=MAX_EXPIRATION_SECONDS,
            ),
            allowed_dns_names=read_int(
                data.get("allowedDnsNames", DEFAULT_ALLOWED_DNS_NAMES), "allowedDnsNames", low=0, high=64
            ),
            bypass_hostname_check=read_bool(data.get("bypassHostnameCheck", False), "bypassHostnameCheck"),
            resolve_dns_names=read_bool(data.get("resolveDnsNames", False), "resolveDnsNames"),
            dns_timeout_seconds=_seconds(data.get("dnsTimeoutSeconds", DEFAULT_DNS_TIMEOUT)),
        )


def parse_prefixes(value: Any) -> tuple[Network, ...]:
    """A list of CIDRs, or one comma-separated string of them (the approver's flag)."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items) or not 0 < len(items) <= 256:
        raise PolicyError("providerIpPrefixes: expected 1 to 256 CIDRs (a list, or one comma-separated string)")
    prefixes = []
    for item in items:
        try:
            prefixes.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError as exc:
            raise PolicyError(
                f"providerIpPrefixes: {item.strip()[:60]!r} is not an IP prefix like 192.168.0.0/16 or fc00::/7"
            ) from exc
    return tuple(prefixes)


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_DNS_TIMEOUT:
        raise PolicyError(f"dnsTimeoutSeconds: expected a number of seconds above 0 and at most {MAX_DNS_TIMEOUT}")
    return float(value)


# --- reading the request ------------------------------------------------------------


@dataclass(frozen=True)
class CertificateRequest:
    """What the checks read from a PKCS#10 request."""

    common_names: tuple[str, ...]
    organizations: tuple[str, ...]
    dns_names: tuple[str, ...]
    ip_addresses: tuple[Address, ...]
    #: Descriptions of SANs of other types (email, URI, directory name, ...).
    other_names: tuple[str, ...]


def parse_request(value: Any, limits: Limits = DEFAULT_LIMITS) -> CertificateRequest:
    """``spec.request`` (base64 of PEM: the API carries ``[]byte``) -> the parsed request, or ``CsrMalformed``."""
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.x509.oid import NameOID

    if not isinstance(value, str) or not value:
        raise CsrMalformed("spec.request is missing or not a base64 string")
    if len(value) > (limits.max_csr_bytes * 4) // 3 + 4:
        raise CsrMalformed(f"spec.request is larger than {limits.max_csr_bytes} bytes")
    try:
        pem = base64.b64decode(value, validate=True).decode("ascii")
    except (binascii.Error, ValueError) as exc:
        raise CsrMalformed("spec.request is not base64 of a PEM text") from exc
    match = _PEM.match(pem)
    if match is None:
        raise CsrMalformed("spec.request is not exactly one PEM 'CERTIFICATE REQUEST' block")
    try:
        request = x509.load_der_x509_csr(
            base64.b64decode(match.group(1).replace("\r", "").replace("\n", ""), validate=True)
        )
        if not request.is_signature_valid:
            raise CsrMalformed("the request's self-signature does not verify: it was not made with the key it carries")
        names = _subject_alt_names(request)
        common = tuple(str(a.value) for a in request.subject.get_attributes_for_oid(NameOID.COMMON_NAME))
        orgs = tuple(str(a.value) for a in request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME))
    except (
        ValueError,
        binascii.Error,
        UnsupportedAlgorithm,
        x509.DuplicateExtension,
        x509.UnsupportedGeneralNameType,
    ) as exc:
        raise CsrMalformed(f"spec.request is not a valid PKCS#10 request ({str(exc)[:120]})") from exc
    dns = tuple(str(n.value) for n in names if isinstance(n, x509.DNSName))
    ips = tuple(_unmap(n.value) for n in names if isinstance(n, x509.IPAddress))
    other = tuple(_describe_name(n) for n in names if not isinstance(n, (x509.DNSName, x509.IPAddress)))
    return CertificateRequest(common, orgs, dns, ips, other)


def _subject_alt_names(request: Any) -> list[Any]:
    from cryptography import x509

    try:
        extension = request.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return list(extension.value)


def _unmap(value: Any) -> Address:
    """IPv4-mapped IPv6 addresses mean their IPv4 address (Go's netaddr.FromStdIP, TLS name checks)."""
    if not isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        raise ValueError("an IP SAN is a network, not an address")
    if isinstance(value, ipaddress.IPv6Address) and value.ipv4_mapped is not None:
        return value.ipv4_mapped
    return value


def _describe_name(name: Any) -> str:
    kind = type(name).__name__
    value = getattr(name, "value", "")
    return f"{kind} {str(value)[:60]!r}"


# --- the checks ---------------------------------------------------------------------


@dataclass(frozen=True)
class Violation:
    reason: Reason
    detail: str


def valid_host_name(name: str) -> bool:
    """An RFC 1123 host name (case-insensitive), at most 253 characters: no wildcard, no trailing dot."""
    if not 0 < len(name) <= 253 or not name.isascii():
        return False
    return all(_LABEL.match(label) for label in name.lower().split("."))


def _spec_checks(
    spec: Mapping[str, Any], request: CertificateRequest, policy: CsrPolicy, requester: str | None
) -> list[Violation]:
    """Who asks, for what subject, usages and lifetime."""
    found: list[Violation] = []
    username = spec.get("username")
    username = username if isinstance(username, str) else ""
    if requester is not None and username != requester:
        found.append(
            Violation(
                "csr-requester-mismatch",
                f"spec.username {username[:80]!r} is not the requesting user {requester[:80]!r}",
            )
        )
    node = username.removeprefix(NODE_USER_PREFIX)
    if not username.startswith(NODE_USER_PREFIX) or not node:
        found.append(
            Violation(
                "csr-username-not-node",
                f"spec.username {username[:80]!r} is not {NODE_USER_PREFIX}<node-name>: only nodes ask for kubelet "
                "serving certificates",
            )
        )
    if request.common_names != (username,):
        cns = ", ".join(repr(c[:80]) for c in request.common_names) or "none"
        found.append(
            Violation(
                "csr-common-name-mismatch", f"the subject's CN ({cns}) must be exactly spec.username {username[:80]!r}"
            )
        )
    if request.organizations != (NODES_ORGANIZATION,):
        found.append(
            Violation(
                "csr-organization-invalid",
                f"the subject's O is {list(request.organizations)[:4]!r}, not ['{NODES_ORGANIZATION}'] (the signer "
                "refuses anything else)",
            )
        )
    usages = spec.get("usages")
    usage_set = frozenset(usages) if isinstance(usages, list) and all(isinstance(u, str) for u in usages) else None
    if usage_set not in (USAGES_RSA, USAGES_NO_RSA):
        shown = sorted(usage_set)[:6] if usage_set is not None else usages
        found.append(
            Violation(
                "csr-usages-invalid",
                f"spec.usages {str(shown)[:120]} are not digital signature, server auth (and, for RSA keys, key "
                "encipherment)",
            )
        )
    expiration = spec.get("expirationSeconds")
    if expiration is not None:
        if isinstance(expiration, bool) or not isinstance(expiration, int):
            found.append(Violation("csr-malformed", "spec.expirationSeconds is not a whole number"))
        elif expiration > policy.max_expiration_seconds:
            found.append(
                Violation(
                    "csr-expiration-too-long",
                    f"spec.expirationSeconds {expiration} is above the policy's maxExpirationSeconds "
                    f"{policy.max_expiration_seconds}",
                )
            )
    return found


def _san_checks(request: CertificateRequest, node: str, policy: CsrPolicy) -> list[Violation]:
    """Which names and addresses the certificate would vouch for."""
    found: list[Violation] = []
    if request.other_names:
        found.append(
            Violation(
                "csr-san-forbidden", f"only DNS and IP SANs are allowed; found {', '.join(request.other_names[:3])}"
            )
        )
    if not request.dns_names and not request.ip_addresses:
        found.append(Violation("csr-san-missing", "the request names neither a DNS name nor an IP address"))
    if len(request.dns_names) > policy.allowed_dns_names:
        found.append(
            Violation(
                "csr-too-many-dns-names",
                f"{len(request.dns_names)} DNS SANs; the policy allows {policy.allowed_dns_names} (allowedDnsNames)",
            )
        )
    node = node.lower()
    for name in request.dns_names[:64]:
        shown = repr(name[:80])
        if not valid_host_name(name):
            found.append(
                Violation(
                    "csr-dns-name-invalid",
                    f"DNS SAN {shown} is not a host name (RFC 1123 labels, no wildcard, at most 253 characters)",
                )
            )
            continue
        lowered = name.lower()
        if not policy.bypass_hostname_check and not (node and (lowered == node or lowered.startswith(node + "."))):
            found.append(
                Violation(
                    "csr-dns-name-not-prefixed",
                    f"DNS SAN {shown} is neither the node name {node[:80]!r} nor under it ({node[:80]}.<domain>)",
                )
            )
        if policy.provider_regex is not None and not policy.provider_regex.search(name):
            found.append(
                Violation("csr-dns-name-not-allowed", f"DNS SAN {shown} does not match the policy's providerRegex")
            )
    if policy.ip_prefixes is not None:
        for address in request.ip_addresses:
            if not any(address in prefix for prefix in policy.ip_prefixes):
                found.append(
                    Violation("csr-ip-not-allowed", f"IP SAN {address} is outside the policy's providerIpPrefixes")
                )
    return found


def _dns_checks(request: CertificateRequest, policy: CsrPolicy, resolver: Resolver) -> list[Violation]:
    """kubelet-csr-approver's resolution checks, under one deadline for every lookup."""
    found: list[Violation] = []
    deadline = time.monotonic() + policy.dns_timeout_seconds
    resolved: set[Address] = set()
    for name in request.dns_names:
        if not valid_host_name(name):
            continue  # already reported; never sent to a resolver
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TransientError(f"DNS lookups of the CSR's names took longer than {policy.dns_timeout_seconds} s")
        addresses = []
        for text in resolver(name, remaining):
            try:
                addresses.append(_unmap(ipaddress.ip_address(text.split("%", 1)[0])))
            except ValueError:
                continue
        if not addresses:
            found.append(Violation("csr-dns-unresolvable", f"DNS SAN {name[:80]!r} does not resolve"))
            continue
        resolved.update(addresses)
        if policy.ip_prefixes is not None:
            outside = [str(a) for a in addresses if not any(a in p for p in policy.ip_prefixes)]
            if outside:
                found.append(
                    Violation(
                        "csr-resolved-ip-not-allowed",
                        f"DNS SAN {name[:80]!r} resolves to {', '.join(outside[:3])}, outside the policy's "
                        "providerIpPrefixes",
                    )
                )
    if resolved:
        for address in request.ip_addresses:
            if address not in resolved:
                found.append(
                    Violation(
                        "csr-ip-not-resolved", f"IP SAN {address} is not an address any of the DNS SANs resolve to"
                    )
                )
    return found


def system_resolver(name: str, timeout: float) -> tuple[str, ...]:
    """The host's resolver (``getaddrinfo``), bounded by ``timeout`` seconds.

    The one bounded lookup every exchange uses (:func:`provider.deadlines.resolve`): a
    lookup that cannot be interrupted runs on a daemon thread abandoned at the deadline,
    and callers asking for one name share its lookup. No answer in time is a
    :class:`~provider.errors.TransientError`; a name that does not resolve has no addresses.
    """
    try:
        infos = resolve(name, 0, time.monotonic() + timeout)
    except TimeoutError:
        raise TransientError(f"DNS lookup of {name[:80]!r} did not finish within {timeout:.2f} s") from None
    except (OSError, UnicodeError):
        return ()
    return tuple(sorted({str(info[4][0]) for info in infos}))


def check_request(
    obj: Mapping[str, Any],
    policy: CsrPolicy,
    *,
    requester: str | None = None,
    resolver: Resolver | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> list[Violation]:
    """Every broken rule of a kubelet-serving CSR, in the module's order (empty: compliant)."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return [Violation("csr-malformed", "the object has no spec")]
    try:
        request = parse_request(spec.get("request"), limits)
    except CsrMalformed as failure:
        return [Violation("csr-malformed", failure.message)]
    found = _spec_checks(spec, request, policy, requester)
    username = spec.get("username")
    node = (
        username.removeprefix(NODE_USER_PREFIX)
        if isinstance(username, str) and username.startswith(NODE_USER_PREFIX)
        else ""
    )
    found += _san_checks(request, node, policy)
    if policy.resolve_dns_names and request.dns_names:
        found += _dns_checks(request, policy, resolver or system_resolver)
    return found


def evaluate_csr(
    review: Review,
    policy: CsrPolicy,
    *,
    resolver: Resolver | None = None,
    limits: Limits = DEFAULT_LIMITS,
    scoped: bool = True,
) -> Result:
    """The verdict for one review of a CertificateSigningRequest.

    ``scoped``: other kinds are out of scope (allowed); unscoped (the CLI),
    they are refused. CSRs for other signers are out of scope either way.
    Raises only :class:`~provider.errors.RequestError` and
    :class:`~provider.errors.TransientError` (DNS, when enabled).
    """
    if review.operation in ("DELETE", "CONNECT"):
        return Result.allow("out-of-scope", f"{review.operation} requests carry no new object to verify", "policy")
    obj = review.object
    if not isinstance(obj, dict):
        raise RequestError("the review has no object to verify")
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    what = f"CertificateSigningRequest {str(name)[:253]}"
    api_version = obj.get("apiVersion")
    if (
        obj.get("kind") != "CertificateSigningRequest"
        or not isinstance(api_version, str)
        or not api_version.startswith("certificates.k8s.io/")
    ):
        if scoped:
            return Result.allow(
                "out-of-scope", "only CertificateSigningRequests are checked by kubelet-serving-csr", "policy"
            )
        return Result.deny(
            "csr-malformed", f"a {str(obj.get('kind'))[:40]} is not a certificates.k8s.io CertificateSigningRequest"
        )
    spec = obj.get("spec")
    signer = spec.get("signerName") if isinstance(spec, dict) else None
    if signer != KUBELET_SERVING_SIGNER:
        return Result.allow(
            "out-of-scope", f"{what} is for signer {str(signer)[:80]!r}, not {KUBELET_SERVING_SIGNER}", "policy"
        )
    requester = review.username if review.operation == "CREATE" else None
    found = check_request(obj, policy, requester=requester, resolver=resolver, limits=limits)
    resolved = policy.resolve_dns_names
    if found:
        listed = "; ".join(f"[{v.reason}] {v.detail}" for v in found[:6])
        more = f"; and {len(found) - 6} more" if len(found) > 6 else ""
        count = "1 rule" if len(found) == 1 else f"{len(found)} rules"
        return Result.deny(found[0].reason, f"{what} breaks {count}: {listed}{more}", used_cluster=resolved)
    return Result.proven(
        f"{what} passes every kubelet-serving check{' (names resolved)' if resolved else ''}", used_cluster=resolved
    )
