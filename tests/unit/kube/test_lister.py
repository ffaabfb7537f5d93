"""Reading live objects: kubectl's names through discovery, lists in pages, against the fake API server.

The fake answers discovery with the real kube-apiserver's recorded documents and
lists in the real server's shape (``tests/support/fakestore.py``), through the real
``kubernetes`` client.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provider.errors import RequestError, TransientError
from provider.kube.dryrun import KubeDryRunner
from provider.kube.lister import PAGE_LIMITS, KubeLister
from tests.support.data import REPO, load_yaml
from tests.support.fakeapi import FakeApiServer, runner_for
from tests.support.manifests import configmap

POLICY_REPORT_CRD = REPO / "tests" / "assets" / "policyreport" / "wgpolicyk8s.io_policyreports.yaml"


@pytest.fixture
def runner(fake: FakeApiServer, tmp_path: Path) -> Iterator[KubeDryRunner]:
    with runner_for(fake, tmp_path) as r:
        yield r


@pytest.fixture
def lister(runner: KubeDryRunner) -> KubeLister:
    return KubeLister(runner)


# --- names, as kubectl reads them -------------------------------------------------------------------

NAMES = [
    ("plural", "configmaps", ("", "v1", "configmaps")),
    ("singular", "configmap", ("", "v1", "configmaps")),
    ("kind", "ConfigMap", ("", "v1", "configmaps")),
    ("short-name", "cm", ("", "v1", "configmaps")),
    ("upper-case", "CONFIGMAPS", ("", "v1", "configmaps")),
    ("group-short-name", "deploy", ("apps", "v1", "deployments")),
    ("resource.group", "deployments.apps", ("apps", "v1", "deployments")),
    ("kind.group", "Deployment.apps", ("apps", "v1", "deployments")),
    ("resource.version.group", "deployments.v1.apps", ("apps", "v1", "deployments")),
    # kubectl's priority: the core group's events, not events.k8s.io's
    ("core-group-first", "events", ("", "v1", "events")),
    ("other-group-named", "events.events.k8s.io", ("events.k8s.io", "v1", "events")),
    # the preferred version when unqualified, another one when named
    ("preferred-version", "hpa", ("autoscaling", "v2", "horizontalpodautoscalers")),
    ("named-version", "horizontalpodautoscalers.v1.autoscaling", ("autoscaling", "v1", "horizontalpodautoscalers")),
    ("cluster-scoped", "clusterroles", ("rbac.authorization.k8s.io", "v1", "clusterroles")),
    ("crd-itself", "crd", ("apiextensions.k8s.io", "v1", "customresourcedefinitions")),
]


@pytest.mark.parametrize(("arg", "expected"), [n[1:] for n in NAMES], ids=[n[0] for n in NAMES])
def test_a_name_resolves_as_kubectl_resolves_it(lister: KubeLister, arg: str, expected: tuple[str, str, str]) -> None:
    resource = lister.resolve(arg)
    assert (resource.group, resource.version, resource.name) == expected


@pytest.mark.parametrize("arg", ["polr", "policyreports", "PolicyReport.wgpolicyk8s.io", "policyreport"])
def test_a_custom_resource_is_found_through_discovery(fake: FakeApiServer, lister: KubeLister, arg: str) -> None:
    (crd,) = load_yaml(POLICY_REPORT_CRD)
    fake.install_crd(crd)
    resource = lister.resolve(arg)
    assert (resource.group, resource.version, resource.kind, resource.namespaced) == (
        "wgpolicyk8s.io",
        "v1alpha2",
        "PolicyReport",
        True,
    )


UNUSABLE = [
    ("unknown", "widgets", 'the server doesn\'t have a resource type "widgets"'),
    ("unknown-group", "deployments.example.com", "doesn't have a resource type"),
    ("wrong-version", "deployments.v9.apps", "doesn't have a resource type"),
    ("no-list-verb", "bindings", "cannot be listed"),
    ("a-subresource", "deployments/scale", "is not a resource type"),
    ("empty", "", "is not a resource type"),
]


@pytest.mark.parametrize(("arg", "error"), [u[1:] for u in UNUSABLE], ids=[u[0] for u in UNUSABLE])
def test_a_name_that_names_nothing_listable_is_a_usage_error(lister: KubeLister, arg: str, error: str) -> None:
    with pytest.raises(RequestError, match=error):
        lister.resolve(arg)


def test_discovery_is_one_cache_with_the_dry_runs(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    """Resolving, listing and a later dry-run of the same kind ask for each discovery document once."""
    lister = KubeLister(runner)
    lister.resolve("deployments")
    lister.resolve("deploy")
    assert runner.resource_for("apps/v1", "Deployment").name == "deployments"
    discovery = [r.path for r in fake.requests if r.path in ("/api", "/apis", "/api/v1", "/apis/apps/v1")]
    assert sorted(discovery) == ["/api", "/api/v1", "/apis", "/apis/apps/v1"]


# --- lists, page by page ----------------------------------------------------------------------------


def populate(fake: FakeApiServer, names: dict[str, list[str]], **labels: str) -> None:
    for namespace, items in names.items():
        for name in items:
            cm = configmap(name, namespace)
            cm["metadata"]["labels"] = dict(labels)
            fake.add(cm)


def everything(lister: KubeLister, arg: str, namespace: str | None = None, selector: str | None = None) -> list[Any]:
    resource = lister.resolve(arg)
    return [obj for page in lister.pages(resource, namespace, selector) for obj in page]


def test_pages_follow_continue_until_the_list_ends(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    populate(fake, {"shop": [f"cm-{i}" for i in range(7)]})
    lister = KubeLister(runner, page_size=3)
    resource = lister.resolve("configmaps")
    pages = list(lister.pages(resource, "shop"))
    assert [len(p) for p in pages] == [3, 3, 1]
    lists = [r for r in fake.requests if r.path == "/api/v1/namespaces/shop/configmaps"]
    assert [r.query.get("limit") for r in lists] == [["3"]] * 3
    assert "continue" not in lists[0].query and all("continue" in r.query for r in lists[1:])
    assert [o["metadata"]["name"] for p in pages for o in p] == [f"cm-{i}" for i in range(7)]


def test_items_get_the_identity_the_list_left_out(fake: FakeApiServer, lister: KubeLister) -> None:
    """The API server writes apiVersion and kind once, on a built-in list; every object is reviewed with them."""
    populate(fake, {"shop": ["a"]})
    raw = fake.store.list(fake.kind_of("/api/v1", "configmaps"), "shop", {})[1]  # type: ignore[arg-type]
    assert raw["kind"] == "ConfigMapList" and "kind" not in raw["items"][0]
    (obj,) = everything(lister, "cm", "shop")
    assert (obj["apiVersion"], obj["kind"]) == ("v1", "ConfigMap")


def test_all_namespaces_is_one_list_in_key_order(fake: FakeApiServer, lister: KubeLister) -> None:
    populate(fake, {"shop": ["b", "a"], "bank": ["z"], "default": ["m"]})
    found = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in everything(lister, "configmaps")]
    assert found == [("bank", "z"), ("default", "m"), ("shop", "a"), ("shop", "b")]
    assert any(r.path == "/api/v1/configmaps" for r in fake.requests)


SELECTORS = [
    ("equality", "app=web", ["web-1", "web-2"]),
    ("double-equals", "app==web", ["web-1", "web-2"]),
    ("inequality", "app!=web", ["db", "plain"]),
    ("set-in", "app in (web,db)", ["db", "web-1", "web-2"]),
    ("set-notin", "app notin (web)", ["db", "plain"]),
    ("exists", "app", ["db", "web-1", "web-2"]),
    ("not-exists", "!app", ["plain"]),
    ("and", "app=web,tier=front", ["web-1"]),
]


@pytest.mark.parametrize(("selector", "names"), [s[1:] for s in SELECTORS], ids=[s[0] for s in SELECTORS])
def test_label_selectors_are_the_servers(
    fake: FakeApiServer, lister: KubeLister, selector: str, names: list[str]
) -> None:
    for name, labels in {"web-1": {"app": "web", "tier": "front"}, "web-2": {"app": "web"}, "db": {"app": "db"}, "plain": {}}.items():  # fmt: skip
        cm = configmap(name, "shop")
        cm["metadata"]["labels"] = labels
        fake.add(cm)
    assert sorted(o["metadata"]["name"] for o in everything(lister, "cm", "shop", selector)) == names


def test_a_malformed_selector_is_a_usage_error(lister: KubeLister) -> None:
    with pytest.raises(RequestError, match="400"):
        everything(lister, "cm", "shop", "app=(web")


def test_an_expired_continue_goes_on_from_the_token_the_server_offers(
    fake: FakeApiServer, runner: KubeDryRunner
) -> None:
    populate(fake, {"shop": [f"cm-{i}" for i in range(5)]})
    notices: list[str] = []
    lister = KubeLister(runner, page_size=2, on_inconsistent=notices.append)
    fake.store.expire_continue = 1
    names = [o["metadata"]["name"] for o in everything(lister, "cm", "shop")]
    assert names == [f"cm-{i}" for i in range(5)]
    assert [r.status for r in fake.requests if r.path.endswith("/configmaps")] == [200, 410, 200, 200]
    assert len(notices) == 1 and "expired" in notices[0]


def test_a_page_too_large_is_asked_again_for_fewer_objects(fake: FakeApiServer, runner: KubeDryRunner) -> None:
    populate(fake, {"shop": [f"cm-{i}" for i in range(6)]})
    small = dataclasses.replace(PAGE_LIMITS, max_api_response_bytes=700)  # room for two of these ConfigMaps, not four
    lister = KubeLister(runner, page_size=8, limits=small)
    names = [o["metadata"]["name"] for o in everything(lister, "cm", "shop")]
    assert names == [f"cm-{i}" for i in range(6)]
    limits = [r.query["limit"][0] for r in fake.requests if r.path.endswith("/configmaps")]
    assert limits == ["8", "4", "2", "2", "2"]


def test_a_forbidden_list_names_the_missing_permission(fake: FakeApiServer, lister: KubeLister) -> None:
    fake.forbidden_resources = {"configmaps"}
    with pytest.raises(
        TransientError, match='cannot list resource "configmaps" in API group "" in the namespace "shop"'
    ):
        everything(lister, "cm", "shop")


def test_objects_are_read_by_name(fake: FakeApiServer, lister: KubeLister) -> None:
    populate(fake, {"shop": ["a"]})
    resource = lister.resolve("cm")
    found = lister.get(resource, "a", "shop")
    assert found is not None and (found["kind"], found["metadata"]["name"]) == ("ConfigMap", "a")
    assert lister.get(resource, "missing", "shop") is None
