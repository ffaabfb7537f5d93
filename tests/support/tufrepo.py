"""A TUF repository the tests build with python-tuf's metadata API and serve on loopback (plain HTTP).

One root key and one key for the three online roles (targets, snapshot,
timestamp), threshold 1; ``consistent_snapshot`` off, so files are served under
their plain names (``timestamp.json``, ``snapshot.json``, ``targets.json``,
``targets/<name>``) and roots as ``<version>.root.json``, the layout
``tuf.ngclient.Updater`` reads. :meth:`TufRepo.rotate_root` makes a new root
version with a new root key, signed by the old key and the new one, as a TUF
root rotation must be (the TUF specification, 5.3.4).
"""

from __future__ import annotations

import functools
import http.server
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from securesystemslib.signer import CryptoSigner
from tuf.api.metadata import Metadata, MetaFile, Root, Snapshot, TargetFile, Targets, Timestamp
from tuf.api.serialization.json import JSONSerializer


def _in(days: float) -> datetime:
    return (datetime.now(UTC) + timedelta(days=days)).replace(microsecond=0)


class TufRepo:
    """Metadata in memory, published to ``directory`` and served by :meth:`serve`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        (directory / "targets").mkdir(parents=True, exist_ok=True)
        self.root_signer = CryptoSigner.generate_ecdsa()
        self.online = CryptoSigner.generate_ecdsa()
        root = Root(expires=_in(365), consistent_snapshot=False)
        root.add_key(self.root_signer.public_key, "root")
        for role in ("targets", "snapshot", "timestamp"):
            root.add_key(self.online.public_key, role)
        self.root = Metadata(root)
        self.targets = Metadata(Targets(expires=_in(30)))
        self.snapshot = Metadata(Snapshot(expires=_in(7)))
        self.timestamp = Metadata(Timestamp(expires=_in(1)))
        self._sign_root(self.root_signer)
        self._server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def root_bytes(self, version: int | None = None) -> bytes:
        name = f"{version or self.root.signed.version}.root.json"
        return (self.directory / name).read_bytes()

    def _write(self, name: str, metadata: Metadata[Any]) -> None:
        (self.directory / name).write_bytes(metadata.to_bytes(JSONSerializer(compact=False)))

    def _sign_root(self, *signers: CryptoSigner) -> None:
        self.root.signatures.clear()
        for signer in signers:
            self.root.sign(signer, append=True)
        self._write(f"{self.root.signed.version}.root.json", self.root)

    def rotate_root(self) -> None:
        """A new root version with a new root key, signed by the old root key and the new one."""
        old = self.root_signer
        self.root_signer = CryptoSigner.generate_ecdsa()
        root = self.root.signed
        root.revoke_key(old.public_key.keyid, "root")
        root.add_key(self.root_signer.public_key, "root")
        root.version += 1
        self._sign_root(old, self.root_signer)

    def publish(self, target: bytes, *, timestamp_expires: datetime | None = None) -> None:
        """A new targets version holding ``trusted_root.json`` = ``target``, and new snapshot and timestamp."""
        (self.directory / "targets" / "trusted_root.json").write_bytes(target)
        targets = self.targets.signed
        targets.targets = {"trusted_root.json": TargetFile.from_data("trusted_root.json", target)}
        targets.version += 1
        self.targets.sign(self.online, append=False)
        self._write("targets.json", self.targets)
        self.snapshot.signed.meta = {"targets.json": MetaFile(version=targets.version)}
        self.snapshot.signed.version += 1
        self.snapshot.sign(self.online, append=False)
        self._write("snapshot.json", self.snapshot)
        self.timestamp.signed.snapshot_meta = MetaFile(version=self.snapshot.signed.version)
        self.timestamp.signed.version += 1
        self.timestamp.signed.expires = timestamp_expires or _in(1)
        self.timestamp.sign(self.online, append=False)
        self._write("timestamp.json", self.timestamp)

    def serve(self) -> TufRepo:
        handler = functools.partial(_Quiet, directory=str(self.directory))
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="tufrepo", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass
