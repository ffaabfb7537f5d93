"""Kyverno's variable substitution in a string, rule by rule as its source writes it.

``tests.support.kyverno.substitute`` gives what a variable stands for; this module
reproduces *how* Kyverno finds and replaces variables in text, including the
re-scan that makes a ``{{ }}`` inside a substituted value run too. Each rule
cites kyverno/kyverno v1.19.0 (unchanged in v1.17.0 and v1.18.0 for everything
used here):

* ``pkg/engine/variables/regex/vars.go``: ``RegexVariables`` finds
  ``{{ ... }}`` at the start of the text or after a character other than a
  backslash (the match includes that character); ``RegexVariableInit`` tells
  the first case. Go's RE2 and Python's ``re`` find the same matches here: the
  two alternatives of the body start with different characters, so there is
  no choice for either engine to make differently.
* ``pkg/engine/variables/vars.go`` ``substituteVariablesIfAny``: for each match,
  strip the braces (``replaceBracesAndTrimSpaces``: a leading ``-`` makes the
  substitution *shallow*), look the variable up, and replace the first
  occurrence of (prefix character + variable) by (prefix + value)
  (``substituteVarInPattern``; a non-string value is ``json.Marshal``-ed); a
  text that is exactly one variable becomes the value itself. Then, unless the
  last substitution was shallow, **scan the new text again** and repeat. At
  the end every ``\\{{`` becomes ``{{``.
* ``pkg/engine/handlers/validation/validate_resource.go`` ``getDenyMessage``:
  the rule's message joined with the deny conditions' message by ``"; "``,
  through ``SubstituteAll``; on an error the conditions' message alone.

``SubstituteAll`` first resolves ``$(...)`` references, but on the template
only, before any variable is replaced: a value cannot bring one in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import jmespath

REGEX_VARIABLES = re.compile(r"(^|[^\\])(\{\{(?:\{[^{}]*\}|[^{}])*\}\})")
REGEX_VARIABLE_INIT = re.compile(r"^\{\{(\{[^{}]*\}|[^{}])*\}\}")
#: A loop that never ends in Kyverno ends here (a value that substitutes to itself).
MAX_ROUNDS = 100


class SubstitutionError(Exception):
    """Kyverno's lookup failed (an unknown path, a JMESPath syntax error)."""


def _braces_off(v: str) -> tuple[str, bool]:
    variable = v.replace("{{", "").replace("}}", "").strip()
    if variable.startswith("-"):
        return variable[1:].strip(), True
    return variable, False


def _go_json(value: Any) -> str:
    """``json.Marshal``: sorted keys, no spaces, ``<``, ``>``, ``&`` escaped (encoding/json's HTML escaping)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def substitute_text(value: str, lookup: Callable[[str], Any]) -> Any:
    """``substituteVariablesIfAny`` on one string leaf."""
    found = [m.group(0) for m in REGEX_VARIABLES.finditer(value)]
    rounds = 0
    while found:
        rounds += 1
        if rounds > MAX_ROUNDS:
            raise SubstitutionError("substitution does not end")
        original = value
        shallow = False
        for old in found:
            initial = REGEX_VARIABLE_INIT.match(old) is not None
            v = old if initial else old[1:]
            variable, shallow = _braces_off(v)
            result = lookup(variable)
            if original == v:
                return result
            prefix = "" if initial else old[0]
            if shallow and result is not None:
                result = str(result).replace("{{", "\\{{")
            text = result if isinstance(result, str) else _go_json(result)
            value = value.replace(prefix + v, prefix + text, 1)
        found = [] if shallow else [m.group(0) for m in REGEX_VARIABLES.finditer(value)]
    return value.replace("\\{{", "{{")


class Context:
    """A JSON context that records every variable Kyverno looks up in it."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.looked_up: list[str] = []

    def __call__(self, variable: str) -> Any:
        self.looked_up.append(variable)
        try:
            result = jmespath.search(variable, self.data)
        except jmespath.exceptions.JMESPathError as exc:
            raise SubstitutionError(str(exc)) from exc
        if result is None:
            raise SubstitutionError(f"Unknown key {variable!r} in path")  # gojmespath.NotFoundError
        return result


def deny_message(rule_message: str, context: Context, conditions_message: str = "") -> str:
    """``getDenyMessage(true, conditions_message)``."""
    joined = "; ".join(part for part in (rule_message, conditions_message) if part)
    try:
        raw = substitute_text(joined, context)
    except SubstitutionError:
        return conditions_message
    return (
        raw
        if isinstance(raw, str)
        else "the produced message didn't resolve to a string, check your policy definition."
    )
