from collections.abc import Iterator

import pytest

from tests.support.data import SHARED
from tests.support.fakeapi import FakeApiServer


def pytest_configure(config: pytest.Config) -> None:
    if not SHARED.is_dir():
        raise pytest.UsageError(f"conformance data not found at {SHARED}; clone ../shared beside this repository")


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    """A fake API server on loopback replaying the recorded kube-apiserver answers (tests/support/fakeapi.py)."""
    with FakeApiServer() as server:
        yield server
