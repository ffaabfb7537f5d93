"""Bootstrap-token signed ``cluster-info``: verify it the way a joining node does.

The ``cluster-info`` ConfigMap in ``kube-public`` carries a ``kubeconfig``
(the cluster's CA and API server address) and one ``jws-kubeconfig-<token-id>``
key per bootstrap token that may sign: a JWS (RFC 7515) in compact
serialisation with a *detached* payload (Appendix F), MAC'd with HS256. The
kube-controller-manager's bootstrap signer writes them; ``kubeadm join
--discovery-token`` trusts the CA only if the signature for its token matches.

Contract of :func:`evaluate_cluster_info`: every ``jws-kubeconfig-*`` key is
checked, and the object is allowed only if every one of them

1. is named ``jws-kubeconfig-<id>`` with ``<id>`` matching ``[a-z0-9]{6}``;
2. is exactly ``BASE64URL(header) || '..' || BASE64URL(MAC)`` -- base64url
   without padding (RFC 7515 section 2), the payload part empty (detached);
3. has the protected header ``{"alg":"HS256","kid":"<id>"}`` serialised byte
   for byte as the bootstrap signer (go-jose) writes it: ``kubeadm join``
   recomputes the whole string and compares, so any other serialisation,
   although a valid JWS, would be refused by every joining node;
4. names a token the :class:`TokenSource` knows (and that the policy's
   ``tokenIds`` allow), which has not expired (an unparseable expiration
   counts as expired, as in cluster-bootstrap) and has
   ``usage-bootstrap-signing: "true"``;
5. carries ``HMAC-SHA256(token-secret, ASCII(header '.' BASE64URL(kubeconfig)))``,
   compared in constant time.

The MAC key is the token *secret* (the 16 characters after the dot), not the
whole ``<id>.<secret>`` token some documentation mentions: cluster-bootstrap's
``ComputeDetachedSignature(content, tokenID, tokenSecret)`` keys HMAC with
``tokenSecret``, and its own test vectors (reproduced in our tests) agree.

A ConfigMap with no signature at all is allowed (reason ``no-signatures``)
unless the policy sets ``requireSignature``: the signer itself removes every
signature when the last signing token expires, and no client trusts an
unsigned cluster-info. Optional ``caCertHashes`` pin the CA in the kubeconfig
(``sha256:<hex>`` of its SubjectPublicKeyInfo, kubeadm's
``--discovery-token-ca-cert-hash``). Limits and rationale: ``docs/neighbours.md``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from ..errors import PolicyError, RequestError, VerificationFailure
from ..limits import DEFAULT_LIMITS, Limits
from ..parsing import load_json, load_yaml_stream
from ..readers import check_fields, read_str_list
from ..result import Reason, Result, reason_of
from ..review import Review

log = logging.getLogger("provider.bootstrap")

# Names and formats from k8s.io/cluster-bootstrap/token/api (types.go).
CLUSTER_INFO_NAMESPACE = "kube-public"
CLUSTER_INFO_NAME = "cluster-info"
KUBECONFIG_KEY = "kubeconfig"
JWS_KEY_PREFIX = "jws-kubeconfig-"
# Names of Secrets and their type, not secrets:
TOKEN_SECRET_TYPE = "bootstrap.kubernetes.io/token"  # noqa: S105
TOKEN_SECRET_NAMESPACE = "kube-system"  # noqa: S105
TOKEN_SECRET_PREFIX = "bootstrap-token-"  # noqa: S105
TOKEN_ID_RE = re.compile(r"[a-z0-9]{6}\Z")
TOKEN_RE = re.compile(r"([a-z0-9]{6})\.([a-z0-9]{16})\Z")
#: Go's time.RFC3339 as time.Parse accepts it (fractional seconds allowed).
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})\Z")
_B64URL = re.compile(r"[A-Za-z0-9_-]*\Z")
_PIN_RE = re.compile(r"sha256:([0-9a-fA-F]{64})\Z")
#: HS256 MACs are 32 bytes (RFC 7518 section 3.2).
_MAC_BYTES = 32


class ClusterInfoInvalid(VerificationFailure):
    reason = "cluster-info-invalid"


class JWSMalformed(VerificationFailure):
    reason = "jws-malformed"


# --- tokens -----------------------------------------------------------------------


@dataclass(frozen=True)
class BootstrapToken:
    """A bootstrap token as the bootstrap signer sees it (never logged: the secret is hidden from repr)."""

    token_id: str
    secret: str = field(repr=False)
    #: ``None``: never expires. Unparseable expirations are recorded as already expired.
    expiration: datetime | None = None
    signing: bool = True
    #: Where the token came from, for messages (``Secret kube-system/bootstrap-token-<id>``, ``--token``).
    origin: str = "inline"

    @classmethod
    def parse(cls, text: str, origin: str = "--token") -> BootstrapToken:
        """``<id>.<secret>`` as ``kubeadm token create`` prints it; usable for signing, no expiration."""
        match = TOKEN_RE.match(text.strip())
        if match is None:
            raise PolicyError(
                f"{origin}: a bootstrap token is <token-id>.<token-secret>: 6, a dot, then 16 of [a-z0-9]"
            )
        return cls(match.group(1), match.group(2), origin=origin)

    @classmethod
    def from_secret(cls, secret: Any, token_id: str) -> BootstrapToken | None:
        """The token a ``bootstrap-token-<id>`` Secret holds, or ``None`` if the bootstrap signer would ignore it.

        Mirrors cluster-bootstrap's ``validateSecretForSigning``: the type, the
        name, ``token-id`` equal to the name's id and a non-empty
        ``token-secret``. ``data`` values are base64 (as the API returns them);
        ``stringData`` (as written in manifests) is read too and wins.
        """
        if not isinstance(secret, Mapping) or secret.get("type") != TOKEN_SECRET_TYPE:
            return None
        meta = secret.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if name != TOKEN_SECRET_PREFIX + token_id:
            return None
        values: dict[str, str] = {}
        data = secret.get("data")
        if isinstance(data, Mapping):
            for key, raw in data.items():
                try:
                    values[key] = base64.b64decode(raw, validate=True).decode() if isinstance(raw, str) else ""
                except (binascii.Error, ValueError):
                    values[key] = ""
        plain = secret.get("stringData")
        if isinstance(plain, Mapping):
            values.update({k: v for k, v in plain.items() if isinstance(v, str)})
        if values.get("token-id") != token_id or not values.get("token-secret"):
            return None
        return cls(
            token_id=token_id,
            secret=values["token-secret"],
            expiration=_parse_expiration(values.get("expiration", "")),
            signing=values.get("usage-bootstrap-signing") == "true",
            origin=f"Secret {TOKEN_SECRET_NAMESPACE}/{name}",
        )

    def expired(self, now: datetime) -> bool:
        return self.expiration is not None and self.expiration <= now


_EXPIRED = datetime.min.replace(tzinfo=UTC)


def _parse_expiration(text: str) -> datetime | None:
    """RFC 3339; empty means "never"; anything unparseable is already expired (cluster-bootstrap's rule)."""
    if not text:
        return None
    if not _RFC3339.match(text):
        return _EXPIRED
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return _EXPIRED


class TokenSource(Protocol):
    """Finds the bootstrap token with an id; ``None`` when there is none.

    Implementations that ask a cluster raise :class:`~provider.errors.TransientError`
    when it cannot be asked.
    """

    def lookup(self, token_id: str) -> BootstrapToken | None: ...

    @property
    def description(self) -> str:
        """Where tokens are looked up, for messages (no secrets)."""
        ...


class InlineTokenSource:
    """Tokens given by hand (the CLI's ``--token``)."""

    description = "not among the --token values given"

    def __init__(self, tokens: list[BootstrapToken] | tuple[BootstrapToken, ...] = ()) -> None:
        self._tokens = {t.token_id: t for t in tokens}

    def lookup(self, token_id: str) -> BootstrapToken | None:
        return self._tokens.get(token_id)


# --- RFC 7515 detached JWS ----------------------------------------------------------


def b64url(data: bytes) -> str:
    """BASE64URL: URL-safe alphabet, trailing ``=`` removed (RFC 7515 section 2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str, what: str) -> bytes:
    """Strict BASE64URL: no padding, no whitespace, no stray bits (only the canonical encoding)."""
    if not _B64URL.match(text) or len(text) % 4 == 1:
        raise JWSMalformed(f"{what} is not base64url without padding")
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if b64url(data) != text:
        raise JWSMalformed(f"{what} is not the canonical base64url encoding of its bytes")
    return data


def protected_header(token_id: str) -> str:
    """BASE64URL of the header the bootstrap signer writes: go-jose marshals members sorted, no spaces."""
    return b64url(b'{"alg":"HS256","kid":"' + token_id.encode("ascii") + b'"}')


def _read_detached(value: Any, token_id: str, limits: Limits) -> tuple[str, bytes]:
    """Steps 2-3: the header part (as written) and the MAC bytes, or a ``jws-*`` failure."""
    if not isinstance(value, str):
        raise JWSMalformed(f"the value is a {type(value).__name__}, not a JWS string")
    if len(value) > limits.max_jws_chars:
        raise JWSMalformed(f"the value is longer than {limits.max_jws_chars} characters")
    parts = value.split(".")
    if len(parts) != 3:
        raise JWSMalformed(f"a compact JWS has three '.'-separated parts; this has {len(parts)}")
    header_b64, payload_b64, mac_b64 = parts
    if payload_b64:
        raise JWSMalformed(
            "the payload part is not empty; the bootstrap signer writes detached signatures (RFC 7515 Appendix F)"
        )
    header = load_json(
        b64url_decode(header_b64, "the protected header"),
        limits=limits,
        error=JWSMalformed,
        what="the protected header",
    )
    if not isinstance(header, dict):
        raise JWSMalformed("the protected header is not a JSON object")
    if header.get("alg") != "HS256":
        raise VerificationFailure(
            f"the header's alg is {_short(header.get('alg'), limits)}, not HS256", reason="jws-header-invalid"
        )
    if header.get("kid") != token_id:
        raise VerificationFailure(
            f"the header's kid is {_short(header.get('kid'), limits)}, not the key's token id {token_id!r}",
            reason="jws-header-invalid",
        )
    extra = sorted(set(header) - {"alg", "kid"})
    if extra:
        raise VerificationFailure(
            f"the header carries members the bootstrap signer never writes: {', '.join(extra)[:80]}",
            reason="jws-header-invalid",
        )
    if header_b64 != protected_header(token_id):
        raise VerificationFailure(
            'the header is not serialised as {"alg":"HS256","kid":"<id>"}; kubeadm join compares it byte for byte',
            reason="jws-header-invalid",
        )
    mac = b64url_decode(mac_b64, "the signature")
    if len(mac) != _MAC_BYTES:
        raise JWSMalformed(f"an HS256 MAC is {_MAC_BYTES} bytes; this one is {len(mac)}")
    return header_b64, mac


def _short(value: Any, limits: Limits) -> str:
    text = repr(value)
    return text if len(text) <= limits.max_quoted_value else text[: limits.max_quoted_value] + "…"


# --- the policy ---------------------------------------------------------------------

_POLICY_FIELDS = ("tokenIds", "caCertHashes", "requireSignature")


@dataclass(frozen=True)
class ClusterInfoPolicy:
    """The ``cluster-info`` check's policy (``docs/neighbours.md``); unknown fields are refused."""

    #: Only signatures by these token ids are trusted; ``None``: any token the source knows.
    token_ids: frozenset[str] | None = None
    #: ``sha256`` hex digests of CA SubjectPublicKeyInfos the kubeconfig must carry (empty: not checked).
    ca_cert_hashes: frozenset[str] = frozenset()
    require_signature: bool = False

    @classmethod
    def from_dict(cls, data: Any, limits: Limits = DEFAULT_LIMITS) -> ClusterInfoPolicy:
        data = check_fields({} if data is None else data, "the cluster-info policy", _POLICY_FIELDS)
        token_ids = None
        if "tokenIds" in data:
            ids = _string_list(data["tokenIds"], "tokenIds", limits)
            bad = [i for i in ids if not TOKEN_ID_RE.match(i)]
            if bad:
                # Never quote what looks like a whole token: this message reaches whoever's write
                # was denied, and the part after the dot is the secret.
                if "." in bad[0]:
                    raise PolicyError(
                        "tokenIds: an entry holds a '.', as a whole token <id>.<secret> does; list only the "
                        "6-character ids, never a secret"
                    )
                raise PolicyError(f"tokenIds: {bad[0][:20]!r} is not a token id (6 of [a-z0-9])")
            token_ids = frozenset(ids)
        pins = set()
        for pin in _string_list(data.get("caCertHashes", []), "caCertHashes", limits, allow_empty=True):
            match = _PIN_RE.match(pin)
            if match is None:
                raise PolicyError(
                    f"caCertHashes: {pin[:80]!r} is not sha256:<64 hex digits> (kubeadm's "
                    "--discovery-token-ca-cert-hash format)"
                )
            pins.add(match.group(1).lower())
        require = data.get("requireSignature", False)
        if not isinstance(require, bool):
            raise PolicyError(f"requireSignature: expected true or false, got {type(require).__name__}")
        return cls(token_ids=token_ids, ca_cert_hashes=frozenset(pins), require_signature=require)


def _string_list(value: Any, name: str, limits: Limits, allow_empty: bool = False) -> list[str]:
    strings = read_str_list(value, name)
    if not strings and not allow_empty:
        raise PolicyError(f"{name}: an empty list would trust nothing; leave the field out to trust every token")
    if len(strings) > limits.max_keys:
        raise PolicyError(f"{name}: more than {limits.max_keys} entries")
    return strings


# --- verification -------------------------------------------------------------------


@dataclass(frozen=True)
class SignatureFinding:
    """What checking one ``jws-kubeconfig-<id>`` key found: ``reason`` is ``verified`` or why not."""

    key: str
    token_id: str
    reason: Reason
    detail: str = ""

    @property
    def verified(self) -> bool:
        return self.reason == "verified"


def _check_signature(
    key: str,
    value: Any,
    content_b64: str,
    *,
    policy: ClusterInfoPolicy,
    tokens: TokenSource,
    now: datetime,
    limits: Limits,
) -> SignatureFinding:
    """Steps 1-5 of the module docstring for one key."""
    token_id = key[len(JWS_KEY_PREFIX) :]
    if not TOKEN_ID_RE.match(token_id):
        return SignatureFinding(
            key[:80], token_id[:20], "jws-malformed", "the key does not end in a token id (6 of [a-z0-9])"
        )
    try:
        header_b64, mac = _read_detached(value, token_id, limits)
    except VerificationFailure as failure:
        return SignatureFinding(key, token_id, reason_of(failure), failure.message)
    if policy.token_ids is not None and token_id not in policy.token_ids:
        return SignatureFinding(key, token_id, "token-unknown", "the token id is not among the policy's tokenIds")
    token = tokens.lookup(token_id)
    if token is None:
        return SignatureFinding(
            key, token_id, "token-unknown", f"no bootstrap token {token_id} is known ({tokens.description})"
        )
    if token.expired(now):
        assert token.expiration is not None
        when = (
            "its expiration is not an RFC 3339 time"
            if token.expiration == _EXPIRED
            else f"it expired at {token.expiration.isoformat()}"
        )
        return SignatureFinding(key, token_id, "token-expired", f"{token.origin}: {when}")
    if not token.signing:
        return SignatureFinding(
            key, token_id, "token-not-for-signing", f'{token.origin} does not set usage-bootstrap-signing: "true"'
        )
    signing_input = f"{header_b64}.{content_b64}".encode("ascii")
    expected = hmac.new(token.secret.encode(), signing_input, hashlib.sha256).digest()
    if not hmac.compare_digest(expected, mac):
        return SignatureFinding(
            key,
            token_id,
            "signature-invalid",
            "the MAC does not match data.kubeconfig under this token: the kubeconfig changed after signing, or another "
            "secret signed it",
        )
    return SignatureFinding(key, token_id, "verified")


def verify_signatures(
    configmap: Mapping[str, Any],
    policy: ClusterInfoPolicy,
    tokens: TokenSource,
    *,
    now: datetime,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[SignatureFinding, ...]:
    """Check every ``jws-kubeconfig-*`` key of a ConfigMap; raises only for a malformed ConfigMap.

    Token lookups may raise :class:`~provider.errors.TransientError`.
    """
    data = configmap.get("data")
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ClusterInfoInvalid(f"data is a {type(data).__name__}, not a mapping")
    kubeconfig = data.get(KUBECONFIG_KEY)
    if not isinstance(kubeconfig, str):
        raise ClusterInfoInvalid("there is no data.kubeconfig string to verify")
    try:
        content = kubeconfig.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ClusterInfoInvalid("data.kubeconfig is not valid Unicode text") from exc
    keys = sorted(k for k in data if isinstance(k, str) and k.startswith(JWS_KEY_PREFIX))
    if len(keys) > limits.max_jws_signatures:
        raise ClusterInfoInvalid(f"{len(keys)} {JWS_KEY_PREFIX}* keys; at most {limits.max_jws_signatures} are read")
    content_b64 = b64url(content)
    return tuple(
        _check_signature(k, data[k], content_b64, policy=policy, tokens=tokens, now=now, limits=limits) for k in keys
    )


def check_ca_pins(kubeconfig: str, pins: frozenset[str], limits: Limits = DEFAULT_LIMITS) -> None:
    """Every cluster in the kubeconfig must carry a CA whose SPKI hash is pinned (kubeadm's ``validateClusterCA``)."""
    docs = load_yaml_stream(kubeconfig, limits=limits, error=ClusterInfoInvalid, what="data.kubeconfig")
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ClusterInfoInvalid("data.kubeconfig is not one YAML mapping")
    clusters = docs[0].get("clusters")
    if not isinstance(clusters, list) or not clusters:
        raise VerificationFailure(
            "data.kubeconfig names no cluster whose CA could be checked against caCertHashes", reason="ca-pin-mismatch"
        )
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    for index, entry in enumerate(clusters):
        if not isinstance(entry, dict):
            raise ClusterInfoInvalid(f"clusters[{index}] in data.kubeconfig is not a mapping")
        cluster, name = entry.get("cluster"), entry.get("name")
        what = (
            f"cluster {name[:60]!r} in data.kubeconfig"
            if isinstance(name, str)
            else f"clusters[{index}] in data.kubeconfig"
        )
        data = cluster.get("certificate-authority-data") if isinstance(cluster, dict) else None
        if not isinstance(data, str) or not data:
            raise VerificationFailure(
                f"{what} carries no certificate-authority-data to check against caCertHashes", reason="ca-pin-mismatch"
            )
        if len(data) > (limits.max_certificate_bytes * 4) // 3 + 4:
            raise ClusterInfoInvalid(
                f"{what}: certificate-authority-data is larger than {limits.max_certificate_bytes} bytes"
            )
        try:
            certs = x509.load_pem_x509_certificates(base64.b64decode(data, validate=True))
        except (binascii.Error, ValueError) as exc:
            raise ClusterInfoInvalid(f"{what}: certificate-authority-data is not base64 PEM certificates") from exc
        found = [
            hashlib.sha256(
                c.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
            ).hexdigest()
            for c in certs
        ]
        if not pins.intersection(found):
            raise VerificationFailure(
                f"{what}: CA sha256:{found[0]} is not among the policy's caCertHashes", reason="ca-pin-mismatch"
            )


def evaluate_cluster_info(
    review: Review,
    policy: ClusterInfoPolicy,
    tokens: TokenSource,
    *,
    now: datetime | None = None,
    limits: Limits = DEFAULT_LIMITS,
    scoped: bool = True,
) -> Result:
    """The verdict for one review of a ConfigMap.

    ``scoped``: objects other than ``kube-public/cluster-info`` are out of
    scope (allowed) -- the admission policy matches more than it needs to.
    Unscoped (the CLI, where a person chose the file), any ConfigMap is
    verified and anything else is refused. Raises only
    :class:`~provider.errors.RequestError` and :class:`~provider.errors.TransientError`.
    """
    if review.operation in ("DELETE", "CONNECT"):
        return Result.allow("out-of-scope", f"{review.operation} requests carry no new object to verify", "policy")
    obj = review.object
    if not isinstance(obj, dict):
        raise RequestError("the review has no object to verify")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    namespace = meta.get("namespace") or review.namespace
    name = meta.get("name")
    what = f"ConfigMap {namespace}/{name}" if namespace else f"ConfigMap {name}"
    is_configmap = obj.get("kind") == "ConfigMap" and obj.get("apiVersion") == "v1"
    if scoped and not (is_configmap and namespace == CLUSTER_INFO_NAMESPACE and name == CLUSTER_INFO_NAME):
        return Result.allow(
            "out-of-scope",
            f"only ConfigMap {CLUSTER_INFO_NAMESPACE}/{CLUSTER_INFO_NAME} carries bootstrap-token signatures",
            "policy",
        )
    if not is_configmap:
        return _deny("cluster-info-invalid", f"a {str(obj.get('kind'))[:40]} is not a v1 ConfigMap")
    when = now or datetime.now(UTC)
    try:
        findings = verify_signatures(obj, policy, tokens, now=when, limits=limits)
        failed = [f for f in findings if not f.verified]
        if failed:
            listed = "; ".join(f"{f.key}: [{f.reason}] {f.detail}" for f in failed[:5])
            more = f"; and {len(failed) - 5} more" if len(failed) > 5 else ""
            return _deny(
                failed[0].reason, f"{what}: {len(failed)} of {len(findings)} signatures refused: {listed}{more}"
            )
        if not findings and policy.require_signature:
            return _deny(
                "unsigned",
                f"{what} carries no {JWS_KEY_PREFIX}<token-id> signature and the policy sets requireSignature",
            )
        if policy.ca_cert_hashes:
            check_ca_pins(str(obj["data"][KUBECONFIG_KEY]), policy.ca_cert_hashes, limits)
    except VerificationFailure as failure:
        return _deny(reason_of(failure), f"{what}: {failure.message}")
    pinned = " with a pinned CA" if policy.ca_cert_hashes else ""
    if not findings:
        return Result.allow(
            "no-signatures",
            f"{what} carries no signatures{pinned}; no joining node trusts it until the bootstrap signer signs it",
            "policy",
        )
    ids = ", ".join(f.token_id for f in findings)
    return Result.proven(
        f"{what}: data.kubeconfig{pinned} is signed by bootstrap token(s) {ids}",
        tuple({"bootstrapToken": f.token_id} for f in findings),
    )


def _deny(reason: Reason, message: str) -> Result:
    return Result.deny(reason, message)
