"""``manifest-provider verify-resource``, the real command against the fake API server.

The fake serves the real kube-apiserver's discovery documents and lists in its
shape (``tests/support/fakestore.py``); the command runs as a user runs it, in
its own process, through a kubeconfig.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.controlplane import SERVICE_CA, TAMPERINGS, stored, tampered, written
from tests.support.data import REPO, load_yaml
from tests.support.fakeapi import FakeApiServer, recording
from tests.support.kube_schema import validate_object
from tests.support.live import KEY, PUBLIC_KEY, deployment, reimaged, scaled, signed, signed_configmap
from tests.support.manifests import configmap, sign

pytestmark = pytest.mark.integration

ASSETS = REPO / "tests" / "assets" / "policyreport"
CRDS = {load_yaml(p)[0]["spec"]["names"]["kind"]: load_yaml(p)[0] for p in sorted(ASSETS.glob("*.yaml"))}


@dataclass
class Cluster:
    fake: FakeApiServer
    tmp: Path

    @property
    def kubeconfig(self) -> Path:
        return self.fake.kubeconfig(self.tmp / "kubeconfig", namespace="shop")

    def run(self, *args: str, key: bool = True, stderr_tty: bool = False) -> subprocess.CompletedProcess[str]:
        keys = ["-k", str(self.tmp / "key.pub")] if key else []
        command = [
            sys.executable,
            "-m",
            "provider.cli",
            "verify-resource",
            *args,
            *keys,
            "--kubeconfig",
            str(self.kubeconfig),
        ]
        env = {**os.environ, "COLUMNS": "100"}
        if not stderr_tty:
            return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)
        # The progress line is for people: it shows only when standard error is a terminal.
        primary, secondary = pty.openpty()
        try:
            proc = subprocess.run(
                command, stdout=subprocess.PIPE, stderr=secondary, text=True, env=env, timeout=120, check=False
            )
            os.close(secondary)
            chunks = []
            while True:
                try:
                    chunk = os.read(primary, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(primary)
        return subprocess.CompletedProcess(command, proc.returncode, proc.stdout, b"".join(chunks).decode())


@pytest.fixture
def cluster(fake: FakeApiServer, tmp_path: Path) -> Cluster:
    (tmp_path / "key.pub").write_text(PUBLIC_KEY)
    for crd in CRDS.values():
        fake.install_crd(crd)
    return Cluster(fake, tmp_path)


def json_results(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    data = json.loads(proc.stdout)
    return {r["object"]["name"]: r for r in data["results"]}


# --- the autoscaler's change and a changed image: the "done when" -------------------------------


def test_a_deployment_the_autoscaler_scaled_is_verified_with_spec_replicas_named(cluster: Cluster) -> None:
    cluster.fake.add(scaled(signed(deployment("web"))))
    proc = cluster.run("deployments", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    web = json_results(proc)["web"]
    assert (web["result"], web["reason"], web["verified"]) == ("pass", "verified", True)
    assert "spec.replicas" in web["message"]


def test_a_changed_image_is_a_failure(cluster: Cluster) -> None:
    cluster.fake.add(reimaged(scaled(signed(deployment("web")))))
    cluster.fake.add(signed(deployment("api")))
    proc = cluster.run("deploy", "-o", "json")
    assert proc.returncode == 1
    found = json_results(proc)
    assert (found["web"]["result"], found["web"]["reason"]) == ("fail", "content-mismatch")
    assert "image" in found["web"]["message"] and found["api"]["result"] == "pass"


def test_a_difference_is_named_in_the_stored_object(cluster: Cluster) -> None:
    """verify-resource reads what the cluster stores: nothing is being admitted."""
    cluster.fake.add(reimaged(signed(deployment("web"))))
    proc = cluster.run("deploy", "-o", "json")
    message = json_results(proc)["web"]["message"]
    assert "signed 'nginx:1.27', stored 'evil.example/miner:latest'" in message and "admitted" not in message


# --- signatures kept outside the object ----------------------------------------------------------------


@pytest.mark.parametrize("concurrency", ["1", "2"], ids=["in-process", "workers"])
def test_a_policy_with_a_signature_configmap_reads_it_from_the_same_cluster(cluster: Cluster, concurrency: str) -> None:
    """``signatureResourceRef`` (``kubectl sigstore sign -o k8s://ConfigMap/NS/NAME``): the workers read it too."""
    signed_web, _ = sign([deployment("web"), deployment("api")], KEY)  # one message holding both
    annotations = signed_web["metadata"]["annotations"]
    signature = configmap("web-signature", "sigs")
    signature["data"] = {
        "message": annotations["cosign.sigstore.dev/message"],
        "signature": annotations["cosign.sigstore.dev/signature"],
    }
    cluster.fake.add(signature)
    cluster.fake.add(scaled(deployment("web")))  # no annotations: the signature is in the ConfigMap
    cluster.fake.add(reimaged(deployment("api")))
    config = cluster.tmp / "policy.yaml"
    config.write_text(yaml.safe_dump({"signatureResourceRef": "k8s://ConfigMap/sigs/web-signature"}))
    proc = cluster.run("deploy", "-o", "json", "-c", str(config), "--concurrency", concurrency)
    found = json_results(proc)
    assert (found["web"]["reason"], found["web"]["verified"]) == ("verified", True), found["web"]["message"]
    assert "spec.replicas" in found["web"]["message"]
    assert (found["api"]["result"], found["api"]["reason"]) == ("fail", "content-mismatch")
    assert proc.returncode == 1
    reads = [r for r in cluster.fake.requests if r.path == "/api/v1/namespaces/sigs/configmaps/web-signature"]
    assert reads and all(r.method == "GET" for r in reads)


# --- exit codes and outputs ----------------------------------------------------------------------------


def test_all_verified_is_exit_0_with_a_table_and_a_summary(cluster: Cluster) -> None:
    for i in range(3):
        cluster.fake.add(signed_configmap(f"cm-{i}"))
    proc = cluster.run("cm")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["RESULT", "OBJECT", "REASON", "MESSAGE"]
    assert [line.split()[:3] for line in lines[1:4]] == [
        ["PASS", f"configmap/shop/cm-{i}", "verified"] for i in range(3)
    ]
    assert "SUMMARY: 3 objects (configmaps in namespace shop)" in proc.stdout
    assert "verified" in lines[-4] and lines[-4].split()[-1] == "3"


def test_an_object_allowed_unverified_is_exit_3_unless_admission_semantics(cluster: Cluster) -> None:
    cluster.fake.add(signed_configmap("signed"))
    cluster.fake.add(configmap("kube-root-ca.crt", "shop"))  # the cluster writes it in every namespace
    config = cluster.tmp / "policy.yaml"
    config.write_text(yaml.safe_dump({"skipObjects": [{"kind": "ConfigMap", "name": "kube-root-ca.crt"}]}))
    proc = cluster.run("cm", "-o", "json", "--config", str(config))
    assert proc.returncode == 3, proc.stdout
    assert json_results(proc)["kube-root-ca.crt"]["result"] == "skip"
    assert cluster.run("cm", "--admission", "--config", str(config)).returncode == 0
    assert cluster.run("cm").returncode == 1  # without the policy's skip: unsigned


# --- what the control plane writes into every namespace --------------------------------------------------


@pytest.mark.parametrize("openshift", [False, True], ids=["kubernetes", "openshift"])
def test_a_fresh_namespace_holds_nothing_to_fix(cluster: Cluster, openshift: bool) -> None:
    """What the control plane writes into a namespace, as written: allowed without verification (exit 3).

    kube-root-ca.crt and the default ServiceAccount everywhere; on OpenShift also
    openshift-service-ca.crt, with the opt-in profile that takes it.
    """
    args: list[str] = []
    for _, obj in written():
        if obj["metadata"]["namespace"] == "shop" and (openshift or obj["metadata"]["name"] != SERVICE_CA):
            cluster.fake.add(stored(obj))
    if openshift:
        config = cluster.tmp / "policy.yaml"
        config.write_text(yaml.safe_dump({"defaults": ["k8s-manifest-sigstore", "common", "openshift"]}))
        args = ["--config", str(config)]
    proc = cluster.run("cm,sa", "-o", "json", *args)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # allowed, not verified
    found = json_results(proc)
    assert sorted(found) == ["default", "kube-root-ca.crt", *([SERVICE_CA] if openshift else [])]
    for name, result in found.items():
        assert (result["result"], result["reason"], result["verified"]) == ("skip", "control-plane-object", False), name
    assert cluster.run("cm,sa", "--admission", *args).returncode == 0


def test_openshifts_service_ca_without_its_profile_says_which_profile(cluster: Cluster) -> None:
    cluster.fake.add(stored(next(o for w, o in written() if o["metadata"]["name"] == SERVICE_CA), "shop"))
    proc = cluster.run("cm", "-o", "json")
    assert proc.returncode == 1
    result = json_results(proc)[SERVICE_CA]
    assert result["reason"] == "unsigned" and "enable the built-in profile 'openshift'" in result["message"]


def test_a_tampered_control_plane_object_is_listed_with_the_field(cluster: Cluster) -> None:
    label = next(t for t in TAMPERINGS if t.name == "label")
    cluster.fake.add(tampered(label, "shop"))
    proc = cluster.run("cm", "-o", "json")
    assert proc.returncode == 1
    result = json_results(proc)["kube-root-ca.crt"]
    assert (result["result"], result["reason"]) == ("fail", "control-plane-object-changed")
    assert "metadata.labels was added: stored" in result["message"]


def test_yaml_output_is_one_document_of_results_and_summary(cluster: Cluster) -> None:
    cluster.fake.add(signed_configmap("a"))
    cluster.fake.add(configmap("b", "shop"))
    proc = cluster.run("configmaps", "-o", "yaml")
    assert proc.returncode == 1
    (doc,) = yaml.safe_load_all(proc.stdout)
    assert [(r["object"]["name"], r["reason"]) for r in doc["results"]] == [("a", "verified"), ("b", "unsigned")]
    assert doc["summary"]["denied"] == 1 and doc["summary"]["reasons"] == {"unsigned": 1}


def test_an_empty_list_is_valid_output(cluster: Cluster) -> None:
    for output in ("json", "yaml"):
        proc = cluster.run("cm", "-o", output)
        assert proc.returncode == 0
        data = json.loads(proc.stdout) if output == "json" else yaml.safe_load(proc.stdout)
        assert data["results"] == [] and data["summary"]["objects"] == 0


# --- where: namespaces, selectors, names, pages ----------------------------------------------------------


def test_all_namespaces_selectors_and_pages(cluster: Cluster) -> None:
    for namespace in ("shop", "bank", "default"):
        for i in range(4):
            cm = configmap(f"{namespace}-{i}", namespace)
            cm["metadata"]["labels"] = {"tier": "front" if i % 2 else "back"}
            cluster.fake.add(signed(cm))
    every = cluster.run("cm", "-A", "-o", "json", "--chunk-size", "5")
    assert every.returncode == 0 and len(json_results(every)) == 12
    pages = [r for r in cluster.fake.requests if r.path == "/api/v1/configmaps"]
    assert len(pages) == 3 and all(r.query["limit"] == ["5"] for r in pages)
    front = cluster.run("cm", "-A", "-l", "tier=front", "-o", "json")
    assert sorted(json_results(front)) == sorted(f"{n}-{i}" for n in ("shop", "bank", "default") for i in (1, 3))
    bank = cluster.run("cm", "-n", "bank", "-o", "json")
    assert sorted(json_results(bank)) == [f"bank-{i}" for i in range(4)]


def test_several_kinds_in_one_command_as_kubectl_takes_them(cluster: Cluster) -> None:
    cluster.fake.add(signed_configmap("settings"))
    cluster.fake.add(signed(deployment("web")))
    proc = cluster.run("cm,deployments.apps", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)["results"]
    assert [(r["object"]["kind"], r["object"]["name"]) for r in found] == [
        ("ConfigMap", "settings"),
        ("Deployment", "web"),
    ]
    assert cluster.run("cm,deploy", "settings").returncode == 2  # names need one kind


def test_named_objects_and_one_that_is_missing(cluster: Cluster) -> None:
    cluster.fake.add(signed_configmap("a"))
    cluster.fake.add(signed_configmap("b"))
    proc = cluster.run("cm", "a", "gone", "-o", "json")
    assert proc.returncode == 1  # a name that is not there is not verified
    assert list(json_results(proc)) == ["a"]
    assert json.loads(proc.stdout)["summary"]["notFound"] == ["gone"]
    assert 'configmaps "gone" not found in namespace shop' in proc.stderr


def test_a_custom_resource_is_verified_like_any_object(cluster: Cluster) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "shortNames": ["wd"]},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }  # fmt: skip
    cluster.fake.install_crd(crd)
    widget = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "shop"},
        "spec": {"size": 3},
    }
    cluster.fake.add(signed(widget))
    changed = signed({**widget, "metadata": {"name": "v", "namespace": "shop"}})
    changed["spec"]["size"] = 4
    cluster.fake.add(changed)
    proc = cluster.run("wd", "-o", "json")
    assert proc.returncode == 1, proc.stderr
    found = json_results(proc)
    assert (found["w"]["reason"], found["v"]["reason"]) == ("verified", "content-mismatch")


def test_worker_processes_give_the_same_verdicts(cluster: Cluster) -> None:
    for i in range(40):
        cluster.fake.add(signed_configmap(f"s-{i}") if i % 4 else configmap(f"u-{i}", "shop"))
    one = cluster.run("cm", "-o", "json")
    two = cluster.run("cm", "-o", "json", "--concurrency", "2")
    assert {n: r["reason"] for n, r in json_results(one).items()} == {
        n: r["reason"] for n, r in json_results(two).items()
    }
    assert len(json_results(two)) == 40 and two.returncode == one.returncode == 1


# --- dry-run compare for live objects ---------------------------------------------------------------------


def test_dry_run_compares_a_live_object_with_what_the_cluster_makes_of_its_manifest(cluster: Cluster) -> None:
    """The stored object carries the server's defaults; the signed manifest, dry-run, gets the same ones."""
    rec = recording("deployment")
    (signed_manifest,) = sign(rec.request_body, KEY)
    live = json.loads(json.dumps(rec.body))
    live["metadata"].setdefault("annotations", {}).update(signed_manifest["metadata"]["annotations"])
    cluster.fake.add(live)
    namespace = live["metadata"]["namespace"]
    without = cluster.run("deploy", "-n", namespace, "-o", "json")
    assert without.returncode == 1 and next(iter(json_results(without).values()))["reason"] == "content-mismatch"
    with_dry_run = cluster.run("deploy", "-n", namespace, "-o", "json", "--dry-run")
    (result,) = json_results(with_dry_run).values()
    assert (with_dry_run.returncode, result["reason"]) == (0, "verified"), result["message"]
    assert any(r.method == "POST" and r.query.get("dryRun") == ["All"] for r in cluster.fake.requests)


# --- PolicyReports ----------------------------------------------------------------------------------------


def test_policyreports_are_printed_in_the_crds_shape(cluster: Cluster) -> None:
    cluster.fake.add(scaled(signed(deployment("web"))))
    cluster.fake.add(reimaged(signed(deployment("bad"))))
    proc = cluster.run("deploy", "-o", "policyreport")
    assert proc.returncode == 1
    reports = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert len(reports) == 2
    for report in reports:
        assert validate_object(report, CRDS[report["kind"]]) == []
    by_name = {r["scope"]["name"]: r["results"][0] for r in reports}
    assert (by_name["web"]["result"], by_name["bad"]["result"]) == ("pass", "fail")
    assert "spec.replicas" in by_name["web"]["message"] and by_name["bad"]["properties"]["reason"] == "content-mismatch"
    assert "SUMMARY: 2 objects" in proc.stderr
    assert not [r for r in cluster.fake.requests if "policyreports" in r.path]  # printed, not applied


def test_apply_creates_then_leaves_alone_then_updates(cluster: Cluster) -> None:
    web = cluster.fake.add(signed(deployment("web")))
    cluster.fake.add(signed_configmap("cm"))
    first = cluster.run("deploy", "-o", "policyreport", "--apply")
    assert first.returncode == 0, first.stderr
    name = f"manifest-provider-{web['metadata']['uid']}"
    assert first.stdout.strip() == f"policyreport.wgpolicyk8s.io/{name} created"
    again = cluster.run("deploy", "-o", "policyreport", "--apply")
    assert again.stdout.strip().endswith("unchanged")
    cluster.fake.change(reimaged(web))  # someone changes the live object
    third = cluster.run("deploy", "-o", "policyreport", "--apply")
    assert third.returncode == 1 and third.stdout.strip().endswith("updated")
    (report,) = cluster.fake.stored("wgpolicyk8s.io/v1alpha2", "PolicyReport")
    assert report["metadata"]["ownerReferences"][0]["uid"] == web["metadata"]["uid"]
    assert (report["results"][0]["result"], report["summary"]["fail"]) == ("fail", 1)


def test_a_cluster_scoped_object_gets_a_clusterpolicyreport(cluster: Cluster) -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}  # fmt: skip
    cluster.fake.add(signed(role))
    proc = cluster.run("clusterroles", "-o", "policyreport", "--apply")
    assert proc.returncode == 0, proc.stderr
    (report,) = cluster.fake.stored("wgpolicyk8s.io/v1alpha2", "ClusterPolicyReport")
    assert report["scope"]["kind"] == "ClusterRole" and report["results"][0]["result"] == "pass"


# --- for people -------------------------------------------------------------------------------------------


def test_a_terminal_sees_a_progress_line(cluster: Cluster) -> None:
    for i in range(5):
        cluster.fake.add(signed_configmap(f"cm-{i}"))
    proc = cluster.run("cm", "-o", "json", stderr_tty=True)
    assert proc.returncode == 0
    assert re.search(r"\rverify-resource: [1-5] checked, \d+/s, 0 failed", proc.stderr), proc.stderr
    piped = cluster.run("cm", "-o", "json")
    assert "checked" not in piped.stderr  # not a terminal: no progress line


USAGE = [
    ("unknown-kind", ["gizmos"], 'the server doesn\'t have a resource type "gizmos"'),
    ("apply-without-reports", ["cm", "--apply"], "--apply writes PolicyReports"),
    ("names-and-all-namespaces", ["cm", "a", "-A"], "cannot be combined"),
    ("no-key", ["cm"], "key"),
]


@pytest.mark.parametrize(("args", "error"), [u[1:] for u in USAGE], ids=[u[0] for u in USAGE])
def test_usage_errors_are_exit_2(cluster: Cluster, args: list[str], error: str) -> None:
    proc = cluster.run(*args, key=args != ["cm"])
    assert proc.returncode == 2 and error in proc.stderr, proc.stderr


def test_a_forbidden_list_is_an_error_not_a_pass(cluster: Cluster) -> None:
    cluster.fake.forbidden_resources = {"configmaps"}
    proc = cluster.run("cm")
    assert proc.returncode == 2 and 'cannot list resource "configmaps"' in proc.stderr


# --- one shape for files and clusters ------------------------------------------------------------------


def test_verify_and_verify_resource_print_the_same_shape(cluster: Cluster) -> None:
    """``verify -o json`` of an object as stored equals ``verify-resource -o json``'s, but for where it was read."""
    cluster.fake.add(signed(deployment("web")))
    proc = cluster.run("deployments", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    live = json.loads(proc.stdout)
    (stored,) = cluster.fake.stored("apps/v1", "Deployment")
    (cluster.tmp / "web.yaml").write_text(yaml.safe_dump(stored))
    command = [sys.executable, "-m", "provider.cli", "verify", "-f", str(cluster.tmp / "web.yaml")]
    file = subprocess.run(
        [*command, "-k", str(cluster.tmp / "key.pub"), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert file.returncode == 0, file.stderr
    read = json.loads(file.stdout)
    (from_cluster,), (from_file,) = live["results"], read["results"]
    assert list(from_file) == list(from_cluster)
    assert from_file["object"] == {**from_cluster["object"], "document": 1}
    assert from_cluster["object"]["group"] == "apps" and from_cluster["object"]["version"] == "v1"
    assert {k: v for k, v in from_file.items() if k not in ("object", "message")} == {
        k: v for k, v in from_cluster.items() if k not in ("object", "message")
    }
    assert list(read["summary"]) == list(live["summary"])
