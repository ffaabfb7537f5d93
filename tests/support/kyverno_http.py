"""Which URLs Kyverno lets a policy call: its HTTP blocklists, release by release, read from its source.

Two paths leave Kyverno for the service, each with its own rules:

* the ClusterPolicy's ``apiCall.service``: a plain ``net/http`` client
  (kyverno/kyverno ``pkg/engine/apicall/executor.go``, ``buildHTTPClient``) with
  no address filter in 1.17.x, 1.18.x and 1.19.0. The filter of kyverno#17234
  (the CEL rules, applied to service calls) reached ``main`` after 1.19.0 and
  ``release-1.19`` through kyverno#17298: it is in no release read here.
* the ValidatingPolicy's CEL ``http.Get``/``http.Post``:

  - 1.17.x: no filter (``pkg/cel/libs/http/http.go``, ``NewHTTP(nil)``: the
    default client); ``--allowHTTPInNamespacedPolicies`` (1.17.2) concerns only
    namespaced policies, which the signature policy is not.
  - 1.18.x: ``--httpBlocklist`` (``FLAG_HTTP_BLOCKLIST``), by default kyverno/sdk
    ``cel/libs/http/http.go`` ``DefaultBlockedCIDRs`` and ``DefaultBlockedHosts``
    (``pkg/toggle/toggle.go``), for cluster-scoped policies too (kyverno#15880
    was reverted before 1.18.0, ``pkg/cel/compiler/http.go``).
  - 1.19.0: the same flag, by default ``defaultPolicyHTTPBlocklist`` in
    ``pkg/toggle/toggle.go`` (kyverno#15973: loopback and the metadata addresses).

The blocklist is read as kyverno/sdk ``NewHTTPWithBlocklist`` reads it: an entry
with ``/`` is a CIDR, checked against every address the host name resolves to
when the connection is made (``secureDialContext``); any other entry is a host
name, compared with the URL's host name in lower case without a trailing dot
(``validateURL``) -- so ``169.254.169.254`` without ``/32`` only blocks that very
spelling. An entry that is not a valid CIDR is a startup error
(``ValidateHTTPFlags``).
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

from tests.support.kyverno import VERSIONS, NotModelled

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: kyverno/sdk cel/libs/http/http.go (the version Kyverno 1.18.x uses): DefaultBlockedCIDRs, DefaultBlockedHosts.
SDK_DEFAULT_BLOCKLIST = (
    "127.0.0.0/8",
    "::1/128",
    "169.254.0.0/16",
    "fe80::/10",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "fc00::/7",
    "100.64.0.0/10",
    "metadata.google.internal",
    "metadata.internal",
)
#: kyverno/kyverno v1.19.0 pkg/toggle/toggle.go, defaultPolicyHTTPBlocklist.
KYVERNO_119_DEFAULT_BLOCKLIST = (
    "169.254.169.254",
    "169.254.169.253",
    "metadata.google.internal",
    "127.0.0.0/8",
    "::1/128",
)
#: The releases whose Kyverno has the ``--httpBlocklist`` flag (an unknown flag stops Kyverno: ExitOnError).
HAS_BLOCKLIST_FLAG = frozenset({"1.18", "1.19"})


@dataclass(frozen=True)
class Blocklist:
    networks: tuple[Network, ...]
    hosts: frozenset[str]


def _host(name: str) -> str:
    return name.strip().lower().rstrip(".")


def parse_blocklist(entries: Iterable[str]) -> Blocklist:
    """``NewHTTPWithBlocklist``: CIDRs (with ``/``) and host names; a bad CIDR is an error."""
    networks: list[Network] = []
    hosts: set[str] = set()
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        if "/" in entry:
            networks.append(ipaddress.ip_network(entry, strict=False))
        else:
            hosts.add(_host(entry))
    return Blocklist(tuple(networks), frozenset(hosts))


def default_blocklist(version: str, path: str) -> Blocklist | None:
    """What applies with no flag set; None when nothing is filtered."""
    if version not in VERSIONS:
        raise NotModelled(f"Kyverno {version}")
    if path == "apiCall":
        return None
    if path != "cel":
        raise NotModelled(f"call path {path!r}")
    if version == "1.17":
        return None
    return parse_blocklist(SDK_DEFAULT_BLOCKLIST if version == "1.18" else KYVERNO_119_DEFAULT_BLOCKLIST)


def blocklist(version: str, path: str, flag: str | None = None) -> Blocklist | None:
    """The rules in force: ``--httpBlocklist=flag`` replaces the default (CEL path; the flag exists from 1.18)."""
    if flag is None or path == "apiCall":
        return default_blocklist(version, path)
    if version not in HAS_BLOCKLIST_FLAG:
        raise NotModelled(f"Kyverno {version} has no --httpBlocklist flag (it would not start)")
    return parse_blocklist(flag.split(","))


def refusal(rules: Blocklist | None, url: str, addresses: Iterable[str]) -> str | None:
    """Why a call to ``url``, whose host resolves to ``addresses``, is refused; None when it goes through."""
    if rules is None:
        return None
    host = urllib.parse.urlsplit(url).hostname or ""
    if _host(host) in rules.hosts:
        return f"hostname {host!r} is on the blocklist"
    try:
        literal: list[str] = [str(ipaddress.ip_address(host))]
    except ValueError:
        literal = []
    for address in literal or list(addresses):
        ip = ipaddress.ip_address(address)
        for network in rules.networks:
            if ip.version == network.version and ip in network:
                return f"IP {ip} falls in blocked range {network}"
    return None
