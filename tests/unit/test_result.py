"""Verdicts: the constructors, and every reason an error can carry is a listed code."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import provider
from provider.errors import (
    ConfigError,
    DataError,
    PolicyError,
    ProviderError,
    RequestError,
    TransientError,
    VerificationFailure,
)
from provider.result import ALLOWING_REASONS, REASONS, Result

REPO_RESULT = Path(provider.__file__).parent / "result.py"


def _all_error_classes() -> list[type[ProviderError]]:
    for module in pkgutil.walk_packages(provider.__path__, "provider."):
        if module.name.endswith("__main__"):
            continue
        importlib.import_module(module.name)
    found: list[type[ProviderError]] = []
    pending: list[type[ProviderError]] = [ProviderError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


#: Roots that are never raised as such (a subclass or an explicit reason always is), and settings errors (not verdicts).
NOT_VERDICTS = {ProviderError, DataError, VerificationFailure, ConfigError}


def test_every_error_class_carries_a_listed_reason() -> None:
    classes = [c for c in _all_error_classes() if c not in NOT_VERDICTS]
    assert len(classes) >= 15
    for cls in classes:
        assert cls.reason in REASONS, f"{cls.__module__}.{cls.__name__}: {cls.reason}"


@pytest.mark.parametrize(
    "error", [RequestError("bad"), TransientError("down", reason="dry-run-failed"), PolicyError("typo")]
)
def test_from_error_keeps_the_reason_and_message(error: ProviderError) -> None:
    result = Result.from_error(error)
    assert (result.allowed, result.verified, result.reason, result.message) == (
        False,
        False,
        error.reason,
        error.message,
    )


def test_constructors() -> None:
    assert Result.proven("ok", ("sha256:x",)).to_dict()["verified"] is True
    denied = Result.deny("content-mismatch", "no")
    assert (denied.allowed, denied.verified, denied.diff_count) == (False, False, 0)
    allowed = Result.allow("skipped-user", "yes", "policy")
    assert (allowed.allowed, allowed.verified, allowed.traffic_class) == (True, False, "app-profile")


def test_the_allowing_reasons_are_the_allowed_section_of_reason() -> None:
    """``ALLOWING_REASONS`` restates the Literal's "# allowed" section; a reason added there must join it."""
    text = (REPO_RESULT).read_text()
    section = text[text.index("    # allowed\n") : text.index("    # denied")]
    listed = {line.strip().split('"')[1] for line in section.splitlines() if line.strip().startswith('"')}
    assert listed == ALLOWING_REASONS and set(REASONS) >= ALLOWING_REASONS
