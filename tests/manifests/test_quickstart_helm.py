"""docs/quickstart-helm.md is true: its ``helm install`` and ``helm upgrade`` lines render, and do what it says.

Each command of the page that installs or upgrades this chart is parsed the way
Helm parses it (``--set`` and ``--set-file`` by Helm's own strvals parser in
helm-python-sdk, ``--reuse-values`` merging the release's earlier values) and
rendered by the real Helm engine into the namespace it names, with ``team.pub``
a real public key. An option the page uses that this test does not know fails
the test, so the page cannot drift into flags nobody checked. Then what the
page claims about each result is checked on the rendered objects, and the
image name its ``kustomize edit set image`` line overrides is the one the
overlays render.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import celpy
import helm_python
import pytest
import yaml

from provider.keys.pem import generate_key, public_pem
from tests.support.data import REPO
from tests.support.helm import find, render
from tests.support.kyverno import to_python

PAGE = REPO / "docs" / "quickstart-helm.md"
CHART_PATH = "manifests/charts/manifest-provider"
ENVIRONMENT = {"$IMAGE": "registry.example.com/platform/manifest-provider", "$TAG": "0.1.0"}


def shell_lines(text: str) -> list[str]:
    """The commands of every ``sh`` block, continuation lines joined, comments dropped."""
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        joined = block.replace("\\\n", " ")
        lines += [
            line.split(" #", 1)[0].strip()
            for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ]
    return lines


def section(title: str) -> str:
    text = PAGE.read_text()
    assert f"\n## {title}\n" in text, title
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def helm_commands(text: str, workdir: Path) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(verb, release, namespace, values) for each helm install/upgrade of this chart, in page order."""
    found: list[tuple[str, str, str, dict[str, Any]]] = []
    released: dict[str, dict[str, Any]] = {}
    for line in shell_lines(text):
        for name, value in ENVIRONMENT.items():
            line = line.replace(name, value)  # noqa: PLW2901 - the page's variables, set in its first block
        words = shlex.split(line)
        if words[:1] != ["helm"] or words[1] not in ("install", "upgrade") or CHART_PATH not in words:
            continue
        verb, release = words[1], words[2]
        assert words[3] == CHART_PATH, line
        values: dict[str, Any] = {}
        namespace = "default"
        options = iter(words[4:])
        for option in options:
            if option in ("-n", "--namespace"):
                namespace = next(options)
            elif option == "--set":
                values = merge(values, helm_python.parse_set_string(next(options)))
            elif option == "--set-file":
                expression = next(options)
                key, _, path = expression.partition("=")
                values = merge(values, helm_python.parse_set_file(f"{key}={workdir / path}"))
            elif option == "--reuse-values":
                assert verb == "upgrade" and release in released, line
                values = merge(released[release], values)
            elif option in ("--create-namespace", "--wait"):
                continue
            else:
                pytest.fail(f"{PAGE.name}: option {option} of `{line}` is not one this test knows")
        released[release] = values
        found.append((verb, release, namespace, values))
    return found


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("quickstart")
    (root / "team.pub").write_bytes(public_pem(generate_key("ecdsa-p256")))
    return root


def test_the_gatekeeper_section_installs_then_enforces(workdir: Path) -> None:
    install, upgrade = helm_commands(section("Gatekeeper"), workdir)
    assert (install[0], upgrade[0]) == ("install", "upgrade")
    assert install[2] == upgrade[2] == "gatekeeper-system"
    first = render(install[3], namespace=install[2])
    assert {d["kind"] for d in first} >= {"Deployment", "Provider", "ConstraintTemplate"}
    assert "K8sVerifyManifestSignature" not in {d["kind"] for d in first}  # its CRD does not exist yet
    container = find(first, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example.com/platform/manifest-provider:0.1.0"
    second = render(upgrade[3], namespace=upgrade[2])
    constraint = find(second, "K8sVerifyManifestSignature")
    assert constraint["spec"]["enforcementAction"] == "deny"
    assert constraint["spec"]["parameters"]["keys"] == [(workdir / "team.pub").read_text()]
    assert constraint["spec"]["match"]["namespaces"] == ["demo"]


def test_the_kyverno_section_installs_an_enforcing_cluster_policy(workdir: Path) -> None:
    ((verb, _release, namespace, values),) = helm_commands(section("Kyverno"), workdir)
    assert (verb, namespace) == ("install", "manifest-provider")
    docs = render(values, namespace=namespace)
    policy = find(docs, "ClusterPolicy")
    rule = policy["spec"]["rules"][0]
    assert rule["validate"]["failureAction"] == "Enforce"
    (entry,) = rule["context"]
    (data,) = [d for d in entry["apiCall"]["data"] if d["key"] == "policy"]
    assert data["value"] == {"keys": [(workdir / "team.pub").read_text()]}


CEL_SECTION = "Kyverno with the CEL policy"
KYVERNO_VALUES = "manifests/overlays/kyverno-cel/kyverno-values.yaml"


def test_the_kyverno_cel_section_installs_the_ca_for_kyverno_then_enforces(workdir: Path) -> None:
    """Install: the service and ConfigMap manifest-provider-ca in Kyverno's namespace, no policy yet; upgrade: the
    enforcing ValidatingPolicy with the page's key, which carries no CA."""
    install, upgrade = helm_commands(section(CEL_SECTION), workdir)
    assert (install[0], upgrade[0]) == ("install", "upgrade")
    assert install[2] == upgrade[2] == "manifest-provider"
    first = render(install[3], namespace=install[2])
    assert "ValidatingPolicy" not in {d["kind"] for d in first}
    configmap = find(first, "ConfigMap", "manifest-provider-ca")
    assert configmap["metadata"]["namespace"] == "kyverno"
    secret = find(first, "Secret")
    assert configmap["data"]["ca.crt"] == base64.b64decode(secret["data"]["ca.crt"]).decode()
    second = render(upgrade[3], namespace=upgrade[2])
    policy = find(second, "ValidatingPolicy")
    assert policy["spec"]["validationActions"] == ["Deny"]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    env = celpy.Environment()
    assert to_python(env.program(env.compile(variables["policy"])).evaluate({})) == {
        "keys": [(workdir / "team.pub").read_text()]
    }
    assert policy["spec"]["matchConstraints"]["namespaceSelector"]["matchExpressions"][0]["values"] == ["demo"]
    assert "CERTIFICATE" not in json.dumps(policy)
    find(second, "ConfigMap", "manifest-provider-ca")  # still there after the upgrade


def test_the_kyverno_values_on_the_page_are_the_overlays(workdir: Path) -> None:
    """The values block is kyverno-values.yaml (comments apart), the page's `helm upgrade kyverno` applies that
    file in the namespace where the chart writes the ConfigMap, and they mount that ConfigMap's key."""
    text = section(CEL_SECTION)
    (block,) = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    values = yaml.safe_load(block)
    assert values == yaml.safe_load((REPO / KYVERNO_VALUES).read_text())
    (line,) = [line for line in shell_lines(text) if line.startswith("helm upgrade kyverno ")]
    words = shlex.split(line)
    assert words[3] == "kyverno/kyverno" and words[words.index("-f") + 1] == KYVERNO_VALUES
    install, _upgrade = helm_commands(text, workdir)
    configmap = find(render(install[3], namespace=install[2]), "ConfigMap", "manifest-provider-ca")
    assert words[words.index("-n") + 1] == configmap["metadata"]["namespace"]
    (volume,) = values["admissionController"]["extraVolumes"]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert [item["key"] for item in volume["configMap"]["items"]] == list(configmap["data"])


def github_anchor(heading: str) -> str:
    """GitHub's heading id: lower case, punctuation but hyphens and underscores dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    prose = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.DOTALL | re.MULTILINE)  # a `#` there is a comment
    for heading in re.findall(r"^#+ (.+)$", prose, re.MULTILINE):
        anchor, n = github_anchor(heading), 1
        while anchor in found:  # a repeated heading gets -1, -2, ...
            anchor, n = f"{github_anchor(heading)}-{n}", n + 1
        found.add(anchor)
    return found


def test_the_pages_links_to_sections_resolve() -> None:
    links = re.findall(r"\]\(([\w.-]*\.md)?#([\w-]+)\)", PAGE.read_text())
    assert len(links) > 5
    for page, anchor in links:
        assert anchor in anchors(PAGE.parent / page if page else PAGE), (page, anchor)


def test_the_image_section_overrides_the_name_the_overlays_render(tmp_path: Path) -> None:
    (line,) = [line for line in shell_lines(section("The image")) if line.startswith("kustomize edit set image")]
    name = line.split()[-1].split("=", 1)[0]
    base = yaml.safe_load((REPO / "manifests/base/kustomization.yaml").read_text())
    (image,) = base["images"]
    assert name == image["newName"]  # what the built overlays hold, so an overlay on top must name it
    if not shutil.which("kubectl"):
        pytest.skip("no kubectl to build an overlay")
    out = subprocess.run(
        ["kubectl", "kustomize", str(REPO / "manifests/overlays/kyverno")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    (deployment,) = [d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"].startswith(name + ":")


def test_the_page_is_linked_from_the_readme() -> None:
    assert "(docs/quickstart-helm.md)" in (REPO / "README.md").read_text()
