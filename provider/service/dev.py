"""``make run``: the service on https://127.0.0.1:8443 with throw-away certificates.

Writes under ``.dev/`` (or ``$MANIFEST_PROVIDER_DEV_DIR``):

* a CA, a server certificate for 127.0.0.1/localhost and a client certificate
  (:func:`provider.service.devcerts.make_dev_pki`);
* ``signing.pub`` (the private half is thrown away) and ``sample.yaml``, a
  ConfigMap signed with it;
* ``kyverno-request.json`` and ``gatekeeper-request.json``: ready-made bodies
  that ask the service about the sample;

prints a ``curl`` command that verifies the sample, then serves in the
foreground with client certificates required (Ctrl-C stops it), the metrics
port beside the API on 127.0.0.1.

Both ports are taken first, before anything is written or printed: a port in
use fails at once (exit 2) with one line that names it and the ``make run``
variable that changes it (``RUN_PORT``, ``METRICS_PORT``; gunicorn itself would
retry for five seconds after the curl lines). The bound sockets are handed to
the server (``fd://N``), so nothing can take a port in between.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
from pathlib import Path
from typing import Any

from ..errors import ProviderError
from ..keys.pem import generate_key, public_pem
from ..signatures.signing import dump_yaml, sign_documents
from .devcerts import CLIENT_NAME, DevPki, make_dev_pki

DEV_DIR = Path(os.environ.get("MANIFEST_PROVIDER_DEV_DIR", ".dev"))
HOST = "127.0.0.1"
PORT = 8443
#: The metrics port, as in a cluster (Gatekeeper's and ratify's 8888); ``METRICS_PORT=0`` turns it off.
METRICS_PORT = 8888

SAMPLE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "sample", "namespace": "default"},
    "data": {"greeting": "hello, signed world"},
}


def write_samples(directory: Path) -> dict[str, Path]:
    """Sign the sample with a fresh key and write the request bodies that ask about it."""
    key = generate_key("ecdsa-p256")
    public = public_pem(key).decode()
    (signed,) = sign_documents([json.loads(json.dumps(SAMPLE))], key)
    policy = {"keys": [public]}
    review = {
        "uid": "00000000-0000-0000-0000-000000000001",
        "operation": "CREATE",
        "namespace": "default",
        "name": "sample",
        "userInfo": {"username": "dev@example.com", "groups": ["system:authenticated"]},
        "object": signed,
    }
    paths = {
        "public key": directory / "signing.pub",
        "signed sample": directory / "sample.yaml",
        "kyverno": directory / "kyverno-request.json",
        "gatekeeper": directory / "gatekeeper-request.json",
    }
    paths["public key"].write_text(public)
    paths["signed sample"].write_text(dump_yaml([signed]))
    paths["kyverno"].write_text(json.dumps({"request": review, "policy": policy}, indent=2) + "\n")
    key_text = json.dumps({"review": review, "policy": policy})
    request = {
        "apiVersion": "externaldata.gatekeeper.sh/v1beta1",
        "kind": "ProviderRequest",
        "request": {"keys": [key_text]},
    }
    paths["gatekeeper"].write_text(json.dumps(request, indent=2) + "\n")
    return paths


def curl_command(pki: DevPki, body: Path, path: str, port: int = PORT) -> str:
    words = [
        "curl",
        "--cacert",
        str(pki.ca_cert),
        "--cert",
        str(pki.client_cert),
        "--key",
        str(pki.client_key),
        "--data-binary",
        f"@{body}",
        f"https://{HOST}:{port}{path}",
    ]
    return " ".join(shlex.quote(w) for w in words)


def take_port(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (as gunicorn binds: ``SO_REUSEADDR``), or OSError when it is taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(16)
    except OSError:
        sock.close()
        raise
    return sock


def _port(name: str, default: int) -> int:
    text = os.environ.get(name, str(default))
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise SystemExit(f"make run: {text!r} is not a TCP port")
    return port


def main() -> int:
    from .serve import serve  # gunicorn loads after the files are written

    port = _port("MANIFEST_PROVIDER_PORT", PORT)
    metrics_port = _port("MANIFEST_PROVIDER_METRICS_PORT", METRICS_PORT)
    taken: list[socket.socket] = []
    for number, what, variable in ((port, "the API", "RUN_PORT"), (metrics_port, "metrics", "METRICS_PORT")):
        if number == 0 and variable == "METRICS_PORT":
            continue  # METRICS_PORT=0: no metrics port
        try:
            taken.append(take_port(HOST, number))
        except OSError as exc:
            print(
                f"make run: port {number} ({what}) on {HOST} is not free ({exc.strerror}); stop what uses it "
                f"(ss -ltnp 'sport = :{number}') or pick another: make run {variable}={number + 1}",
                file=sys.stderr,
            )
            return 2
    pki = make_dev_pki(DEV_DIR)
    paths = write_samples(DEV_DIR)
    print(f"throw-away CA, server and client certificates in {DEV_DIR}/; sample signed with {paths['public key']}")
    print("\nverify the signed sample (Kyverno route):\n")
    print("  " + curl_command(pki, paths["kyverno"], "/v1/kyverno/verify", port))
    print("\nthe same through the Gatekeeper route:\n")
    print("  " + curl_command(pki, paths["gatekeeper"], "/v1/gatekeeper/verify", port))
    print(f"\nserving https://{HOST}:{port} (client certificates required; Ctrl-C stops)")
    settings: dict[str, Any] = {
        "BIND": f"fd://{taken[0].detach()}",
        "PORT": port,
        "CERT": str(pki.server_cert),
        "KEY": str(pki.server_key),
        "CLIENT_CA": str(pki.ca_cert),
        # The throw-away client certificate is the one caller (the default list names the cluster's engines).
        "CALLERS": f"cert:{CLIENT_NAME}",
        "METRICS_PORT": metrics_port,
    }
    if metrics_port:
        print(f"metrics on http://{HOST}:{metrics_port}/metrics (no credentials; only this machine can reach it)")
        settings["METRICS_BIND"] = f"fd://{taken[1].detach()}"
    print(flush=True)
    try:
        return serve(settings)
    except ProviderError as exc:  # what `manifest-provider serve` would say, as one line, not a traceback
        print(f"make run: {exc.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
