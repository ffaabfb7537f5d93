"""Run docs/pipelines.md's recipes as written, with stand-ins for the tools that are not installed here.

Each recipe in docs/pipelines.md is a fenced ``sh`` block after a
``<!-- recipe: NAME -->`` marker; :func:`recipes` reads them and
:func:`run_recipe` runs one with bash in a scratch directory whose ``PATH``
holds:

* ``manifest-provider`` -- this checkout's CLI, for real;
* ``kustomize`` -- ``kustomize build DIR`` is the real kustomize built into
  kubectl (``kubectl kustomize DIR``; v5.5.0 in kubectl v1.32) when kubectl is
  installed, which it is where the tests run; without kubectl it prints
  ``tests/assets/pipelines/kustomize-build.yaml``, the stream that kustomize
  rendered from ``tests/assets/pipelines/kustomize/overlays/prod`` (a test
  keeps the two equal). :func:`app_repository` puts that overlay tree where a
  recipe builds it;
* ``helm`` -- ``helm install NAME CHART`` as Helm 3 does it around a
  post-renderer (helm/helm pkg/postrender/exec.go: the rendered manifests on
  the post-renderer's standard input, its standard output read back, a
  non-zero exit failing the install with its standard error), then Helm's
  release metadata on every object (pkg/action/validate.go), each object
  written as JSON into ``$FAKE_CLUSTER`` -- where a test reads what Helm sent
  to the API server.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support.data import REPO
from tests.support.delivery import CLUSTER_SCOPED

ASSETS = REPO / "tests" / "assets" / "pipelines"
KUSTOMIZE_BUILD = ASSETS / "kustomize-build.yaml"
HELM_TEMPLATE = ASSETS / "helm-template.yaml"
DOC = REPO / "docs" / "pipelines.md"
RECIPE = re.compile(r"<!-- recipe: (?P<name>[\w-]+) -->\n```(?P<lang>\w+)\n(?P<body>.*?)```\n", re.DOTALL)


def recipes(path: Path = DOC) -> dict[str, tuple[str, str]]:
    """``name -> (language, body)`` of every marked block."""
    return {m["name"]: (m["lang"], m["body"]) for m in RECIPE.finditer(path.read_text())}


def cli(*args: str | Path, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI in a child process (no password from the developer's environment leaks in)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MANIFEST_PROVIDER_PASSWORD", "COSIGN_PASSWORD")}
    return subprocess.run(
        [sys.executable, "-m", "provider.cli", *map(str, args)],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=cwd,
        env={**env, "COLUMNS": "100"},
        timeout=120,
        check=False,
    )


_KUSTOMIZE = """#!/bin/sh
# kustomize: `kustomize build [DIR]` by kubectl's built-in kustomize; without kubectl, the committed rendering.
[ "$1" = build ] || {{ echo "kustomize stand-in: only 'build' is known" >&2; exit 2; }}
if command -v kubectl >/dev/null 2>&1; then exec kubectl kustomize "${{2:-.}}"; fi
exec cat {build}
"""

#: The overlay and base the recipes build (``kustomize build overlays/prod``).
KUSTOMIZE_TREE = ASSETS / "kustomize"


def real_kustomize() -> bool:
    """Whether ``kustomize build`` runs kustomize itself here (kubectl's), rather than printing the committed stream."""
    return shutil.which("kubectl") is not None


def kustomize_build(directory: Path) -> str:
    """What kubectl's built-in kustomize renders from ``directory``."""
    return subprocess.run(
        ["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=True
    ).stdout


def app_repository(where: Path) -> Path:
    """``where`` holding the application's kustomize tree (``base/``, ``overlays/prod/``), as a CI checkout would."""
    where.mkdir(parents=True, exist_ok=True)
    for part in ("base", "overlays"):
        shutil.copytree(KUSTOMIZE_TREE / part, where / part)
    return where


_HELM = '''#!{python}
"""helm stand-in: `helm install NAME CHART [-n NS] [--post-renderer EXE] [--post-renderer-args ARG]...`."""
import json, os, shutil, subprocess, sys
import yaml

args = sys.argv[1:]
if args[:1] != ["install"] or len(args) < 3:
    sys.exit("helm stand-in: only 'helm install NAME CHART' is known")
release, namespace, renderer, renderer_args = args[1], "default", None, []
rest = args[3:]
while rest:
    if rest[0].startswith("--") and "=" in rest[0]:
        (flag, value), rest = rest[0].split("=", 1), rest[1:]
    else:
        flag, value, rest = rest[0], rest[1], rest[2:]
    if flag in ("-n", "--namespace"):
        namespace = value
    elif flag == "--post-renderer":
        renderer = value
    elif flag == "--post-renderer-args":
        renderer_args.append(value)
    else:
        sys.exit(f"helm stand-in: unknown flag {{flag}}")
rendered = open({template!r}).read()
if renderer:
    # pkg/postrender/exec.go: a path with a separator is taken as it is, a bare name is looked up in PATH.
    path = renderer if os.sep in renderer else shutil.which(renderer)
    if path is None:
        sys.exit(f"Error: unable to find binary at {{renderer}}")
    done = subprocess.run([path, *renderer_args], input=rendered, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"Error: error while running post render on files: error while running command {{path}}. "
                 f"error output:\\n{{done.stderr}}")
    rendered = done.stdout
cluster = os.environ["FAKE_CLUSTER"]
for index, obj in enumerate(d for d in yaml.safe_load_all(rendered) if d is not None):
    meta = obj.setdefault("metadata", {{}})
    if obj["kind"] not in {cluster_scoped!r}:
        meta.setdefault("namespace", namespace)  # kube client: the release namespace for objects without one
    meta.setdefault("labels", {{}})["app.kubernetes.io/managed-by"] = "Helm"
    meta.setdefault("annotations", {{}}).update(
        {{"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": namespace}}
    )
    with open(os.path.join(cluster, f"{{index:02d}}-{{obj['kind']}}-{{meta['name']}}.json"), "w") as out:
        json.dump(obj, out)
print(f"NAME: {{release}}\\nNAMESPACE: {{namespace}}\\nSTATUS: deployed")
'''

_MANIFEST_PROVIDER = """#!/bin/sh
exec {python} -m provider.cli "$@"
"""


def tool_bin(directory: Path) -> Path:
    """A directory of stand-in tools (and the real CLI), to put first on PATH."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in (
        ("kustomize", _KUSTOMIZE.format(build=KUSTOMIZE_BUILD)),
        ("helm", _HELM.format(python=sys.executable, template=str(HELM_TEMPLATE), cluster_scoped=CLUSTER_SCOPED)),
        ("manifest-provider", _MANIFEST_PROVIDER.format(python=sys.executable)),
    ):
        path = directory / name
        path.write_text(text)
        path.chmod(0o755)
    return directory


def tool_env(workdir: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a recipe runs in: the stand-ins first on PATH, a fake cluster, a Git identity."""
    cluster = workdir / "cluster"
    cluster.mkdir(exist_ok=True)
    tools = tool_bin(workdir / ".bin")
    base = {k: v for k, v in os.environ.items() if k not in ("MANIFEST_PROVIDER_PASSWORD", "COSIGN_PASSWORD")}
    return {
        **base,
        "PATH": f"{tools}{os.pathsep}{base.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
        "FAKE_CLUSTER": str(cluster),
        "GIT_AUTHOR_NAME": "ci",
        "GIT_AUTHOR_EMAIL": "ci@example.com",
        "GIT_COMMITTER_NAME": "ci",
        "GIT_COMMITTER_EMAIL": "ci@example.com",
        # A CI checkout's branch pushes to its remote; the developer's own Git settings stay out.
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "init.defaultBranch",
        "GIT_CONFIG_VALUE_0": "main",
        "GIT_CONFIG_KEY_1": "push.autoSetupRemote",
        "GIT_CONFIG_VALUE_1": "true",
        **(env or {}),
    }


def run_tools(
    argv: list[str], workdir: Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in ``cwd`` (default ``workdir``) with :func:`tool_env`."""
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=cwd or workdir,
        env=tool_env(workdir, env),
        timeout=180,
        check=False,
    )


def run_recipe(
    name: str, workdir: Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the recipe ``name`` with ``bash -euo pipefail`` in ``cwd`` (default ``workdir``), the stand-ins on PATH."""
    language, body = recipes()[name]
    assert language == "sh", f"recipe {name} is a {language} block, not sh"
    return run_tools(["bash", "-euo", "pipefail", "-c", body], workdir, cwd, env)


def installed(workdir: Path) -> list[dict[str, Any]]:
    """What the helm stand-in sent to the API server, in order."""
    return [json.loads(p.read_text()) for p in sorted((workdir / "cluster").glob("*.json"))]


def two_hundred_objects(crd_copies: int = 2) -> list[dict[str, Any]]:
    """200 objects as one release might hold them: ``crd_copies`` renamed copies of Kyverno's two CRDs
    (``tests/data/crds/kyverno``, 1.3 MB and 0.3 MB of YAML) and, to fill up, the objects of the recorded dry-run creates and
    of the two rendered streams, renamed per round. Two copies (3.1 MB of YAML) give the 438 KB message
    docs/pipelines.md quotes, one copy the 222 KB one."""
    from tests.support.data import CRDS, DRYRUN

    crds = [
        d for f in sorted((CRDS / "kyverno" / "v1.19").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d
    ]
    assert len(crds) == 2, crds
    pool = [json.loads(f.read_text())["request"]["body"] for f in sorted((DRYRUN / "create").glob("*.json"))]
    pool = [d for d in pool if isinstance(d, dict) and d.get("metadata", {}).get("name")]
    pool += [d for f in (KUSTOMIZE_BUILD, HELM_TEMPLATE) for d in yaml.safe_load_all(f.read_text()) if d]
    assert len(pool) >= 50, len(pool)
    objects = []
    for n in range(crd_copies):
        for crd in crds:
            renamed = copy.deepcopy(crd)
            renamed["metadata"]["name"] = f"v{n}.{crd['metadata']['name']}"
            objects.append(renamed)
    index = 0
    while len(objects) < 200:
        obj = copy.deepcopy(pool[index % len(pool)])
        obj["metadata"]["name"] = f"{obj['metadata']['name']}-{index // len(pool)}"
        objects.append(obj)
        index += 1
    return objects
