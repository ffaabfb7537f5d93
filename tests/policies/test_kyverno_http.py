"""The URL each Kyverno policy calls, against each supported release's HTTP rules (``tests/support/kyverno_http.py``).

The service URL is an in-cluster name, ``manifest-provider.manifest-provider.svc``,
which resolves to the Service's ClusterIP: an address from the cluster's service
range, private in most distributions. With Kyverno's defaults the ClusterPolicy's
``apiCall.service`` is never filtered; the CEL policy's ``http.Post`` is refused
by Kyverno 1.18's default blocklist, so ``kyverno-values.yaml`` sets
``--httpBlocklist`` -- and that list must still block what the default blocks
for a reason: loopback, link-local and the metadata host names.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.support.data import REPO
from tests.support.kyverno import APICALL, CEL, VERSIONS, NotModelled, admission_request, api_call, cel_variables
from tests.support.kyverno import policy_doc as shipped
from tests.support.kyverno_http import (
    HAS_BLOCKLIST_FLAG,
    KYVERNO_119_DEFAULT_BLOCKLIST,
    SDK_DEFAULT_BLOCKLIST,
    blocklist,
    parse_blocklist,
    refusal,
)

VALUES = REPO / "manifests" / "overlays" / "kyverno-cel" / "kyverno-values.yaml"
QUICKSTART = REPO / "docs" / "quickstart-kyverno.md"

#: ClusterIPs from the default service ranges of common distributions: kubeadm (10.96.0.0/12), k3s
#: (10.43.0.0/16), EKS (10.100.0.0/16 or 172.20.0.0/16), AKS (10.0.0.0/16), GKE Autopilot
#: (34.118.224.0/20), an RFC 1918 range chosen by hand, kind's IPv6 default (fd00:10:96::/112).
CLUSTER_IPS = {
    "kubeadm": "10.96.14.7",
    "k3s": "10.43.0.12",
    "eks-10": "10.100.201.3",
    "eks-172": "172.20.5.9",
    "aks": "10.0.44.1",
    "gke-autopilot": "34.118.230.17",
    "custom-192": "192.168.100.20",
    "kind-ipv6": "fd00:10:96::4a2",
}
PRIVATE = {name for name, ip in CLUSTER_IPS.items() if name != "gke-autopilot"}
#: Addresses the flag must keep refusing (the reasons the default blocklist exists).
MUST_STAY_BLOCKED = [
    ("http://169.254.169.254/latest/meta-data/", ["169.254.169.254"]),
    ("http://metadata.google.internal/computeMetadata/v1/", ["169.254.169.254"]),
    ("http://metadata.internal/", ["169.254.169.254"]),
    ("http://[fe80::a9fe:a9fe]/", ["fe80::a9fe:a9fe"]),
    ("https://localhost:10250/pods", ["127.0.0.1", "::1"]),
    ("http://127.0.0.1:8080/", []),
]


def cel_url() -> str:
    variables = cel_variables(shipped(CEL), admission_request({"kind": "ConfigMap", "metadata": {}}), lambda *a: {})
    return str(variables["serviceURL"])


def values_flag() -> str:
    values = yaml.safe_load(VALUES.read_text())
    return str(values["admissionController"]["container"]["extraArgs"]["httpBlocklist"])


def test_both_policies_call_the_same_in_cluster_service() -> None:
    assert api_call(shipped(APICALL))["service"]["url"] == cel_url()
    assert cel_url().startswith("https://manifest-provider.manifest-provider.svc:")


@pytest.mark.parametrize("version", list(VERSIONS))
@pytest.mark.parametrize("cluster", list(CLUSTER_IPS))
def test_the_cluster_policys_service_call_is_never_filtered(version: str, cluster: str) -> None:
    """pkg/engine/apicall/executor.go ``buildHTTPClient``: a plain client in 1.17.x, 1.18.x and 1.19.0."""
    url = api_call(shipped(APICALL))["service"]["url"]
    assert refusal(blocklist(version, "apiCall"), url, [CLUSTER_IPS[cluster]]) is None


@pytest.mark.parametrize("version", list(VERSIONS))
@pytest.mark.parametrize("cluster", list(CLUSTER_IPS))
def test_the_cel_call_with_kyvernos_defaults(version: str, cluster: str) -> None:
    """1.17: no filter; 1.18: the sdk's default refuses every private ClusterIP; 1.19: in-cluster calls pass."""
    why = refusal(blocklist(version, "cel"), cel_url(), [CLUSTER_IPS[cluster]])
    if version == "1.18" and cluster in PRIVATE:
        assert why is not None and "falls in blocked range" in why
    else:
        assert why is None, why


@pytest.mark.parametrize("version", sorted(HAS_BLOCKLIST_FLAG))
@pytest.mark.parametrize("cluster", list(CLUSTER_IPS))
def test_the_cel_call_with_the_shipped_flag(version: str, cluster: str) -> None:
    assert refusal(blocklist(version, "cel", values_flag()), cel_url(), [CLUSTER_IPS[cluster]]) is None


@pytest.mark.parametrize("version", sorted(HAS_BLOCKLIST_FLAG))
@pytest.mark.parametrize(("url", "addresses"), MUST_STAY_BLOCKED, ids=[u for u, _ in MUST_STAY_BLOCKED])
def test_the_shipped_flag_still_blocks_what_the_defaults_block_for_a_reason(
    version: str, url: str, addresses: list[str]
) -> None:
    assert refusal(blocklist(version, "cel", values_flag()), url, addresses) is not None
    # ... as the 1.18 default does (1.19's keeps only loopback and the metadata names and addresses).
    assert refusal(parse_blocklist(SDK_DEFAULT_BLOCKLIST), url, addresses) is not None


def test_the_shipped_flag_is_no_weaker_than_the_119_default() -> None:
    """Every entry of 1.19's default is covered: its CIDRs by a CIDR of the flag, its host names by name or range."""
    flag = parse_blocklist(values_flag().split(","))
    default = parse_blocklist(KYVERNO_119_DEFAULT_BLOCKLIST)
    for network in default.networks:
        assert any(network.version == n.version and network.subnet_of(n) for n in flag.networks), network
    for host in default.hosts:
        assert host in flag.hosts or refusal(flag, f"http://{host}/", []) is not None, host


def test_the_flag_parses_as_kyverno_parses_it() -> None:
    """Every entry is a CIDR or a host name; a bad CIDR would stop Kyverno at startup (ValidateHTTPFlags)."""
    entries = values_flag().split(",")
    assert entries == [e.strip() for e in entries] and all(entries)
    parse_blocklist(entries)
    with pytest.raises(ValueError):
        parse_blocklist(["10.0.0.0/33"])


def test_117_has_no_flag_to_pass() -> None:
    """cmd/kyverno/main.go: the flag set is ExitOnError and 1.17 registers no httpBlocklist: it would not start."""
    with pytest.raises(NotModelled):
        blocklist("1.17", "cel", values_flag())
    assert "1.17" not in HAS_BLOCKLIST_FLAG


def test_the_values_mount_the_ca_the_script_writes() -> None:
    """kyverno-values.yaml mounts ConfigMap manifest-provider-ca (key ca.crt, ca-bundle.sh --kyverno-trust) into a
    directory SSL_CERT_DIR names, beside the system one."""
    values: dict[str, Any] = yaml.safe_load(VALUES.read_text())["admissionController"]
    (volume,) = values["extraVolumes"]
    assert volume["configMap"]["name"] == "manifest-provider-ca"
    assert [i["key"] for i in volume["configMap"]["items"]] == ["ca.crt"]
    (mount,) = values["extraVolumeMounts"]
    assert mount["name"] == volume["name"]
    env = {e["name"]: e["value"] for e in values["container"]["extraEnvVars"]}
    assert env["SSL_CERT_DIR"].split(":") == ["/etc/ssl/certs", mount["mountPath"]]


def test_the_quickstart_names_the_versions_and_the_flag() -> None:
    text = QUICKSTART.read_text()
    for needle in ("--httpBlocklist", "kyverno-values.yaml", "1.17", "1.18", "1.19", "--kyverno-trust"):
        assert needle in text, needle
