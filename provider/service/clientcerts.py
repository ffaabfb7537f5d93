"""Client certificates checked on every request, whatever the TLS session's history.

OpenSSL verifies a client certificate in a *full* handshake only. A resumed
session (a TLS 1.3 ticket, a TLS 1.2 session ID) restores the certificate the
session was made with, unverified, and a kept-alive connection keeps it for as
long as the connection lives: a certificate that has since expired, or whose
CA the server no longer trusts, would go on working. So every request checks
the peer certificate again (:meth:`ClientCertificates.check`):

1. the leaf's validity window against the clock;
2. a path to a self-signed CA in the *current* client-CA file (reread when
   the file changes, as the TLS context is), each link's signature verified
   and each certificate's validity window checked.

Python 3.11 shows the server only the leaf, not intermediates the client sent,
so an intermediate must be in the client-CA file for step 2 to find it.
Gatekeeper's certificate is issued directly by its self-signed CA
(open-policy-agent/cert-controller pkg/rotator/rotator.go), so its path is
the CA alone.

Results are cached by the certificate's digest and the file's state; the
clock comparison runs on every request. The names a certificate answers to
(:attr:`PeerCertificate.names`: DNS SANs, then the CN) are what
:mod:`provider.service.auth` authorizes.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.oid import NameOID

from ..cache import LRUCache

log = logging.getLogger("provider.auth")

#: Most certificates between a leaf and its self-signed root that a path may hold.
MAX_PATH = 5
#: Distinct client certificates whose path is remembered per process.
PATH_CACHE_ENTRIES = 256


@dataclass(frozen=True)
class PeerCertificate:
    """What a request's client certificate proved, as of now."""

    #: ``""`` when the certificate is usable; else ``certificate-expired``,
    #: ``certificate-not-yet-valid`` or ``certificate-untrusted``.
    problem: str
    #: The names it answers to: its DNS SANs, then its subject CN.
    names: tuple[str, ...] = ()

    @property
    def common_name(self) -> str:
        return self.names[-1] if self.names else "?"


@dataclass(frozen=True)
class _Path:
    """A checked path, and the window inside which every certificate on it is valid."""

    trusted: bool
    not_before: float
    not_after: float
    names: tuple[str, ...]


def _names(cert: x509.Certificate) -> tuple[str, ...]:
    names: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names += [str(n)[:253] for n in san.get_values_for_type(x509.DNSName)]
    except x509.ExtensionNotFound:
        pass
    common = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if common:
        names.append(str(common[0].value)[:128])
    return tuple(names)


def _window(cert: x509.Certificate) -> tuple[float, float]:
    return cert.not_valid_before_utc.timestamp(), cert.not_valid_after_utc.timestamp()


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except Exception:  # a wrong name, key type or signature: not this issuer
        return False
    return True


class ClientCertificates:
    """The client-CA file, reread when it changes, and the per-request check of a peer certificate."""

    def __init__(self, ca_file: str, clock: Callable[[], float] = time.time) -> None:
        self._file = ca_file
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp: float | None = None
        #: ``(stamp,)`` of a file that did not load (None: none failed): read again only once it changes.
        self._failed: tuple[float | None] | None = None
        self._cas: tuple[x509.Certificate, ...] = ()
        self._paths: LRUCache[_Path] = LRUCache(PATH_CACHE_ENTRIES)

    def _authorities(self) -> tuple[tuple[x509.Certificate, ...], float | None]:
        try:
            stamp: float | None = os.stat(self._file).st_mtime
        except OSError:
            stamp = self._stamp  # mid-rotation: keep what we have, as the TLS context does
        with self._lock:
            if (stamp != self._stamp or not self._cas) and (stamp,) != self._failed:
                try:
                    with open(self._file, "rb") as handle:
                        self._cas = tuple(x509.load_pem_x509_certificates(handle.read()))
                    self._stamp, self._failed = stamp, None
                    self._paths.clear()
                except (OSError, ValueError) as exc:
                    self._failed = (stamp,)
                    if not self._cas:
                        log.error(
                            "the client CA file does not load: no client certificate is accepted",
                            extra={"reason": "certificate-untrusted", "error": type(exc).__name__},
                        )
            return self._cas, self._stamp

    def _path(self, leaf: x509.Certificate, cas: tuple[x509.Certificate, ...]) -> _Path:
        not_before, not_after = _window(leaf)
        current = leaf
        for _ in range(MAX_PATH):
            issuer = next((ca for ca in cas if ca.subject == current.issuer and _issued_by(current, ca)), None)
            if issuer is None:
                break
            start, end = _window(issuer)
            not_before, not_after = max(not_before, start), min(not_after, end)
            if issuer.subject == issuer.issuer:  # a self-signed CA of the file: the path is complete
                return _Path(True, not_before, not_after, _names(leaf))
            current = issuer
        return _Path(False, not_before, not_after, _names(leaf))

    def check(self, der: bytes) -> PeerCertificate:
        """Whether the certificate (DER) is usable *now*, and the names it answers to."""
        cas, stamp = self._authorities()
        key = hashlib.sha256(der).digest() + repr(stamp).encode()
        path = self._paths.get(key)
        if path is None:
            try:
                leaf = x509.load_der_x509_certificate(der)
            except ValueError:
                return PeerCertificate("certificate-untrusted")
            path = self._path(leaf, cas)
            self._paths.put(key, path)
        if not path.trusted:
            return PeerCertificate("certificate-untrusted", path.names)
        now = self._clock()
        if now > path.not_after:
            return PeerCertificate("certificate-expired", path.names)
        if now < path.not_before:
            return PeerCertificate("certificate-not-yet-valid", path.names)
        return PeerCertificate("", path.names)
