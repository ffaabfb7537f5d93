"""Attack class 13 (docs/security.md): regular expressions from policies run in linear time, as RE2 reads them.

Every test here failed on the code before the fix.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from provider import Policy
from provider.errors import PolicyError
from provider.neighbours.csr import CsrPolicy
from tests.support.blocking import BLOCKED
from tests.support.keys import make_key, public_key_pem

REPO = Path(__file__).resolve().parents[2]
KEY = make_key("ecdsa-p256", 250)


# --- regular expressions from policies run in linear time -------------------------------------------------------

#: Exponential for a backtracking engine against the subject below: every split of the a's is tried.
CATASTROPHIC = r"(a|a)*b@example\.com"
LONG_SUBJECT = "a" * 48 + "@example.com"

_RUN_CATASTROPHIC = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from provider import Policy, Review, decide
from tests.support.keyless import World
from tests.support.manifests import configmap
world = World()
key, cert = world.leaf(email={LONG_SUBJECT!r})
signed = world.sign(configmap("app"), key=key, cert=cert)
policy = Policy.from_dict({{"signers": [{{"subjectRegExp": {CATASTROPHIC!r}}}], "trustedRoot": world.trusted_root()}})
print(decide(Review.for_object(signed), policy).reason)
"""


def test_a_catastrophic_subject_pattern_does_not_hold_the_verifier() -> None:
    """Before: Python's re backtracked for hours; a thread cannot be stopped, so it ran in a child process."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _RUN_CATASTROPHIC],
            check=False,
            capture_output=True,
            text=True,
            timeout=BLOCKED * 2,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the subject pattern {CATASTROPHIC!r} held the verifier for {BLOCKED * 2} s")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "identity-mismatch"


#: What Python's re accepts and RE2 does not; each is policy-invalid wherever a policy carries a pattern.
PYTHON_ONLY = {
    "backreference": r"(a)\1",
    "named-backreference": r"(?P<x>a)(?P=x)",
    "lookahead": r"jane(?=@)",
    "negative-lookahead": r"(?!root)\w+",
    "lookbehind": r"(?<=@)example",
    "atomic-group": r"(?>a+)b",
    "possessive": r"a++b",
    "conditional": r"(a)?(?(1)b|c)",
    "verbose-flag": r"(?x) a b",
    "end-of-text-Z": r"a\Z",
    "huge-repetition": r"a{1001}",
}

WHERE_PATTERNS_LIVE: dict[str, Callable[[str], None]] = {
    "signers.subjectRegExp": lambda p: Policy.from_dict({"signers": [{"subjectRegExp": p}]}),
    "signers.issuerRegExp": lambda p: Policy.from_dict(
        {"signers": [{"subject": "jane@example.com", "issuerRegExp": p}]}
    ),
    "attestors.keyless.subjectRegExp": lambda p: Policy.from_dict(
        {"attestors": [{"entries": [{"keyless": {"subjectRegExp": p}}]}]}
    ),
    "unsafeUnanchoredIgnoreFields": lambda p: Policy.from_dict(
        {"keys": [public_key_pem(KEY)], "unsafeUnanchoredIgnoreFields": True, "ignoreFields": [{"fields": [p]}]}
    ),
    "csr.providerRegex": lambda p: CsrPolicy.from_dict({"providerRegex": p}),
}


@pytest.mark.parametrize("where", list(WHERE_PATTERNS_LIVE))
@pytest.mark.parametrize("feature", list(PYTHON_ONLY))
def test_patterns_re2_cannot_run_are_refused_when_the_policy_is_read(where: str, feature: str) -> None:
    with pytest.raises(PolicyError) as refused:
        WHERE_PATTERNS_LIVE[where](PYTHON_ONLY[feature])
    assert refused.value.reason == "policy-invalid"
    assert "RE2" in refused.value.message


def test_re2_patterns_mean_what_they_mean_in_go() -> None:
    """Kyverno reads subjectRegExp with Go's regexp: ASCII classes, whole-value match."""
    policy = Policy.from_dict({"signers": [{"subjectRegExp": r"\d+@example\.com"}]})
    (spec,) = policy.signers
    assert spec.subject_regexp is not None
    assert spec.subject_regexp.fullmatch("42@example.com")
    assert not spec.subject_regexp.fullmatch("٤٢@example.com")  # Arabic-Indic digits: \d in Python, not in Go
    assert not spec.subject_regexp.fullmatch("42@example.com.evil")
    assert not spec.subject_regexp.fullmatch("\ud800@example.com")  # not text: no match, never an error
