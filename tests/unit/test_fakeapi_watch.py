"""The fake API server's watch behaves as the real one does: the stand-in must enforce what the real thing does.

Read over a raw HTTPS connection, not through the client under test:

* 200, ``Transfer-Encoding: chunked``, ``application/json``, one JSON event per
  line, sent as it happens (k8s.io/apiserver ``pkg/endpoints/handlers/watch.go``
  ``HandleHTTP``);
* a resourceVersion older than the window: one ``ERROR`` event with a 410
  ``Expired`` Status ("too old resource version: X (Y)") on a 200 stream, then
  the end (``pkg/storage/cacher/cacher.go``, ``watch_cache.go``);
* ``BOOKMARK`` events only when asked (``allowWatchBookmarks``), carrying only
  ``metadata.resourceVersion`` of an object of the kind, and one right before
  ``timeoutSeconds`` ends the watch (``defaultBookmarkFrequency``: "in addition
  to sending a bookmark right before watch deadline");
* no resourceVersion: the current objects as ``ADDED`` first;
* an object leaving the label selector: ``DELETED`` (``cache_watcher.go``).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.fakeapi import FakeApiServer
from tests.support.manifests import configmap

PATH = "/api/v1/namespaces/shop/configmaps"


@contextlib.contextmanager
def open_watch(fake: FakeApiServer, query: str) -> Iterator[http.client.HTTPResponse]:
    with tempfile.TemporaryDirectory() as tmp:
        ca = Path(tmp, "ca.pem")
        ca.write_bytes(fake.ca_pem)
        context = ssl.create_default_context(cafile=str(ca))
    connection = http.client.HTTPSConnection("127.0.0.1", fake.port, context=context, timeout=60)
    try:
        connection.request("GET", f"{PATH}?watch=1&{query}", headers={"Authorization": f"Bearer {fake.token}"})
        with connection.getresponse() as response:
            yield response
    finally:
        connection.close()


def events(response: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
    for line in response:  # http.client undoes the chunking
        if line.strip():
            yield json.loads(line)


def test_a_watch_is_a_chunked_stream_of_json_lines(fake: FakeApiServer) -> None:
    first = fake.add(configmap("a", "shop"))
    with open_watch(fake, f"resourceVersion={first['metadata']['resourceVersion']}&timeoutSeconds=2") as response:
        assert response.status == 200
        assert response.getheader("Transfer-Encoding") == "chunked"
        assert response.getheader("Content-Type") == "application/json"
        second = fake.add(configmap("b", "shop"))
        stream = events(response)
        event = next(stream)
        assert event["type"] == "ADDED" and event["object"]["metadata"]["name"] == "b"
        assert event["object"]["apiVersion"] == "v1" and event["object"]["kind"] == "ConfigMap"
        assert event["object"]["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"]
        assert list(stream) == []  # no bookmarks unless asked; the stream ends at timeoutSeconds


def test_a_too_old_version_is_an_error_event_with_410_expired_on_a_200_stream(fake: FakeApiServer) -> None:
    old = fake.add(configmap("a", "shop"))["metadata"]["resourceVersion"]
    fake.add(configmap("b", "shop"))
    floor = fake.store.compact()
    with open_watch(fake, f"resourceVersion={old}") as response:
        assert response.status == 200
        (event,) = list(events(response))
        assert event["type"] == "ERROR"
        status = event["object"]
        assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
        assert status["message"] == f"too old resource version: {old} ({floor})"


def test_bookmarks_when_asked_and_one_before_the_deadline(fake: FakeApiServer) -> None:
    fake.store.bookmark_seconds = 3600  # none in between: only the one before the deadline
    start = fake.add(configmap("a", "shop"))["metadata"]["resourceVersion"]
    moved = fake.add(configmap("x", "bank"))["metadata"]["resourceVersion"]
    with open_watch(fake, f"resourceVersion={start}&allowWatchBookmarks=true&timeoutSeconds=1") as response:
        (bookmark,) = list(events(response))
        assert bookmark == {
            "type": "BOOKMARK",
            "object": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": moved}},
        }


def test_without_a_version_the_current_objects_come_first(fake: FakeApiServer) -> None:
    fake.add(configmap("a", "shop"))
    fake.add(configmap("other", "bank"))
    with open_watch(fake, "timeoutSeconds=1") as response:
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events(response)] == [("ADDED", "a")]


def test_leaving_the_selector_is_a_deletion(fake: FakeApiServer) -> None:
    cm = fake.add({**configmap("a", "shop"), "metadata": {"name": "a", "namespace": "shop", "labels": {"app": "web"}}})
    with open_watch(
        fake, f"resourceVersion={cm['metadata']['resourceVersion']}&labelSelector=app%3Dweb&timeoutSeconds=2"
    ) as response:
        changed = fake.change({**cm, "metadata": {**cm["metadata"], "labels": {"app": "other"}}})
        (event,) = list(events(response))
        assert event["type"] == "DELETED"
        assert event["object"]["metadata"]["labels"] == {"app": "web"}  # what it was
        assert event["object"]["metadata"]["resourceVersion"] == changed["metadata"]["resourceVersion"]
