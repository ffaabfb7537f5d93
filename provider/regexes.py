"""Regular expressions that arrive in policies, compiled with RE2: matching takes linear time, whatever the pattern.

Every pattern a policy carries -- a signer's ``subjectRegExp`` and
``issuerRegExp`` (``signers``, ``attestors[].entries[].keyless``), the
``unsafeUnanchoredIgnoreFields`` ignore patterns, the kubelet-serving-csr
check's ``providerRegex`` -- is written by the policy's author, who is not
always the operator (``docs/security.md``, "Threat model"). Python's ``re``
backtracks: ``(a|a)*b`` against forty ``a`` runs for hours and holds a worker
thread that no deadline can interrupt (a thread cannot be stopped from
outside, and ``re`` releases neither the GIL nor control until it is done).

Why RE2 (``google-re2``, Google's own bindings) and not a time bound around
``re``: RE2 runs in time linear in the text (an automaton, no backtracking),
so no pattern can take longer than the text allows, and the compiled program
is bounded in memory (``max_mem``); a watchdog around ``re`` would need a
process per match to be stopped at all. RE2 is also what the engines use:
Kyverno reads ``subjectRegExp`` with Go's ``regexp``, and Go's ``regexp``
is RE2's syntax and semantics, as is kubelet-csr-approver's ``providerRegex``
-- so a pattern means here what it means there (``\\d`` and ``\\w`` are ASCII, as
in Go).

What Python's ``re`` accepts and RE2 refuses, each a ``policy-invalid`` that
names the pattern: backreferences (``\\1``, ``(?P=name)``), lookahead and
lookbehind (``(?=``, ``(?!``, ``(?<=``, ``(?<!``), atomic groups (``(?>``),
possessive quantifiers (``a++``), conditionals (``(?(1)...)``), the flags
``(?x)``, ``(?a)``, ``(?L)`` and ``(?u)``, ``\\Z`` (RE2 writes ``\\z``), and
repetition counts over 1000. Patterns are at most :data:`MAX_PATTERN_CHARS`
characters.

A text RE2 cannot take (a lone UTF-16 surrogate, which JSON can carry and
UTF-8 cannot) matches nothing: an identity is then not matched, a path not
ignored -- a denial, never a pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

from .errors import PolicyError

#: Characters of one pattern. Real identity patterns are well under 200; the bound keeps a
#: compiled program small whatever the pattern (RE2 also refuses programs over ``max_mem``).
MAX_PATTERN_CHARS = 4096
#: Bytes RE2 may use for one compiled pattern and its automata (RE2's own default).
MAX_MEMORY = 8 << 20

_HINTS = (
    ("\\Z", "write \\z for the end of the text"),
    ("(?=", "lookahead is not available"),
    ("(?!", "lookahead is not available"),
    ("(?<=", "lookbehind is not available"),
    ("(?<!", "lookbehind is not available"),
    ("(?>", "atomic groups are not available"),
    ("(?P=", "backreferences are not available"),
    ("(?(", "conditionals are not available"),
)


@cache
def _options() -> Any:
    """RE2's options, made on the first pattern: a policy without one never loads RE2."""
    import re2

    options = re2.Options()
    options.log_errors = False  # RE2 would write every refused pattern to standard error
    options.max_mem = MAX_MEMORY
    return options


@dataclass(frozen=True)
class PolicyRegex:
    """A policy's regular expression, compiled with RE2 (module docstring)."""

    pattern: str
    _compiled: Any = field(repr=False, compare=False)

    @classmethod
    def compile(cls, text: Any, where: str) -> PolicyRegex:
        """Compile ``text`` or raise :class:`~provider.errors.PolicyError` naming ``where`` and what is wrong."""
        if not isinstance(text, str):
            raise PolicyError(f"{where}: expected a regular expression (a string), got {type(text).__name__}")
        if len(text) > MAX_PATTERN_CHARS:
            raise PolicyError(f"{where}: a regular expression of {len(text)} characters; at most {MAX_PATTERN_CHARS}")
        import re2

        try:
            compiled = re2.compile(text, _options())
        except UnicodeEncodeError:
            raise PolicyError(f"{where}: the regular expression holds a lone surrogate, which is not text") from None
        except re2.error as exc:
            detail = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
            hint = next((why for token, why in _HINTS if token in text), "")
            raise PolicyError(
                f"{where}: not a valid regular expression for RE2: {text[:80]!r} ({detail[:120]}"
                f"{'; ' + hint if hint else ''}); policy patterns are RE2, the syntax of Go's regexp that Kyverno "
                "reads them with: backreferences, lookaround, atomic groups, possessive quantifiers, conditionals "
                "and the (?x) flag are not available"
            ) from None
        return cls(text, compiled)

    def fullmatch(self, text: str) -> bool:
        """Whether the whole of ``text`` matches."""
        try:
            return self._compiled.fullmatch(text) is not None
        except UnicodeEncodeError:
            return False

    def search(self, text: str) -> bool:
        """Whether some part of ``text`` matches (Go's ``MatchString``)."""
        try:
            return self._compiled.search(text) is not None
        except UnicodeEncodeError:
            return False


__all__ = ["MAX_PATTERN_CHARS", "PolicyRegex"]
