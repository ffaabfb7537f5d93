"""The static mode: policy objects from a file or a mounted ConfigMap, read again when they change.

A mounted ConfigMap is the kubelet's layout (k8s.io/kubernetes ``pkg/volume/util/atomic_writer.go``):
the keys are symlinks ``KEY -> ..data/KEY``, ``..data`` a symlink to a timestamped
directory, and an update writes a new directory and swaps ``..data`` with one rename.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.bounds import SERVICE
from provider.errors import ConfigError
from provider.policy.schema import Policy
from provider.policystore.files import SOURCE, PolicyFiles, read_policy_files
from provider.policystore.objects import HeldPolicy, read_policy_object
from provider.policystore.store import PolicyStore
from tests.support.heldpolicies import cluster_policy, tenant_policy, write_policies
from tests.support.keys import make_key, public_key_pem

KEYS = {"keys": [public_key_pem(make_key("ecdsa-p256", 321))]}


def load(obj: dict[str, Any]) -> HeldPolicy:
    return read_policy_object(obj, lambda raw, b: Policy.from_dict(raw, bounds=b), SERVICE)


def files(path: Path) -> tuple[PolicyFiles, PolicyStore]:
    store = PolicyStore([(SOURCE, f"the policy files ({path})")])
    return PolicyFiles(str(path), store, load, poll_seconds=60), store


def configmap_volume(directory: Path, data: dict[str, str], generation: int) -> None:
    """What the kubelet writes for a ConfigMap volume, generation by generation."""
    target = directory / f"..2026_05_01_12_00_0{generation}.000"
    target.mkdir()
    for key, text in data.items():
        (target / key).write_text(text)
    link = directory / "..data_tmp"
    link.symlink_to(target.name)
    os.rename(link, directory / "..data")
    for key in data:
        if not (directory / key).is_symlink():
            (directory / key).symlink_to(f"..data/{key}")


def test_a_file_of_policies_is_read(tmp_path: Path) -> None:
    path = write_policies(tmp_path / "p.yaml", cluster_policy("a", KEYS), tenant_policy("b", "shop", KEYS))
    reader, store = files(path)
    assert store.problem() is not None and not store.ready
    assert reader.read()
    assert store.problem() is None
    assert [h.ref for h in store.policies.all()] == ["ClusterManifestPolicy a", "ManifestPolicy shop/b"]


def test_a_list_is_read_too(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [cluster_policy("a", KEYS)]}))
    assert [name for _, name in [(w, o["metadata"]["name"]) for w, o in read_policy_files(path)]] == ["a"]


def test_a_mounted_configmap_is_read_and_read_again_when_the_kubelet_swaps_it(tmp_path: Path) -> None:
    configmap_volume(tmp_path, {"policies.yaml": yaml.safe_dump(cluster_policy("first", KEYS))}, 1)
    reader, store = files(tmp_path)
    assert reader.read()
    assert [h.name for h in store.policies.cluster] == ["first"]
    assert not reader.changed()
    configmap_volume(tmp_path, {"policies.yaml": yaml.safe_dump(cluster_policy("second", KEYS))}, 2)
    assert reader.changed()
    assert reader.read()
    assert [h.name for h in store.policies.cluster] == ["second"]


def test_the_poll_thread_reads_a_change(tmp_path: Path) -> None:
    path = write_policies(tmp_path / "p.yaml", cluster_policy("first", KEYS))
    store = PolicyStore([(SOURCE, "the policy files")])
    reader = PolicyFiles(str(path), store, load, poll_seconds=0.05)
    import threading

    thread = threading.Thread(target=reader.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not store.ready and time.monotonic() < deadline:
            time.sleep(0.02)
        write_policies(path, cluster_policy("second", KEYS))
        while [h.name for h in store.policies.cluster] != ["second"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [h.name for h in store.policies.cluster] == ["second"]
    finally:
        reader.stop()
        thread.join(timeout=60)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("kind: [unclosed", "not valid YAML"),
        (yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}), "a ConfigMap, not a"),
        (yaml.safe_dump_all([cluster_policy("a", KEYS), cluster_policy("a", KEYS)]), "is also in"),
        (yaml.safe_dump({"kind": "ManifestPolicy", "metadata": {"name": "x"}, "spec": {}}), "has no namespace"),
    ],
)
def test_a_set_that_cannot_be_read_replaces_nothing_and_denies_everything_until_it_can(
    tmp_path: Path, text: str, words: str
) -> None:
    path = write_policies(tmp_path / "p.yaml", cluster_policy("good", KEYS))
    reader, store = files(path)
    assert reader.read()
    path.write_text(text)
    assert not reader.read()
    problem = store.problem()
    assert problem is not None and words in problem and "every request is denied" in problem
    assert [h.name for h in store.policies.cluster] == ["good"]  # kept, but nothing is decided with it
    write_policies(path, cluster_policy("fixed", KEYS))
    assert reader.read() and store.problem() is None


def test_before_the_first_good_read_the_service_is_not_ready(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("kind: [unclosed")
    reader, store = files(path)
    assert not reader.read()
    problem = store.problem()
    assert (
        not store.ready
        and problem is not None
        and "has not finished reading" in problem
        and "not valid YAML" in problem
    )


def test_a_fifo_in_the_directory_is_an_error_not_a_hang(tmp_path: Path) -> None:
    write_policies(tmp_path / "a.yaml", cluster_policy("a", KEYS))
    os.mkfifo(tmp_path / "b.yaml")
    with pytest.raises(ConfigError, match="not a regular file"):
        read_policy_files(tmp_path)


def test_a_file_too_large_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    with path.open("wb") as out:
        out.truncate(5 * 1024 * 1024)
    with pytest.raises(ConfigError, match="larger than"):
        read_policy_files(path)


def test_other_files_and_dot_files_of_a_directory_are_not_read(tmp_path: Path) -> None:
    write_policies(tmp_path / "a.yaml", cluster_policy("a", KEYS))
    (tmp_path / "README.txt").write_text("not a policy")
    (tmp_path / ".hidden.yaml").write_text("kind: [broken")
    assert [o["metadata"]["name"] for _, o in read_policy_files(tmp_path)] == ["a"]


def test_a_policy_that_reads_but_does_not_compile_is_held_as_invalid(tmp_path: Path) -> None:
    path = write_policies(tmp_path / "p.yaml", cluster_policy("bad", {"keys": []}))
    reader, store = files(path)
    assert reader.read() and store.problem() is None
    (held,) = store.policies.cluster
    assert not held.ready and "no keys" in held.error


def test_two_cluster_policies_of_one_name_are_a_duplicate_whatever_namespace_they_carry(tmp_path: Path) -> None:
    """A ClusterManifestPolicy's ``metadata.namespace`` is cleared (the API server clears it, and so does the store):
    two of one name in different files, one with a namespace written in, are the same policy. The second used to
    replace the first without a word -- an Enforce policy gone because another file named it too."""
    strict = cluster_policy("shared", KEYS)
    other = cluster_policy("shared", KEYS, action="Audit")
    other["metadata"]["namespace"] = "team-b"
    write_policies(tmp_path / "a.yaml", strict)
    write_policies(tmp_path / "b.yaml", other)
    reader, store = files(tmp_path)
    assert not reader.read()
    problem = store.problem()
    assert problem is not None and "ClusterManifestPolicy 'shared' is also in" in problem and "a.yaml" in problem
    assert not store.ready


def test_files_that_change_while_read_replace_nothing_and_are_read_again(tmp_path: Path) -> None:
    """A read that overlaps a write may hold half of it: the set held stays, and the next look reads it whole."""
    path = write_policies(tmp_path / "p.yaml", cluster_policy("old", KEYS))
    store = PolicyStore([(SOURCE, f"the policy files ({path})")])
    writes = []

    def load_while_written(obj: dict[str, Any]) -> HeldPolicy:
        if len(writes) < 1 and obj["metadata"]["name"] == "new":  # the writer is still at work
            writes.append(1)
            write_policies(path, cluster_policy("new", KEYS), cluster_policy("also-new", KEYS))
        return load(obj)

    reader = PolicyFiles(str(path), store, load_while_written, poll_seconds=60)
    assert reader.read()
    write_policies(path, cluster_policy("new", KEYS))
    assert reader.changed()
    assert not reader.read()
    assert [h.name for h in store.policies.cluster] == ["old"] and store.problem() is None
    assert reader.changed()  # looked at again at the next poll
    assert reader.read()
    assert sorted(h.name for h in store.policies.cluster) == ["also-new", "new"]
