"""The summary ``verify``, ``verify-resource`` and the other commands that judge objects end their output with.

Counts, not verdicts: memory does not grow with the number of objects. Its
``to_dict`` is the ``summary`` of ``-o json|yaml``; its ``lines`` end the table.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Summary:
    """Counts, not verdicts: what is kept of every object checked."""

    what: str
    started: float = field(default_factory=time.monotonic)
    total: int = 0
    verified: int = 0
    unverified: int = 0
    denied: int = 0
    errors: int = 0
    missing: list[str] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)

    def add(self, checked: Any) -> None:
        result = checked.result
        self.total += 1
        if checked.error:
            self.errors += 1
        elif result.verified:
            self.verified += 1
        elif result.allowed:
            self.unverified += 1
        else:
            self.denied += 1
        if not result.verified:
            self.reasons[result.reason] += 1

    @property
    def failed(self) -> int:
        return self.denied + self.errors + len(self.missing)

    def to_dict(self) -> dict[str, Any]:
        return {
            "objects": self.total,
            "verified": self.verified,
            "allowedUnverified": self.unverified,
            "denied": self.denied,
            "errors": self.errors,
            "notFound": self.missing,
            "reasons": dict(sorted(self.reasons.items())),
            "seconds": round(time.monotonic() - self.started, 3),
        }

    def lines(self) -> list[str]:
        seconds = time.monotonic() - self.started
        rate = self.total / seconds if seconds > 0 else 0.0
        rows = [
            ("verified", self.verified),
            ("allowed unverified", self.unverified),
            ("denied", self.denied),
            ("no verdict (errors)", self.errors),
        ]
        if self.missing:
            rows.append(("not found", len(self.missing)))
        out = [f"SUMMARY: {self.total} objects ({self.what}) in {seconds:.1f} s, {rate:.0f}/s"]
        for label, count in rows:
            out.append(f"  {label:<30} {count:>8}")
        for reason, count in sorted(self.reasons.items(), key=lambda item: (-item[1], item[0])):
            out.append(f"    {reason:<28} {count:>8}")
        return out
