"""Bootstrap-token test material: RFC 7515 detached JWS computed independently, cluster-info, token Secrets.

Every signature here is computed from RFC 7515 itself (:func:`jws`: base64url
without padding, HMAC-SHA256 over ``header '.' payload``, payload detached),
never with the code under test. :data:`BROKEN` is the table of cluster-info
signatures broken one way each, with the reason each must get: the library's
tests (``tests/unit/neighbours/test_bootstrap.py``), the CLI's and the
service's use the same rows.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from provider.limits import DEFAULT_LIMITS
from tests.support.fakeapi import TokenApi
from tests.support.server import VERDICT_DEADLINE, Server, running_server

NOW = dt.datetime(2026, 1, 15, 12, 0, tzinfo=dt.UTC)
TOKEN_ID, TOKEN_SECRET = "abcdef", "0123456789abcdef"
OTHER_ID, OTHER_SECRET = "07401b", "f395accd246ae52d"


# --- RFC 7515, independently --------------------------------------------------------


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def jws(content: str, token_id: str, secret: str, *, header: bytes | None = None) -> str:
    """A detached compact JWS (RFC 7515 section 7.1 + Appendix F) with HS256 (RFC 7518 section 3.2)."""
    if header is None:
        header = json.dumps({"alg": "HS256", "kid": token_id}, separators=(",", ":")).encode()
    signing_input = b64u(header) + "." + b64u(content.encode())
    mac = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return b64u(header) + ".." + b64u(mac)


def make_ca(name: str) -> tuple[bytes, str]:
    """A self-signed CA certificate (PEM) and its kubeadm pin (sha256 of the SubjectPublicKeyInfo)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(1).not_valid_before(NOW - dt.timedelta(days=1)).not_valid_after(NOW + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    spki = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return cert.public_bytes(serialization.Encoding.PEM), "sha256:" + hashlib.sha256(spki).hexdigest()


CA_PEM, CA_PIN = make_ca("kubernetes")
_, OTHER_PIN = make_ca("somebody-else")


def kubeconfig(ca: bytes = CA_PEM, server: str = "https://10.138.0.2:6443") -> str:
    return (
        "apiVersion: v1\nclusters:\n- cluster:\n"
        f"    certificate-authority-data: {base64.b64encode(ca).decode()}\n"
        f"    server: {server}\n"
        '  name: ""\ncontexts: []\ncurrent-context: ""\nkind: Config\npreferences: {}\nusers: []\n'
    )


KUBECONFIG = kubeconfig()


def cluster_info(
    data: dict[str, Any] | None = None, *, name: str = "cluster-info", namespace: str = "kube-public"
) -> dict[str, Any]:
    if data is None:
        data = {"kubeconfig": KUBECONFIG, f"jws-kubeconfig-{TOKEN_ID}": jws(KUBECONFIG, TOKEN_ID, TOKEN_SECRET)}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


# --- token Secrets, as kubeadm writes them ---------------------------------------------


def secret(**fields: Any) -> dict[str, Any]:
    values = {"token-id": TOKEN_ID, "token-secret": TOKEN_SECRET, "usage-bootstrap-signing": "true", **fields}
    return {"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": f"bootstrap-token-{TOKEN_ID}", "namespace": "kube-system"},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}}  # fmt: skip


# --- broken one way each -------------------------------------------------------------

SIG_KEY = f"jws-kubeconfig-{TOKEN_ID}"
GOOD = jws(KUBECONFIG, TOKEN_ID, TOKEN_SECRET)
HEADER = b64u(b'{"alg":"HS256","kid":"abcdef"}')


def _std_b64_variant() -> tuple[str, str]:
    """A kubeconfig whose MAC's base64url has '-' or '_', and that MAC in standard base64."""
    for n in range(200):
        content = KUBECONFIG + f"# {n}\n"
        mac = jws(content, TOKEN_ID, TOKEN_SECRET).split("..")[1]
        if "-" in mac or "_" in mac:
            return content, f"{HEADER}..{mac.replace('-', '+').replace('_', '/')}"
    raise AssertionError("no MAC with '-' or '_' in 200 tries")


def _noncanonical_mac() -> str:
    """The good MAC with the unused low bits of its last character set: same bytes, different text."""
    mac = GOOD.split("..")[1]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(mac[-1])
    return (
        f"{HEADER}..{mac[:-1]}{alphabet[last | 0b11]}"
        if last & 0b11 != 0b11
        else f"{HEADER}..{mac[:-1]}{alphabet[last & ~0b11]}"
    )


STD_CONTENT, STD_VALUE = _std_b64_variant()


def hdr(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


BROKEN: list[tuple[str, dict[str, Any], str]] = [
    ("tampered-kubeconfig", {"kubeconfig": kubeconfig(server="https://evil.example:6443"), SIG_KEY: GOOD}, "signature-invalid"),
    ("other-ca", {"kubeconfig": kubeconfig(make_ca("evil")[0]), SIG_KEY: GOOD}, "signature-invalid"),
    ("wrong-secret", {"kubeconfig": KUBECONFIG, SIG_KEY: jws(KUBECONFIG, TOKEN_ID, "ffffffffffffffff")}, "signature-invalid"),
    ("unknown-token", {"kubeconfig": KUBECONFIG, "jws-kubeconfig-zzzzzz": jws(KUBECONFIG, "zzzzzz", "0123456789abcdef")}, "token-unknown"),
    ("padding", {"kubeconfig": KUBECONFIG, SIG_KEY: GOOD + "="}, "jws-malformed"),
    ("standard-base64", {"kubeconfig": STD_CONTENT, SIG_KEY: STD_VALUE}, "jws-malformed"),
    ("non-canonical-base64", {"kubeconfig": KUBECONFIG, SIG_KEY: _noncanonical_mac()}, "jws-malformed"),
    ("attached-payload", {"kubeconfig": KUBECONFIG, SIG_KEY: GOOD.replace("..", "." + b64u(KUBECONFIG.encode()) + ".")}, "jws-malformed"),
    ("two-parts", {"kubeconfig": KUBECONFIG, SIG_KEY: GOOD.replace("..", ".")}, "jws-malformed"),
    ("four-parts", {"kubeconfig": KUBECONFIG, SIG_KEY: GOOD + ".x"}, "jws-malformed"),
    ("short-mac", {"kubeconfig": KUBECONFIG, SIG_KEY: f"{HEADER}..{b64u(bytes(31))}"}, "jws-malformed"),
    ("whitespace", {"kubeconfig": KUBECONFIG, SIG_KEY: GOOD[:50] + "\n" + GOOD[50:]}, "jws-malformed"),
    ("not-a-string", {"kubeconfig": KUBECONFIG, SIG_KEY: 12345}, "jws-malformed"),
    ("empty", {"kubeconfig": KUBECONFIG, SIG_KEY: ""}, "jws-malformed"),
    ("header-not-json", {"kubeconfig": KUBECONFIG, SIG_KEY: jws(KUBECONFIG, TOKEN_ID, TOKEN_SECRET, header=b"alg=HS256")}, "jws-malformed"),
    ("header-duplicate-member", {"kubeconfig": KUBECONFIG, SIG_KEY: jws(KUBECONFIG, TOKEN_ID, TOKEN_SECRET, header=b'{"alg":"none","alg":"HS256","kid":"abcdef"}')}, "jws-malformed"),
    ("header-array", {"kubeconfig": KUBECONFIG, SIG_KEY: jws(KUBECONFIG, TOKEN_ID, TOKEN_SECRET, header=b'["HS256"]')}, "jws-malformed"),
    ("key-name-not-a-token-id", {"kubeconfig": KUBECONFIG, "jws-kubeconfig-ABC": jws(KUBECONFIG, "ABC", TOKEN_SECRET)}, "jws-malformed"),
    ("too-long", {"kubeconfig": KUBECONFIG, SIG_KEY: GOOD + "A" * 600}, "jws-malformed"),
    ("alg-none", {"kubeconfig": KUBECONFIG, SIG_KEY: b64u(hdr({"alg": "none", "kid": TOKEN_ID})) + ".."}, "jws-header-invalid"),
    ("alg-hs512", {"kubeconfig": KUBECONFIG, SIG_KEY: jws(KUBECONFIG, TOKEN_ID, TOKEN_SECRET, header=hdr({"alg": "HS512", "kid": TOKEN_ID}))}, "jws-header-invalid"),
    ("kid-mismatch", {"kubeconfig": KUBECONFIG, SIG_KEY: jws(KUBECONFIG, OTHER_ID, TOKEN_SECRET)}, "jws-header-invalid"),
    ("kid-missing", {"kubeconfig": KUBECONFIG, SIG_KEY: jws(KUBECONFIG, TOKEN_ID, TOKEN_SECRET, header=hdr({"alg": "HS256"}))}, "jws-header-invalid"),
    ("b64-false", {"kubeconfig": KUBECONFIG, SIG_KEY: jws(KUBECONFIG, TOKEN_ID, TOKEN_SECRET, header=hdr({"alg": "HS256", "kid": TOKEN_ID, "b64": False, "crit": ["b64"]}))}, "jws-header-invalid"),
    ("members-reordered", {"kubeconfig": KUBECONFIG, SIG_KEY: jws(KUBECONFIG, TOKEN_ID, TOKEN_SECRET, header=b'{"kid":"abcdef","alg":"HS256"}')}, "jws-header-invalid"),
    ("header-spaces", {"kubeconfig": KUBECONFIG, SIG_KEY: jws(KUBECONFIG, TOKEN_ID, TOKEN_SECRET, header=b'{"alg": "HS256", "kid": "abcdef"}')}, "jws-header-invalid"),
    ("no-kubeconfig", {SIG_KEY: GOOD}, "cluster-info-invalid"),
    ("kubeconfig-not-a-string", {"kubeconfig": {"clusters": []}, SIG_KEY: GOOD}, "cluster-info-invalid"),
    ("too-many-signatures", {"kubeconfig": KUBECONFIG, **{f"jws-kubeconfig-{i:06d}": GOOD for i in range(DEFAULT_LIMITS.max_jws_signatures + 1)}}, "cluster-info-invalid"),
]  # fmt: skip


#: The bootstrap token the shipped cluster-info policy samples name (policies/*/verify-cluster-info).
SAMPLE_TOKEN_ID, SAMPLE_TOKEN_SECRET = "07401b", "f395accd246ae52d"


@contextlib.contextmanager
def serving_with_sample_token(directory: Path) -> Iterator[Server]:
    """The real server with a fake API server that holds :data:`SAMPLE_TOKEN_ID`'s bootstrap-token Secret."""
    token = secret(**{"token-id": SAMPLE_TOKEN_ID, "token-secret": SAMPLE_TOKEN_SECRET})
    token["metadata"]["name"] = f"bootstrap-token-{SAMPLE_TOKEN_ID}"
    api = TokenApi(secrets={f"bootstrap-token-{SAMPLE_TOKEN_ID}": token}).start()
    try:
        with running_server(
            env={"MANIFEST_PROVIDER_KUBECONFIG": str(api.kubeconfig(directory / "kubeconfig")), **VERDICT_DEADLINE}
        ) as running:
            yield running
    finally:
        api.stop()
