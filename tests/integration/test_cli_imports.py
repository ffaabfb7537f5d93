"""Each command line imports only what it uses (issue 31): checked by module name, never by time.

A fresh interpreter runs the command as the ``manifest-provider`` script does
(``provider.cli.main``) and writes ``sys.modules`` when it exits. A key-only
``verify`` of upstream's signed ConfigMap (tests/data/interop/k8s-manifest-sigstore,
verified with its key) must not have loaded the cluster client, the service, the
keyless or OpenPGP code, the OCI client, the audit code, RE2's or x509's machinery
for a PEM key, or any other command's module; ``--help`` and ``--version`` load no
command and no verification code at all. What start-up then costs is measured in
``bench/cli_startup.py``; this test keeps the gain from going away unnoticed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provider.cli import COMMANDS
from tests.support.data import UPSTREAM

pytestmark = pytest.mark.integration

SIGNED = UPSTREAM / "manifests" / "cm-tarball-key-signed.yaml"
KEY = UPSTREAM / "keys" / "testpub.pem"

#: What a verify with a PEM key never needs: third-party packages and this package's modules (a name
#: stands for itself and everything under it).
NOT_FOR_A_KEY = (
    # the cluster, the service and its web stack, metrics, registries
    "kubernetes",
    "urllib3",
    "requests",
    "flask",
    "werkzeug",
    "gunicorn",
    "prometheus_client",
    # keyless and OpenPGP signatures
    "sigstore",
    "pysequoia",
    "cryptography.x509",
    "provider.keyless",
    "provider.keys.openpgp",
    "provider.keys.openpgp_packets",
    "provider.keys.cosign",
    # the rest of the package
    "provider.oci",
    "provider.kube",
    "provider.service",
    "provider.audit",
    "provider.policystore",
    "provider.neighbours",
    "provider.cache",
    "provider.signatures.signing",
    # standard-library modules loaded for a rare case only: a warning to log, a YAML number too large
    # for a float's exact digits, a float32 key, a dry-run name too long to keep (hashlib: a key's
    # fingerprint is taken with cryptography, loaded anyway)
    "logging",
    "hashlib",
    "decimal",
    "fractions",
)
#: Verification code and its libraries: what --help and --version must not load.
VERIFICATION = ("yaml", "cryptography", "provider.policy", "provider.verifier", "provider.parsing", "provider.keys")


def imported(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``manifest-provider ARGS`` in a fresh interpreter; its result and the modules loaded by its exit."""
    out = cwd / "modules.json"
    program = (
        "import atexit, json, sys\n"
        f"atexit.register(lambda: open({str(out)!r}, 'w').write(json.dumps(sorted(sys.modules))))\n"
        "from provider.cli import main\n"
        f"sys.exit(main({args!r}))\n"
    )
    # cwd: an empty directory, so the interpreter imports the installed package, not a folder it finds there.
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ), timeout=120, check=False)  # fmt: skip
    return done, json.loads(out.read_text())


def loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == name or m.startswith(name + ".") for name in names)]


def other_commands(command: str | None) -> tuple[str, ...]:
    return tuple(f"provider.cli.{name.replace('-', '_')}" for name in COMMANDS if name != command)


def test_a_key_only_verify_imports_nothing_it_does_not_need(tmp_path: Path) -> None:
    done, modules = imported(["verify", "-f", str(SIGNED), "-k", str(KEY)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("PASS [verified] ConfigMap sample-cm-signed"), done.stdout
    assert "provider.verifier" in modules  # it did verify, here
    assert loaded(modules, NOT_FOR_A_KEY) == []
    assert loaded(modules, other_commands("verify")) == []


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["verify", "--help"]], ids=" ".join)
def test_help_and_version_import_no_verification_code(tmp_path: Path, args: list[str]) -> None:
    done, modules = imported(args, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), "printed nothing"
    assert loaded(modules, VERIFICATION + NOT_FOR_A_KEY) == []
    command = args[0] if args[0] in COMMANDS else None
    assert loaded(modules, other_commands(command)) == []
