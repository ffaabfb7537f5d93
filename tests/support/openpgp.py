"""Real GnuPG for the OpenPGP tests: keys made, changed and used by Debian's ``gpg`` binary.

Every key and signature the OpenPGP tests check comes from ``/usr/bin/gpg``
(``make install`` installs the ``gnupg`` package), never from the library
under test. A missing ``gpg`` fails the tests: nothing is skipped.

``faked`` times use gpg's ``--faked-system-time`` so a key can have expired
before the test runs, or a self-signature can predate a signature.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

GPG = shutil.which("gpg") or "/usr/bin/gpg"


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%dT%H%M%S")


def ago(**delta: float) -> str:
    return stamp(datetime.now(UTC) - timedelta(**delta))


class Gpg:
    """One throw-away GnuPG home (``GNUPGHOME``); :meth:`close` stops its agent."""

    def __init__(self, home: Path) -> None:
        if not Path(GPG).exists():
            raise AssertionError("gpg is not installed; `make install` installs Debian's gnupg package")
        self.home = home
        home.mkdir(mode=0o700, parents=True, exist_ok=True)

    def run(self, *args: str, stdin: bytes | None = None, faked: str | None = None) -> bytes:
        command = [GPG, "--batch", "--no-tty", "--homedir", str(self.home)]
        if faked:
            command += ["--faked-system-time", faked]
        done = subprocess.run(
            [*command, *args],
            check=False,
            input=stdin,
            capture_output=True,
            timeout=60,
            env={**os.environ, "LC_ALL": "C"},
        )
        if done.returncode != 0:
            raise AssertionError(f"gpg {' '.join(args)} failed: {done.stderr.decode(errors='replace')}")
        return done.stdout

    def generate(
        self,
        email: str,
        *,
        key_type: str = "EDDSA",
        curve: str = "ed25519",
        primary_usage: str = "cert",
        subkey_usage: str | None = "sign",
        expire: str = "0",
        subkey_expire: str | None = None,
        faked: str | None = None,
    ) -> str:
        """A new key pair (primary for ``primary_usage``, a subkey for ``subkey_usage``); its fingerprint."""
        curve_line = f"Key-Curve: {curve}\n" if key_type in ("EDDSA", "ECDSA") else "Key-Length: 3072\n"
        params = f"%no-protection\nKey-Type: {key_type}\n{curve_line}Key-Usage: {primary_usage}\n"
        if subkey_usage:
            params += f"Subkey-Type: {key_type}\n{curve_line.replace('Key-', 'Subkey-')}Subkey-Usage: {subkey_usage}\n"
        params += f"Name-Real: {email.split('@', maxsplit=1)[0]}\nName-Email: {email}\nExpire-Date: {expire}\n%commit\n"
        self.run("--gen-key", stdin=params.encode(), faked=faked)
        fingerprint = self.fingerprint(email)
        if subkey_expire is not None:
            sub = self.fingerprints(email)[1]
            self.run("--quick-set-expire", fingerprint, subkey_expire, sub, faked=faked)
        return fingerprint

    def fingerprints(self, who: str) -> list[str]:
        listing = self.run("--with-colons", "--list-keys", who).decode()
        return [line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")]

    def fingerprint(self, who: str) -> str:
        return self.fingerprints(who)[0]

    def sign(self, who: str, data: bytes, *, faked: str | None = None, textmode: bool = False) -> bytes:
        """``gpg --detach-sign --armor`` over ``data``, as Integrity Shield's script signs."""
        extra = ["--textmode"] if textmode else []
        return self.run(
            "--local-user", who, "--detach-sign", "--armor", *extra, "--output", "-", stdin=data, faked=faked
        )

    def export(self, who: str, *, armor: bool = True) -> bytes:
        return self.run("--export", *(["--armor"] if armor else []), who)

    def export_secret(self, who: str) -> bytes:
        return self.run("--export-secret-keys", "--armor", who)

    def revoke(self, fingerprint: str) -> None:
        """Import the revocation certificate gpg wrote when it made the key."""
        text = (self.home / "openpgp-revocs.d" / f"{fingerprint}.rev").read_text()
        self.run("--import", stdin=text.replace(":-----BEGIN", "-----BEGIN").encode())

    def edit(self, fingerprint: str, commands: str, *, faked: str | None = None) -> None:
        self.run("--expert", "--command-fd", "0", "--status-fd", "2", "--edit-key", fingerprint,
                 stdin=commands.encode(), faked=faked)  # fmt: skip

    def revoke_subkey(self, fingerprint: str) -> None:
        self.edit(fingerprint, "key 1\nrevkey\ny\n0\n\ny\nsave\n")

    def subkey_usage_to_authentication(self, fingerprint: str, *, faked: str | None = None) -> None:
        """Take the signing capability from subkey 1 (a newer binding signature says: authentication only)."""
        self.edit(fingerprint, "key 1\nchange-usage\nS\nA\nQ\nsave\n", faked=faked)

    def close(self) -> None:
        subprocess.run(
            ["gpgconf", "--homedir", str(self.home), "--kill", "all"], check=False, capture_output=True, timeout=30
        )
