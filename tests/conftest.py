from collections.abc import Iterator

import pytest

# Helpers assert too (a vector's shape, a table's rows): their failures read like the tests' own.
# Registered before any of them is imported.
pytest.register_assert_rewrite("tests.support")

from tests.support.data import SHARED  # noqa: E402
from tests.support.fakeapi import FakeApiServer  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    if not SHARED.is_dir():
        raise pytest.UsageError(f"conformance data not found at {SHARED}; clone ../shared beside this repository")


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    """A fake API server on loopback replaying the recorded kube-apiserver answers (tests/support/fakeapi.py)."""
    with FakeApiServer() as server:
        yield server
