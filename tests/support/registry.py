"""A real OCI registry on loopback for the bundle tests: Debian's ``docker-registry`` (CNCF distribution).

``make install`` installs the package (Makefile, ``system-packages``). A
missing binary fails the tests: nothing is skipped. Each :class:`Registry`
gets its own config, storage directory and port, and is stopped by its owner.

:class:`Misbehaving` is the opposite: a loopback HTTP server that answers the
way a broken or hostile registry would (stalls, trickles, oversized answers),
for the fault tests.
"""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

BINARY = Path("/usr/bin/docker-registry")

CONFIG = """\
version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


#: docker-registry's htpasswd authentication (distribution v2.8 ``registry/auth/htpasswd``): a Basic
#: challenge with this realm; the file's hashes must be bcrypt (``$2a$``/``$2b$``/``$2y$``), the only
#: kind its ``htpasswd.go`` reads (golang.org/x/crypto/bcrypt ``CompareHashAndPassword``).
HTPASSWD_CONFIG = """\
auth:
  htpasswd:
    realm: manifest-provider-tests
    path: {path}
"""


def bcrypt_hash(password: str) -> str:
    """A bcrypt hash of ``password`` with what this machine has: the C library's crypt(3) (libxcrypt:
    ``$2b$``) through Python 3.11's ``crypt`` module, else the ``bcrypt`` package; neither: a clear failure."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # crypt: deprecated in 3.11, removed in 3.13
        try:
            import crypt

            if crypt.METHOD_BLOWFISH in crypt.methods:
                return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 4))
        except ImportError:
            pass
    try:
        import bcrypt  # type: ignore[import-not-found]
    except ImportError:
        raise AssertionError(
            "no bcrypt for docker-registry's htpasswd file: Python's crypt module with libxcrypt, or the bcrypt "
            "package, is needed"
        ) from None
    return str(bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode())


class Registry:
    """``docker-registry serve`` on ``127.0.0.1:<port>`` with storage under ``directory``.

    ``users`` (name -> password) turns on htpasswd authentication: every request then needs Basic credentials.
    """

    def __init__(self, directory: Path, users: dict[str, str] | None = None) -> None:
        if not BINARY.exists():
            raise AssertionError(
                f"{BINARY} is missing; `make install` installs Debian's docker-registry package (apt-get)"
            )
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        config = directory / "config.yml"
        text = CONFIG.format(root=directory / "storage", port=self.port)
        if users:
            htpasswd = directory / "htpasswd"
            htpasswd.write_text("".join(f"{name}:{bcrypt_hash(password)}\n" for name, password in users.items()))
            text += HTPASSWD_CONFIG.format(path=htpasswd)
        config.write_text(text)
        self.log = directory / "registry.log"
        with self.log.open("wb") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen([str(BINARY), "serve", str(config)], stdout=log, stderr=log)
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except urllib.error.HTTPError as refused:
                if refused.code == 401 and users:  # up, and asking for credentials
                    return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(f"docker-registry did not start: {self.log.read_text()[-500:]}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


Behaviour = Callable[[http.server.BaseHTTPRequestHandler], None]


class Misbehaving:
    """A loopback HTTP server whose every GET runs ``behaviour`` (threads: a stalled answer blocks no other)."""

    def __init__(self, behaviour: Behaviour) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                behaviour(self)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def stall(handler: http.server.BaseHTTPRequestHandler) -> None:
    """Accept, then say nothing for longer than any deadline."""
    time.sleep(5)


def trickle(handler: http.server.BaseHTTPRequestHandler) -> None:
    """Headers at once, then a body one byte every 0.2 s: each read is quick, the whole is not."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
    handler.send_header("Content-Length", "1000")
    handler.end_headers()
    try:
        for _ in range(1000):
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(0.2)
    except OSError:
        pass


def oversized_manifest(handler: http.server.BaseHTTPRequestHandler) -> None:
    body = b" " * (1024 * 1024)
    handler.send_response(200)
    handler.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def huge_layer(handler: http.server.BaseHTTPRequestHandler) -> None:
    """A manifest whose one layer claims 1 GiB: refused before the blob is asked for."""
    layer = {"mediaType": "application/x-gzip", "size": 1 << 30, "digest": "sha256:" + "0" * 64}
    config = {"mediaType": "application/vnd.oci.image.config.v1+json", "size": 2, "digest": "sha256:" + "1" * 64}
    body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "config": config, "layers": [layer]}).encode()  # fmt: skip
    handler.send_response(200)
    handler.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def server_error(handler: http.server.BaseHTTPRequestHandler) -> None:
    handler.send_response(503)
    handler.send_header("Content-Length", "0")
    handler.end_headers()


def _json_answer(handler: http.server.BaseHTTPRequestHandler, body: bytes, content_type: str) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


#: 30 000 nested arrays: 60 KB, under the 64 KiB manifest limit, far past json's recursion limit.
DEEP_JSON = b"[" * 30_000 + b"]" * 30_000


def deep_manifest(handler: http.server.BaseHTTPRequestHandler) -> None:
    _json_answer(handler, DEEP_JSON, "application/vnd.oci.image.manifest.v1+json")


def manifest_with_a_5000_digit_number(handler: http.server.BaseHTTPRequestHandler) -> None:
    """Past Python's own int() limit of 4 300 digits (and far past float64)."""
    _json_answer(handler, b'{"schemaVersion": 1' + b"0" * 4999 + b"}", "application/vnd.oci.image.manifest.v1+json")


def deep_token_answer(handler: http.server.BaseHTTPRequestHandler) -> None:
    """A bearer challenge whose token service (this server, on loopback) answers nested arrays."""
    if handler.path.startswith("/token"):
        _json_answer(handler, DEEP_JSON, "application/json")
        return
    handler.send_response(401)
    handler.send_header("WWW-Authenticate", f'Bearer realm="http://{handler.headers["Host"]}/token",service="test"')
    handler.send_header("Content-Length", "0")
    handler.end_headers()


def _head_only(handler: http.server.BaseHTTPRequestHandler, fields: list[tuple[str, str]]) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
    for name, value in fields:
        handler.send_header(name, value)
    handler.send_header("Content-Length", "2")
    handler.end_headers()
    handler.wfile.write(b"{}")


def answer_with_101_header_fields(handler: http.server.BaseHTTPRequestHandler) -> None:
    """Over http.client's 100 header fields (Lib/http/client.py _MAXHEADERS)."""
    _head_only(handler, [(f"X-Field-{i}", "1") for i in range(101)])


def answer_with_a_70_kib_header_line(handler: http.server.BaseHTTPRequestHandler) -> None:
    """Over http.client's 64 KiB line (Lib/http/client.py _MAXLINE)."""
    _head_only(handler, [("X-Big", "a" * 70 * 1024)])


def manifest_declaring_5000_digits_of_length(handler: http.server.BaseHTTPRequestHandler) -> None:
    """A Content-Length of 5 000 digits: past int()'s own digit limit (4 300)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
    handler.send_header("Content-Length", "9" * 5000)
    handler.end_headers()
    handler.wfile.write(b"{}")
