"""One signing key, a policy that trusts it, and an object's verdict under that policy.

Shared by tests that attack the comparison, the default profile, the verifier's inputs and the
OpenPGP armor with objects signed by one key.
"""

from __future__ import annotations

from typing import Any

from provider import Policy, Review, decide
from provider.result import Result
from tests.support.keys import make_key, public_key_pem

KEY = make_key("ecdsa-p256", 7)
POLICY = Policy.from_dict({"keys": [public_key_pem(KEY)]})


def verdict(obj: dict[str, Any], policy: Policy = POLICY) -> Result:
    return decide(Review.for_object(obj), policy)
