"""The observer's deployment (``manifests/overlays/observer``): consistent, and no more privilege than it uses.

Rendered with ``kubectl kustomize`` (or ``kustomize``). What is checked:

* the command line is one ``manifest-provider observe`` accepts, its files are
  mounted from the ConfigMap, its metrics port is the container's and the one
  the NetworkPolicy opens;
* the targets and the policy in the ConfigMap are ones the observer reads, and
  the policy trusts the keys the shipped Kyverno policy trusts;
* RBAC grants exactly what the observer does -- ``list`` on each target's
  resource in each target namespace (the resource found as the observer finds
  it: discovery, here the real API server's recorded documents), ``watch`` too
  when it runs with ``--watch``, and get/create/update on PolicyReports there
  (with ``--watch`` also delete: it deletes the report of a deleted object) --
  to its service account, and nothing else: no wildcard, no Secrets;
* the pod runs as a restricted workload.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.audit.observer import read_targets
from provider.cli import build_parser
from provider.kube.lister import KubeLister
from provider.policy.schema import Policy
from tests.support.data import REPO
from tests.support.fakeapi import FakeApiServer, runner_for
from tests.support.kyverno import APICALL, api_call, policy_doc

OVERLAY = REPO / "manifests" / "overlays" / "observer"
MOUNT = "/etc/manifest-provider/observer"


def render() -> list[dict[str, Any]]:
    if shutil.which("kustomize"):
        command = ["kustomize", "build", str(OVERLAY)]
    elif shutil.which("kubectl"):
        command = ["kubectl", "kustomize", str(OVERLAY)]
    else:
        pytest.skip("no kustomize or kubectl to render the overlay")
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


DOCS = render() if OVERLAY.is_dir() else []


def one(kind: str) -> dict[str, Any]:
    (found,) = [d for d in DOCS if d["kind"] == kind]
    return found


def container() -> dict[str, Any]:
    (c,) = one("Deployment")["spec"]["template"]["spec"]["containers"]
    return dict(c)


def args() -> Any:
    return build_parser().parse_args(container()["args"])


def config_file(path: str) -> Any:
    assert path.startswith(MOUNT + "/"), path
    (mount,) = [m for m in container()["volumeMounts"] if m["mountPath"] == MOUNT]
    (volume,) = [v for v in one("Deployment")["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == one("ConfigMap")["metadata"]["name"]
    return yaml.safe_load(one("ConfigMap")["data"][path.removeprefix(MOUNT + "/")])


def test_the_overlay_renders_what_the_observer_needs() -> None:
    assert sorted(d["kind"] for d in DOCS) == sorted(
        ["Namespace", "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment", "NetworkPolicy"]
    )


def test_the_command_line_is_one_observe_accepts_and_its_files_are_mounted() -> None:
    parsed = args()
    assert parsed.command == "observe"
    read_targets(config_file(parsed.targets))
    Policy.from_dict(config_file(parsed.config))
    assert parsed.concurrency >= 1 and parsed.interval > 0


def test_the_policy_trusts_the_shipped_policies_keys() -> None:
    shipped = api_call(policy_doc(APICALL))["data"][1]["value"]["keys"]
    assert config_file(args().config)["keys"] == shipped


def test_the_metrics_port_is_the_containers_and_the_only_one_the_network_policy_opens() -> None:
    (port,) = container()["ports"]
    assert (port["name"], port["containerPort"]) == ("metrics", args().metrics_port)
    policy = one("NetworkPolicy")["spec"]
    pod_labels = one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert [p["port"] for rule in policy["ingress"] for p in rule["ports"]] == ["metrics"]
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}


def rules_by_namespace() -> dict[str, set[tuple[str, str, str]]]:
    """(group, resource, verb) granted to the observer's service account, by namespace."""
    account = one("ServiceAccount")["metadata"]
    roles = {(d["metadata"]["namespace"], d["metadata"]["name"]): d for d in DOCS if d["kind"] == "Role"}
    granted: dict[str, set[tuple[str, str, str]]] = {}
    for binding in (d for d in DOCS if d["kind"] == "RoleBinding"):
        subjects = {(s["kind"], s["name"], s.get("namespace")) for s in binding["subjects"]}
        assert subjects == {("ServiceAccount", account["name"], account["namespace"])}
        role = roles[(binding["metadata"]["namespace"], binding["roleRef"]["name"])]
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        granted.setdefault(binding["metadata"]["namespace"], set()).add((group, resource, verb))
    assert not [d for d in DOCS if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    return granted


def test_rbac_grants_exactly_what_the_observer_does(tmp_path: Path) -> None:
    targets = read_targets(config_file(args().targets))
    needed: dict[str, set[tuple[str, str, str]]] = {}
    with FakeApiServer() as fake, runner_for(fake, tmp_path) as runner:
        lister = KubeLister(runner)
        for target in targets:
            resource = lister.resolve(target.resource)
            assert resource.namespaced and target.namespaces, "cluster-wide targets need a ClusterRole"
            for namespace in target.namespaces:
                grants = needed.setdefault(namespace, set())
                grants |= {(resource.group, resource.name, verb) for verb in ("list", "watch")[: 1 + args().watch]}
                report_verbs = ("get", "create", "update") + (("delete",) if args().watch else ())
                grants |= {("wgpolicyk8s.io", "policyreports", verb) for verb in report_verbs}
    assert rules_by_namespace() == needed


def test_the_observer_follows_changes_as_they_happen() -> None:
    assert args().watch and not args().once


def test_the_pod_is_a_restricted_workload() -> None:
    pod = one("Deployment")["spec"]["template"]["spec"]
    assert (
        pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    )
    security = container()["securityContext"]
    assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert security["capabilities"]["drop"] == ["ALL"]
    assert pod["serviceAccountName"] == one("ServiceAccount")["metadata"]["name"]
    assert one("Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
