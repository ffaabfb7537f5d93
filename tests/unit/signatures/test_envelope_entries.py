"""Attack class 7 (docs/security.md): only the envelope that was read is ignored.

Annotations named like envelope entries but
never read (``signature_9`` past the first gap, ``bundle_7``, unknown names under the domain)
used to be masked from the comparison, so a verified object could carry anything there.
"""

from __future__ import annotations

import copy

import pytest

from provider import Policy, Review, decide
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign

KEY = make_key("ecdsa-p256", 11)
POLICY = Policy.from_dict({"keys": [public_key_pem(KEY)]})
D = "cosign.sigstore.dev"

# --- 7. the envelope ------------------------------------------------------------------


@pytest.mark.parametrize(
    "annotation",
    [
        f"{D}/signature_9",
        f"{D}/signature_2",
        f"{D}/bundle_7",
        f"{D}/certificate_3",
        f"{D}/resourceBundleRef",
        f"{D}/anything",
        f"{D}/message_1",
    ],
)
def test_an_envelope_like_annotation_that_was_not_read_is_content(annotation: str) -> None:
    (signed,) = sign(configmap(mode="production"), KEY)
    assert decide(Review.for_object(signed), POLICY).verified
    smuggled = copy.deepcopy(signed)
    smuggled["metadata"]["annotations"][annotation] = "rm -rf / # anything at all"
    result = decide(Review.for_object(smuggled), POLICY)
    assert (result.allowed, result.reason) == (False, "content-mismatch")
    assert [item.key for item in result.diff] == [f"metadata.annotations.{annotation}"]


def test_the_annotations_that_were_read_are_masked() -> None:
    """Two signature sets (0 and 1) read: both are out of the comparison, and so is the message."""
    other = make_key("ecdsa-p256", 12)
    (first,) = sign(configmap(), KEY)
    (second,) = sign(configmap(), other)
    both = copy.deepcopy(first)
    both["metadata"]["annotations"][f"{D}/signature_1"] = second["metadata"]["annotations"][f"{D}/signature"]
    policy = Policy.from_dict({"keys": [public_key_pem(KEY), public_key_pem(other)], "keyOperation": "MustAll"})
    assert decide(Review.for_object(both), policy).verified


def test_an_unread_signature_is_content_even_when_it_is_valid() -> None:
    """``signature_2`` after a gap is never read -- so it is compared, and the object it rides on is not verified."""
    (signed,) = sign(configmap(), KEY)
    gap = copy.deepcopy(signed)
    gap["metadata"]["annotations"][f"{D}/signature_2"] = signed["metadata"]["annotations"][f"{D}/signature"]
    result = decide(Review.for_object(gap), POLICY)
    assert result.reason == "content-mismatch"
    assert "signature_2" in result.message
