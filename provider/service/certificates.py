"""Certificate health: the serving certificate and the client CA bundle, checked at start and on every reload.

An expired serving certificate does not stop a TLS server: it keeps
accepting connections, and every client that verifies dates -- Gatekeeper's
and Kyverno's Go clients, the API server -- refuses the handshake. With
enforcing policies every matched write is then denied, and the only clue is a
per-handshake log line. This module turns the dates into facts the service
acts on (:mod:`provider.service.serve` at start and on each reload of the
files, :mod:`provider.service.routes` for ``/readyz``, :mod:`provider.service.metrics`
for the expiry gauge):

* **Refused** (:class:`~provider.errors.ConfigError`, exit 2 at start; at a
  reload the previous files are kept and an error is logged): a serving
  certificate (the first in its file) that has expired, and a client CA bundle
  in which every certificate has expired -- it can never verify a caller again.
  Neither gets better by waiting. (A certificate and key that do not belong
  together are refused by :func:`provider.service.serve.tls_context` already.)
* **Warned** in the log: any certificate of the two files that expires within
  the margin (``MANIFEST_PROVIDER_CERT_EXPIRY_WARNING_DAYS``), one that has
  already expired beside valid ones (an old CA left in a bundle, an extra
  certificate in the chain -- clients may well ignore it: Let's Encrypt's
  expired cross-signed root sat in chains for months in 2021), and a serving
  certificate that is not valid yet (clients refuse it until then; it is served
  all the same, because refusing a rotation issued a second ahead of this node's
  clock would keep an older certificate until the next rotation).
* **Not ready** (``/readyz`` 503): while the served certificate is outside its
  validity period. The server keeps serving, so the probe and the log say why
  the pod left the Service's endpoints.

Dates are compared in UTC; messages print them as ``2026-01-31T12:00:00Z``.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509

from ..errors import ConfigError

#: Certificates read from one file. A CA bundle or chain of more is refused: bundles hold a handful
#: (Gatekeeper's one CA, two during a rotation), and the expiry gauge has one series per certificate.
MAX_CERTIFICATES_PER_FILE = 16
#: Bytes read from one certificate file (a certificate in PEM is 1-3 KiB).
MAX_FILE_BYTES = 1 << 20
#: Characters of a subject kept in a metric label or a log line.
MAX_SUBJECT_CHARS = 128

SERVING, CLIENT_CA = "certificate", "client CA"


def stamp(when: datetime.datetime) -> str:
    """``2026-01-31T12:00:00Z``."""
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class CertificateFacts:
    """One certificate of a file: where it is, whose it is, when it is valid."""

    path: str
    index: int
    subject: str
    not_before: datetime.datetime
    not_after: datetime.datetime

    def valid_at(self, now: datetime.datetime) -> bool:
        return self.not_before <= now <= self.not_after


def read_certificates(path: str) -> list[CertificateFacts]:
    """The certificates of a PEM file, in order; :class:`ConfigError` naming the file when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"TLS: cannot read {path} ({exc.strerror or exc})") from exc
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"TLS: {path} is larger than {MAX_FILE_BYTES} bytes; expected a few PEM certificates")
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise ConfigError(f"TLS: {path} holds no usable PEM certificate") from exc
    if len(certificates) > MAX_CERTIFICATES_PER_FILE:
        raise ConfigError(
            f"TLS: {path} holds {len(certificates)} certificates; at most {MAX_CERTIFICATES_PER_FILE} "
            "(a serving chain or the callers' CA, not a system trust store)"
        )
    return [
        CertificateFacts(
            path,
            index,
            cert.subject.rfc4514_string()[:MAX_SUBJECT_CHARS],
            cert.not_valid_before_utc,
            cert.not_valid_after_utc,
        )
        for index, cert in enumerate(certificates)
    ]


@dataclass(frozen=True)
class Inspection:
    """What the TLS files hold, and what is wrong with them at ``now``."""

    #: The serving chain, the served certificate first.
    serving: tuple[CertificateFacts, ...]
    #: The client CA bundle (empty without one).
    client_ca: tuple[CertificateFacts, ...]
    #: Reasons to refuse the files (one line each); empty when they may be served.
    fatal: tuple[str, ...]
    #: Reasons to warn (one line each).
    warnings: tuple[str, ...]

    @property
    def leaf(self) -> CertificateFacts:
        return self.serving[0]

    def raise_if_fatal(self) -> None:
        if self.fatal:
            raise ConfigError(self.fatal[0])


def _left(until: datetime.datetime, now: datetime.datetime) -> str:
    days = (until - now).total_seconds() / 86400
    return f"{days:.1f} days" if days >= 1 else f"{(until - now).total_seconds() / 3600:.1f} hours"


def inspect(cert: str, client_ca: str | None, now: datetime.datetime, margin_days: float) -> Inspection:
    """Read the serving chain and the client CA bundle and judge their dates at ``now``.

    ``margin_days``: warn about any certificate that expires within it.
    """
    serving = tuple(read_certificates(cert))
    cas = tuple(read_certificates(client_ca)) if client_ca else ()
    fatal: list[str] = []
    warnings: list[str] = []
    margin = datetime.timedelta(days=margin_days)
    leaf = serving[0]
    if leaf.not_after < now:
        fatal.append(
            f"TLS: the certificate {cert} expired on {stamp(leaf.not_after)}; every caller refuses it: "
            "give a current one"
        )
    elif leaf.not_before > now:
        warnings.append(
            f"TLS: the certificate {cert} is not valid before {stamp(leaf.not_before)}; callers refuse it "
            "until then and /readyz answers 503"
        )
    ca_expired = bool(cas) and all(ca.not_after < now for ca in cas)
    if ca_expired:
        last = max(ca.not_after for ca in cas)
        fatal.append(
            f"TLS: the client CA {client_ca} expired on {stamp(last)}; no caller's certificate can be verified: "
            "give the callers' current CA"
        )
    for what, facts in ((SERVING, serving), (CLIENT_CA, cas)):
        for fact in facts:
            if (fact is leaf and leaf.not_after < now) or (what == CLIENT_CA and ca_expired):
                continue  # already fatal
            where = f"the {what} {fact.path}" + (f" (certificate {fact.index}, {fact.subject})" if fact.index else "")
            if fact.not_after < now:
                warnings.append(f"TLS: {where} expired on {stamp(fact.not_after)}")
            elif fact.not_after - now < margin:
                warnings.append(
                    f"TLS: {where} expires on {stamp(fact.not_after)}, in {_left(fact.not_after, now)}: renew it "
                    f"(warned {margin_days:g} days ahead)"
                )
    return Inspection(serving, cas, tuple(fatal), tuple(warnings))


def readiness_problem(leaf: CertificateFacts, now: datetime.datetime) -> tuple[str, str] | None:
    """``(reason, message)`` when the served certificate is outside its validity period at ``now``, else ``None``."""
    if leaf.not_after < now:
        return "certificate-expired", f"the serving certificate {leaf.path} expired on {stamp(leaf.not_after)}"
    if leaf.not_before > now:
        return (
            "certificate-not-yet-valid",
            f"the serving certificate {leaf.path} is not valid before {stamp(leaf.not_before)}",
        )
    return None


#: The ``role`` label of the expiry gauge: which setting a file is.
ROLES = ("serving", "client-ca")


def expiry_series(files: Sequence[tuple[str, str]]) -> list[tuple[str, str, str, str, float]]:
    """``(file, role, index, subject, not_after as Unix seconds)`` for every certificate of ``files``, read now.

    ``files``: ``(role, path)`` pairs. For the expiry gauge, read at each scrape:
    what the files hold, whichever process scrapes. A file that cannot be read has
    no series (its reload fails and is logged; an alert on a missing series is
    ``absent()``'s job).
    """
    series = []
    for role, path in files:
        try:
            facts = read_certificates(path)
        except ConfigError:
            continue
        series += [(f.path, role, str(f.index), f.subject, f.not_after.timestamp()) for f in facts]
    return series
