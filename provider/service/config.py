"""The service's configuration: one frozen dataclass, read from the environment.

Every setting has a documented default and an environment variable
``MANIFEST_PROVIDER_<NAME>`` (``MANIFEST_PROVIDER_DEADLINE_SECONDS=1.5``).
:func:`load_config` merges, in order of precedence: a mapping given in code
(``create_app({"DEADLINE_SECONDS": 1})``, the CLI's flags), the environment,
the defaults. A value that does not parse, or a mapping key nobody knows, is a
:class:`ConfigError` -- a typo must not silently fall back to a default.

Lists (``CALLERS``) are comma-separated in the environment and on the command
line; an empty element (a trailing comma) is an error, never "anything".

Objects that cannot come from the environment are given in the mapping only:
``DRY_RUNNER`` (a :class:`provider.verifier.DryRunner`), ``KUBE_CLIENT``,
``TOKEN_REVIEWER`` (a :class:`provider.service.auth.TokenReviewer`) and ``NOW`` (a fixed
clock for tests). When ``DRY_RUNNER``/``KUBE_CLIENT`` are absent the service
builds them from ``KUBECONFIG`` or, inside a pod, from the in-cluster
configuration (see :mod:`provider.service.cluster`).

This module also sets up logging: JSON lines on standard error, one object per
line, so that a log pipeline never has to parse prose.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from ..bounds import Bounds
from ..errors import ConfigError
from ..limits import DEFAULT_LIMITS, Limits
from ..objects import DNS_LABEL
from ..signatures.sources import parse_repository_prefix

ENV_PREFIX = "MANIFEST_PROVIDER_"

#: Gatekeeper's webhook certificate, which it presents as its client certificate: cert-controller
#: names it ``<--cert-service-name>.<namespace>.svc`` in the CN and the DNS SAN
#: (open-policy-agent/gatekeeper main.go ``DNSName``; open-policy-agent/cert-controller
#: pkg/rotator/rotator.go ``CreateCertPEM``), with the defaults ``gatekeeper-webhook-service``
#: and ``gatekeeper-system``.
GATEKEEPER_CALLER = "cert:gatekeeper-webhook-service.gatekeeper-system.svc"
#: Kyverno's admission controller (the Helm chart's service account ``kyverno-admission-controller``
#: in namespace ``kyverno``): the only Kyverno component that calls at admission time.
KYVERNO_CALLER = "token:system:serviceaccount:kyverno:kyverno-admission-controller"

LOG_LEVELS = ("debug", "info", "warning", "error")


def _cpus() -> int:
    return os.cpu_count() or 1


@dataclass(frozen=True)
class Config:
    # -- decisions --
    #: Seconds one request may take before it is answered with a ``systemError``.
    #: The binding limit is Gatekeeper's Provider ``timeout`` (2 s in
    #: manifests/overlays/gatekeeper/provider.yaml, under its 3 s webhook
    #: timeout): 1.5 s leaves 0.5 s for the connection, TLS and Gatekeeper
    #: reading the answer, so a slow verification ends with this service's
    #: reason rather than Gatekeeper's "context deadline exceeded"
    #: (tests/unit/test_deadlines.py holds the order).
    deadline_seconds: float = 1.5
    #: Bytes of one request body (HTTP 413 beyond).
    max_body_bytes: int = DEFAULT_LIMITS.max_body_bytes
    #: Keys in one Gatekeeper ProviderRequest (a ``systemError`` beyond).
    max_keys: int = DEFAULT_LIMITS.max_keys_per_request
    #: Threads per worker process that verify the keys of a request concurrently.
    verify_threads: int = 4
    #: Verdicts kept per worker process (LRU); 0 disables the cache.
    cache_entries: int = 4096
    #: Seconds a cached verdict is reused. Gatekeeper audits every 60 s and caches
    #: answers itself for 3 min; 10 min bounds how stale a time-dependent verdict
    #: (a certificate's validity) can be.
    cache_ttl_seconds: float = 600.0
    #: Compiled policies kept per worker process (LRU, keyed by canonical JSON).
    policy_cache_entries: int = 256
    # -- what a policy may make the service read or reach (provider/bounds.py) --
    #: Trust-root files a policy's ``trustedRoot`` may name, as absolute paths compared exactly.
    #: Default none: inline TrustedRoots and the shipped public-good root only.
    trusted_root_files: tuple[str, ...] = ()
    #: Namespaces any policy's ``signatureResourceRef`` may read, besides the admitted object's own.
    signature_namespaces: tuple[str, ...] = ()
    #: Whether ``signatureResourceRef`` may read the admitted object's own namespace. A Kyverno body is
    #: its policy's template, so its author writes the namespace too (docs/security.md, "Threat model").
    signature_own_namespace: bool = True
    #: Namespaces any policy's ``dryRun.namespace`` may name besides the admitted object's own (a dedicated
    #: dry-run namespace, docs/dryrun.md "Which namespace").
    dry_run_namespaces: tuple[str, ...] = ()
    #: Registries or repositories (``registry[/path]``) bundles may come from; every entry of a policy's
    #: ``resourceBundleRef.repositories`` must lie under one. Default none: no bundle is fetched.
    bundle_repositories: tuple[str, ...] = ()
    #: Namespaces whose Secrets a policy may name as keys (``k8s://NS/NAME``, ``secretRef``, ``keys.secret``).
    #: Default none, and never implicitly the admitted object's own: a key must sit where the people whose
    #: objects it verifies cannot write it (docs/security.md, "Threat model"). The service account also
    #: needs ``get`` on each Secret by name (RBAC ``resourceNames``).
    key_secret_namespaces: tuple[str, ...] = ()
    #: Seconds a key read from a Secret is used before the Secret is read again (provider/kube/keysecrets.py);
    #: 0 reads it for every verification.
    key_secret_ttl_seconds: float = 30.0
    #: Namespaces whose ``kubernetes.io/dockerconfigjson`` Secrets a policy may name as registry credentials
    #: (``resourceBundleRef.pullSecrets``). Default none: they are credentials.
    pull_secret_namespaces: tuple[str, ...] = ()
    #: A Docker config file (``{"auths": {...}}``, e.g. a mounted pull Secret's ``.dockerconfigjson``) whose
    #: credentials bundle fetches use, each only for the registry it names; reread when it changes.
    registry_auth_file: str | None = None
    #: Hosts (``host[:port]``, 443 without a port) a registry may send a bundle fetch to by a redirect or
    #: a token realm, besides itself (Docker Hub: ``auth.docker.io,production.cloudflare.docker.com``).
    registry_hosts: tuple[str, ...] = ()
    # -- the keyless trust root kept current (provider/service/trustroot.py) --
    #: TUF repository the default TrustedRoot is refreshed from, in the background; empty: the shipped root only.
    tuf_url: str = "https://tuf-repo-cdn.sigstore.dev"
    #: The pinned root of trust: a TUF ``root.json`` file; unset: the public-good root.json sigstore-python ships.
    tuf_root: str | None = None
    #: Seconds between refreshes (a failed one is tried again after 5 minutes).
    tuf_refresh_seconds: float = 3600.0
    #: Where the TUF client keeps the metadata it trusts (rollback protection); unset: a temporary directory.
    tuf_cache_dir: str | None = None
    # -- the policies the service holds (the admission route, provider/policystore) --
    #: Watch ``ClusterManifestPolicy`` and ``ManifestPolicy`` objects (their CRDs installed), and Namespaces
    #: for their labels; needs a cluster.
    watch_policies: bool = False
    #: A file, or a directory (a mounted ConfigMap), of such objects instead: no CRDs needed.
    policy_file: str | None = None
    #: Seconds between two looks at ``policy_file`` for a change.
    policy_file_poll_seconds: float = 5.0
    # -- the cluster --
    #: kubeconfig for dry-runs and Secret reads; unset: in-cluster config inside a pod, else no cluster.
    kubeconfig: str | None = None
    #: Where the pod's service-account ``token``, ``ca.crt`` and ``namespace`` are, when no kubeconfig
    #: is given (a projected token mounted elsewhere); unset: /var/run/secrets/kubernetes.io/serviceaccount.
    service_account_dir: str | None = None
    #: Seconds one dry-run (discovery, create, one retry) may take; must stay under
    #: ``deadline_seconds`` so a slow API server is ``dry-run-failed``, not a passed
    #: deadline. Unset: 1.5 s, or 60% of the deadline when that is shorter.
    dry_run_timeout_seconds: float | None = None
    # -- authentication --
    #: PEM CA bundle: API routes then require a client certificate it issued
    #: (Gatekeeper's CA: ``ca.crt`` of Secret ``gatekeeper-webhook-server-cert``).
    client_ca: str | None = None
    #: When set, a bearer token whose TokenReview succeeds for this audience also
    #: authenticates (Kyverno >= 1.17.2 sends one for ``kyverno-svc.kyverno.io``).
    token_audience: str | None = None
    #: Upper bound on how long an accepted token is trusted without asking again
    #: (never longer than the token's own ``exp``).
    token_cache_seconds: float = 300.0
    #: TokenReviews one worker process may start per second (twice as many in a burst);
    #: past it a token that is not cached gets 503 ``token-review-rate-limited``.
    token_reviews_per_second: float = 5.0
    #: Who may call the verify routes once authenticated (:mod:`provider.service.auth`):
    #: ``cert:<name>`` (a client certificate whose DNS SAN or CN is the name) or
    #: ``token:<username>`` (a TokenReview's user; a service account's groups must agree).
    #: The default is exactly what the shipped deployments need.
    callers: tuple[str, ...] = (GATEKEEPER_CALLER, KYVERNO_CALLER)
    #: Who may read ``/metrics`` on the API port, in the same form; unset: the callers above.
    metrics_callers: tuple[str, ...] | None = None
    # -- the metrics port (provider.service.scrape) --
    #: Plain-HTTP port serving ``GET /metrics`` without credentials (Gatekeeper's and ratify's
    #: metrics port is 8888 too); 0 turns it off. Who may reach it is the NetworkPolicy's choice.
    metrics_port: int = 8888
    #: Address the metrics port listens on (``fd://N``: an inherited, listening socket). Unset: where
    #: the API listens (its ``bind``, an inherited API socket's address, 127.0.0.1 beside a unix
    #: socket), so an API kept on loopback keeps its unauthenticated metrics there too; in a pod
    #: the API's 0.0.0.0, the pod's address Prometheus scrapes.
    metrics_bind: str | None = None
    # -- serving (the gunicorn launcher) --
    bind: str = "0.0.0.0"  # noqa: S104 - a pod serves its Service on every interface; TLS and mTLS guard it
    port: int = 8443
    cert: str | None = None
    key: str | None = None
    #: gunicorn worker processes (default: one per CPU).
    workers: int = field(default_factory=_cpus)
    #: Requests each worker serves at once (gthread worker threads). Connections
    #: that have not sent a complete request head hold no thread (:mod:`provider.service.worker`).
    threads: int = 8
    #: Seconds from accepting a connection (or from the first byte of a kept-alive
    #: connection's next request) to a complete request head, TLS handshake included.
    head_timeout_seconds: float = 5.0
    #: Connections one worker process holds at once (gunicorn's ``worker_connections``).
    #: When full, the oldest connection without a verified client certificate that
    #: is not being served is closed to make room.
    max_connections: int = 1000
    #: Seconds an idle kept-alive connection stays open. Gatekeeper and Kyverno
    #: reuse connections; a TLS handshake costs more than a verification.
    keepalive_seconds: float = 30.0
    #: Plain HTTP, for local experiments only: warns on every request.
    unsafe_http: bool = False
    log_level: str = "info"
    # -- certificate health (provider.service.certificates) --
    #: Days before a certificate of ``cert`` or ``client_ca`` expires that the log warns, at
    #: start and on every reload. 14: cert-manager renews a 90-day certificate 30 days ahead,
    #: so a certificate with 14 days left has missed its renewal by two weeks -- late enough
    #: not to warn in normal operation, early enough to act (a holiday fits in it). Lower it
    #: for certificates that live less than two weeks. The shipped alert uses the same 14 days.
    cert_expiry_warning_days: float = 14.0
    # -- objects, given in code only --
    dry_runner: Any = field(default=None, compare=False, repr=False)
    kube_client: Any = field(default=None, compare=False, repr=False)
    token_reviewer: Any = field(default=None, compare=False, repr=False)
    now: datetime | None = field(default=None, compare=False)
    limits: Limits = field(default=DEFAULT_LIMITS, compare=False, repr=False)
    #: The launcher's rotating TLS context: which certificate this process presents (``/readyz``).
    serving_certificates: Any = field(default=None, compare=False, repr=False)

    @property
    def effective_limits(self) -> Limits:
        """The verifier's limits with the service's body and key limits applied."""
        return dataclasses.replace(
            self.limits,
            max_body_bytes=self.max_body_bytes,
            max_keys_per_request=self.max_keys,
            dry_run_timeout=self.dry_run_timeout,
        )

    @property
    def bounds(self) -> Bounds:
        """What any policy may make the service read or reach (:mod:`provider.bounds`)."""
        return Bounds(
            trusted_root_files=self.trusted_root_files,
            signature_namespaces=self.signature_namespaces,
            own_namespace_signatures=self.signature_own_namespace,
            bundle_repositories=self.bundle_repositories,
            dry_run_namespaces=self.dry_run_namespaces,
            key_secret_namespaces=self.key_secret_namespaces,
            pull_secret_namespaces=self.pull_secret_namespaces,
        )

    @property
    def dry_run_timeout(self) -> float:
        if self.dry_run_timeout_seconds is not None:
            return self.dry_run_timeout_seconds
        return min(DEFAULT_LIMITS.dry_run_timeout, 0.6 * self.deadline_seconds)


#: Settings that are objects: given in the mapping, never read from the environment.
_OBJECTS = frozenset({"dry_runner", "kube_client", "token_reviewer", "now", "limits", "serving_certificates"})
_FIELDS = {f.name: f for f in dataclasses.fields(Config)}


def env_name(name: str) -> str:
    """``deadline_seconds`` -> ``MANIFEST_PROVIDER_DEADLINE_SECONDS``."""
    return ENV_PREFIX + name.upper()


_KINDS: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "float | None": (int, float),
    "bool": (bool,),
    "str": (str,),
    "str | None": (str,),
    "tuple[str, ...]": (tuple, list),
    "tuple[str, ...] | None": (tuple, list),
}
_LISTS = ("tuple[str, ...]", "tuple[str, ...] | None")


def _parse_list(where: str, items: Any) -> tuple[str, ...]:
    """A list setting: every element a non-empty string without surrounding blanks."""
    values = tuple(items)
    for value in values:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected text elements, got {type(value).__name__}")
        if not value.strip():
            raise ConfigError(
                f"{where}: an empty element (a stray comma?) would match nothing or everything; remove it"
            )
    return tuple(v.strip() for v in values)


def _parse(name: str, value: Any, kind: str) -> Any:
    """A setting's value from text (the environment, a flag) or from code (checked for its type)."""
    where = env_name(name)
    if kind in _LISTS:
        if isinstance(value, str):
            if kind.endswith("None") and not value.strip():
                return None
            return _parse_list(where, value.split(","))
        if not isinstance(value, _KINDS[kind]):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__}")
        return _parse_list(where, value)
    if not isinstance(value, str):
        allowed = _KINDS[kind]
        if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
            raise ConfigError(f"{where}: expected {kind}, got {type(value).__name__}")
        return float(cast(float, value)) if kind.startswith("float") else value
    text = value.strip()
    if kind == "str | None":
        return text or None
    if kind == "float | None" and not text:
        return None
    if kind == "str":
        return text
    if kind == "bool":
        lowered = text.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off", ""):
            return False
        raise ConfigError(f"{where}: expected true or false, got {text[:40]!r}")
    try:
        return int(text) if kind == "int" else float(text)  # "float" and "float | None"
    except ValueError as exc:
        raise ConfigError(
            f"{where}: expected a {'whole number' if kind == 'int' else 'number'}, got {text[:40]!r}"
        ) from exc


def _check(config: Config) -> Config:
    def positive(name: str) -> None:
        if not getattr(config, name) > 0:
            raise ConfigError(f"{env_name(name)}: must be greater than 0, got {getattr(config, name)}")

    for name in (
        "deadline_seconds",
        "max_body_bytes",
        "max_keys",
        "verify_threads",
        "workers",
        "threads",
        "keepalive_seconds",
        "token_cache_seconds",
        "policy_cache_entries",
        "token_reviews_per_second",
        "head_timeout_seconds",
        "max_connections",
        "tuf_refresh_seconds",
    ):
        positive(name)
    if config.max_connections <= config.threads:
        raise ConfigError(
            f"{env_name('max_connections')} ({config.max_connections}) must exceed {env_name('threads')} "
            f"({config.threads})"
        )
    from .auth import parse_callers  # the caller syntax lives with the rule that reads it

    for name in ("callers", "metrics_callers"):
        value = getattr(config, name)
        if value is not None:
            try:
                parse_callers(value)
            except ValueError as exc:
                raise ConfigError(f"{env_name(name)}: {exc}") from exc
    if not config.dry_run_timeout > 0:
        raise ConfigError(
            f"{env_name('dry_run_timeout_seconds')}: must be greater than 0, got {config.dry_run_timeout}"
        )
    if config.dry_run_timeout >= config.deadline_seconds:
        raise ConfigError(
            f"{env_name('dry_run_timeout_seconds')} ({config.dry_run_timeout_seconds}) must be under "
            f"{env_name('deadline_seconds')} ({config.deadline_seconds}), or a slow API server passes the deadline"
        )
    if config.cache_entries < 0:
        raise ConfigError(f"{env_name('cache_entries')}: must be 0 (off) or more")
    if config.cache_ttl_seconds < 0:
        raise ConfigError(f"{env_name('cache_ttl_seconds')}: must be 0 or more")
    if config.key_secret_ttl_seconds < 0:
        raise ConfigError(f"{env_name('key_secret_ttl_seconds')}: must be 0 (read every time) or more")
    if config.cert_expiry_warning_days < 0:
        raise ConfigError(f"{env_name('cert_expiry_warning_days')}: must be 0 (no warning) or more")
    for name in ("port", "metrics_port"):
        if not 0 <= getattr(config, name) <= 65535:
            raise ConfigError(f"{env_name(name)}: {getattr(config, name)} is not a TCP port")
    metrics_bind = config.metrics_bind or config.bind
    if metrics_bind.startswith("fd://") and not metrics_bind[len("fd://") :].isdigit():
        raise ConfigError(f"{env_name('metrics_bind')}: fd://<number>, got {metrics_bind[:40]!r}")
    if (config.metrics_port, metrics_bind) == (config.port, config.bind) and not config.bind.startswith("fd://"):
        raise ConfigError(
            f"{env_name('metrics_port')} ({config.metrics_port}) is the API's port: give it one of its own, "
            "or 0 for none"
        )
    if config.watch_policies and config.policy_file:
        raise ConfigError(
            f"{env_name('watch_policies')} and {env_name('policy_file')}: choose one source of held policies"
        )
    if config.policy_file is not None and not os.path.isabs(config.policy_file):
        raise ConfigError(f"{env_name('policy_file')}: {config.policy_file[:80]!r} is not an absolute path")
    if not config.policy_file_poll_seconds > 0:
        raise ConfigError(f"{env_name('policy_file_poll_seconds')}: must be greater than 0")
    if config.log_level not in LOG_LEVELS:
        raise ConfigError(f"{env_name('log_level')}: {config.log_level[:20]!r} is not one of {', '.join(LOG_LEVELS)}")
    if config.token_audience is not None and not config.token_audience:
        raise ConfigError(f"{env_name('token_audience')}: must not be empty")
    return _check_bounds(config)


def _check_bounds(config: Config) -> Config:
    """The policy bounds, checked and normalised: a typo must not widen them, nor fail on the first request."""
    if config.registry_auth_file is not None and (
        not os.path.isabs(config.registry_auth_file) or "\x00" in config.registry_auth_file
    ):
        raise ConfigError(
            f"{env_name('registry_auth_file')}: {config.registry_auth_file[:80]!r} is not an absolute path"
        )
    where = env_name("trusted_root_files")
    for path in config.trusted_root_files:
        if not os.path.isabs(path) or os.path.normpath(path) != path or "\x00" in path:
            raise ConfigError(f"{where}: {path[:80]!r} is not an absolute, normalised path (no '..', '.', '//')")
    for name in ("signature_namespaces", "dry_run_namespaces", "key_secret_namespaces", "pull_secret_namespaces"):
        for namespace in getattr(config, name):
            if not DNS_LABEL.match(namespace):
                raise ConfigError(
                    f"{env_name(name)}: {namespace[:80]!r} is not a namespace name (no patterns: list each one)"
                )
    repositories = tuple(
        parse_repository_prefix(text, env_name("bundle_repositories"), ConfigError)
        for text in config.bundle_repositories
    )
    from ..oci.registry import RegistryError, host_key  # the host syntax lives with the client that compares it

    for host in config.registry_hosts:
        if any(c in host for c in "/@?#*") or any(c.isspace() for c in host):
            raise ConfigError(f"{env_name('registry_hosts')}: {host[:80]!r} is not host or host:port (no patterns)")
        try:
            host_key(host)
        except RegistryError as exc:
            raise ConfigError(f"{env_name('registry_hosts')}: {exc.message}") from None
    return dataclasses.replace(config, bundle_repositories=repositories)


def load_config(overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """The configuration: ``overrides`` (upper-case names), then ``MANIFEST_PROVIDER_*``, then defaults."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, spec in _FIELDS.items():
        if name in _OBJECTS:
            continue
        text = environ.get(env_name(name))
        if text is not None:
            values[name] = _parse(name, text, str(spec.type))
    for upper, value in (overrides or {}).items():
        name = upper.lower()
        if name not in _FIELDS:
            raise ConfigError(f"unknown setting {upper!r}; known: {', '.join(n.upper() for n in _FIELDS)}")
        if value is None and name not in _OBJECTS:
            continue  # a CLI flag that was not given
        values[name] = value if name in _OBJECTS else _parse(name, value, str(_FIELDS[name].type))
    try:
        config = Config(**values)
    except TypeError as exc:  # pragma: no cover - names were checked above
        raise ConfigError(str(exc)) from exc
    return _check(config)


# --- logging ----------------------------------------------------------------------

#: Attributes every LogRecord has; anything else was passed with ``extra=`` and is logged as a field.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the ``extra=`` fields.

    Callers pass only facts they chose to log (decision, reason, object
    identity, latency); request headers, tokens and whole objects are never
    handed to a logger, so they cannot leak through this formatter.
    """

    converter = staticmethod(time.gmtime)  # timestamps in UTC, as the "Z" says

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            # The exception type and message, not the traceback: frames can hold request data.
            entry["error"] = f"{record.exc_info[0].__name__}: {str(record.exc_info[1])[:300]}"
        return json.dumps(entry, default=str, separators=(",", ":"))


class RepeatLimiter(logging.Filter):
    """Lets through at most ``burst`` identical warnings per ``window`` seconds; counts the rest.

    "Identical" means the same logger, level, message and ``extra=`` fields
    (a caller's identity, a reason, a route): a stranger who repeats a refused
    handshake or a malformed request writes a few lines a minute, not one per
    attempt, while a refusal of someone else still gets its own line. The next line let
    through after a quiet spell carries ``suppressed``, how many were dropped.
    Errors and anything below WARNING pass untouched. The table of recent
    messages is bounded (least recently seen forgotten first).
    """

    def __init__(
        self, burst: int = 5, window: float = 60.0, keys: int = 1024, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.burst, self.window, self.keys, self._clock = burst, window, keys, clock
        self._seen: OrderedDict[tuple[Any, ...], list[float]] = (
            OrderedDict()
        )  # key -> [window start, count, suppressed]
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        fields = tuple(
            sorted(
                (k, str(v)[:200]) for k, v in vars(record).items() if k not in _RECORD_FIELDS and not k.startswith("_")
            )
        )
        key = (record.name, record.levelno, record.getMessage()[:200], fields)
        now = self._clock()
        with self._lock:
            entry = self._seen.get(key)
            if entry is None or now - entry[0] >= self.window:
                suppressed = int(entry[2]) if entry is not None else 0
                entry = [now, 0.0, 0.0]
                if suppressed:
                    record.suppressed = suppressed
            self._seen[key] = entry
            self._seen.move_to_end(key)
            while len(self._seen) > self.keys:
                self._seen.popitem(last=False)
            entry[1] += 1
            if entry[1] > self.burst:
                entry[2] += 1
                return False
            return True


#: One limiter per process, shared by the service's and gunicorn's log handlers.
REPEATS = RepeatLimiter()


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is emitted (test runners swap it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def configure_logging(level: str = "info") -> None:
    """Send the ``provider`` loggers to standard error as JSON lines (one handler per process)."""
    logger = logging.getLogger("provider")
    logger.setLevel(level.upper())
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(JsonFormatter())
        handler.addFilter(REPEATS)
        logger.addHandler(handler)
    logger.propagate = False
