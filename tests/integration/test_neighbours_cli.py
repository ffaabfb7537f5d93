"""``manifest-provider verify-cluster-info`` and ``verify-csr`` as a user runs them: verdicts, JSON, exit codes."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import bootstrap
from tests.support import csr as csrs
from tests.support.bootstrap import (
    CA_PIN,
    KUBECONFIG,
    OTHER_ID,
    OTHER_PIN,
    OTHER_SECRET,
    SIG_KEY,
    TOKEN_ID,
    TOKEN_SECRET,
    cluster_info,
    jws,
    secret,
)

pytestmark = pytest.mark.integration

TOKEN = f"{TOKEN_ID}.{TOKEN_SECRET}"


def cli(*args: str | Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MANIFEST_PROVIDER_")}
    return subprocess.run(
        [sys.executable, "-m", "provider.cli", *map(str, args)],
        capture_output=True, text=True, env={**env, "COLUMNS": "100"}, input=stdin, timeout=60, check=False,
    )  # fmt: skip


def write(path: Path, *docs: Any) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


def results(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    answer = json.loads(proc.stdout)
    assert set(answer) == {"results", "summary"}  # verify's shape (docs/cli.md, verify)
    assert all({"object", "result"} <= set(r) for r in answer["results"])
    assert answer["summary"]["objects"] == len(answer["results"])
    return answer["results"]  # type: ignore[no-any-return]


# --- verify-cluster-info ---------------------------------------------------------------------

TAMPERED = cluster_info(
    {"kubeconfig": KUBECONFIG.replace("6443", "7443"), SIG_KEY: jws(KUBECONFIG, TOKEN_ID, TOKEN_SECRET)}
)


@pytest.mark.parametrize(
    ("doc", "extra", "code", "reason"),
    [
        (cluster_info(), [], 0, "verified"),
        (TAMPERED, [], 1, "signature-invalid"),
        (cluster_info({"kubeconfig": KUBECONFIG}), [], 3, "no-signatures"),  # allowed, but nothing was checked
        (cluster_info({"kubeconfig": KUBECONFIG}), ["--require-signature"], 1, "unsigned"),
        (cluster_info(), ["--ca-cert-hash", CA_PIN], 0, "verified"),
        (cluster_info(), ["--ca-cert-hash", OTHER_PIN], 1, "ca-pin-mismatch"),
        (cluster_info(name="backup", namespace="default"), [], 0, "verified"),
        ({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}, [], 1, "cluster-info-invalid"),
    ],
    ids=[
        "valid",
        "tampered",
        "unsigned",
        "unsigned-required",
        "pinned",
        "pin-mismatch",
        "any-configmap",
        "not-a-configmap",
    ],
)
def test_verify_cluster_info(tmp_path: Path, doc: dict[str, Any], extra: list[str], code: int, reason: str) -> None:
    proc = cli("verify-cluster-info", "-f", write(tmp_path / "cm.yaml", doc), "--token", TOKEN, *extra, "-o", "json")
    assert proc.returncode == code, proc.stderr
    assert [r["reason"] for r in results(proc)] == [reason]


def each_case_denied(
    proc: subprocess.CompletedProcess[str], cases: Sequence[tuple[str, Any, str]], prefix: Callable[[str], str]
) -> None:
    """Exit 1, and one denial per (case, input, reason) in order, with its reason and a message naming the case."""
    assert proc.returncode == 1, proc.stderr
    got = results(proc)
    assert {case: r["reason"] for (case, _, _), r in zip(cases, got, strict=True)} == {
        case: reason for case, _, reason in cases
    }
    for (case, _, _), r in zip(cases, got, strict=True):
        assert (r["allowed"], r["verified"]) == (False, False), case
        assert r["message"].startswith(prefix(case)), r["message"]


def test_every_broken_signature_through_the_cli(tmp_path: Path) -> None:
    # The library's table of JWS breaks (tests/support/bootstrap.py), as a user would meet them: one
    # ConfigMap per case in one file (so the table costs one process), each named after its case --
    # the CLI checks any ConfigMap -- and both tokens the library's source knows given as --token.
    cases = bootstrap.BROKEN
    docs = [cluster_info(data, name=case) for case, data, _ in cases]
    tokens = ["--token", TOKEN, "--token", f"{OTHER_ID}.{OTHER_SECRET}"]
    proc = cli("verify-cluster-info", "-f", write(tmp_path / "cms.yaml", *docs), *tokens, "-o", "json")
    each_case_denied(proc, cases, lambda case: f"ConfigMap kube-public/{case}")
    # Refusing a signature names the key and the reason, never the secret it was checked with.
    assert TOKEN_SECRET not in proc.stdout and OTHER_SECRET not in proc.stdout


def test_cluster_info_without_the_token_is_unknown(tmp_path: Path) -> None:
    proc = cli("verify-cluster-info", "-f", write(tmp_path / "cm.yaml", cluster_info()))
    assert proc.returncode == 1
    assert proc.stdout.startswith(
        f"FAIL [token-unknown] ConfigMap kube-public/cluster-info: 1 of 1 signatures refused: {SIG_KEY}: [token-unknown]"
    )
    assert "--token" in proc.stdout


def test_text_output_and_stdin(tmp_path: Path) -> None:
    proc = cli("verify-cluster-info", "-f", "-", "--token", TOKEN, stdin=yaml.safe_dump(cluster_info()))
    assert proc.returncode == 0, proc.stderr
    assert (
        proc.stdout
        == f"PASS [verified] ConfigMap kube-public/cluster-info: data.kubeconfig is signed by bootstrap token(s) {TOKEN_ID}\n"
    )


@pytest.mark.parametrize(
    ("fields", "code", "reason"),
    [
        ({}, 0, "verified"),
        ({"expiration": "2020-01-01T00:00:00Z"}, 1, "token-expired"),
        ({"usage-bootstrap-signing": "false"}, 1, "token-not-for-signing"),
    ],
    ids=["valid", "expired", "not-for-signing"],
)
def test_token_from_a_secret_file(tmp_path: Path, fields: dict[str, str], code: int, reason: str) -> None:
    token_file = write(tmp_path / "token.yaml", {"apiVersion": "v1", "kind": "List", "items": [secret(**fields)]})
    proc = cli(
        "verify-cluster-info",
        "-f",
        write(tmp_path / "cm.yaml", cluster_info()),
        "--token-secret",
        token_file,
        "-o",
        "json",
    )
    assert proc.returncode == code, proc.stderr
    assert [r["reason"] for r in results(proc)] == [reason]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--token", "abcdef:0123456789abcdef"], "a bootstrap token is"),
        (["--token", TOKEN, "--ca-cert-hash", "md5:abc"], "sha256:<64 hex digits>"),
        (["--token-secret", "MISSING"], "No such file"),
    ],
    ids=["bad-token", "bad-pin", "missing-secret-file"],
)
def test_cluster_info_usage_errors(tmp_path: Path, args: list[str], says: str) -> None:
    proc = cli(
        "verify-cluster-info",
        "-f",
        write(tmp_path / "cm.yaml", cluster_info()),
        *[str(tmp_path / a) if a == "MISSING" else a for a in args],
    )
    assert proc.returncode == 2
    assert says in proc.stderr
    assert TOKEN_SECRET not in proc.stderr


def test_secret_file_that_is_not_a_token(tmp_path: Path) -> None:
    other = write(tmp_path / "s.yaml", {**secret(), "type": "Opaque"})
    proc = cli("verify-cluster-info", "-f", write(tmp_path / "cm.yaml", cluster_info()), "--token-secret", other)
    assert proc.returncode == 2
    assert "not a usable bootstrap-token-<id> Secret" in proc.stderr


# --- verify-csr ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "flags", "code", "reason"),
    [
        (csrs.csr(), [], 0, "verified"),
        (csrs.csr(), ["--provider-regex", r"^worker-\d+\.example\.com$", "--ip-prefixes", "10.0.0.0/24,fc00::/7"], 0, "verified"),
        (csrs.csr(), ["--provider-regex", r"^node-\w*\.int\.company\.ch$"], 1, "csr-dns-name-not-allowed"),
        (csrs.csr(), ["--ip-prefixes", "192.168.0.0/16"], 1, "csr-ip-not-allowed"),
        (csrs.csr(expiration=86401), ["--max-expiration-sec", "86400"], 1, "csr-expiration-too-long"),
        (csrs.csr(csrs.pem_request(dns=("worker-1.a.com", "worker-1.b.com"))), [], 1, "csr-too-many-dns-names"),
        (csrs.csr(csrs.pem_request(dns=("worker-1.a.com", "worker-1.b.com"))), ["--allowed-dns-names", "2"], 0, "verified"),
        (csrs.csr(csrs.pem_request(dns=("api.example.com",))), [], 1, "csr-dns-name-not-prefixed"),
        (csrs.csr(csrs.pem_request(dns=("api.example.com",))), ["--bypass-hostname-check"], 0, "verified"),
        (csrs.localhost_csr(("127.0.0.1", "10.0.0.5")), ["--resolve-dns-names", "--dns-timeout", "1"], 1, "csr-ip-not-resolved"),
    ],
    ids=["compliant", "compliant-with-flags", "regex", "ip-prefixes", "max-expiration", "two-dns-names", "allowed-dns-names",
         "not-prefixed", "bypass-hostname-check", "resolve"],
)  # fmt: skip
def test_verify_csr(tmp_path: Path, obj: dict[str, Any], flags: list[str], code: int, reason: str) -> None:
    proc = cli("verify-csr", "-f", write(tmp_path / "csr.yaml", obj), *flags, "-o", "json")
    assert proc.returncode == code, proc.stderr
    assert [r["reason"] for r in results(proc)] == [reason]


#: verify-csr's flag for each library policy field (the inverse of provider.cli.verify_csr.build_policy).
CSR_FLAGS = {
    "providerRegex": "--provider-regex",
    "maxExpirationSeconds": "--max-expiration-sec",
    "allowedDnsNames": "--allowed-dns-names",
}


def csr_flags(policy: dict[str, Any]) -> tuple[str, ...]:
    """A library policy as the ``verify-csr`` flags a user would type for it."""
    flags: list[str] = []
    for field, setting in policy.items():
        if field == "bypassHostnameCheck":
            assert setting is True, policy
            flags.append("--bypass-hostname-check")
        elif field == "providerIpPrefixes":
            flags += ["--ip-prefixes", setting if isinstance(setting, str) else ",".join(setting)]
        else:
            assert field in CSR_FLAGS, f"no verify-csr flag for the policy field {field!r}: add it to CSR_FLAGS"
            flags += [CSR_FLAGS[field], str(setting)]
    return tuple(flags)


def broken_csrs_by_flags() -> dict[tuple[str, ...], list[tuple[str, dict[str, Any], str]]]:
    """The library's one-rule-broken CSRs (tests/support/csr.py BROKEN), grouped by the flags they need."""
    groups: dict[tuple[str, ...], list[tuple[str, dict[str, Any], str]]] = {}
    for case, obj, policy, reason in csrs.BROKEN:
        groups.setdefault(csr_flags(policy), []).append((case, obj, reason))
    return groups


CSR_GROUPS = broken_csrs_by_flags()


@pytest.mark.parametrize(
    ("flags", "cases"), list(CSR_GROUPS.items()), ids=[" ".join(f) or "no-flags" for f in CSR_GROUPS]
)
def test_every_broken_csr_rule_through_the_cli(
    tmp_path: Path, flags: tuple[str, ...], cases: list[tuple[str, Any, str]]
) -> None:
    # One process per flag combination, not per case (~0.35 s each: 38 would add ~13 s): the CSRs go in one
    # multi-document file, each named after its case, and verify-csr answers one result per document,
    # in order. The compliant control (exit 0) is test_verify_csr[compliant].
    docs = []
    for case, obj, _ in cases:
        doc = copy.deepcopy(obj)
        doc["metadata"]["name"] = case
        docs.append(doc)
    proc = cli("verify-csr", "-f", write(tmp_path / "csrs.yaml", *docs), *flags, "-o", "json")
    each_case_denied(proc, cases, lambda case: f"CertificateSigningRequest {case} breaks 1 rule: ")


def test_verify_csr_reads_a_list_as_kubectl_prints_it(tmp_path: Path) -> None:
    items = [csrs.csr(name="good"), csrs.csr(csrs.pem_request(orgs=("system:masters",)), name="bad"),
             csrs.csr(usages=["digital signature", "client auth"], signer="kubernetes.io/kube-apiserver-client-kubelet", name="client")]  # fmt: skip
    proc = cli("verify-csr", "-f", write(tmp_path / "csrs.yaml", {"apiVersion": "v1", "kind": "List", "items": items}))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0] == "PASS [verified] CertificateSigningRequest good passes every kubelet-serving check"
    assert lines[1].startswith("FAIL [csr-organization-invalid] CertificateSigningRequest bad breaks 1 rule")
    assert lines[2].startswith(
        "ALLOW [out-of-scope] CertificateSigningRequest client is for signer 'kubernetes.io/kube-apiserver-client-kubelet'"
    )


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--provider-regex", "(unclosed"], "providerRegex: not a valid regular expression"),
        (["--ip-prefixes", "10.0.0.0/33"], "not an IP prefix"),
        (["--max-expiration-sec", str(368 * 86400)], "maxExpirationSeconds"),
        (["--dns-timeout", "9"], "dnsTimeoutSeconds"),
    ],
    ids=["bad-regex", "bad-prefix", "expiration-over-max", "timeout-over-max"],
)
def test_verify_csr_usage_errors(tmp_path: Path, flags: list[str], says: str) -> None:
    proc = cli("verify-csr", "-f", write(tmp_path / "csr.yaml", csrs.csr()), *flags)
    assert proc.returncode == 2
    assert says in proc.stderr


def test_verify_csr_refuses_other_kinds(tmp_path: Path) -> None:
    proc = cli("verify-csr", "-f", write(tmp_path / "x.yaml", cluster_info()), "-o", "json")
    assert proc.returncode == 1
    assert [r["reason"] for r in results(proc)] == ["csr-malformed"]
