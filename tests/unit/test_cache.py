"""The bounded LRU cache behind verdicts, compiled policies and accepted tokens."""

from __future__ import annotations

import threading

import pytest

from provider.cache import LRUCache, digest
from tests.support.clock import Clock


def test_least_recently_used_entry_is_evicted_first() -> None:
    cache: LRUCache[str] = LRUCache(2)
    cache.put(b"a", "A")
    cache.put(b"b", "B")
    assert cache.get(b"a") == "A"  # a is now the most recently used
    cache.put(b"c", "C")
    assert cache.get(b"b") is None
    assert cache.get(b"a") == "A" and cache.get(b"c") == "C"
    assert len(cache) == 2


def test_putting_an_existing_key_replaces_it_without_growing() -> None:
    cache: LRUCache[int] = LRUCache(2)
    cache.put(b"a", 1)
    cache.put(b"a", 2)
    assert cache.get(b"a") == 2 and len(cache) == 1


def test_entries_expire_after_the_ttl() -> None:
    clock = Clock()
    cache: LRUCache[str] = LRUCache(10, ttl=60, clock=clock)
    cache.put(b"k", "v")
    clock.now += 59.9
    assert cache.get(b"k") == "v"
    clock.now += 0.2
    assert cache.get(b"k") is None
    assert len(cache) == 0  # an expired entry is dropped when seen


@pytest.mark.parametrize(
    ("cache_ttl", "entry_ttl", "lives"),
    [(60, 5, 5), (5, 60, 5), (None, 7, 7), (None, None, None)],
    ids=["entry-shorter", "cache-shorter", "entry-only", "forever"],
)
def test_an_entry_lives_as_long_as_the_shorter_ttl(
    cache_ttl: float | None, entry_ttl: float | None, lives: float | None
) -> None:
    clock = Clock()
    cache: LRUCache[str] = LRUCache(10, ttl=cache_ttl, clock=clock)
    cache.put(b"k", "v", ttl=entry_ttl)
    clock.now += (lives or 10**9) - 0.01
    assert cache.get(b"k") == "v"
    clock.now += 0.02
    assert cache.get(b"k") == (None if lives is not None else "v")


def test_zero_entries_keeps_nothing() -> None:
    cache: LRUCache[str] = LRUCache(0)
    cache.put(b"k", "v")
    assert cache.get(b"k") is None and len(cache) == 0


def test_hits_and_misses_are_counted() -> None:
    cache: LRUCache[str] = LRUCache(1)
    cache.get(b"k")
    cache.put(b"k", "v")
    cache.get(b"k")
    assert (cache.hits, cache.misses) == (1, 1)


def test_a_negative_size_is_refused() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        LRUCache(-1)


def test_clear_empties_the_cache() -> None:
    cache: LRUCache[str] = LRUCache(4)
    cache.put(b"k", "v")
    cache.clear()
    assert cache.get(b"k") is None


def test_digest_separates_parts_and_accepts_lone_surrogates() -> None:
    assert digest("ab", "c") != digest("a", "bc")
    assert digest("a", b"b") == digest(b"a", "b")
    assert len(digest("\ud800")) == 32  # a JSON key may carry one; hashing must not fail


def test_concurrent_use_stays_bounded_and_consistent() -> None:
    cache: LRUCache[int] = LRUCache(50)
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(2000):
                key = digest(str((offset + i) % 120))
                cache.put(key, i)
                value = cache.get(key)
                assert value is None or isinstance(value, int)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n * 7,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(cache) <= 50
