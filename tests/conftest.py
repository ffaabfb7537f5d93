import pytest

from tests.support import SHARED


def pytest_configure(config: pytest.Config) -> None:
    if not SHARED.is_dir():
        raise pytest.UsageError(f"conformance data not found at {SHARED}; clone ../shared beside this repository")
