"""OpenPGP: only the signature that was checked rides in the annotation, one armored block.

From an attack pass without any signing key (docs/security.md): each test is named by the attack; a table
row's id names the input.
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Iterator

import pytest

from provider import Policy
from provider.signatures.signing import dump_yaml
from tests.support.manifests import configmap
from tests.support.one_key import verdict
from tests.support.openpgp import Gpg

# --- OpenPGP: only the signature that was checked rides in the annotation ----------------------------------


@pytest.fixture(scope="module")
def gpg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gpg]:
    home = Gpg(tmp_path_factory.mktemp("gnupg"))
    yield home
    home.close()


@pytest.mark.parametrize(
    ("tail", "allowed"),
    [(b"", True), (b"\n\n", True), (b"SIGNATURE", False), (b"junk that nobody verifies", False)],
    ids=["as-gpg-writes-it", "trailing-newlines", "the-block-again", "trailing-bytes"],
)
def test_an_openpgp_signature_annotation_holds_one_armored_block(gpg: Gpg, tail: bytes, allowed: bool) -> None:
    # Sequoia reads the first armored block and ignores what follows, so anything appended to a valid
    # signature verified -- bytes in a masked annotation that nobody checked.
    payload = dump_yaml([configmap("app", mode="production")]).encode()
    fingerprint = gpg.generate("round3@example.com")
    signature = gpg.sign(fingerprint, payload)
    appended = signature if tail == b"SIGNATURE" else tail
    obj = configmap("app", mode="production")
    obj["metadata"]["annotations"] = {
        "cosign.sigstore.dev/message": base64.b64encode(gzip.compress(payload, mtime=0)).decode(),
        "cosign.sigstore.dev/signature": base64.b64encode(signature + appended).decode(),
    }
    result = verdict(obj, Policy.from_dict({"keys": [gpg.export(fingerprint).decode()]}))
    assert result.allowed is allowed, result.message
