"""The keyless trust root kept current: a TUF client that refreshes the TrustedRoot in the background.

Sigstore publishes its TrustedRoot (Fulcio's CAs, Rekor's keys, with their
validity windows) as the TUF target ``trusted_root.json`` of a TUF repository
(the public-good one: :data:`PUBLIC_GOOD`); sigstore's own clients refresh it
through TUF (sigstore-python ``sigstore/_internal/tuf.py``: metadata at the
repository's root URL, targets under ``targets/``), and so does this service:

* **where**: ``MANIFEST_PROVIDER_TUF_URL`` (default the public-good repository;
  a mirror for an air-gapped cluster; empty: no refresh, the shipped root
  only). Plain HTTP is allowed: TUF signs every file, so the transport adds
  nothing to integrity -- it cannot make a stale root look fresh, because
  ``timestamp.json`` expires;
* **the root of trust is pinned** by the operator: ``MANIFEST_PROVIDER_TUF_ROOT``,
  a ``root.json`` file; by default the public-good ``root.json`` that
  sigstore-python ships in its package. TUF walks every root rotation from the
  pinned one (each new root signed by a threshold of the previous root's keys
  and its own), refuses a rollback to an older version of any metadata
  (python-tuf ``tuf.ngclient.Updater``: ``BadVersionNumberError``) and expired
  metadata (a freeze attack: ``ExpiredMetadataError``), and checks the target's
  length and hashes against the signed ``targets.json``;
* **in the background**: one daemon thread per worker process, started when
  the worker starts (``post_worker_init``), refreshing every
  ``MANIFEST_PROVIDER_TUF_REFRESH_SECONDS`` (default 3600; after a failure
  sooner, :data:`RETRY_SECONDS`). Never on the request path: a request uses
  the root the last good refresh installed
  (:func:`provider.keyless.trust.set_default_root`), else the shipped one;
* **the last good root stays** when a refresh fails (unreachable, a rollback,
  expired metadata, a target that is not a usable TrustedRoot): the failure is
  logged and counted, nothing is replaced;
* **its age is a metric**: ``manifest_provider_trusted_root_age_seconds`` --
  seconds since the root in use was last confirmed current by a refresh (for
  the shipped root: since the worker started), and
  ``manifest_provider_trusted_root_refreshes_total{result}``.

The TUF client's local metadata (what rollback protection compares against)
lives in ``MANIFEST_PROVIDER_TUF_CACHE_DIR`` (default a directory of its own
under the system's temporary directory, per worker process: a few hundred KiB,
on the ``/tmp`` emptyDir that ``manifests/base`` and the chart mount beside the
read-only root). A cache directory that cannot be created or written is a
:class:`~provider.errors.ConfigError` when the service starts, never a refresh
that silently fails for ever.

Policies that give their own ``trustedRoot`` are not affected; the refreshed
root replaces only the default, the one a keyless policy gets when it names none.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import ConfigError, PolicyError
from ..keyless.trust import TrustRoot, load_trusted_root, set_default_root
from ..parsing import load_json

log = logging.getLogger("provider.trustroot")

#: sigstore's public-good TUF repository (sigstore-python ``DEFAULT_TUF_URL``).
PUBLIC_GOOD = "https://tuf-repo-cdn.sigstore.dev"
#: The TUF target holding the TrustedRoot (sigstore-python ``TrustedRoot.from_tuf``).
TARGET = "trusted_root.json"
#: Seconds before a failed refresh is tried again.
RETRY_SECONDS = 300.0
#: Seconds one read of a download may wait (the background thread's, never a request's). python-tuf's fetcher
#: applies it to each socket read, not to the download: a repository that sends a byte within every 30 s keeps
#: a refresh going for as long as the file's signed length allows -- the root in use stays, and its age
#: (``manifest_provider_trusted_root_age_seconds``) grows where an alert sees it.
DOWNLOAD_TIMEOUT = 30.0


def shipped_tuf_root() -> bytes:
    """The public-good ``root.json`` sigstore-python ships (its ``_store`` package data, one directory per URL)."""
    folder = resources.files("sigstore").joinpath("_store", "https%3A%2F%2Ftuf-repo-cdn.sigstore.dev")
    return folder.joinpath("root.json").read_bytes()


class TrustRootRefresher:
    """Refreshes the default TrustedRoot from a TUF repository (module docstring)."""

    def __init__(
        self,
        url: str,
        root: bytes,
        *,
        cache_dir: str | None = None,
        interval: float = 3600.0,
        clock: Callable[[], float] = time.time,
        quiet: bool = False,
    ) -> None:
        self.url = url.rstrip("/")
        self.root = root
        if not cache_dir:  # without a configured cache, a per-worker directory removed with the refresher
            cache_dir = tempfile.mkdtemp(prefix="manifest-provider-tuf-")
            weakref.finalize(self, shutil.rmtree, cache_dir, ignore_errors=True)
        self.cache_dir = cache_dir
        self.interval = interval
        self.clock = clock
        #: Failures of the default repository are logged at INFO: a cluster without internet is normal.
        self.quiet = quiet
        self.confirmed = clock()
        self.current: TrustRoot | None = None
        self.failures = 0
        self.last_target = b""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def age(self) -> float:
        """Seconds since the root in use was last confirmed current (the metric)."""
        return max(0.0, self.clock() - self.confirmed)

    def refresh(self) -> bool:
        """One refresh; True when a root was confirmed (and installed when it changed), False when the last stays."""
        from . import metrics

        try:
            root = self._fetch()
        except Exception as exc:  # whatever the repository or the network does, the last good root stays
            self.failures += 1
            metrics.TRUSTED_ROOT_REFRESHES.labels("failed").inc()
            level = logging.INFO if self.quiet else logging.WARNING
            log.log(level, "the TUF repository %s could not refresh the trusted root (%s: %s); the one in use stays",
                    self.url, type(exc).__name__, str(exc)[:300])  # fmt: skip
            return False
        self.failures = 0
        self.confirmed = self.clock()
        if self.current is None or root.digest != self.current.digest:
            self.current = root
            set_default_root(root)
            log.info("trusted root from %s installed (sha256 %s)", self.url, root.digest[:16])
        metrics.TRUSTED_ROOT_REFRESHES.labels("ok").inc()
        return True

    def _fetch(self) -> TrustRoot:
        return load_trusted_root(load_json(self.fetch_target(), error=PolicyError, what=f"the TUF target {TARGET}"))

    def fetch_target(self) -> bytes:
        """The target's bytes, after TUF's checks (kept in :attr:`last_target`); raises whatever TUF refuses."""
        from tuf.ngclient.config import UpdaterConfig
        from tuf.ngclient.updater import Updater

        Path(self.cache_dir, "targets").mkdir(parents=True, exist_ok=True)
        updater = Updater(
            metadata_dir=self.cache_dir,
            metadata_base_url=f"{self.url}/",
            target_dir=str(Path(self.cache_dir, "targets")),
            target_base_url=f"{self.url}/targets/",
            fetcher=_fetcher(),
            config=UpdaterConfig(),
            bootstrap=self.root,
        )
        updater.refresh()
        info = updater.get_targetinfo(TARGET)
        if info is None:
            raise PolicyError(f"the repository has no {TARGET} target")
        path = updater.find_cached_target(info) or updater.download_target(info)
        self.last_target = Path(path).read_bytes()
        load_trusted_root(load_json(self.last_target, error=PolicyError, what=f"the TUF target {TARGET}"))
        return self.last_target

    def start(self) -> None:
        """Refresh now and every interval, in a daemon thread (sooner again after a failure)."""
        if self._thread is not None:
            return
        from . import metrics

        metrics.TRUSTED_ROOT_AGE_SOURCE = self.age

        def loop() -> None:
            while not self._stop.is_set():
                ok = self.refresh()
                self._stop.wait(self.interval if ok else min(self.interval, RETRY_SECONDS))

        self._thread = threading.Thread(target=loop, name="trusted-root-refresh", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()


def _fetcher() -> Any:
    from tuf.ngclient.urllib3_fetcher import Urllib3Fetcher

    return Urllib3Fetcher(
        socket_timeout=int(DOWNLOAD_TIMEOUT), chunk_size=64 * 1024, app_user_agent="manifest-provider"
    )


def refresher_for(url: str, root_file: str | None, cache_dir: str | None, interval: float) -> TrustRootRefresher | None:
    """The service's refresher: ``None`` when no URL; :class:`ConfigError` for a pinned root that cannot be read."""
    if not url:
        return None
    if root_file:
        try:
            root = Path(root_file).read_bytes()
        except OSError as exc:
            raise ConfigError(f"MANIFEST_PROVIDER_TUF_ROOT: {root_file} cannot be read ({exc.strerror})") from None
    else:
        root = shipped_tuf_root()
    try:
        if cache_dir:
            os.makedirs(cache_dir, exist_ok=True)
            if not os.access(cache_dir, os.W_OK | os.X_OK):  # a read-only mount: every refresh would fail
                raise PermissionError(errno.EROFS, "not writable")
        return TrustRootRefresher(url, root, cache_dir=cache_dir, interval=interval,
                                  quiet=url == PUBLIC_GOOD and not root_file)  # fmt: skip
    except OSError as exc:
        # A read-only root filesystem without a writable temporary directory: say what to mount,
        # rather than a traceback from tempfile (manifests/base and the chart mount an emptyDir at /tmp).
        where = cache_dir or "a directory under the temporary directory (TMPDIR, else /tmp)"
        raise ConfigError(
            f"MANIFEST_PROVIDER_TUF_CACHE_DIR: cannot use {where} for the TUF client's metadata "
            f"({exc.strerror or type(exc).__name__}); mount a writable volume (an emptyDir) there, or set "
            "MANIFEST_PROVIDER_TUF_URL empty to keep the shipped trust root without refreshing"
        ) from None
