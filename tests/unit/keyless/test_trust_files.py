"""Attack class 11 (docs/security.md): a policy's ``trustedRoot`` names a file on the server, and the operator decides which.

The policy arrives with each request, and a namespaced Kyverno ``Policy`` is a namespace admin's, sent with
Kyverno's own token: the service cannot tell it from the operator's. Every test here failed on the code
before the fix. The real gunicorn server's side is ``tests/integration/test_attack_policy_is_data.py``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provider import Bounds, Policy
from provider.bounds import LOCAL
from provider.errors import PolicyError, TransientError
from tests.support.blocking import BLOCKED, finishes
from tests.support.keyless import World

WORLD = World()


def keyless_policy(root: Any, **extra: Any) -> dict[str, Any]:
    return {"signers": ["jane@example.com"], "trustedRoot": root, **extra}


# --- trustedRoot names a file on the server: the operator decides which ----------------------------------------


@pytest.fixture
def server_files(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Paths of every kind a policy could name on the verifier's machine, one of each."""
    root_file = tmp_path / "root.json"
    root_file.write_text(json.dumps(WORLD.trusted_root()))  # a *valid* TrustedRoot: it must not be used either
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    unix = tmp_path / "unix.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(unix))
    read_end, write_end = os.pipe()  # a pipe of this process, as a worker's own are
    link = tmp_path / "link.json"
    link.symlink_to(root_file)
    try:
        yield {
            "valid-trusted-root": str(root_file),
            "missing": str(tmp_path / "missing.json"),
            "directory": str(tmp_path),
            "fifo": str(fifo),
            "own-pipe-through-proc": f"/proc/self/fd/{read_end}",
            "own-stdin-through-proc": "/proc/self/fd/0",
            "character-device": "/dev/zero",
            "unix-socket": str(unix),
            "symlink-to-a-root": str(link),
            "system-file": "/etc/hostname",
            "relative": "root.json",
        }
    finally:
        listener.close()
        os.close(read_end)
        os.close(write_end)


def test_a_path_the_operator_did_not_allow_is_refused_alike_whatever_it_names(server_files: dict[str, str]) -> None:
    """Before: any path was opened -- a FIFO or the worker's own pipe blocked the thread for ever, the
    error told a file from a directory from nothing, and a valid root file was used."""
    messages = {}
    for what, path in server_files.items():
        with pytest.raises(PolicyError) as refused:
            finishes(lambda path=path: Policy.from_dict(keyless_policy(path)))
        assert refused.value.reason == "policy-invalid"
        messages[what] = refused.value.message.replace(repr(path), "<path>")
    assert len(set(messages.values())) == 1, messages  # nothing about what the path is
    (message,) = set(messages.values())
    assert "not a trust-root file the operator allows" in message


@pytest.mark.parametrize(
    "what",
    ["fifo", "own-pipe-through-proc", "character-device", "unix-socket", "directory"],
)
def test_an_allowed_path_that_is_not_a_regular_file_is_never_opened(server_files: dict[str, str], what: str) -> None:
    """The operator lists the file (a mistake, or a file replaced later): it still must not stop a worker."""
    path = server_files[what]
    for bounds in (Bounds(trusted_root_files=(path,)), LOCAL):
        with pytest.raises(PolicyError) as refused:
            finishes(lambda bounds=bounds: Policy.from_dict(keyless_policy(path), bounds=bounds))
        assert refused.value.reason == "policy-invalid"
    assert "not a regular file" in refused.value.message  # the CLI's user (LOCAL) is told why


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_what_is_wrong_with_an_allowed_file_goes_to_the_log_not_to_the_policy(tmp_path: Path) -> None:
    """Before: missing, directory, and for a JSON file a duplicated key's name, a non-finite number or the line and
    column of a syntax error came back in the answer."""
    contents = {
        "duplicate-key": b'{"tlogs": [], "secret-key-name": 1, "secret-key-name": 2}',
        "not-finite": b'{"tlogs": [NaN]}',
        "syntax-error": b'{\n\n   "tlogs": [1,,]}',
        "not-a-root": b'{"tlogs": "s3cret"}',
    }
    paths = {name: tmp_path / f"{name}.json" for name in contents}
    for name, data in contents.items():
        paths[name].write_bytes(data)
    paths["missing"] = tmp_path / "missing.json"
    paths["directory"] = tmp_path / "dir"
    paths["directory"].mkdir()
    bounds = Bounds(trusted_root_files=tuple(str(p) for p in paths.values()))
    messages = set()
    records = _Records()
    logger = logging.getLogger("provider.trust")
    level = logger.level
    logger.setLevel(logging.WARNING)  # whatever another test left the "provider" logger's level at
    logger.addHandler(records)
    try:
        for path in paths.values():
            with pytest.raises(PolicyError) as refused:
                Policy.from_dict(keyless_policy(str(path)), bounds=bounds)
            messages.add(refused.value.message.replace(repr(str(path)), "<path>"))
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    assert len(messages) == 1, messages
    for leak in ("secret-key-name", "NaN", "line", "column", "s3cret", "No such file", "directory"):
        assert leak not in next(iter(messages))
    logged = "\n".join(records.lines)
    assert "secret-key-name" in logged and "No such file" in logged  # the operator can still see why


def test_an_allowed_regular_file_is_read_and_only_until_the_request_deadline(tmp_path: Path) -> None:
    path = tmp_path / "root.json"
    path.write_text(json.dumps(WORLD.trusted_root()))
    mounted = tmp_path / "mounted.json"  # ConfigMap and Secret volumes are symbolic links: they are followed
    mounted.symlink_to(path)
    bounds = Bounds(trusted_root_files=(str(mounted),))
    policy = Policy.from_dict(keyless_policy(str(mounted)), bounds=bounds, deadline=time.monotonic() + BLOCKED)
    inline = Policy.from_dict(keyless_policy(WORLD.trusted_root()))
    assert policy.trusted_root is not None and inline.trusted_root is not None
    assert policy.trusted_root.digest == inline.trusted_root.digest
    with pytest.raises(TransientError) as late:
        Policy.from_dict(keyless_policy(str(mounted)), bounds=bounds, deadline=time.monotonic() - 1)
    assert late.value.reason == "deadline-exceeded"
