"""A clock the test moves by hand, for code that takes any ``() -> float`` as its clock."""

from __future__ import annotations


class Clock:
    """Starts at 1000.0 seconds; a test sets ``now`` to move it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
