"""What a Gatekeeper call costs the server on a fresh TLS connection, against a kept-alive one.

Gatekeeper's external-data client (open-policy-agent/frameworks
``constraint/pkg/externaldata/request.go``) sets ``MinVersion: TLS 1.3`` and
no ``ClientSessionCache``: every connection it opens is a full TLS 1.3
handshake with its client certificate. Up to frameworks' per-provider client
cache it opened one for every call; with the cache it keeps idle connections
(90 s) and reuses them. This measures both cases on the real server
(``manifest-provider serve``, one worker) with one-key Gatekeeper requests
about a signed ConfigMap:

* **server CPU per call** -- user + system seconds of the worker process
  (``psutil``), so the client's share of the machine does not count;
* **latency** p50 as the client sees it.

And, in this process, the server side of one full TLS 1.3 handshake (thread
CPU) for the choices the service makes: an ECDSA P-256 against an RSA-2048
server key, no session tickets against OpenSSL's default two, with and without
a client certificate to verify. Configurations are interleaved over
``--rounds`` rounds and the median of the rounds' medians is reported: the
machine is shared, and a single run drifts by more than the differences.

Usage: ``python bench/handshake.py [--calls N] [--json]``
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from provider.keys.pem import generate_key, public_pem
from provider.service import serve
from provider.service.devcerts import DevPki, make_dev_pki
from provider.signatures.signing import sign_documents
from tests.support.server import Server, running_server

PATH = "/v1/gatekeeper/verify"


def gatekeeper_body() -> bytes:
    signer = generate_key("ecdsa-p256")
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "bench", "namespace": "team"},
        "data": {"k": "v"},
    }
    (signed,) = sign_documents([obj], signer)
    review = {"operation": "CREATE", "namespace": "team", "name": "bench", "object": signed,
              "userInfo": {"username": "alice", "groups": ["system:authenticated"]}}  # fmt: skip
    key = json.dumps({"review": review, "policy": {"keys": [public_pem(signer).decode()]}})
    return json.dumps(
        {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest", "request": {"keys": [key]}}
    ).encode()


def worker_cpu(server: Server) -> float:
    return sum(sum(p.cpu_times()[:2]) for p in psutil.Process(server.pid).children())


def gatekeeper_context(server: Server) -> ssl.SSLContext:
    context = server.ssl_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_3  # as Gatekeeper's client
    return context


def fresh(server: Server, body: bytes, calls: int) -> tuple[float, float]:
    """Server CPU seconds per call and p50 latency, one new TLS connection per call."""
    context = gatekeeper_context(server)
    latencies = []
    before = worker_cpu(server)
    for _ in range(calls):
        start = time.perf_counter()
        conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context)
        conn.request("POST", PATH, body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        conn.close()
        assert response.status == 200
        latencies.append(time.perf_counter() - start)
    return (worker_cpu(server) - before) / calls, statistics.median(latencies)


def kept_alive(server: Server, body: bytes, calls: int) -> tuple[float, float]:
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=gatekeeper_context(server))
    latencies = []
    before = worker_cpu(server)
    for _ in range(calls):
        start = time.perf_counter()
        conn.request("POST", PATH, body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        assert response.status == 200
        latencies.append(time.perf_counter() - start)
    conn.close()
    return (worker_cpu(server) - before) / calls, statistics.median(latencies)


# --- one handshake, in process ---------------------------------------------------------------


def rsa_pki(directory: Path, dev: DevPki) -> DevPki:
    """The dev PKI with an RSA-2048 server key and certificate (same CA, same names)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench CA")])
    now = datetime.datetime.now(datetime.UTC)
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))  # fmt: skip
    key = rsa.generate_private_key(65537, 2048)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (directory / "server.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "server.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                             serialization.NoEncryption()))  # fmt: skip
    return DevPki(
        directory,
        directory / "ca.crt",
        directory / "server.crt",
        directory / "server.key",
        dev.client_cert,
        dev.client_key,
    )


def _server_side(server: ssl.SSLSocket, spent: list[float]) -> None:
    start = time.thread_time()
    server.do_handshake()
    server.recv(1)  # the client's first byte: the handshake is complete on both sides
    spent.append(time.thread_time() - start)


def handshake_cpu(pki: DevPki, client_ca: Path | None, tickets: int, n: int) -> float:
    """Server thread CPU seconds for one full TLS 1.3 handshake (median of ``n``); with a client certificate if ``client_ca``."""
    server_context = serve.tls_context(str(pki.server_cert), str(pki.server_key), str(client_ca) if client_ca else None)
    server_context.num_tickets = tickets
    client_context = ssl.create_default_context(cafile=str(pki.ca_cert))
    if client_ca is not None:
        client_context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    client_context.minimum_version = ssl.TLSVersion.TLSv1_3
    costs: list[float] = []
    for _ in range(n):
        a, b = socket.socketpair()
        server = server_context.wrap_socket(a, server_side=True, do_handshake_on_connect=False)
        client = client_context.wrap_socket(b, server_hostname="localhost", do_handshake_on_connect=False)
        spent: list[float] = []
        thread = threading.Thread(target=_server_side, args=(server, spent))
        thread.start()
        client.do_handshake()
        client.sendall(b"x")
        thread.join()
        costs.append(spent[0])
        server.close()
        client.close()
    return statistics.median(costs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {}

    with tempfile.TemporaryDirectory() as tmp:
        dev = make_dev_pki(Path(tmp) / "dev")
        other = rsa_pki(Path(tmp) / "rsa", dev)
        configs = [(f"{key}, {tickets} tickets, {'client cert' if ca else 'no client cert'}", pki, ca, tickets)
                   for ca in (dev.ca_cert, None) for key, pki in (("ecdsa-p256", dev), ("rsa-2048", other)) for tickets in (0, 2)]  # fmt: skip
        rounds: dict[str, list[float]] = {label: [] for label, *_ in configs}
        for _ in range(args.rounds):
            for label, pki, ca, tickets in configs:
                handshake_cpu(pki, ca, tickets, 10)  # warm-up
                rounds[label].append(handshake_cpu(pki, ca, tickets, args.calls))
        for label, values in rounds.items():
            results[f"handshake_server_ms[{label}]"] = 1000 * statistics.median(values)

    body = gatekeeper_body()
    with running_server(args=("--workers", "1", "--threads", "4")) as server:
        kept_alive(server, body, 50)  # warm-up: imports, the policy cache
        fresh(server, body, 50)
        cpu_kept, p50_kept = kept_alive(server, body, args.calls)
        cpu_fresh, p50_fresh = fresh(server, body, args.calls)
    results.update({
        "kept_alive_server_cpu_ms": 1000 * cpu_kept, "kept_alive_p50_ms": 1000 * p50_kept,
        "fresh_server_cpu_ms": 1000 * cpu_fresh, "fresh_p50_ms": 1000 * p50_fresh,
        "fresh_over_kept_alive_cpu": cpu_fresh / cpu_kept, "fresh_over_kept_alive_p50": p50_fresh / p50_kept,
    })  # fmt: skip
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for name, value in results.items():
            print(f"{name:60s} {value:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
