"""Trust material for signers: a sigstore TrustedRoot, and CA roots for certificate signers.

Contract:

* :func:`load_trusted_root` turns a policy's ``trustedRoot`` value into a
  :class:`TrustRoot`: ``None`` is the public-good root shipped with this
  package (``provider/data/trusted_root.json``), a mapping is a TrustedRoot
  JSON object given inline, a string is the path of a TrustedRoot JSON file
  -- one the operator allows (:class:`~provider.bounds.Bounds`
  ``trusted_root_files``), read by :func:`read_root_file`. Anything else, or a
  document that is not a usable TrustedRoot, raises
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
provides, or the service's background TUF refresh installs as the default
(:func:`set_default_root`; :mod:`provider.service.trustroot`).

A path comes from the policy, and the policy's author is not always the
operator (``docs/security.md``, "Threat model"), so:

* a path the operator did not allow is refused by comparing strings, before
  the disk is touched, with one message for every path -- a readable file,
  a missing one, a directory and a FIFO all read alike;
* an allowed path is read only if it is a regular file (``stat`` before
  ``open``, so a FIFO, a device, a socket, a directory or a
  ``/proc/self/fd/N`` naming a pipe is never opened), opened with
  ``O_NONBLOCK`` (a file that only looks regular, such as ``/proc/kmsg``,
  answers at once instead of waiting), checked again on the open descriptor
  (the same inode: nothing swapped in between), read in chunks up to
  ``Limits.max_trusted_root_bytes`` and only until the request's deadline;
* under the service's bounds, what went wrong with an allowed file (missing,
  not regular, not JSON, which key, which line) goes to the service's log, and
  the policy gets one message: the file's name is the operator's, its state is
  not the policy author's to learn.

Symbolic links are followed: the operator named the path, and Kubernetes
mounts ConfigMap and Secret keys as links (kubelet's atomic writer, ``..data``).

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
import os
import stat
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from ..bounds import SERVICE, Bounds
from ..cache import LRUCache, digest
from ..errors import PolicyError, TransientError
from ..keys.pem import PublicKey
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


def load_trusted_root(
    value: Any, *, limits: Limits = DEFAULT_LIMITS, bounds: Bounds = SERVICE, deadline: float | None = None
) -> TrustRoot:
    """The :class:`TrustRoot` a policy's ``trustedRoot`` names (see the module docstring).

    ``deadline`` (a :func:`time.monotonic` instant) bounds reading a file: past it,
    :class:`~provider.errors.TransientError` ``deadline-exceeded``.
    """
    if value is None:
        return default_root()
    if isinstance(value, str):
        return _root_from_file(value, limits, bounds, deadline)
    if isinstance(value, dict):
        check_shape(value, limits=limits, error=PolicyError, what="trustedRoot")
        return _parse_cached(value, limits)
    raise PolicyError(f"trustedRoot: expected a TrustedRoot JSON object or the path of one, got {type(value).__name__}")


def _root_from_file(path: str, limits: Limits, bounds: Bounds, deadline: float | None) -> TrustRoot:
    shown = path[:200]
    if not bounds.allows_trusted_root_file(path):
        # Decided on the string alone: the disk is not touched, so the answer is the same for every path.
        raise PolicyError(
            f"trustedRoot: {shown!r} is not a trust-root file the operator allows; a policy may name only the "
            "files listed in MANIFEST_PROVIDER_TRUSTED_ROOT_FILES (none by default): give the TrustedRoot inline, "
            "or leave trustedRoot out for the shipped public-good root"
        )
    try:
        document = load_json(
            read_root_file(path, limits, deadline), limits=limits, error=PolicyError, what=f"trustedRoot file {shown}"
        )
        return _parse_cached(document, limits)
    except PolicyError as exc:
        if bounds.trusted_root_files is None:  # the person running this named the file: tell them everything
            raise
        log.warning("the trust-root file %s is not usable: %s", shown, exc.message)
        raise PolicyError(
            f"trustedRoot: the trust-root file {shown!r} could not be used; the service's log says why"
        ) from None


#: The default root a background TUF refresh installed (provider/service/trustroot.py); empty: the shipped one.
_refreshed: list[TrustRoot] = []


def set_default_root(root: TrustRoot | None) -> None:
    """Replace the default TrustedRoot (a policy without ``trustedRoot`` gets it); None: the shipped one again."""
    _refreshed[:] = [root] if root is not None else []


def default_root() -> TrustRoot:
    """The TrustedRoot a policy without ``trustedRoot`` gets: the last refreshed one, else the shipped one."""
    found = _refreshed[:1]
    return found[0] if found else _default_root()


def current_default_digest() -> str:
    """Which default is in use: the refreshed root's digest, or ``""`` for the shipped one (cheap: no parse)."""
    found = _refreshed[:1]
    return found[0].digest if found else ""


@lru_cache(maxsize=1)
def _default_root() -> TrustRoot:
    data = resources.files("provider").joinpath("data", DEFAULT_ROOT).read_bytes()
    return _parse_cached(load_json(data, error=PolicyError, what="the shipped trusted root"), DEFAULT_LIMITS)


#: Bytes read from a trust-root file at a time; the deadline is checked between reads.
_CHUNK = 64 * 1024


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def read_root_file(path: str, limits: Limits = DEFAULT_LIMITS, deadline: float | None = None) -> bytes:
    """The bytes of a trust-root file: a regular file only, never blocking, at most the limit (module docstring)."""
    shown = path[:200]
    limit = limits.max_trusted_root_bytes
    if not path or "\x00" in path:
        raise PolicyError("trustedRoot: not a file path")
    try:
        before = os.stat(path)
    except OSError as exc:
        raise PolicyError(f"trustedRoot: cannot read {shown}: {exc.strerror or type(exc).__name__}") from None
    if not stat.S_ISREG(before.st_mode):
        # Never opened: opening a FIFO waits for a writer, a device may do anything on open.
        raise PolicyError(f"trustedRoot: {shown} is {_file_kind(before.st_mode)}, not a regular file")
    if before.st_size > limit:
        raise PolicyError(f"trustedRoot: {shown} is larger than {limit} bytes")
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise PolicyError(f"trustedRoot: cannot read {shown}: {exc.strerror or type(exc).__name__}") from None
    try:
        opened = os.fstat(descriptor)
        if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino):
            raise PolicyError(f"trustedRoot: {shown} changed while it was opened")
        chunks: list[bytes] = []
        total = 0
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                raise TransientError(
                    f"the request's deadline passed while the trust-root file {shown} was read",
                    reason="deadline-exceeded",
                )
            try:
                chunk = os.read(descriptor, _CHUNK)
            except OSError as exc:  # EAGAIN from a file that only looks regular (/proc/kmsg), EIO, ...
                raise PolicyError(f"trustedRoot: cannot read {shown}: {exc.strerror or type(exc).__name__}") from None
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > limit:
                raise PolicyError(f"trustedRoot: {shown} is larger than {limit} bytes")
            chunks.append(chunk)
    finally:
        os.close(descriptor)


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
