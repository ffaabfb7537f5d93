"""Trust material for signers: a sigstore TrustedRoot, and CA roots for certificate signers.

Contract:

* :func:`load_trusted_root` turns a policy's ``trustedRoot`` value into a
  :class:`TrustRoot`: ``None`` is the public-good root shipped with this
  package (``provider/data/trusted_root.json``), a mapping is a TrustedRoot
  JSON object given inline, a string is the path of a TrustedRoot JSON file.
  Anything else, or a document that is not a usable TrustedRoot, raises
  :class:`~provider.errors.PolicyError`. Parsed roots are cached by the SHA-256
  of their canonical JSON, so a policy that arrives with every request costs
  one hash, not one parse.
* :func:`load_signer_roots` reads the PEM CA bundle of a certificate signer
  (``signers[].roots``) into the complete path material for its certificates
  -- anchors and the intermediates a path may pass -- or raises ``PolicyError``.

Paths are built from this material only. A Fulcio certificate chains through
the chain of one certificate authority of the TrustedRoot, and only an
authority whose ``validFor`` contains the logged time; a certificate signer's
certificate chains through the certificates of its ``roots``. Certificates a
signer sends after its leaf are never used: with them, a root shared by a
retired and a current authority would let the retired one's intermediate issue
again, and a corporate root would lend its trust to every CA it ever
certified (TLS issuing CAs, retired code-signing CAs, enrolment CAs).

Nothing here touches the network: the TrustedRoot is data the operator
provides (``docs/keyless.md`` says how to refresh it).

The TrustedRoot schema is sigstore's (``dev.sigstore.trustroot.v1``), parsed
with ``sigstore_models``, the model package sigstore-python itself uses. Two
leniencies, both for files that real tools write: a missing ``mediaType`` is
read as version 0.1 (older copies of sigstore/root-signing's
``targets/trusted_root.json`` carry none), and a CA's ``certChain`` is accepted
in either order (sigstore-python's embedded root lists the intermediate first,
some root-signing copies the root first): anchors are the certificates no
other certificate of the chain issued.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from ..cache import LRUCache, digest
from ..errors import PolicyError
from ..keys import PublicKey
from ..limits import DEFAULT_LIMITS, Limits
from ..parsing import check_shape, load_json

if TYPE_CHECKING:
    from cryptography.x509.verification import Store

log = logging.getLogger("provider.trust")

#: sigstore's TrustedRoot media types (protobuf-specs ``TrustedRoot.media_type``).
MEDIA_TYPES = (
    "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
    "application/vnd.dev.sigstore.trustedroot.v0.2+json",
)
#: The package data file holding the public-good root.
DEFAULT_ROOT = "trusted_root.json"
#: Parsed roots kept; a cluster rarely has more than a couple of distinct roots.
_CACHE_SIZE = 16

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Window:
    """A validity period from a TrustedRoot (``validFor``); ``end`` None means open."""

    start: datetime
    end: datetime | None = None

    def contains(self, when: datetime) -> bool:
        return self.start <= when and (self.end is None or when <= self.end)

    def describe(self) -> str:
        end = self.end.isoformat() if self.end else "open-ended"
        return f"{self.start.isoformat()} .. {end}"


@dataclass(frozen=True)
class LogKey:
    """One transparency log (Rekor) instance: the key its SETs verify with."""

    log_id: bytes
    url: str
    key: PublicKey
    window: Window


@dataclass(frozen=True)
class Authority:
    """One certificate authority (Fulcio) with its validity window from the TrustedRoot."""

    label: str
    anchors: tuple[x509.Certificate, ...]
    intermediates: tuple[x509.Certificate, ...]
    window: Window
    store: Store = field(repr=False, compare=False)


@dataclass(frozen=True)
class TrustRoot:
    """A parsed, validated TrustedRoot."""

    digest: str
    logs: tuple[LogKey, ...]
    authorities: tuple[Authority, ...]

    def log(self, log_id: bytes) -> LogKey | None:
        return next((entry for entry in self.logs if entry.log_id == log_id), None)

    def authorities_at(self, when: datetime) -> tuple[Authority, ...]:
        return tuple(ca for ca in self.authorities if ca.window.contains(when))


# --- loading ----------------------------------------------------------------------


#: Parsed roots by the digest of their canonical JSON and the limits they were checked with.
_cache: LRUCache[TrustRoot] = LRUCache(_CACHE_SIZE)


def load_trusted_root(value: Any, *, limits: Limits = DEFAULT_LIMITS) -> TrustRoot:
    """The :class:`TrustRoot` a policy's ``trustedRoot`` names (see the module docstring)."""
    if value is None:
        return _default_root()
    if isinstance(value, str):
        document = load_json(
            _read_file(value, limits), limits=limits, error=PolicyError, what=f"trustedRoot file {value[:200]}"
        )
    elif isinstance(value, dict):
        check_shape(value, limits=limits, error=PolicyError, what="trustedRoot")
        document = value
    else:
        raise PolicyError(
            f"trustedRoot: expected a TrustedRoot JSON object or the path of one, got {type(value).__name__}"
        )
    return _parse_cached(document, limits)


@lru_cache(maxsize=1)
def _default_root() -> TrustRoot:
    data = resources.files("provider").joinpath("data", DEFAULT_ROOT).read_bytes()
    return _parse_cached(load_json(data, error=PolicyError, what="the shipped trusted root"), DEFAULT_LIMITS)


def _read_file(path: str, limits: Limits) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(limits.max_trusted_root_bytes + 1)
    except OSError as exc:
        raise PolicyError(f"trustedRoot: cannot read {path[:200]}: {exc.strerror or exc}") from exc
    if len(data) > limits.max_trusted_root_bytes:
        raise PolicyError(f"trustedRoot: {path[:200]} is larger than {limits.max_trusted_root_bytes} bytes")
    return data


def _parse_cached(document: Any, limits: Limits) -> TrustRoot:
    if not isinstance(document, dict):
        raise PolicyError(f"trustedRoot: expected a JSON object, got {type(document).__name__}")
    document = dict(document)
    document.setdefault("mediaType", MEDIA_TYPES[0])
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    if len(text) > limits.max_trusted_root_bytes:
        raise PolicyError(f"trustedRoot: larger than {limits.max_trusted_root_bytes} bytes")
    text_digest = hashlib.sha256(text.encode()).hexdigest()
    key = digest(
        "trusted-root", text_digest, repr(limits)
    )  # limits bound the parse, so they are part of what was checked
    if (root := _cache.get(key)) is not None:
        return root
    root = _parse(text, text_digest, limits)
    _cache.put(key, root)
    return root


def _schema_error(exc: Any) -> PolicyError:
    # Never echo the input: a path policy may point at a file that is not meant to be shown.
    problems = [
        f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}"
        for err in exc.errors(include_url=False, include_input=False, include_context=False)[:3]
    ]
    return PolicyError(f"trustedRoot: not a valid sigstore TrustedRoot ({'; '.join(problems)})")


def _parse(text: str, digest: str, limits: Limits) -> TrustRoot:
    from pydantic import ValidationError
    from sigstore_models.trustroot.v1 import TrustedRoot as TrustedRootModel

    try:
        model = TrustedRootModel.from_json(text)
    except ValidationError as exc:
        raise _schema_error(exc) from exc
    certificates = sum(len(ca.cert_chain.certificates) for ca in model.certificate_authorities)
    if certificates > limits.max_root_certificates:
        raise PolicyError(
            f"trustedRoot: {certificates} CA certificates; at most {limits.max_root_certificates} are read"
        )
    logs = tuple(entry for entry in (_log_key(tlog, i) for i, tlog in enumerate(model.tlogs)) if entry is not None)
    authorities = tuple(_authority(ca, i) for i, ca in enumerate(model.certificate_authorities))
    if not logs:
        raise PolicyError("trustedRoot: no usable transparency log (tlogs) key; keyless signatures could never verify")
    if not authorities:
        raise PolicyError("trustedRoot: no certificate authorities; keyless signatures could never verify")
    return TrustRoot(digest, logs, authorities)


def _utc(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _window(valid_for: Any) -> Window:
    if valid_for is None:
        return Window(_EPOCH)
    return Window(_utc(valid_for.start), _utc(valid_for.end) if valid_for.end is not None else None)


def _log_key(tlog: Any, index: int) -> LogKey | None:
    where = f"trustedRoot.tlogs[{index}]"
    raw = tlog.public_key.raw_bytes
    if not raw:
        raise PolicyError(f"{where}.publicKey: rawBytes is missing")
    try:
        key = PublicKey.from_crypto(serialization.load_der_public_key(raw), name=tlog.base_url)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise PolicyError(f"{where}.publicKey: not a DER public key ({str(exc)[:80]})") from exc
    except PolicyError as exc:
        # A key type this verifier cannot use (sigstore-python skips these too): the
        # log is left out, and its entries fail as "log not in the trusted root".
        log.warning("%s (%s) skipped: %s", where, tlog.base_url, exc.message)
        return None
    if not tlog.log_id.key_id:
        raise PolicyError(f"{where}.logId: keyId is missing")
    return LogKey(tlog.log_id.key_id, tlog.base_url, key, _window(tlog.public_key.valid_for))


def _split_chain(chain: list[x509.Certificate]) -> tuple[tuple[x509.Certificate, ...], tuple[x509.Certificate, ...]]:
    """Anchors (certificates no other member issued) and intermediates, in any listed order."""
    subjects = {cert.subject for cert in chain}
    anchors = tuple(c for c in chain if c.issuer == c.subject or c.issuer not in subjects)
    return anchors, tuple(c for c in chain if c not in anchors)


def _authority(ca: Any, index: int) -> Authority:
    from cryptography.x509.verification import Store

    where = f"trustedRoot.certificateAuthorities[{index}]"
    chain = []
    for j, cert in enumerate(ca.cert_chain.certificates):
        try:
            chain.append(x509.load_der_x509_certificate(cert.raw_bytes))
        except ValueError as exc:
            raise PolicyError(f"{where}.certChain.certificates[{j}]: not a DER certificate ({str(exc)[:80]})") from exc
    if not chain:
        raise PolicyError(f"{where}.certChain: no certificates")
    anchors, intermediates = _split_chain(chain)
    label = ca.uri or chain[0].subject.rfc4514_string()
    return Authority(label, anchors, intermediates, _window(ca.valid_for), Store(list(anchors)))


# --- certificate signers ----------------------------------------------------------


@dataclass(frozen=True)
class SignerRoots:
    """A certificate signer's path material: the anchors, and the intermediates a path may pass."""

    anchors: tuple[x509.Certificate, ...]
    intermediates: tuple[x509.Certificate, ...]
    store: Store = field(repr=False, compare=False)


@lru_cache(maxsize=64)
def load_signer_roots(pem: str, limits: Limits = DEFAULT_LIMITS) -> SignerRoots:
    """Path material from a PEM bundle of CA certificates (``signers[].roots``).

    Split as a TrustedRoot's ``certChain`` is: the certificates no other listed
    certificate issued are the anchors, the rest are intermediates, checked on
    every path through them (validity, constraints, their issuer's signature).
    ``[root, issuing CA]`` trusts what that issuing CA issues under that root;
    ``[issuing CA]`` alone trusts it as an anchor; ``[root]`` alone trusts only
    certificates the root issued itself.
    """
    from cryptography.x509.verification import Store

    if "-----BEGIN" not in pem:
        raise PolicyError("signers[].roots: no PEM certificate found")
    if pem.count("-----BEGIN") > limits.max_root_certificates:
        raise PolicyError(f"signers[].roots: more than {limits.max_root_certificates} certificates")
    try:
        listed = x509.load_pem_x509_certificates(pem.encode())
    except ValueError as exc:
        raise PolicyError(f"signers[].roots: not a PEM bundle of CA certificates ({str(exc)[:80]})") from exc
    for cert in listed:
        try:
            is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            is_ca = False
        if not is_ca:
            raise PolicyError(
                f"signers[].roots: {cert.subject.rfc4514_string()[:80]} is not a CA certificate (basicConstraints "
                "CA:TRUE); "
                "list the CA that issues the signing certificates, not a signing certificate"
            )
    anchors, intermediates = _split_chain(listed)
    return SignerRoots(anchors, intermediates, Store(list(anchors)))
