"""What every test shares: the conformance data must be there, and the one fake API server fixture."""

import logging
import os
from collections.abc import Callable, Iterator

import pytest

# The services the tests start refresh no keyless trust root from the internet (a thread per
# worker reaching sigstore's CDN); the tests of that refresh set their own repository.
os.environ.setdefault("MANIFEST_PROVIDER_TUF_URL", "")

# Helpers assert too (a vector's shape, a table's rows): their failures read like the tests' own.
# Registered before any of them is imported.
pytest.register_assert_rewrite("tests.support")

from tests.support.data import DATA  # noqa: E402
from tests.support.fakeapi import FakeApiServer  # noqa: E402

#: How long the ``fake`` fixture's server lives (``fake_api(per=...)``) -> the pytest scope that gives it.
LIFETIMES = {"test": "function", "module": "module"}


def pytest_configure(config: pytest.Config) -> None:
    if not (DATA / "SHA256SUMS").is_file():
        raise pytest.UsageError(
            f"conformance data not found at {DATA}: it is part of the repository; check out the whole tree"
        )


def fake_api(node: pytest.Item | pytest.Collector) -> tuple[Callable[[], FakeApiServer], str]:
    """What builds the ``fake`` fixture's server for ``node``, and how long it lives (its ``fake_api`` marker)."""
    marker = node.get_closest_marker("fake_api")
    options = dict(marker.kwargs) if marker else {}
    make = options.pop("make", FakeApiServer)
    per = options.pop("per", "test")
    if options or per not in LIFETIMES or (marker and marker.args):
        raise pytest.UsageError(
            f"{node.nodeid}: fake_api takes make= and per= ({' or '.join(LIFETIMES)}), got {marker}"
        )
    return make, per


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # The fixture's scope is the one pytest offers for a per-test choice: a parametrization's
    # scope overrides the fixture's, so one definition gives a server per test or per module.
    # The parameter stays out of the test's id.
    if "fake" in metafunc.fixturenames:
        make, per = fake_api(metafunc.definition)
        metafunc.parametrize("fake", [make], indirect=True, scope=LIFETIMES[per], ids=[pytest.HIDDEN_PARAM])


@pytest.fixture(scope="module")
def fake(request: pytest.FixtureRequest) -> Iterator[FakeApiServer]:
    """A fake API server on loopback replaying the recorded kube-apiserver answers (tests/support/fakeapi.py).

    A fresh one for each test. A module whose own fixtures outlive a test (a real server
    pointed at the fake) shares one between its tests with ``pytest.mark.fake_api(per="module")``;
    ``make=`` builds another one (a :class:`~tests.support.fakeapi.TokenApi` holding Secrets,
    other settings).
    """
    with request.param() as server:
        yield server


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[object], request: pytest.FixtureRequest) -> None:
    # A fixture that outlives a test would keep a per-test fake after it stopped: refuse it.
    if "fake" in fixturedef.argnames and fixturedef.scope != "function" and fake_api(request.node)[1] != "module":
        pytest.fail(f"fixture {fixturedef.argname!r} outlives a test but uses a per-test fake: "
                    'mark its module pytest.mark.fake_api(per="module")', pytrace=False)  # fmt: skip


#: The ``provider`` logger as the interpreter made it, before any test module was imported.
_PROVIDER_LOGGER = logging.getLogger("provider")
_PRISTINE = (_PROVIDER_LOGGER.level, _PROVIDER_LOGGER.propagate, list(_PROVIDER_LOGGER.handlers))


def _pristine_provider_logger() -> None:
    level, propagate, handlers = _PRISTINE
    _PROVIDER_LOGGER.setLevel(level)
    _PROVIDER_LOGGER.propagate = propagate
    _PROVIDER_LOGGER.handlers[:] = handlers


@pytest.fixture(autouse=True)
def _provider_logging_pristine() -> Iterator[None]:
    """Each test starts and ends with the ``provider`` logger as the interpreter made it.

    ``configure_logging`` (an in-process ``serve``, or an app a test module builds at import)
    stops propagation and raises the level, which hides every later test's records from
    ``caplog``: a test that reads the log must not depend on which tests ran or were
    collected before it. A test that configures logging itself still sees its own setup.
    """
    _pristine_provider_logger()
    yield
    _pristine_provider_logger()
