"""A tampered Secret is denied without quoting a value, however the value was changed (attack class 6 probed
again with other inputs).

From an attack pass without any signing key (docs/security.md): each test is named by the attack; a table
row's id names the input.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from provider import Policy
from tests.support.keys import public_key_pem
from tests.support.manifests import sign
from tests.support.one_key import KEY, verdict

# --- the earlier classes, probed again with other inputs (each held) ------------------------------------------


SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "db", "namespace": "shop"},
    "type": "Opaque",
    "data": {"password": "c3VwZXJzZWNyZXQ="},  # supersecret
}


LEAKS = ("c3VwZXJzZWNyZXQ", "supersecret", "bmV3c2VjcmV0", "newsecret")  # the signed and the admitted value


def _last_applied(obj: dict[str, Any]) -> None:
    # What kubectl apply writes on every Secret it applies: the whole object, values included.
    applied = {**SECRET, "data": {"password": "bmV3c2VjcmV0"}}  # newsecret
    obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = json.dumps(applied)


def _data_to_list(obj: dict[str, Any]) -> None:
    obj["data"] = ["bmV3c2VjcmV0"]


def _string_data(obj: dict[str, Any]) -> None:
    obj["stringData"] = {"password": "newsecret"}


@pytest.mark.parametrize("defaults", [["common"], ["common", "k8s-manifest-sigstore"]], ids=["common", "both"])
@pytest.mark.parametrize(
    "change",
    [_last_applied, _data_to_list, _string_data],
    ids=["last-applied-annotation", "data-becomes-a-list", "string-data-added"],
)
def test_a_tampered_secret_is_denied_without_quoting_a_value(
    change: Callable[[dict[str, Any]], None], defaults: list[str]
) -> None:
    # Without the k8s-manifest-sigstore profile (--disable-default-config, or defaults: [common]) the
    # last-applied annotation is compared, and its diff quoted both Secrets' values in the message.
    policy = Policy.from_dict({"keys": [public_key_pem(KEY)], "defaults": defaults})
    (signed,) = sign(SECRET, KEY)
    changed = copy.deepcopy(signed)
    change(changed)
    result = verdict(changed, policy)
    shown = json.dumps(result.to_dict())
    if result.allowed:  # the profile ignores the annotation: nothing to say, nothing said
        assert result.verified and change is _last_applied
    else:
        assert result.reason == "content-mismatch", result.message
    assert not any(value in shown for value in LEAKS), shown
