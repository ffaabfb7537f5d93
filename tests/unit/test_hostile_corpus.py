"""The hostile-input corpus through the library: a clear reason, bounded time and memory, never a false allow.

Every file of ``tests/assets/hostile/index.yaml`` goes through the library entry
point its kind names (``generate.py`` documents them): ``decide()`` for objects
and reviews, ``Policy.from_dict`` for policies and keys, the three wire
readers for raw bodies. The CLI and the two HTTP routes get the same files in
``tests/integration/test_hostile_cli.py`` and ``test_hostile_service.py``.
"""

from __future__ import annotations

import contextlib
import json
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from provider import Policy, Review, decide
from provider.errors import PolicyError, ProviderError, RequestError
from provider.parsing import load_json, load_yaml_stream
from provider.result import Result
from provider.service.wire import gatekeeper, kyverno
from tests.assets.hostile import corpus
from tests.assets.hostile.generate import ENTRY_POINTS, outputs

#: Seconds one library call may take, timed without tracemalloc (which slows allocation-heavy
#: parsing four- to fivefold). The slowest file (250 000 JSON keys, read by the three wire
#: readers and the YAML reader) takes about 2.2 s here; a bomb that got through would take
#: minutes, so the bound leaves room for a loaded CI machine without losing its meaning.
TIME_LIMIT = 10.0
#: Peak bytes Python may allocate for one file (tracemalloc): 64 MiB, or 40 times the file
#: for the large ones. JSON is parsed whole before its nodes are counted, and a node of a
#: few bytes of text is a Python object of 50 to 100 (the 3 MB body of 250 000 keys peaks
#: at ~100 MiB); the service refuses bodies over 16 MiB before parsing. A bomb -- a small
#: file that expands -- would need gigabytes.
MEMORY_FLOOR = 64 * 2**20
MEMORY_PER_INPUT_BYTE = 40
#: The corpus is hostile by design: at least this many files, besides the controls.
MIN_FILES = 60
#: Committed files are small; anything larger is a recipe built by the tests.
MAX_COMMITTED_BYTES = 100 * 1024

FILES = corpus.load()
POLICY = Policy.from_dict(corpus.trusted_policy())


@pytest.fixture(scope="module")
def recipes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, corpus.CorpusFile]]:
    built = corpus.materialize(tmp_path_factory.mktemp("hostile-recipes"))
    yield {item.name: item for item in built}


# --- the corpus itself ---------------------------------------------------------------


def test_the_corpus_is_large_and_every_file_has_an_expectation_for_every_entry_point() -> None:
    hostile = [f for f in FILES if not f.name.startswith("control-")]
    assert len(hostile) >= MIN_FILES
    assert len({f.name for f in FILES}) == len(FILES)
    for item in FILES:
        assert item.kind in ENTRY_POINTS, item.name
        assert {p.split(":")[0] for p in ENTRY_POINTS[item.kind]} == {"library", "cli", "gatekeeper", "kyverno"}
        assert item.what and item.reason, item.name
        assert item.recipe or item.path.is_file(), f"{item.name} is in the index but not committed"
    kinds = {f.kind for f in FILES}
    assert kinds == set(ENTRY_POINTS)


def test_the_committed_corpus_is_exactly_what_the_generator_writes() -> None:
    expected = outputs()
    for name, data in expected.items():
        path = corpus.HERE / name
        assert path.read_bytes() == data, (
            f"{name} differs from generate.py's output; run python tests/assets/hostile/generate.py"
        )
    committed = {p.name for p in corpus.HERE.iterdir() if p.is_file()}
    assert committed - set(expected) == {"generate.py", "corpus.py"}, (
        "files in the corpus directory that generate.py does not write"
    )


def test_committed_files_are_small_and_large_inputs_are_recipes() -> None:
    for item in FILES:
        if not item.recipe:
            assert item.path.stat().st_size <= MAX_COMMITTED_BYTES, item.name
    assert sum(f.recipe for f in FILES) >= 5


# --- the library ---------------------------------------------------------------------


def _answer(run: Callable[[], Any]) -> Any:
    try:
        return run()
    except ProviderError as exc:
        return exc


def measured(run: Callable[[], Any]) -> tuple[Any, float, int]:
    """``run()``'s value (or the ProviderError it raised), seconds, and peak bytes allocated.

    Two runs: the first under tracemalloc for the peak and the value (cold: key and policy
    caches start empty for a new input), the second timed, because tracing inflates the time.
    Timed in this process's CPU seconds: the bound is on the work, whatever else the machine runs.
    """
    tracemalloc.start()
    try:
        value = _answer(run)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    start = time.process_time()
    _answer(run)
    seconds = time.process_time() - start
    return value, seconds, peak


def _decide(review: Any) -> Result | ProviderError:
    try:
        return decide(Review.from_admission(review), POLICY)
    except RequestError as exc:
        return exc


def _policy(item: corpus.CorpusFile) -> Policy:
    if item.kind == "key":
        return Policy.from_dict({"keys": [item.data().decode("utf-8", "replace")]})
    data = item.data()
    parsed = (
        load_json(data, error=PolicyError, what=item.name)
        if item.name.endswith(".json")
        else load_yaml_stream(data, error=PolicyError, what=item.name)
    )
    if not item.name.endswith(".json"):
        parsed = parsed[0] if len(parsed) == 1 else parsed
    return Policy.from_dict(parsed)


def _readers(item: corpus.CorpusFile) -> list[ProviderError | None]:
    data = item.data()
    answers: list[ProviderError | None] = []
    for read in (
        lambda: gatekeeper.read_request(data),
        lambda: gatekeeper.read_key(corpus.key_text(item)),
        lambda: kyverno.read_body(data),
    ):
        try:
            read()
            answers.append(None)
        except ProviderError as exc:
            answers.append(exc)
    # What the CLI does with the file first: every outcome but a RequestError is a bug.
    with contextlib.suppress(RequestError):
        load_yaml_stream(data, error=RequestError, what=item.name)
    return answers


def check_verdict(item: corpus.CorpusFile, answer: Result | ProviderError) -> None:
    if isinstance(answer, ProviderError):
        assert answer.reason == item.expected, (item.name, answer.reason, answer.message)
        assert answer.message and not corpus.has_traceback(answer.message)
        assert item.says in answer.message, (item.name, answer.message)
        return
    assert answer.reason == item.expected, (item.name, answer.reason, answer.message)
    assert answer.message and not corpus.has_traceback(answer.message)
    if item.expected != "verified":
        assert item.says in answer.message, (item.name, answer.message)
    if answer.allowed:
        assert answer.reason in corpus.ALLOWING_REASONS and (answer.verified or answer.reason != "verified")
    else:
        assert not answer.verified
    json.dumps(answer.to_dict())  # the wire shape serialises, whatever the object held


@pytest.mark.parametrize("item", FILES, ids=[f.name for f in FILES])
def test_the_library_answers_every_hostile_file_clearly_within_bounds(
    item: corpus.CorpusFile, recipes: dict[str, corpus.CorpusFile]
) -> None:
    item = recipes[item.name]
    if item.kind in ("object", "review"):
        answer, seconds, peak = measured(lambda: _decide(corpus.review_of(item)))
        check_verdict(item, answer)
    elif item.kind in ("policy", "key"):
        answer, seconds, peak = measured(lambda: _policy(item))
        assert isinstance(answer, PolicyError), f"{item.name}: the policy loaded"
        check_verdict(item, answer)
    else:
        answers, seconds, peak = measured(lambda: _readers(item))
        assert all(isinstance(a, RequestError) for a in answers), (item.name, answers)
        assert any(item.says in a.message for a in answers if a is not None), (
            item.name,
            [a.message for a in answers if a],
        )
        assert not any(corpus.has_traceback(a.message) for a in answers if a is not None)
    assert seconds < TIME_LIMIT, f"{item.name}: {seconds:.2f} s"
    assert peak < max(MEMORY_FLOOR, MEMORY_PER_INPUT_BYTE * item.path.stat().st_size), (
        f"{item.name}: {peak / 2**20:.0f} MiB"
    )


def test_the_traversal_tarball_verifies_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (item,) = [f for f in FILES if f.name == "object-signed-tar-traversal-member-names.yaml"]
    monkeypatch.chdir(tmp_path)
    result = decide(Review.for_object(corpus.object_of(item)), POLICY)
    assert result.verified
    assert list(tmp_path.iterdir()) == []
    assert not Path("/etc/cron.d/x.yaml").exists()
