"""Fixtures for tests that drive the real server (see :mod:`tests.support.server`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.server import Server, running_server


@pytest.fixture(scope="session")
def provider_server() -> Iterator[Server]:
    """One real server for the session: gunicorn with two workers, TLS, client certificates required.

    Tests that need other settings start their own with :func:`running_server`.
    """
    with running_server(args=("--workers", "2")) as server:
        yield server
