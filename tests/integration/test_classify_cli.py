"""``manifest-provider classify``, run as a user runs it, on the real audit log and on signed traffic."""

from __future__ import annotations

import copy
import csv
import gzip
import io
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.policy.schema import Policy
from tests.support.audit import REAL_LOG, event
from tests.support.data import UPSTREAM, load_yaml
from tests.support.fakeapi import FakeApiServer
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign

pytestmark = pytest.mark.integration

TABLE = {
    "out-of-scope": 655,
    "common-profile": 459,
    "app-profile": 0,
    "valid-signature": 0,
    "invalid-signature": 1,
    "unprocessed": 22,
}
PERSON = "kubernetes-admin"


def cli(*args: str | Path, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = subprocess.run(
        [sys.executable, "-m", "provider.cli", "classify", *map(str, args)],
        capture_output=True, env={**env, "COLUMNS": "100"}, input=stdin, timeout=120, check=False,
    )  # fmt: skip
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A policy with keys and no skipUsers: the common profile alone."""
    path = tmp_path_factory.mktemp("classify") / "policy.yaml"
    path.write_text(yaml.safe_dump({"keys": [public_key_pem(make_key())]}))
    return path


def test_json_table_of_the_real_log(policy_file: Path) -> None:
    proc = cli("-f", REAL_LOG, "--config", policy_file, "-o", "json", "--by", "user")
    assert proc.returncode == 1, proc.stderr  # the person's unsigned writes would be stopped
    report = json.loads(proc.stdout)
    assert list(report) == ["total", "classes", "by", "topUnprocessed"]
    assert report["total"] == 1137 and report["classes"] == TABLE
    users = report["by"]["user"]
    # kubectl scale goes through the scale subresource: denied (class 5), the rest unsigned (class 6)
    assert (
        users[PERSON]["classes"]["unprocessed"],
        users[PERSON]["classes"]["invalid-signature"],
        users[PERSON]["total"],
    ) == (22, 1, 23)
    for user, row in users.items():
        if user != PERSON:
            assert row["classes"]["out-of-scope"] + row["classes"]["common-profile"] == row["total"], user
    assert report["topUnprocessed"][0] == {"user": PERSON, "kind": "Namespace", "namespace": "", "count": 4}
    assert len(report["topUnprocessed"]) == 10
    assert proc.stderr == ""


def test_events_lines_classify_every_write(policy_file: Path) -> None:
    proc = cli("-f", REAL_LOG, "--config", policy_file, "--events", "-o", "json")
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(lines) == 1137
    assert set(lines[0]) == {"auditID", "user", "verb", "resource", "namespace", "name", "class", "reason"}
    by_user: dict[str, Counter[str]] = {}
    for line in lines:
        by_user.setdefault(line["user"], Counter())[line["class"]] += 1
    assert by_user.pop(PERSON) == {"unprocessed": 22, "invalid-signature": 1}
    assert all(set(classes) <= {"out-of-scope", "common-profile"} for classes in by_user.values())
    deletion = next(line for line in lines if line["user"] == PERSON and line["verb"] == "delete")
    assert (deletion["resource"], deletion["name"], deletion["class"], deletion["reason"]) == (
        "namespaces",
        "batch",
        "unprocessed",
        "unverifiable-operation",
    )
    assert json.loads(proc.stderr[proc.stderr.index("{") :])["classes"] == TABLE  # the table went to stderr


def test_table_output_with_percentages(policy_file: Path) -> None:
    proc = cli("-f", REAL_LOG, "--config", policy_file, "--by", "namespace", "--top", "3")
    assert proc.returncode == 1
    out = proc.stdout
    assert "Traffic classes of 1137 write requests" in out
    assert "1 out-of-scope            655   57.6 %" in out
    assert "2 common-profile          459   40.4 %" in out
    assert "5 invalid-signature         1    0.1 %" in out
    assert "6 unprocessed              22    1.9 %" in out
    assert "total                    1137  100.0 %" in out
    assert "By namespace:" in out and "(cluster-scoped)" in out
    top = out[out.index("Most frequent unprocessed") :].splitlines()
    assert len(top) == 5 and "kubernetes-admin  Namespace" in top[2]


def test_csv_output(policy_file: Path) -> None:
    proc = cli("-f", REAL_LOG, "--config", policy_file, "-o", "csv", "--by", "kind")
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert rows[0] == {"dimension": "all", "key": "", "total": "1137", **{k: str(v) for k, v in TABLE.items()}}
    kinds = {r["key"]: r for r in rows[1:]}
    assert all(r["dimension"] == "kind" for r in rows[1:])
    assert kinds["Lease"]["out-of-scope"] == "548"
    assert sum(int(r["total"]) for r in rows[1:]) == 1137


def test_suggest_prints_reviewable_yaml_and_never_changes_the_policy(policy_file: Path, tmp_path: Path) -> None:
    before = policy_file.read_text()
    app = tmp_path / "app.audit.jsonl"
    operator = "system:serviceaccount:shop:operator"
    app.write_text("".join(json.dumps(e) + "\n" for e in [
        event(body=configmap("a", "shop"), namespace="shop", user=operator),
        event(body={"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}, resource="secrets", namespace="shop", user=operator, name="s"),
    ]))  # fmt: skip
    proc = cli("-f", app, "--config", policy_file, "--suggest")
    assert proc.returncode == 1
    fragment = yaml.safe_load(proc.stdout)
    assert fragment == {"skipUsers": [{
        "description": f"{operator} manages its own namespace's objects (2 unprocessed of 2 requests in the audit log); proposed by classify --suggest",
        "users": [operator],
        "operations": ["CREATE"],
        "objects": [{"namespace": "shop", "group": "-", "kind": "ConfigMap,Secret"}],
    }]}  # fmt: skip
    assert "Traffic classes of 2 write requests" in proc.stderr
    assert policy_file.read_text() == before
    # The proposal, once a person adds it, makes the same log clean.
    reviewed = tmp_path / "reviewed.yaml"
    reviewed.write_text(yaml.safe_dump({**yaml.safe_load(before), **fragment}))
    Policy.from_dict(yaml.safe_load(reviewed.read_text()))
    again = cli("-f", app, "--config", reviewed, "-o", "json")
    assert again.returncode == 0 and json.loads(again.stdout)["classes"]["app-profile"] == 2


def test_signed_traffic_from_standard_input(policy_file: Path) -> None:
    (signed,) = sign(configmap("app-config", "shop", mode="prod"))
    tampered = copy.deepcopy(signed)
    tampered["data"]["mode"] = "debug"
    lines = [
        event(body=signed, namespace="shop", name="app-config"),
        event(
            "patch",
            body={"metadata": {"annotations": signed["metadata"]["annotations"]}, "data": {"mode": "prod"}},
            namespace="shop",
            name="app-config",
        ),
        event("update", body=tampered, namespace="shop", name="app-config"),
    ]
    stdin = b"not json\n" + b"".join(json.dumps(e).encode() + b"\n" for e in lines)
    proc = cli("-f", "-", "--config", policy_file, "-o", "json")
    assert proc.returncode == 2 and "holds no audit event" in proc.stderr  # nothing on standard input
    proc = cli("-f", "-", "--config", policy_file, stdin=b"garbage\n")
    assert proc.returncode == 2 and "holds no readable audit event" in proc.stderr
    reads_only = json.dumps(event("get", resource="pods")).encode() + b"\n"
    proc = cli("-f", "-", "--config", policy_file, stdin=reads_only)
    assert proc.returncode == 0 and "1 reads (not admission requests) not counted" in proc.stderr
    proc = cli("-f", "-", "--config", policy_file, "-o", "json", stdin=stdin)
    assert proc.returncode == 1
    classes = json.loads(proc.stdout)["classes"]
    assert (classes["valid-signature"], classes["invalid-signature"]) == (2, 1)
    assert "1 malformed line skipped (line 1: the line is not valid JSON" in proc.stderr
    only_good = b"".join(json.dumps(e).encode() + b"\n" for e in lines[:2])
    assert cli("-f", "-", "--config", policy_file, stdin=only_good).returncode == 0


def test_a_compressed_log(policy_file: Path, tmp_path: Path) -> None:
    packed = tmp_path / "audit.jsonl.gz"
    packed.write_bytes(gzip.compress(REAL_LOG.read_bytes()))
    proc = cli("-f", packed, "--config", policy_file, "-o", "json")
    assert json.loads(proc.stdout)["classes"] == TABLE


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--events", "--suggest"), "not both"),
        (("--top", "-1"), "--top"),
        (("--by", "colour"), "invalid choice"),
        (("-o", "yaml"), "invalid choice"),
    ],
    ids=["events-and-suggest", "negative-top", "unknown-dimension", "unknown-format"],
)
def test_usage_errors(policy_file: Path, args: tuple[str, ...], message: str) -> None:
    proc = cli("-f", REAL_LOG, "--config", policy_file, *args)
    assert proc.returncode == 2 and message in proc.stderr and proc.stdout == ""


def test_configuration_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"keys": [], "skipUsers": []}))
    proc = cli("-f", REAL_LOG, "--config", bad)
    assert proc.returncode == 2 and "no keys or signers" in proc.stderr
    proc = cli("-f", tmp_path / "missing.jsonl", "--config", bad)
    assert proc.returncode == 2


# --- dry-run ------------------------------------------------------------------------------

LIVE_OBJECT = UPSTREAM / "manifests" / "deploy-live-object-needs-dryrun.yaml"
UPSTREAM_KEY = UPSTREAM / "keys" / "testpub.pem"


def test_dry_run_turns_a_defaulted_object_into_a_valid_signature(fake: FakeApiServer, tmp_path: Path) -> None:
    (live,) = load_yaml(LIVE_OBJECT)
    tampered = copy.deepcopy(live)
    tampered["spec"]["template"]["spec"]["hostNetwork"] = True
    meta = live["metadata"]
    log = tmp_path / "live.audit.jsonl"
    log.write_text("".join(
        json.dumps(event("create", resource="deployments", group="apps", body=obj, namespace=meta.get("namespace", "default"), name=meta["name"])) + "\n"
        for obj in (live, tampered)
    ))  # fmt: skip
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"keys": [UPSTREAM_KEY.read_text()]}))

    def classes(*extra: str | Path) -> dict[str, Any]:
        proc = cli("-f", log, "--config", policy, "-o", "json", *extra)
        assert proc.returncode == 1, proc.stderr
        return json.loads(proc.stdout)["classes"]  # type: ignore[no-any-return]

    assert (classes()["invalid-signature"], classes()["valid-signature"]) == (2, 0)
    assert fake.creates() == []
    with_cluster = classes("--dry-run", "--kubeconfig", fake.kubeconfig(tmp_path / "kubeconfig"))
    assert (with_cluster["valid-signature"], with_cluster["invalid-signature"]) == (1, 1)
    assert all(p.query["dryRun"] == ["All"] for p in fake.creates()) and len(fake.creates()) == 2
