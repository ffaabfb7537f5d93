"""List, then watch: the real ``kubernetes`` client against the fake API server's watch.

The fake serves a watch as the API server's watch cache does
(``tests/support/fakestore.py`` ``Store.watch``, which cites k8s.io/apiserver):
a chunked stream of JSON events, bookmarks when asked, a 410 ``Expired`` ERROR
event for a resourceVersion older than its window. Each test drives one
:class:`KubeWatcher` in a thread and waits for what its handler is told; the
waits are deadlines for something to happen at all, never for how fast.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from provider.kube.dryrun import KubeDryRunner
from provider.kube.lister import PAGE_LIMITS, KubeLister
from provider.kube.watcher import Backoff, KubeWatcher
from tests.support.fakeapi import FakeApiServer, Logged, runner_for
from tests.support.manifests import configmap

#: Long enough for anything to happen on a loaded machine; a test that waits this long has failed.
PATIENCE = 60.0


class Recorder:
    """A WatchHandler that keeps what it is told."""

    def __init__(self) -> None:
        self.said: list[tuple[str, Any]] = []
        self.changed_ = threading.Condition()

    def _add(self, kind: str, value: Any) -> None:
        with self.changed_:
            self.said.append((kind, value))
            self.changed_.notify_all()

    def page(self, objects: list[dict[str, Any]]) -> None:
        self._add("page", [o["metadata"]["name"] for o in objects])

    def listed(self, present: set[tuple[str, str]]) -> None:
        self._add("listed", sorted(name for _, name in present))

    def changed(self, obj: dict[str, Any]) -> None:
        self._add("changed", (obj["metadata"]["name"], obj["metadata"]["resourceVersion"], obj["kind"]))

    def deleted(self, obj: dict[str, Any]) -> None:
        self._add("deleted", obj["metadata"]["name"])

    def note(self, event: str, **fields: Any) -> None:
        self._add(event, fields)

    def wait(self, found: Callable[[list[tuple[str, Any]]], bool]) -> None:
        with self.changed_:
            assert self.changed_.wait_for(lambda: found(self.said), timeout=PATIENCE), self.said

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.said]


@pytest.fixture
def runner(fake: FakeApiServer, tmp_path: Path) -> Iterator[KubeDryRunner]:
    with runner_for(fake, tmp_path) as r:
        yield r


@dataclasses.dataclass
class Running:
    watcher: KubeWatcher
    handler: Recorder
    thread: threading.Thread


@pytest.fixture
def start(fake: FakeApiServer, runner: KubeDryRunner) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def go(namespace: str | None = "shop", selector: str | None = None, **options: Any) -> Running:
        limits = options.pop("limits", PAGE_LIMITS)
        lister = KubeLister(runner, limits=limits)
        handler = Recorder()
        options.setdefault("backoff", Backoff(initial=0.05, cap=0.2))
        watcher = KubeWatcher(lister, lister.resolve("configmaps"), namespace, selector, handler, **options)
        thread = threading.Thread(target=watcher.run, daemon=True)
        thread.start()
        running = Running(watcher, handler, thread)
        started.append(running)
        return running

    yield go
    for running in started:
        running.watcher.stop()
        running.thread.join(timeout=PATIENCE)
        assert not running.thread.is_alive(), "stop() did not end the watcher"


def watches(fake: FakeApiServer) -> list[Logged]:
    return [r for r in fake.watches() if r.path.endswith("/configmaps")]


def lists(fake: FakeApiServer) -> list[Logged]:
    return [r for r in fake.requests if r.path.endswith("/configmaps") and "watch" not in r.query]


def watching(fake: FakeApiServer, count: int) -> None:
    """Wait until ``count`` watch requests have been answered (the stream is open)."""
    deadline = time.monotonic() + PATIENCE
    while len([w for w in watches(fake) if w.status == 200]) < count:
        assert time.monotonic() < deadline, fake.watches()
        time.sleep(0.01)


def test_it_lists_then_watches_from_the_lists_version_and_sees_changes(
    fake: FakeApiServer, start: Callable[..., Running]
) -> None:
    fake.add(configmap("a", "shop"))
    fake.add(configmap("elsewhere", "bank"))
    run = start()
    run.handler.wait(lambda said: ("listed", ["a"]) in said)
    watching(fake, 1)
    (first,) = watches(fake)
    kind = fake.kind_of("/api/v1", "configmaps")
    assert kind is not None
    _, body, _ = fake.store.list(kind, "shop", {})
    assert first.query["resourceVersion"] == [body["metadata"]["resourceVersion"]]
    assert first.query["allowWatchBookmarks"] == ["true"] and int(first.query["timeoutSeconds"][0]) >= 300
    added = fake.add(configmap("b", "shop"))
    fake.change({**added, "data": {"key": "changed"}})
    fake.remove("v1", "ConfigMap", "shop", "a")
    run.handler.wait(lambda said: ("deleted", "a") in said)
    events = [(k, v) for k, v in run.handler.said if k in ("changed", "deleted")]
    assert events == [
        ("changed", ("b", added["metadata"]["resourceVersion"], "ConfigMap")),
        ("changed", ("b", str(int(added["metadata"]["resourceVersion"]) + 1), "ConfigMap")),
        ("deleted", "a"),
    ]
    assert len(lists(fake)) == 1  # nothing listed again


def test_a_label_selector_is_watched_with_objects_moving_in_and_out(
    fake: FakeApiServer, start: Callable[..., Running]
) -> None:
    cm = fake.add({**configmap("a", "shop"), "metadata": {"name": "a", "namespace": "shop", "labels": {"app": "web"}}})
    run = start(selector="app=web")
    run.handler.wait(lambda said: ("listed", ["a"]) in said)
    watching(fake, 1)
    assert watches(fake)[0].query["labelSelector"] == ["app=web"]
    fake.change({**cm, "metadata": {**cm["metadata"], "labels": {"app": "other"}}})
    run.handler.wait(lambda said: ("deleted", "a") in said)  # out of the selector: gone from this watch


def test_bookmarks_move_the_version_on_and_a_dropped_connection_resumes_from_it(
    fake: FakeApiServer, start: Callable[..., Running]
) -> None:
    fake.store.bookmark_seconds = 0.2
    fake.add(configmap("a", "shop"))
    run = start()
    watching(fake, 1)
    seen = run.watcher.resource_version
    # Writes the watch does not show (another namespace) move the server on; a bookmark tells the watcher.
    moved = fake.add(configmap("other", "bank"))["metadata"]["resourceVersion"]
    deadline = time.monotonic() + PATIENCE
    while run.watcher.resource_version != moved:
        assert time.monotonic() < deadline, (seen, run.watcher.resource_version)
        time.sleep(0.01)
    assert fake.drop_watches() == 1
    watching(fake, 2)
    assert watches(fake)[1].query["resourceVersion"] == [moved]
    assert len(lists(fake)) == 1  # resumed, not listed again
    assert "watch-error" in run.handler.kinds()  # the cut is said, with the backoff before the next try
    run.handler.wait(lambda said: any(k == "resumed" for k, _ in said))


@pytest.mark.parametrize("expired_as", ["event", "status"])
def test_a_version_the_server_no_longer_has_lists_again(
    fake: FakeApiServer, start: Callable[..., Running], expired_as: str
) -> None:
    """A 410: an ERROR event holding an Expired Status on a 200 stream (the watch cache), or an HTTP 410."""
    fake.store.expired_as = expired_as
    fake.add(configmap("a", "shop"))
    run = start()
    watching(fake, 1)
    fake.add(configmap("b", "shop"))
    run.handler.wait(lambda said: ("changed", ("b",)) in [(k, v[:1]) for k, v in said if k == "changed"])
    fake.store.watch_failures = 10**6  # while the watch is down ...
    fake.drop_watches()
    fake.remove("v1", "ConfigMap", "shop", "a")  # ... what it would have seen happens,
    fake.add(configmap("c", "shop"))
    fake.store.compact()  # and the window moves past every version the watcher saw.
    fake.store.watch_failures = 0
    run.handler.wait(lambda said: ("listed", ["b", "c"]) in said)
    assert ("deleted", "a") not in run.handler.said  # the list says it: a is not in it
    relisted = [v for k, v in run.handler.said if k == "relist"]
    assert relisted and "too old resource version" in relisted[0]["why"]
    assert len(lists(fake)) == 2
    watching(fake, 3 if expired_as == "event" else 2)  # the first; the one with the ERROR event; the new one
    relist_version = lists(fake)[-1]
    assert relist_version.status == 200
    kind = fake.kind_of("/api/v1", "configmaps")
    assert kind is not None
    _, body, _ = fake.store.list(kind, "shop", {})
    assert watches(fake)[-1].query["resourceVersion"] == [body["metadata"]["resourceVersion"]]


def test_a_watch_the_server_ends_is_started_again_where_it_was(
    fake: FakeApiServer, start: Callable[..., Running]
) -> None:
    run = start(watch_seconds=1)  # the server ends each watch after a second (timeoutSeconds)
    watching(fake, 3)
    versions = {w.query["resourceVersion"][0] for w in watches(fake)}
    assert len(versions) == 1 and len(lists(fake)) == 1
    assert "watch-error" not in run.handler.kinds()


def test_failures_back_off_and_the_watch_resumes(fake: FakeApiServer, start: Callable[..., Running]) -> None:
    fake.store.watch_failures = 3  # the watch cache is not ready: 500
    run = start()
    run.handler.wait(lambda said: any(k == "resumed" for k, _ in said))
    errors = [v for k, v in run.handler.said if k == "watch-error"]
    assert len(errors) == 3 and all("500" in e["error"] for e in errors)
    assert all(0 < e["retryIn"] <= 0.4 for e in errors)  # the backoff's cap (0.2) and its jitter (up to 100 %)
    assert len(lists(fake)) == 1


def test_an_event_longer_than_the_limit_fails_the_watch(fake: FakeApiServer, start: Callable[..., Running]) -> None:
    run = start(limits=dataclasses.replace(PAGE_LIMITS, max_api_response_bytes=4096))
    watching(fake, 1)
    fake.add({**configmap("big", "shop"), "data": {"blob": "x" * 20000}})
    run.handler.wait(lambda said: any(k == "watch-error" and "longer than 4096 bytes" in v["error"] for k, v in said))


def test_forbidden_is_said_and_retried(fake: FakeApiServer, start: Callable[..., Running]) -> None:
    run = start()
    watching(fake, 1)
    fake.forbidden_resources = {"configmaps"}
    fake.drop_watches()
    run.handler.wait(
        lambda said: any(k == "watch-error" and 'cannot watch resource "configmaps"' in v["error"] for k, v in said)
    )
    fake.forbidden_resources = set()
    run.handler.wait(lambda said: any(k == "resumed" for k, _ in said))


def test_stop_ends_a_watch_waiting_for_its_next_byte(fake: FakeApiServer, start: Callable[..., Running]) -> None:
    run = start(idle_seconds=3600)
    watching(fake, 1)
    run.watcher.stop()
    run.thread.join(timeout=PATIENCE)
    assert not run.thread.is_alive()


# --- the backoff --------------------------------------------------------------------------------------


def test_the_backoff_doubles_to_its_cap_with_jitter_and_resets_after_a_quiet_while() -> None:
    now = [0.0]
    low = Backoff(rng=lambda: 0.0, clock=lambda: now[0])
    assert [round(low.delay(), 3) for _ in range(8)] == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    high = Backoff(rng=lambda: 1.0, clock=lambda: now[0])
    assert [round(high.delay(), 3) for _ in range(3)] == [1.6, 3.2, 6.4]  # stretched by up to 100 %
    now[0] += 121  # two minutes without a failure
    assert round(low.delay(), 3) == 0.8
