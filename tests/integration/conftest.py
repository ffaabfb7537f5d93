"""Fixtures for tests that drive the real server (see :mod:`tests.support.server`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import Server, running_server


@pytest.fixture(scope="session")
def provider_server() -> Iterator[Server]:
    """One real server for the session: gunicorn with two workers, TLS, client certificates required.

    Tests that need other settings start their own with :func:`running_server`.
    """
    with running_server(args=("--workers", "2")) as server:
        yield server


HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/integration/ is an integration test, whether or not its module says so,
    so that ``make test-fast`` (``-m "not slow and not integration"``) never starts a server."""
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.integration)
