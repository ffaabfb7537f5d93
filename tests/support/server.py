"""The real service for tests: ``manifest-provider serve`` (gunicorn, TLS, client certificates) on loopback.

:func:`running_server` makes a throw-away PKI (:func:`provider.service.devcerts.make_dev_pki`)
in a temporary directory, binds 127.0.0.1 on an ephemeral port *in this
process* and hands the listening socket to gunicorn (``--bind fd://N``), so
there is no window in which another test could take the port. It waits for
``/readyz`` and stops the server (SIGTERM, then SIGKILL) on exit::

    with running_server(env={"MANIFEST_PROVIDER_KUBECONFIG": str(kubeconfig)}) as server:
        status, headers, body = server.post("/v1/kyverno/verify", json.dumps(...).encode())

The child's environment is this process's without ``MANIFEST_PROVIDER_*``,
``KUBERNETES_SERVICE_HOST`` and ``PROMETHEUS_MULTIPROC_DIR`` (so a developer's
settings, or running inside a pod, cannot change a test), plus ``env``.
``args`` are appended to the command line after the defaults
(``--workers 1 --threads 4``), so they win. The dev client certificate is the
one allowed caller (``MANIFEST_PROVIDER_CALLERS``) unless ``env`` says otherwise.
The plain-HTTP metrics port is bound the same way (``--metrics-bind fd://N``) on
its own ephemeral port, :attr:`Server.metrics_port`; with ``metrics=False`` no
socket is handed over, for tests of the ``--metrics-port`` flags themselves.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provider.service.devcerts import CLIENT_NAME, DevPki, make_dev_pki

#: Seconds to wait for /readyz (gunicorn plus the app import take about one).
START_TIMEOUT = 30.0
#: Seconds to wait for a graceful stop before SIGKILL.
STOP_TIMEOUT = 15.0
#: The service's request deadline for servers whose tests are about verdicts, not deadlines: what a
#: busy machine needs for anything those tests ask (a new worker's first cluster call imports and
#: builds the kubernetes client, seconds under load), well inside the client's 30 s timeout.
VERDICT_DEADLINE = {"MANIFEST_PROVIDER_DEADLINE_SECONDS": "10"}
#: A client's timeout to go with it (an engine stand-in's, say): past the server's deadline.
VERDICT_CLIENT_TIMEOUT = 15.0
#: Environment variables of this process that must not reach the server.
_SCRUBBED_PREFIXES = ("MANIFEST_PROVIDER_",)
_SCRUBBED = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "PROMETHEUS_MULTIPROC_DIR")
#: How a kept-alive connection the server has since closed (after its 30 s keep-alive, or a
#: worker restart) shows up on the next request: as a reset or a closed pipe, or -- when the
#: server's close_notify and FIN arrived first -- as a TLS EOF while the request is written.
_STALE_CONNECTION = (
    http.client.RemoteDisconnected,
    http.client.CannotSendRequest,
    ConnectionResetError,
    BrokenPipeError,
    ssl.SSLEOFError,
    ssl.SSLZeroReturnError,
)


def command() -> list[str]:
    """How to run the CLI: the installed console script, else ``python -m provider.cli``."""
    script = Path(sys.executable).parent / "manifest-provider"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "provider.cli"]


@dataclass
class Server:
    url: str
    port: int
    pki: DevPki
    pid: int
    log_path: Path
    require_client_cert: bool = True
    #: The plain-HTTP metrics port (``--metrics-bind fd://N``); nothing listens there after ``--no-metrics-port``.
    metrics_port: int = 0
    _local: threading.local = field(default_factory=threading.local, repr=False)

    def ssl_context(self, client_cert: bool = True) -> ssl.SSLContext:
        """A client context trusting the dev CA; with the dev client certificate unless ``client_cert=False``."""
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        if client_cert:
            context.load_cert_chain(str(self.pki.client_cert), str(self.pki.client_key))
        return context

    def connection(self, client_cert: bool = True, timeout: float = 30.0) -> http.client.HTTPSConnection:
        """A new keep-alive TLS connection to the server."""
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.ssl_context(client_cert), timeout=timeout
        )

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        *,
        client_cert: bool = True,
    ) -> tuple[int, dict[str, str], bytes]:
        """One request over this thread's kept-alive connection (reconnecting once if the server closed it)."""
        key = f"conn_{client_cert}"
        for attempt in (1, 2):
            conn = getattr(self._local, key, None)
            if conn is None:
                conn = self.connection(client_cert)
                setattr(self._local, key, conn)
            try:
                conn.request(method, path, body=body, headers=dict(headers or {}))
                response = conn.getresponse()
                data = response.read()
                return response.status, {k.lower(): v for k, v in response.getheaders()}, data
            except _STALE_CONNECTION:
                conn.close()
                setattr(self._local, key, None)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def post(
        self, path: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        return self.request("POST", path, body, headers)

    def get(self, path: str, headers: Mapping[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        return self.request("GET", path, None, headers)

    def post_json(self, path: str, body: Any) -> Any:
        status, _, data = self.post(path, json.dumps(body).encode())
        assert status == 200, (status, data[:500])
        return json.loads(data)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_records(self) -> list[dict[str, Any]]:
        """The server's log so far, one JSON object per line (lines that are not JSON are skipped)."""
        records = []
        for line in self.log_text().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    records.append(record)
        return records

    def close_connections(self) -> None:
        for key in ("conn_True", "conn_False"):
            conn = getattr(self._local, key, None)
            if conn is not None:
                conn.close()
                setattr(self._local, key, None)


def _child_env(env: Mapping[str, str] | None) -> dict[str, str]:
    child = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED_PREFIXES) and k not in _SCRUBBED}
    child["MANIFEST_PROVIDER_CALLERS"] = f"cert:{CLIENT_NAME}"
    child.update(env or {})
    return child


def _wait_ready(server: Server, process: subprocess.Popen[bytes], until: str = "ready") -> None:
    """Until ``/readyz`` answers 200 -- or with ``until="listening"``, until ``/healthz`` does, as a kubelet asks it:
    without verifying the server's certificate (for a server that is up but not ready)."""
    deadline = time.monotonic() + START_TIMEOUT
    if until == "listening":
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    else:
        context = server.ssl_context(client_cert=True)
    path = "/healthz" if until == "listening" else "/readyz"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"manifest-provider serve exited with {process.returncode}:\n{server.log_text()[-4000:]}"
            )
        try:
            conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=2)
            conn.request("GET", path)
            if conn.getresponse().status == 200:
                conn.close()
                return
            conn.close()
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"manifest-provider serve was not ready within {START_TIMEOUT} s:\n{server.log_text()[-4000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_TIMEOUT)


@contextlib.contextmanager
def running_server(
    *,
    env: dict[str, str] | None = None,
    require_client_cert: bool = True,
    args: Sequence[str] = (),
    metrics: bool = True,
    until: str = "ready",
) -> Iterator[Server]:
    """The real server on an ephemeral loopback port, ready when the block starts, stopped when it ends.

    ``until="listening"``: the block starts once ``/healthz`` answers, ready or not.
    """
    tmp = Path(tempfile.mkdtemp(prefix="manifest-provider-server-"))
    process: subprocess.Popen[bytes] | None = None
    try:
        pki = make_dev_pki(tmp / "pki")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        port = listener.getsockname()[1]
        inherited = [listener]
        if metrics:
            metrics_listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            metrics_listener.bind(("127.0.0.1", 0))
            metrics_listener.listen(16)
            inherited.append(metrics_listener)
        metrics_port = metrics_listener.getsockname()[1] if metrics else 0
        cmd = [
            *command(), "serve",
            "--bind", f"fd://{listener.fileno()}",
            "--cert", str(pki.server_cert), "--key", str(pki.server_key),
            "--workers", "1", "--threads", "4",
        ]  # fmt: skip
        if metrics:
            cmd += ["--metrics-bind", f"fd://{metrics_listener.fileno()}"]
        if require_client_cert:
            cmd += ["--client-ca", str(pki.ca_cert)]
        cmd += list(args)
        log_path = tmp / "server.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_child_env(env),
                pass_fds=tuple(s.fileno() for s in inherited),
                cwd=tmp,
            )
        for inherited_socket in inherited:
            inherited_socket.close()  # the child holds its own copies
        server = Server(
            f"https://127.0.0.1:{port}", port, pki, process.pid, log_path, require_client_cert, metrics_port
        )
        _wait_ready(server, process, until)
        try:
            yield server
        finally:
            server.close_connections()
    finally:
        if process is not None:
            _stop(process)
        shutil.rmtree(tmp, ignore_errors=True)
