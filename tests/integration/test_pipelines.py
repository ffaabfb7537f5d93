"""docs/pipelines.md's recipes, run as written, produce objects that verify as each tool delivers them.

Each recipe runs under bash with the real CLI, the real kustomize (kubectl's
built-in one; a committed rendering of the same overlay only where kubectl is
missing) and a stand-in for Helm (its post-renderer contract and release
metadata): tests/support/pipelines.py. The objects it
produces are then delivered the way the tool delivers them
(tests/support/delivery.py) and verified with the tool's profile -- and not
without it, and not after a change smuggled in beside the tool's metadata.
"""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.errors import ContentMismatch
from provider.keys.pem import generate_key, private_pem, public_pem
from provider.policy.schema import Policy
from provider.signatures.signing import strip_envelope
from provider.verifier import verify
from tests.support import delivery
from tests.support.data import load_yaml
from tests.support.pipelines import (
    KUSTOMIZE_BUILD,
    KUSTOMIZE_TREE,
    app_repository,
    installed,
    kustomize_build,
    real_kustomize,
    recipes,
    run_recipe,
    run_tools,
    tool_env,
)

pytestmark = pytest.mark.integration

#: Each recipe the page must hold, and its kind of block.
RECIPES = {
    "kustomize": "sh",
    "helm-post-renderer": "sh",
    "helm-post-renderer-args": "sh",
    "helm4-plugin": "yaml",
    "argocd-ci": "sh",
    "argocd-application": "yaml",
    "argocd-cmp": "yaml",
    "flux-ci": "sh",
    "flux-kustomization": "yaml",
}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A scratch directory holding signing.key, signing.pub and the application's kustomize tree."""
    app_repository(tmp_path)
    key = generate_key("ecdsa-p256")
    (tmp_path / "signing.key").write_bytes(private_pem(key, None))
    (tmp_path / "signing.pub").write_bytes(public_pem(key))
    return tmp_path


def policy(workdir: Path, *profiles: str) -> Policy:
    return Policy.from_dict(
        {"keys": [(workdir / "signing.pub").read_text()], "defaults": ["k8s-manifest-sigstore", "common", *profiles]}
    )


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def verifies_as_delivered(
    objects: list[dict[str, Any]], deliver: Callable[[dict[str, Any]], None], good: Policy, without: Policy
) -> None:
    """Each object, delivered by the tool, verifies with the tool's profile, not without it, and not if changed."""
    assert objects, "the recipe produced no objects"
    for signed in objects:
        obj = copy.deepcopy(signed)
        deliver(obj)
        verify(obj, good)
        with pytest.raises(ContentMismatch):
            verify(obj, without)
        smuggled = copy.deepcopy(obj)
        smuggled["metadata"].setdefault("labels", {})["smuggled"] = "yes"
        with pytest.raises(ContentMismatch):
            verify(smuggled, good)


def test_the_page_holds_every_recipe() -> None:
    found = recipes()
    assert {name: lang for name, (lang, _) in found.items()} == RECIPES


@pytest.mark.skipif(not real_kustomize(), reason="kubectl (and its built-in kustomize) is not installed")
def test_the_committed_rendering_is_what_kustomize_renders() -> None:
    """Where kubectl is missing the recipes read the committed stream: it must be kustomize's own output."""
    assert load_yaml(KUSTOMIZE_BUILD) == [
        d for d in yaml.safe_load_all(kustomize_build(KUSTOMIZE_TREE / "overlays" / "prod")) if d
    ]


def test_kustomize_build_piped_into_sign(workdir: Path) -> None:
    proc = ok(run_recipe("kustomize", workdir))
    signed = load_yaml(workdir / "signed.yaml")
    rendered = load_yaml(KUSTOMIZE_BUILD)
    assert [d["kind"] for d in signed] == [d["kind"] for d in rendered] and len(signed) == 7
    # What was signed is exactly what kustomize rendered: the signature annotations are all sign added.
    assert strip_envelope(signed) == rendered
    assert proc.stdout.count("PASS [verified]") == 7  # the recipe's own verify
    no_tool = policy(workdir)
    for obj in signed:
        verify(obj, no_tool)  # kubectl apply --server-side adds nothing


def test_a_helm_post_renderer_wrapper_signs_what_helm_installs(workdir: Path) -> None:
    ok(run_recipe("helm-post-renderer", workdir))
    sent = installed(workdir)
    assert [o["kind"] for o in sent] == ["ServiceAccount", "Service", "Deployment"]  # the empty document dropped
    for obj in sent:
        meta = obj["metadata"]
        assert meta["namespace"] == "shop" and meta["annotations"]["meta.helm.sh/release-name"] == "web"
        verify(obj, policy(workdir, "helm"))
        with pytest.raises(ContentMismatch):
            verify(obj, policy(workdir))
    tampered = copy.deepcopy(sent[2])
    tampered["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:latest"
    with pytest.raises(ContentMismatch):
        verify(tampered, policy(workdir, "helm"))


def test_a_helm_post_renderer_without_a_wrapper(workdir: Path) -> None:
    ok(run_recipe("helm-post-renderer-args", workdir))
    sent = installed(workdir)
    assert len(sent) == 3
    for obj in sent:
        verify(obj, policy(workdir, "helm"))


def test_a_failing_post_renderer_fails_the_install(workdir: Path) -> None:
    """Helm shows the post-renderer's standard error and installs nothing: a missing key stops the release."""
    (workdir / "signing.key").unlink()
    proc = run_recipe("helm-post-renderer", workdir)
    assert proc.returncode != 0
    assert "error while running post render" in proc.stderr and "signing.key" in proc.stderr
    assert installed(workdir) == []


def test_the_helm4_plugin_runs_the_wrapper() -> None:
    _, body = recipes()["helm4-plugin"]
    plugin = yaml.safe_load(body)
    assert plugin["type"] == "postrenderer/v1" and plugin["runtime"] == "subprocess"
    (command,) = plugin["runtimeConfig"]["platformCommand"]
    assert command["command"] == "${HELM_PLUGIN_DIR}/sign-manifests"
    _, wrapper = recipes()["helm-post-renderer"]
    assert "cat > sign-manifests" in wrapper and "sign --post-renderer" in wrapper


def git_checkout(workdir: Path, path: str) -> Path:
    """A clone of an empty deploy repository (a bare one beside it stands for the Git server), holding ``path``."""
    for argv in (
        ["git", "init", "-q", "--bare", str(workdir / "remote.git")],
        ["git", "clone", "-q", str(workdir / "remote.git"), str(workdir / "checkout")],
    ):
        subprocess.run(argv, check=True, capture_output=True, env=tool_env(workdir))
    (workdir / "checkout" / path).mkdir(parents=True)
    return app_repository(workdir / "checkout")


def committed(workdir: Path, path: str) -> list[dict[str, Any]]:
    """The file as the Git server holds it after the recipe's push."""
    show = subprocess.run(
        ["git", "--git-dir", str(workdir / "remote.git"), "show", f"main:{path}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [d for d in yaml.safe_load_all(show.stdout) if d is not None]


def test_argocd_sign_in_ci_and_commit(workdir: Path) -> None:
    checkout = git_checkout(workdir, "deploy/prod")
    ok(run_recipe("argocd-ci", workdir, cwd=checkout, env={"SIGNING_KEY": str(workdir / "signing.key")}))
    objects = committed(workdir, "deploy/prod/storefront.yaml")
    assert len(objects) == 7
    application = yaml.safe_load(recipes()["argocd-application"][1])
    assert application["spec"]["source"]["path"] == "deploy/prod"
    namespace = application["spec"]["destination"]["namespace"]
    verifies_as_delivered(
        objects,
        lambda obj: delivery.argocd(obj, app=application["metadata"]["name"], destination=namespace),
        policy(workdir, "argocd"),
        policy(workdir),
    )


def test_argocd_config_management_plugin(workdir: Path) -> None:
    """The plugin's generate command, run as the sidecar runs it: in the application's source directory."""
    plugin = yaml.safe_load(recipes()["argocd-cmp"][1])
    assert plugin["kind"] == "ConfigManagementPlugin"
    source = app_repository(workdir / "app") / "overlays" / "prod"
    assert (source / plugin["spec"]["discover"]["fileName"]).is_file()  # what discover looks for
    generate = plugin["spec"]["generate"]
    proc = ok(
        run_tools(
            generate["command"] + generate["args"], workdir, source, {"SIGNING_KEY": str(workdir / "signing.key")}
        )
    )
    objects = [d for d in yaml.safe_load_all(proc.stdout) if d is not None]
    assert len(objects) == 7
    verifies_as_delivered(objects, delivery.argocd, policy(workdir, "argocd"), policy(workdir))


def test_flux_sign_in_ci_and_commit(workdir: Path) -> None:
    kustomization = yaml.safe_load(recipes()["flux-kustomization"][1])
    path = kustomization["spec"]["path"].removeprefix("./")
    # Nothing in the Kustomization may edit the signed objects.
    assert not {
        "targetNamespace",
        "patches",
        "images",
        "commonMetadata",
        "namePrefix",
        "nameSuffix",
        "postBuild",
    } & set(kustomization["spec"])
    checkout = git_checkout(workdir, path)
    ok(run_recipe("flux-ci", workdir, cwd=checkout, env={"SIGNING_KEY": str(workdir / "signing.key")}))
    objects = committed(workdir, f"{path}/storefront.yaml")
    assert len(objects) == 7
    verifies_as_delivered(
        objects,
        lambda obj: delivery.flux(obj, kustomization["metadata"]["name"], kustomization["metadata"]["namespace"]),
        policy(workdir, "flux"),
        policy(workdir),
    )
