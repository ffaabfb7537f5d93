"""The observer's rule: verify an object again only when it, the policy or the trust material changed.

The loop runs against its two ports: a source holding objects in memory and a
sink keeping reports by name (``tests/integration/test_observe_cli.py`` runs the
real command against the fake API server). Verifications are counted by the
pass's statistics and by a checker factory that counts the checks it makes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import pytest

from provider.audit.live import Checked, LiveChecker, ObjectRef
from provider.audit.observer import Observer, PassStats, Target, VerdictCache, WriteOutcome, read_targets
from provider.audit.reports import same_content
from provider.bounds import LOCAL
from provider.errors import PolicyError, TransientError
from provider.signatures.sources import Sources
from tests.support.keys import make_key, public_key_pem
from tests.support.live import KEY, POLICY, deployment, reimaged, scaled, signed, signed_configmap, stored
from tests.support.manifests import sign

TARGET = Target("deployments.apps", ("shop",))


class Source:
    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects_by_uid = {o["metadata"]["uid"]: o for o in objects}
        self.down = False

    def objects(self, target: Target) -> Iterator[dict[str, Any]]:
        if self.down:
            raise TransientError("the API server could not be reached")
        yield from self.objects_by_uid.values()

    def write(self, obj: dict[str, Any]) -> None:
        """A write to the object: the API server gives it a new resourceVersion."""
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(
            int(self.objects_by_uid[obj["metadata"]["uid"]]["metadata"]["resourceVersion"]) + 1
        )
        self.objects_by_uid[obj["metadata"]["uid"]] = obj


class Sink:
    def __init__(self) -> None:
        self.reports: dict[str, dict[str, Any]] = {}
        self.failing = False

    def write(self, report: dict[str, Any]) -> WriteOutcome:
        if self.failing:
            raise TransientError("policyreports forbidden")
        name = report["metadata"]["name"]
        old = self.reports.get(name)
        self.reports[name] = report
        return "created" if old is None else ("unchanged" if same_content(old, report) else "updated")

    def delete(self, obj: dict[str, Any]) -> Literal["deleted", "absent"]:
        if self.failing:
            raise TransientError("policyreports forbidden")
        return "deleted" if self.reports.pop(obj["metadata"]["name"], None) is not None else "absent"


class CountingChecker(LiveChecker):
    checks = 0

    def check_all(self, objects: Iterable[dict[str, Any]]) -> Iterator[Checked]:
        for checked in super().check_all(objects):
            CountingChecker.checks += 1
            yield checked


class World:
    def __init__(self, objects: list[dict[str, Any]], cache_size: int = 1000) -> None:
        self.source = Source(objects)
        self.sink = Sink()
        self.policy = dict(POLICY)
        CountingChecker.checks = 0
        self.observer = Observer(
            (TARGET,), self.source, sink=self.sink, cache=VerdictCache(cache_size),
            load_policy=lambda: self.policy, make_checker=CountingChecker,
        )  # fmt: skip

    def run(self) -> PassStats:
        before = CountingChecker.checks
        stats = self.observer.run_pass()
        assert stats.verified_now == CountingChecker.checks - before
        return stats


def fleet() -> list[dict[str, Any]]:
    return [
        stored(signed(deployment("web")), "10", "uid-web"),
        stored(scaled(signed(deployment("api"))), "11", "uid-api"),
        stored(reimaged(signed(deployment("bad"))), "12", "uid-bad"),
    ]


def test_the_first_pass_verifies_everything_and_writes_every_report() -> None:
    world = World(fleet())
    stats = world.run()
    assert (stats.objects, stats.verified_now, stats.cache_hits) == (3, 3, 0)
    assert dict(stats.by_outcome) == {"pass": 2, "fail": 1} and dict(stats.failing_reasons) == {"content-mismatch": 1}
    assert dict(stats.reports) == {"created": 3} and stats.complete


def test_an_unchanged_cluster_is_read_and_nothing_is_verified_or_written() -> None:
    world = World(fleet())
    world.run()
    stats = world.run()
    assert (stats.verified_now, stats.cache_hits, dict(stats.reports)) == (0, 3, {})
    assert dict(stats.by_outcome) == {"pass": 2, "fail": 1}  # every object still counted with its verdict


def test_a_written_object_alone_is_verified_again() -> None:
    world = World(fleet())
    world.run()
    world.source.write(reimaged(world.source.objects_by_uid["uid-web"]))
    stats = world.run()
    assert (stats.verified_now, stats.cache_hits) == (1, 2)
    assert dict(stats.reports) == {"updated": 1}
    assert world.sink.reports["manifest-provider-uid-web"]["results"][0]["result"] == "fail"


def test_the_autoscaler_scaling_again_is_verified_again_and_still_passes() -> None:
    world = World(fleet())
    world.run()
    world.source.write(scaled(world.source.objects_by_uid["uid-api"], 9))
    stats = world.run()
    assert stats.verified_now == 1 and dict(stats.reports) == {"updated": 1}  # the resourceVersion it was checked at
    (result,) = world.sink.reports["manifest-provider-uid-api"]["results"]
    assert (result["result"], result["properties"]["resourceVersion"]) == ("pass", "12")


def test_a_changed_policy_verifies_everything_again() -> None:
    world = World(fleet())
    world.run()
    world.policy = {**POLICY, "threshold": 1}
    stats = world.run()
    assert (stats.verified_now, stats.cache_hits) == (3, 0)
    assert dict(stats.reports) == {"unchanged": 3}  # same verdicts: the reports stay as they are


def test_rotated_trust_material_verifies_everything_again() -> None:
    """The key file now holds another key: the old signatures no longer verify."""
    world = World(fleet())
    world.run()
    world.policy = {"keys": [public_key_pem(make_key("ecdsa-p256", 151))]}
    stats = world.run()
    assert stats.verified_now == 3 and dict(stats.by_outcome) == {"fail": 3}
    assert dict(stats.by_reason) == {"signature-invalid": 3} and dict(stats.reports) == {"updated": 3}


def test_an_object_recreated_under_its_name_is_a_new_object() -> None:
    """The same name and even resourceVersion text, another uid: nothing carries over."""
    world = World(fleet())
    world.run()
    old = world.source.objects_by_uid.pop("uid-web")
    world.source.objects_by_uid["uid-web-2"] = stored(reimaged(old), old["metadata"]["resourceVersion"], "uid-web-2")
    stats = world.run()
    assert (
        stats.verified_now == 1 and world.sink.reports["manifest-provider-uid-web-2"]["results"][0]["result"] == "fail"
    )


class DownCluster:
    def dry_run(self, manifest: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        raise TransientError("the API server could not be reached", reason="dry-run-failed")


def test_no_verdict_is_never_remembered() -> None:
    world = World(fleet())
    world.policy = {**POLICY, "dryRun": {"enabled": True}}
    world.observer._make_checker = lambda data: CountingChecker(data, dry_runner=DownCluster())
    first = world.run()
    second = world.run()
    # The two that differ from their manifests need the cluster; the unchanged one does not.
    assert first.by_outcome["error"] == 2 == second.by_outcome["error"]
    assert second.verified_now == 2 and second.cache_hits == 1


def test_a_report_that_could_not_be_written_is_written_on_the_next_pass() -> None:
    world = World(fleet())
    world.sink.failing = True
    first = world.run()
    assert dict(first.reports) == {"failed": 3}
    world.sink.failing = False
    second = world.run()
    assert second.verified_now == 3 and dict(second.reports) == {"created": 3}


def test_the_cache_is_bounded_and_an_evicted_verdict_costs_a_verification() -> None:
    world = World(fleet(), cache_size=2)
    world.run()
    stats = world.run()
    assert stats.cache_hits + stats.verified_now == 3 and stats.verified_now >= 1
    assert len(world.observer.cache) <= 2


def test_a_target_that_cannot_be_read_leaves_the_pass_incomplete() -> None:
    world = World(fleet())
    world.source.down = True
    stats = world.run()
    assert not stats.complete and stats.failed_targets[0][0] == TARGET and stats.objects == 0


def test_a_policy_that_cannot_be_read_fails_the_pass() -> None:
    world = World(fleet())
    world.policy = {"keys": []}
    with pytest.raises(PolicyError):
        world.run()


def test_configmaps_and_deployments_are_counted_alike() -> None:
    world = World([stored(signed_configmap("a"), "1", "uid-a"), *fleet()])
    assert world.run().objects == 4


# --- the targets file ----------------------------------------------------------------------------------

TARGETS_OK = [
    ("one", {"targets": [{"resource": "deploy"}]}, (Target("deploy"),)),
    (
        "full",
        {"targets": [{"resource": "cm", "namespaces": ["a", "b"], "selector": "app=web"}, {"resource": "crd"}]},
        (Target("cm", ("a", "b"), "app=web"), Target("crd")),
    ),
]


@pytest.mark.parametrize(("data", "expected"), [t[1:] for t in TARGETS_OK], ids=[t[0] for t in TARGETS_OK])
def test_targets_are_read(data: Any, expected: tuple[Target, ...]) -> None:
    assert read_targets(data) == expected


TARGETS_BAD = [
    ("not-a-mapping", ["deploy"], "non-empty list 'targets'"),
    ("empty", {"targets": []}, "non-empty list 'targets'"),
    ("unknown-top-field", {"targets": [{"resource": "cm"}], "interval": 5}, "unknown field"),
    ("unknown-entry-field", {"targets": [{"resource": "cm", "namespace": "a"}]}, "unknown field"),
    ("no-resource", {"targets": [{"namespaces": ["a"]}]}, "'resource'"),
    ("namespaces-not-a-list", {"targets": [{"resource": "cm", "namespaces": "a"}]}, "'namespaces' must be a list"),
]


@pytest.mark.parametrize(("data", "error"), [t[1:] for t in TARGETS_BAD], ids=[t[0] for t in TARGETS_BAD])
def test_unusable_targets_are_refused(data: Any, error: str) -> None:
    with pytest.raises(PolicyError, match=error):
        read_targets(data)


class SignatureConfigMap:
    """The :class:`~provider.signatures.sources.ConfigMapReader` port, holding one signature ConfigMap's data."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.data: dict[str, str] | None = None
        self.sign(*objects)

    def sign(self, *objects: dict[str, Any]) -> None:
        annotations = sign(list(objects), KEY)[0]["metadata"]["annotations"]
        self.data = {key.rpartition("/")[2]: annotations[key] for key in ("cosign.sigstore.dev/message",
                                                                           "cosign.sigstore.dev/signature")}  # fmt: skip

    def read_data(self, namespace: str, name: str, deadline: float) -> dict[str, str] | None:
        return self.data


def test_under_a_signature_configmap_every_pass_verifies_again_as_the_configmap_may_change() -> None:
    """resourceVersion tracks the object, not the ConfigMap its signature lives in: nothing is cached."""
    web, api = deployment("web"), deployment("api")
    signatures = SignatureConfigMap(web, api)
    world = World([stored(web, "10", "uid-web"), stored(api, "11", "uid-api")])
    world.policy = {**POLICY, "signatureResourceRef": "k8s://ConfigMap/sigs/signatures"}
    world.observer._make_checker = lambda data: CountingChecker(data, sources_factory=lambda _: Sources(
        configmaps=signatures), bounds=LOCAL)  # fmt: skip
    first = world.run()
    assert (first.verified_now, dict(first.by_outcome)) == (2, {"pass": 2})
    again = world.run()
    assert (again.verified_now, again.cache_hits, dict(again.reports)) == (2, 0, {"unchanged": 2})
    signatures.sign(api)  # re-signed without web: the objects' resourceVersions stay
    third = world.run()
    assert dict(third.by_outcome) == {"pass": 1, "fail": 1} and dict(third.reports) == {"unchanged": 1, "updated": 1}


# --- what a watch saw (observe --watch) -----------------------------------------------------------------


def test_a_watched_change_is_verified_now_and_an_unchanged_object_is_not() -> None:
    world = World(fleet())
    world.run()
    before = CountingChecker.checks
    web = world.source.objects_by_uid["uid-web"]
    world.source.write(reimaged(web))
    stats = world.observer.check([world.source.objects_by_uid["uid-web"], world.source.objects_by_uid["uid-api"]])
    assert (stats.verified_now, stats.cache_hits, dict(stats.reports)) == (1, 1, {"updated": 1})
    assert CountingChecker.checks - before == 1
    assert [(c.ref.name, report) for c, report in stats.verdicts or []] == [("web", "updated"), ("api", "cached")]


def test_a_deleted_object_loses_its_report() -> None:
    world = World(fleet())
    world.run()
    ref = ObjectRef.of(world.source.objects_by_uid["uid-bad"])
    assert world.observer.forget(ref) == "deleted"
    assert "manifest-provider-uid-bad" not in world.sink.reports and len(world.sink.reports) == 2
    assert world.observer.forget(ref) == "absent"
    world.sink.failing = True
    assert world.observer.forget(ObjectRef.of(world.source.objects_by_uid["uid-web"])) == "failed"


def test_reload_says_whether_the_policy_changed() -> None:
    world = World(fleet())
    assert world.observer.reload() is True  # the first read
    assert world.observer.reload() is False
    rotated = {"keys": [public_key_pem(make_key("ecdsa-p256", 153))]}
    world.policy = rotated
    assert world.observer.reload() is True
    world.policy = {"keys": []}
    with pytest.raises(PolicyError):
        world.observer.reload()
    world.policy = rotated
    assert world.observer.reload() is False  # the refused one never replaced the one in use
