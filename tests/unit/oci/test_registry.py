"""provider.oci.registry: the exchange's deadline bounds looking up the registry's name too.

The registry is whoever the bundle reference names, so its name's DNS zone is
the reference author's: a zone whose servers never answer must cost a fetch its
deadline, not the C resolver's timeouts and retries on top of it
(``tests/support/resolver.py``).
"""

from __future__ import annotations

import socket
import time

import pytest

from provider.oci.registry import RegistryClient, RegistryError
from tests.support.resolver import StuckResolver

#: The fetch's deadline: time for a thread to start on a loaded machine, far under the stand-in's hold.
DEADLINE = 1.0


def test_a_registry_name_that_never_resolves_costs_the_deadline_not_more(monkeypatch: pytest.MonkeyPatch) -> None:
    resolver = StuckResolver()
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    try:
        with pytest.raises(RegistryError) as caught:
            RegistryClient().request(
                "GET", "registry.example:443", "/v2/", scope="", deadline=time.monotonic() + DEADLINE, max_bytes=1024
            )
        # Returned while the lookup was still held: the client stopped waiting at its deadline.
        returned_while_stuck = not resolver.gave_up.is_set()
    finally:
        resolver.release()
    assert resolver.asked == ["registry.example"]
    assert returned_while_stuck
    assert (caught.value.kind, "by the deadline" in caught.value.message) == ("unavailable", True), caught.value.message
