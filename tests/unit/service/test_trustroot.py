"""The keyless trust root kept current through TUF, against a TUF repository built here and served on loopback.

Rotation (a new root version, new targets), rollback (older metadata after
newer), a freeze (an expired timestamp), garbage (a target that is no
TrustedRoot, metadata that is no JSON), an unreachable repository: the last good
root stays in every failure, and its age is a metric.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from provider.errors import ConfigError
from provider.keyless.trust import default_root, load_trusted_root, set_default_root
from provider.service import metrics
from provider.service.checks import PolicyCache
from provider.service.trustroot import PUBLIC_GOOD, TrustRootRefresher, refresher_for
from tests.support.clock import Clock
from tests.support.registry import free_port
from tests.support.tufrepo import TufRepo

SHIPPED = json.loads((Path(__file__).resolve().parents[3] / "provider" / "data" / "trusted_root.json").read_text())


def variant(keep_tlogs: int) -> bytes:
    """A usable TrustedRoot that differs from the shipped one: its first ``keep_tlogs`` transparency logs only."""
    document = dict(SHIPPED, tlogs=SHIPPED["tlogs"][:keep_tlogs])
    return json.dumps(document).encode()


A, B = variant(1), variant(2)


@pytest.fixture(autouse=True)
def shipped_root_after() -> Iterator[None]:
    yield
    set_default_root(None)


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[TufRepo]:
    served = TufRepo(tmp_path / "repo")
    served.publish(A)
    served.serve()
    yield served
    served.stop()


def digest_of(target: bytes) -> str:
    return load_trusted_root(json.loads(target)).digest


def refresher(repo: TufRepo, tmp_path: Path, **options: Any) -> TrustRootRefresher:
    return TrustRootRefresher(repo.url, repo.root_bytes(1), cache_dir=str(tmp_path / "cache"), **options)


def test_a_refresh_installs_the_repositorys_root_as_the_default(repo: TufRepo, tmp_path: Path) -> None:
    shipped = default_root().digest
    assert refresher(repo, tmp_path).refresh()
    assert default_root().digest == digest_of(A) != shipped


def test_a_root_rotation_and_new_targets_are_followed_from_the_pinned_root(repo: TufRepo, tmp_path: Path) -> None:
    updater = refresher(repo, tmp_path)
    assert updater.refresh()
    repo.rotate_root()
    repo.publish(B)
    assert updater.refresh()
    assert default_root().digest == digest_of(B)
    set_default_root(None)
    fresh = TrustRootRefresher(repo.url, repo.root_bytes(1), cache_dir=str(tmp_path / "fresh"))
    assert fresh.refresh()  # pinned to version 1, it walks the rotation to version 2
    assert default_root().digest == digest_of(B)


def test_a_rollback_to_older_metadata_is_refused_and_the_last_root_stays(repo: TufRepo, tmp_path: Path) -> None:
    updater = refresher(repo, tmp_path)
    older = {name: (repo.directory / name).read_bytes() for name in ("timestamp.json", "snapshot.json", "targets.json")}
    shutil.copy(repo.directory / "targets" / "trusted_root.json", tmp_path / "older-target")
    repo.publish(B)
    assert updater.refresh()
    assert default_root().digest == digest_of(B)
    for name, data in older.items():  # the repository (or a mirror) serves the versions before
        (repo.directory / name).write_bytes(data)
    shutil.copy(tmp_path / "older-target", repo.directory / "targets" / "trusted_root.json")
    assert not updater.refresh()
    assert default_root().digest == digest_of(B)


def test_an_expired_timestamp_is_a_freeze_and_refused(repo: TufRepo, tmp_path: Path) -> None:
    updater = refresher(repo, tmp_path)
    assert updater.refresh()
    repo.publish(B, timestamp_expires=(datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=0))
    assert not updater.refresh()
    assert default_root().digest == digest_of(A)


@pytest.mark.parametrize("garbage", ["target", "metadata"])
def test_a_repository_serving_garbage_keeps_the_last_good_root(repo: TufRepo, tmp_path: Path, garbage: str) -> None:
    updater = refresher(repo, tmp_path)
    assert updater.refresh()
    if garbage == "target":
        repo.publish(b'{"mediaType": "not a trusted root"}')  # signed by the repository, and still no TrustedRoot
    else:
        (repo.directory / "timestamp.json").write_bytes(b"\x00garbage" * 100)
    assert not updater.refresh()
    assert default_root().digest == digest_of(A)


def test_an_unreachable_repository_leaves_the_shipped_root(tmp_path: Path) -> None:
    shipped = default_root().digest
    repo = TufRepo(tmp_path / "repo")
    updater = TrustRootRefresher(f"http://127.0.0.1:{free_port()}", repo.root_bytes(1), cache_dir=str(tmp_path / "c"))
    assert not updater.refresh()
    assert default_root().digest == shipped


def test_the_age_is_a_metric_reset_by_each_refresh(repo: TufRepo, tmp_path: Path) -> None:
    clock = Clock()
    updater = refresher(repo, tmp_path, clock=clock)
    clock.now += 120
    assert updater.age() == 120
    assert updater.refresh()
    assert updater.age() == 0
    clock.now += 30
    metrics.TRUSTED_ROOT_AGE_SOURCE = updater.age
    try:
        metrics.TALLY.flush()
        text = metrics.exposition()[0].decode()
    finally:
        metrics.TRUSTED_ROOT_AGE_SOURCE = None
    assert "manifest_provider_trusted_root_age_seconds 30.0" in text
    assert 'manifest_provider_trusted_root_refreshes_total{result="ok"}' in text


def test_compiled_keyless_policies_pick_up_a_refreshed_root(repo: TufRepo, tmp_path: Path) -> None:
    cache = PolicyCache()
    raw = {"signers": [{"subject": "jane@example.com", "issuer": "https://accounts.google.com"}]}
    before = cache.compile(raw)
    assert refresher(repo, tmp_path).refresh()
    after = cache.compile(raw)
    assert before.trusted_root is not None and after.trusted_root is not None
    assert (before.trusted_root.digest, after.trusted_root.digest) != (after.trusted_root.digest,) * 2
    assert after.trusted_root.digest == digest_of(A)


def test_the_service_setting_pins_a_root_file_and_empty_turns_refreshing_off(tmp_path: Path) -> None:
    assert refresher_for("", None, None, 3600) is None
    pinned = tmp_path / "root.json"
    pinned.write_bytes(TufRepo(tmp_path / "r").root_bytes(1))
    made = refresher_for("http://mirror.example", str(pinned), str(tmp_path / "cache"), 60)
    assert made is not None and made.root == pinned.read_bytes() and not made.quiet
    default = refresher_for("https://tuf-repo-cdn.sigstore.dev", None, None, 60)
    assert default is not None and default.quiet and json.loads(default.root)["signed"]["_type"] == "root"


def test_a_cache_directory_that_cannot_be_made_is_a_clear_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only root filesystem without a writable /tmp (a Deployment of one's own without the
    emptyDir manifests/base mounts), or a cache path that cannot be a directory: the service refuses
    to start, naming the setting and what to mount -- not a traceback, not a refresh failing for ever."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError) as refused:
        refresher_for(PUBLIC_GOOD, None, str(blocker / "cache"), 60)
    assert refused.value.message.startswith(f"MANIFEST_PROVIDER_TUF_CACHE_DIR: cannot use {blocker / 'cache'}")
    assert "emptyDir" in refused.value.message and "MANIFEST_PROVIDER_TUF_URL empty" in refused.value.message
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-tmp"))  # as gettempdir() finds none writable
    with pytest.raises(ConfigError) as refused:
        refresher_for(PUBLIC_GOOD, None, None, 60)
    assert "the temporary directory (TMPDIR, else /tmp)" in refused.value.message
    assert refresher_for("", None, None, 60) is None  # refreshing off: no cache needed, nothing refused


def test_the_cli_writes_the_verified_root_and_fails_clearly_when_the_repository_is_unreachable(
    repo: TufRepo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from provider.cli import main

    (tmp_path / "root.json").write_bytes(repo.root_bytes(1))
    out = tmp_path / "trusted_root.json"
    assert main(["trusted-root", "--tuf-url", repo.url, "--tuf-root", str(tmp_path / "root.json"), "-o", str(out)]) == 0
    assert out.read_bytes() == A
    assert main(["trusted-root", "--tuf-url", f"http://127.0.0.1:{free_port()}", "-o", str(out)]) == 2
    assert "trusted-root" in capsys.readouterr().err
