"""Host-name lookups within a deadline (:func:`provider.deadlines.resolve`): one name that never resolves
holds one lookup slot, however many exchanges wait for it.

``getaddrinfo`` cannot be interrupted: a lookup the caller stopped waiting for keeps its slot until the
resolver gives up (glibc: 5 s an attempt). Every admission a policy with a resource bundle matches looks
its registry up; when that registry's name stopped resolving, each started a lookup of its own, and
:data:`~provider.deadlines.MAX_LOOKUPS` of them took every slot of the process: every other name --
another tenant's registry, an API server named by host name -- then failed "no time was left to look
up" until the resolver gave up on them. Lookups of one name now share the one in progress.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from provider.deadlines import MAX_LOOKUPS, resolve
from tests.support.resolver import StuckResolver


def test_lookups_of_a_name_that_never_resolves_share_one_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    resolver = StuckResolver()
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    try:
        for _ in range(MAX_LOOKUPS + 4):
            with pytest.raises(TimeoutError):
                resolve("registry.stuck.example", 443, time.monotonic() + 0.05)
        # Another name still gets a slot: its own lookup starts, and fails at its own deadline only.
        with pytest.raises(TimeoutError) as caught:
            resolve("other.stuck.example", 443, time.monotonic() + 0.2)
        assert "did not finish by the deadline" in str(caught.value)
        assert resolver.asked == ["registry.stuck.example", "other.stuck.example"]
    finally:
        resolver.release()


def test_callers_sharing_a_lookup_each_get_its_answer_or_its_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.getaddrinfo
    asked: list[str] = []
    release = threading.Event()

    def slow(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("flags", 0) & socket.AI_NUMERICHOST:
            return real(host, port, *args, **kwargs)
        asked.append(str(host))
        release.wait(20)
        if host == "gone.example":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known (the stand-in resolver)")
        return real("127.0.0.1", port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    results: dict[str, list[Any]] = {"here.example": [], "gone.example": []}

    def ask(host: str) -> None:
        try:
            results[host].append(resolve(host, 8443, time.monotonic() + 20)[0][4])
        except OSError as exc:
            results[host].append(exc)

    threads = [threading.Thread(target=ask, args=(host,)) for host in results for _ in range(3)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 20
    while len(asked) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    for thread in threads:
        thread.join(20)
    # A caller that came after a lookup ended starts its own: which callers shared one is the scheduler's.
    assert set(asked) == {"gone.example", "here.example"}
    assert results["here.example"] == [("127.0.0.1", 8443)] * 3
    failures = results["gone.example"]
    assert len(failures) == 3 and all(isinstance(f, socket.gaierror) and f.errno == socket.EAI_NONAME for f in failures)
