"""A signed manifest that says two things about a tool's key is refused when it is read.

From an attack pass without any signing key (docs/security.md).
"""

from __future__ import annotations

import pytest

from provider.errors import DataError
from provider.parsing import load_yaml_stream
from tests.support.delivery import MANAGED_BY, RELEASE_NAME, TRACKING

# --- a signed manifest that says two things about a tool's key ---------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(f"metadata:\n  annotations:\n    {TRACKING}: a\n    {TRACKING}: b\n", id="tracking-id-twice"),
        pytest.param(f"metadata:\n  labels: {{{MANAGED_BY}: Helm, {MANAGED_BY}: x}}\n", id="managed-by-twice-in-flow"),
        pytest.param(
            f'metadata:\n  annotations:\n    {RELEASE_NAME}: a\n    "{RELEASE_NAME}": b\n', id="quoted-and-plain"
        ),
        pytest.param(
            f"metadata:\n  labels:\n    {MANAGED_BY}: Helm\n    <<: {{{MANAGED_BY}: x}}\n", id="merge-key-override"
        ),
    ],
)
def test_a_signed_manifest_naming_a_tools_key_twice_is_refused(text: str) -> None:
    # The signer's value is what a stamp defers to; a payload with two must not let a reader pick one.
    with pytest.raises(DataError, match=r"duplicate key|merge key"):
        load_yaml_stream(text)
