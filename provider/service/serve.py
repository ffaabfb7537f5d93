"""The gunicorn launcher: HTTPS only, gthread workers, the app factory preloaded.

Why these choices:

* **gthread workers, guarded.** A sync worker serves one connection at a time
  and closes it after each request, so every call would pay a TLS handshake.
  gthread workers keep connections alive (``keepalive_seconds``) and serve
  ``threads`` requests at once per process; :mod:`provider.service.worker` changes
  gthread so that a connection holds a thread only once its request head is
  complete (handshake and head are read in the event loop, within
  ``head_timeout_seconds``), and body and answer have deadlines.
* **Preloaded app.** :func:`provider.service.app.create_app` runs once in the master,
  so a configuration error stops the server before any worker forks, and
  workers share the imported code (the ``kubernetes`` client's too, when a
  cluster is configured). Everything that must not cross a fork (the
  verification thread pool, cluster connections) is built after it: the
  cluster clients as each worker starts, before it accepts
  (:func:`provider.service.app.prepare_worker`, gunicorn's ``post_worker_init``),
  so a worker's first cluster call does not pay for them inside its deadline.
* **TLS.** One :class:`ssl.SSLContext` (:func:`tls_context`), rebuilt only
  when a certificate file changes (cert-manager rotates them in place):
  TLS 1.2 at least, 1.3 whenever the client offers it, ECDHE+AEAD ciphers for
  1.2. With a client CA the handshake asks for a certificate and rejects one
  the CA did not issue; :mod:`provider.service.auth` refuses requests that brought
  none (probes excepted) and checks the certificate again on every request.
  No session tickets: neither Gatekeeper's Go client nor Kyverno's keeps a
  session cache, so tickets would only cost each full handshake their
  encryption and bytes, and give a resumed session a certificate nobody
  re-verifies (TLS 1.2 session IDs cannot be turned off from Python; the
  per-request check covers them). Without ``cert`` and ``key`` the server
  refuses to start unless ``unsafe_http`` is set, which warns on every request.
* **Metrics across workers.** ``PROMETHEUS_MULTIPROC_DIR`` is pointed at a
  fresh directory before the app is imported, so ``/metrics`` sums every
  worker (:mod:`provider.service.metrics`). The master also serves them on the
  plain-HTTP metrics port (:mod:`provider.service.scrape`), bound here before
  gunicorn starts so a taken port stops the server at once; workers close their
  inherited copy of that socket.
* **Logs.** gunicorn's own log goes through the same JSON formatter; its
  access log is off (it would record paths, addresses and user agents; the
  app logs each decision instead), and so is the work gunicorn
  does for it on every request (:class:`QuietLogger`). The JSON formatter
  prints no thread, process or source line, so log records do not look them
  up (:func:`lean_log_records`).
"""

from __future__ import annotations

import datetime
import logging
import os
import shutil
import socket
import ssl
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from typing import Any

from gunicorn import glogging
from gunicorn.app.base import BaseApplication

from ..deadlines import DeadlineSSLSocket
from ..errors import ConfigError
from .certificates import CertificateFacts, Inspection, inspect
from .config import REPEATS, Config, RepeatLimiter, configure_logging, load_config
from .ports import API_BACKLOG, host_of, listen, why

log = logging.getLogger("provider.serve")

#: TLS 1.2 suites when 1.3 is not offered: forward secrecy and AEAD only (Mozilla "intermediate").
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
#: Seconds gunicorn lets a busy worker stay silent before replacing it.
WORKER_TIMEOUT = 30
#: Seconds workers get to finish in-flight requests on SIGTERM (Kubernetes gives 30 in all).
GRACEFUL_TIMEOUT = 10
#: TLS 1.3 session tickets issued per full handshake (OpenSSL's default is 2); see the module docstring.
SESSION_TICKETS = 0


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def tls_context(cert: str, key: str, client_ca: str | None = None) -> ssl.SSLContext:
    """The server's TLS settings; raises :class:`ConfigError` when a file is missing or unusable."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_TICKET
    # A client that half-closes (a TCP FIN without close_notify, as one gone mid-body does) still gets
    # its answer: OpenSSL 3 otherwise fails the connection; HTTP framing detects the truncation itself.
    context.options |= ssl.OP_IGNORE_UNEXPECTED_EOF
    context.num_tickets = SESSION_TICKETS
    # Every socket this context wraps can be given a deadline (provider.service.worker: bodies and answers).
    context.sslsocket_class = DeadlineSSLSocket
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(_tls_file_problem(cert, key, exc)) from exc
    if client_ca:
        try:
            context.load_verify_locations(cafile=client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"TLS: cannot load the client CA {client_ca} ({_why(exc)})") from exc
        # OPTIONAL, not REQUIRED: kubelet probes bring no certificate; the app
        # refuses certificate-less requests on every route but the probes.
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror and not isinstance(exc, ssl.SSLError):
        return exc.strerror
    return str(exc)[:200]


def _tls_file_problem(cert: str, key: str, exc: BaseException) -> str:
    """Which of ``cert`` and ``key`` failed to load, and why: OpenSSL's error names neither file.

    Each file is read and parsed on its own (``cryptography``); when both parse,
    they do not belong together.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    for path, what in ((cert, "certificate"), (key, "key")):
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as read_error:
            return f"TLS: cannot load the {what} {path} ({_why(read_error)})"
        try:
            if what == "certificate":
                x509.load_pem_x509_certificates(data)
            else:
                load_pem_private_key(data, password=None)
        except TypeError:
            return f"TLS: cannot load the key {path} (it is encrypted; the server needs an unencrypted key)"
        except ValueError:  # cryptography's text names no file either, and points at its FAQ
            expected = "a PEM certificate chain" if what == "certificate" else "an unencrypted PEM private key"
            return f"TLS: cannot load the {what} {path} (not {expected})"
    return f"TLS: cannot load the certificate {cert} with the key {key} ({_why(exc)}; do they belong together?)"


class _RotatingContext:
    """One SSLContext for every connection, rebuilt when a file's modification time changes.

    The first context is built here, when gunicorn's options are made in the master,
    so every worker forks with one that works: a worker whose first connection
    arrives while a rotation has left unusable files keeps serving the certificate
    it started with instead of failing that handshake. Raises :class:`ConfigError`
    when the files do not load at start.

    Each load also judges the certificates' dates (:func:`provider.service.certificates.inspect`):
    an expired serving certificate or client CA is refused like a file that does not
    load -- at start the server does not start, at a reload the previous files stay --
    and what comes close to expiring is logged. :meth:`served` is the certificate this
    process presents, for ``/readyz``.
    """

    def __init__(
        self,
        cert: str,
        key: str,
        client_ca: str | None,
        margin_days: float = Config.cert_expiry_warning_days,
        clock: Callable[[], datetime.datetime] = _utcnow,
    ) -> None:
        self._files = (cert, key, client_ca)
        self._margin_days = margin_days
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp: tuple[float, ...] = ()
        #: The stamp of files that did not load: tried again only once they change again.
        self._failed: tuple[float, ...] | None = None
        self._context: ssl.SSLContext | None = None
        self._served: CertificateFacts | None = None
        self.get()

    def _stamps(self) -> tuple[float, ...]:
        try:
            return tuple(os.stat(f).st_mtime for f in self._files if f)
        except OSError:
            return self._stamp  # a file mid-rotation: keep the context we have

    def _load(self) -> tuple[ssl.SSLContext, Inspection]:
        cert, key, ca = self._files
        assert cert is not None and key is not None
        context = tls_context(cert, key, ca)
        inspection = inspect(cert, ca, self._clock(), self._margin_days)
        inspection.raise_if_fatal()
        return context, inspection

    def get(self) -> ssl.SSLContext:
        stamp = self._stamps()
        with self._lock:
            if self._context is None or stamp not in (self._stamp, self._failed):
                try:
                    context, inspection = self._load()
                except ConfigError as exc:
                    if self._context is None:
                        raise
                    self._failed = stamp  # not read, parsed and logged again on every connection
                    log.error(
                        "new certificate files do not load; serving with the previous ones",
                        extra={"detail": exc.message},
                    )
                else:
                    self._context, self._served = context, inspection.leaf
                    self._stamp, self._failed = stamp, None
                    for warning in inspection.warnings:
                        log.warning(warning)
            return self._context

    def served(self) -> CertificateFacts | None:
        """The certificate this process presents (its dates and file), as of its last (re)load."""
        self.get()
        return self._served

    def hook(self, _conf: Any, _default_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        """gunicorn's ``ssl_context`` server hook."""
        return self.get()


def bind_address(config: Config) -> str:
    if config.bind.startswith(("fd://", "unix:")):
        return config.bind
    host = f"[{config.bind}]" if ":" in config.bind else config.bind
    return f"{host}:{config.port}"


def repeat_limiter() -> RepeatLimiter:
    """The process's ``config.RepeatLimiter``, for gunicorn's log handler (``logconfig_dict``)."""
    return REPEATS


def _log_config(level: str) -> dict[str, Any]:
    # gunicorn's "Invalid request from ip=..." lines are warnings a stranger can repeat at will.
    handler = {
        "class": "logging.StreamHandler",
        "formatter": "json",
        "stream": "ext://sys.stderr",
        "filters": ["repeats"],
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "provider.service.config.JsonFormatter"}},
        "filters": {"repeats": {"()": "provider.service.serve.repeat_limiter"}},
        "handlers": {"stderr": handler},
        "root": {"level": "WARNING", "handlers": ["stderr"]},
        "loggers": {
            "gunicorn.error": {"level": level.upper(), "handlers": ["stderr"], "propagate": False},
            "gunicorn.access": {"level": "CRITICAL", "handlers": [], "propagate": False},
        },
    }


class QuietLogger(glogging.Logger):  # type: ignore[misc]
    """gunicorn's logger without the access log's per-request work.

    gunicorn builds the access log's fields (every header, the time, the
    addresses) for each request whenever any log configuration is given, then
    hands them to the ``gunicorn.access`` logger, which drops them here.
    """

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        return None


def lean_log_records() -> None:
    """Log records without the thread, process and source-line lookups the JSON formatter never prints.

    The settings of the standard library's logging "Optimization" section; process-wide,
    so only the launcher, whose process this is, sets them.
    """
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None


def _child_exit(_server: Any, worker: Any) -> None:
    from . import metrics  # imported after PROMETHEUS_MULTIPROC_DIR is set

    metrics.worker_exited(worker.pid)


def serving_context(config: Config) -> _RotatingContext | None:
    """The rotating TLS context for ``config`` (``None`` for plain HTTP); :class:`ConfigError` when unusable."""
    if config.unsafe_http:
        return None
    assert config.cert is not None and config.key is not None
    return _RotatingContext(config.cert, config.key, config.client_ca, config.cert_expiry_warning_days)


def gunicorn_options(config: Config, tls: _RotatingContext | None = None) -> dict[str, Any]:
    from .worker import worker_class  # gunicorn's worker module; imported for serving only

    options: dict[str, Any] = {
        "bind": [bind_address(config)],
        "workers": config.workers,
        "worker_class": worker_class(config.head_timeout_seconds, config.deadline_seconds),
        "threads": config.threads,
        "worker_connections": config.max_connections,
        "keepalive": max(1, round(config.keepalive_seconds)),
        "timeout": WORKER_TIMEOUT,
        "graceful_timeout": GRACEFUL_TIMEOUT,
        "preload_app": True,
        "accesslog": None,
        "errorlog": "-",
        "loglevel": config.log_level,
        "logconfig_dict": _log_config(config.log_level),
        "child_exit": _child_exit,
        "post_worker_init": _post_worker_init,
        "logger_class": QuietLogger,
        "proc_name": "manifest-provider",
        # gunicorn >= 25.1 opens a control socket at a fixed per-user path: one
        # more way in, and a clash between two servers on one machine.
        "control_socket_disable": True,
        # gunicorn's own parser, always: with ``auto`` (the default) gunicorn switches to the
        # optional C parser (gunicorn_h1c) whenever that package happens to be installed, and the
        # request heads the server accepts -- and how the worker refuses those too large -- would
        # change with what else is on the machine. (Measured: it parses a head about 5 us faster.)
        "http_parser": "python",
    }
    if not config.unsafe_http:
        assert config.cert is not None and config.key is not None
        options.update(
            certfile=config.cert,
            keyfile=config.key,
            ssl_context=(tls or serving_context(config)).hook,  # type: ignore[union-attr]
        )
        if config.client_ca:
            options.update(ca_certs=config.client_ca, cert_reqs=ssl.CERT_OPTIONAL)
    return options


class ProviderApplication(BaseApplication):  # type: ignore[misc]
    """gunicorn, configured in code (no gunicorn.conf.py, no command line of its own)."""

    def __init__(self, options: Mapping[str, Any], app_config: Mapping[str, Any]) -> None:
        self._options = dict(options)
        self._app_config = dict(app_config)
        super().__init__()

    def load_config(self) -> None:
        for name, value in self._options.items():
            if name in self.cfg.settings:  # settings newer than the installed gunicorn are skipped
                self.cfg.set(name, value)

    def load(self) -> Any:
        from .app import create_app  # after the metrics directory is set

        return create_app(self._app_config)


def _post_worker_init(worker: Any) -> None:
    """gunicorn's hook in each new worker, after the fork and before it accepts: build the cluster clients."""
    from .app import prepare_worker

    try:
        prepare_worker(worker.app.wsgi())
    except Exception:  # a worker that raises here stops gunicorn ("failed to boot"); it can build them later
        log.exception("preparing the worker failed; its cluster clients are built on first use")


def check_serving(config: Config) -> None:
    """Refuse to serve without TLS (unless told ``unsafe_http``), and fail early on unusable files."""
    if config.unsafe_http:
        if config.cert or config.key:
            raise ConfigError("give a certificate or --unsafe-http, not both")
        return
    if not (config.cert and config.key):
        raise ConfigError(
            "HTTPS only: give --cert and --key (MANIFEST_PROVIDER_CERT, MANIFEST_PROVIDER_KEY); "
            "--unsafe-http serves plain HTTP for local experiments"
        )
    tls_context(config.cert, config.key, config.client_ca)
    # Warnings are logged once, by the rotating context; here only what stops the server.
    inspect(config.cert, config.client_ca, _utcnow(), config.cert_expiry_warning_days).raise_if_fatal()


def api_port(config: Config) -> socket.socket | None:
    """The API's listening socket, bound here (``None`` for ``fd://`` and ``unix:`` binds); :class:`ConfigError`
    naming the address when it cannot be bound (:mod:`provider.service.ports` says why not gunicorn)."""
    if config.bind.startswith(("fd://", "unix:")):
        return None
    try:
        return listen(config.bind, config.port, API_BACKLOG)
    except OSError as exc:
        raise ConfigError(
            f"the API port cannot listen on {host_of(config.bind)} port {config.port} ({why(exc)}); "
            "stop what uses it, or choose another with --port"
        ) from exc


def metrics_port(config: Config) -> socket.socket | None:
    """The metrics port's listening socket (``None`` when turned off); :class:`ConfigError` when it cannot be bound.

    Unless ``metrics_bind`` says otherwise it listens where the API does: a server told to
    listen on 127.0.0.1 does not open an unauthenticated port on every interface.
    """
    if config.metrics_port == 0:
        return None
    try:
        bind = config.metrics_bind or host_of(config.bind)
        return listen(bind, config.metrics_port)
    except (OSError, ValueError) as exc:
        reason = why(exc) if isinstance(exc, OSError) else str(exc)
        where = bind if bind.startswith("fd://") else f"{bind} port {config.metrics_port}"
        raise ConfigError(
            f"the metrics port cannot listen on {where} ({reason}); stop what uses it, choose another with "
            "--metrics-port, or turn it off with --no-metrics-port"
        ) from exc


def serve(overrides: Mapping[str, Any] | None = None) -> int:
    """Run the server in the foreground until SIGTERM/SIGINT; returns gunicorn's exit status."""
    overrides = dict(overrides or {})
    config = load_config(overrides)
    configure_logging(config.log_level)
    lean_log_records()
    check_serving(config)
    if config.unsafe_http:
        log.warning("serving plain HTTP (--unsafe-http): never do this where anyone else can connect")
    own_dir = None
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        if "prometheus_client" in sys.modules:  # it chose its value store at import: too late to share
            log.warning("prometheus_client was imported before serving; /metrics will show one worker at a time")
        own_dir = tempfile.mkdtemp(prefix="manifest-provider-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = own_dir
    api = None
    listener = None
    scraper = None
    # gunicorn forks its workers inside run(), so a worker that exits unwinds through
    # this function too: what the finally block tears down is the master's alone (in a
    # worker the metrics thread does not exist, and the metrics directory is still in use).
    master = os.getpid()
    from . import metrics  # after PROMETHEUS_MULTIPROC_DIR is set

    metrics.PROCESSES.master = master  # process_* add up this process and its children (the workers)
    try:
        api = api_port(config)
        listener = metrics_port(config)
        tls = serving_context(config)
        options = gunicorn_options(config, tls)
        if api is not None:
            options["bind"] = [f"fd://{api.detach()}"]  # gunicorn owns the socket from here
        if listener is not None:
            from .scrape import MetricsServer

            scraper = MetricsServer(listener)
            scraper.start()
            options["post_fork"] = lambda _server, _worker: listener.close()  # the master's alone
        # /readyz asks the context which certificate this process presents.
        ProviderApplication(options, {**overrides, "SERVING_CERTIFICATES": tls}).run()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    finally:
        if os.getpid() == master:
            if api is not None and api.fileno() != -1:  # not handed over: a later step failed
                api.close()
            if scraper is not None:
                scraper.stop()
            elif listener is not None:
                listener.close()
            if own_dir is not None:
                shutil.rmtree(own_dir, ignore_errors=True)
    return 0
