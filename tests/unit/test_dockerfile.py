"""The Dockerfile, read: no image can be built here (no container engine), so its rules are checked.

* It installs only from requirements/ with ``--require-hashes`` (and the package itself with
  ``--no-deps``), so the image holds the versions the tests passed with.
* Plain Dockerfile syntax: no ``# syntax=`` parser directive (BuildKit would fetch that
  frontend image from Docker Hub first) and no ``RUN --mount`` (BuildKit only; the classic
  builder, Podman and buildah before 1.24 refuse it). Docker's parser directives:
  https://docs.docker.com/reference/dockerfile/#parser-directives
* Both ports ``serve`` listens on are exposed; the user is numeric and not root, so a pod's
  ``runAsNonRoot`` can check it without reading the image's /etc/passwd.
* Every path it copies exists and is let into the build context by .dockerignore; every
  repository path its comments name exists.
* The header's ``docker run`` starts a service that asks for client certificates, with
  settings the service knows.
"""

from __future__ import annotations

import dataclasses
import re
import shlex

import pytest
import yaml

from provider.service.config import Config, env_name
from tests.support.data import REPO

DOCKERFILE = REPO / "Dockerfile"


@dataclasses.dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    stage: int  # 0 before the first FROM, then 1, 2, ...
    line: int


def _instructions(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped (Docker's rules, minus escapes)."""
    out: list[Instruction] = []
    stage = 0
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # comments and blank lines end nothing: Docker skips them inside a continuation too
        if not pending:
            start = number
        pending.append(stripped.removesuffix("\\").strip())
        if stripped.endswith("\\"):
            continue
        keyword, _, args = " ".join(pending).partition(" ")
        pending = []
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        out.append(Instruction(keyword, args.strip(), stage, start))
    assert not pending, "the Dockerfile ends inside a continuation line"
    return out


def _header(text: str) -> list[str]:
    """The comment block at the top, without the '#'."""
    lines = []
    for raw in text.splitlines():
        if not raw.startswith("#"):
            break
        lines.append(raw[1:].strip())
    return lines


def _commands(instruction: Instruction) -> list[list[str]]:
    """The shell commands of a RUN, split at && and ;."""
    commands = []
    for part in re.split(r"&&|;", instruction.args):
        words = shlex.split(part)
        if words:
            commands.append(words)
    return commands


TEXT = DOCKERFILE.read_text()
INSTRUCTIONS = _instructions(TEXT)
FINAL = max(i.stage for i in INSTRUCTIONS)


def test_the_dockerfile_was_read() -> None:
    keywords = {i.keyword for i in INSTRUCTIONS}
    assert {"FROM", "RUN", "COPY", "USER", "EXPOSE", "ENTRYPOINT"} <= keywords
    assert FINAL == 2, "expected a build stage and a run stage"


def test_no_syntax_directive_and_no_buildkit_only_flags() -> None:
    # Parser directives are `# key=value` lines before the first instruction or other comment;
    # refuse any `# syntax=` (or `# escape=`/`# check=`) line anywhere, in any case and spacing.
    directive = re.compile(r"^#\s*(syntax|escape|check)\s*=", re.IGNORECASE)
    assert not [line for line in TEXT.splitlines() if directive.match(line)]
    flags = [
        f"line {i.line}: {i.keyword} {i.args[:40]}"
        for i in INSTRUCTIONS
        if re.search(r"--(mount|network|security)\b", i.args) and i.keyword == "RUN"
    ]
    assert not flags, f"BuildKit-only RUN flags: {flags}"
    heredocs = [i.line for i in INSTRUCTIONS if i.keyword in ("RUN", "COPY") and "<<" in i.args]
    assert not heredocs, f"heredocs need the dockerfile:1.4 frontend: lines {heredocs}"


def test_every_pip_install_is_from_the_lock_with_hashes_or_the_package_without_dependencies() -> None:
    installs = []
    for instruction in INSTRUCTIONS:
        if instruction.keyword != "RUN":
            continue
        for words in _commands(instruction):
            if words[:2] == ["pip", "install"] or words[1:4] == ["-m", "pip", "install"]:
                installs.append((instruction, words))
    assert len(installs) >= 3, "expected the build tools, the runtime set and the package"
    locked_files = []
    for instruction, words in installs:
        where = f"line {instruction.line}: {' '.join(words)}"
        if "-r" in words:
            assert "--require-hashes" in words, where
            assert "--only-binary=:all:" in words, f"{where}: nothing may be built from source in the image"
            requirement = words[words.index("-r") + 1]
            assert requirement.endswith(("requirements/build.txt", "requirements/serve.txt", "/serve.txt")), where
            locked_files.append(requirement.rsplit("/", 1)[-1])
            others = [w for w in words[2:] if not w.startswith("-") and w != requirement]
            assert not others, f"{where}: a package named beside the lock: {others}"
        else:
            assert "--no-deps" in words and "--no-index" in words, where
            targets = [w for w in words[2:] if not w.startswith("-")]
            assert targets and all(t.endswith(".whl") for t in targets), f"{where}: only the package's own wheel"
    assert sorted(locked_files) == ["build.txt", "serve.txt"]
    wheel_builds = [w for i in INSTRUCTIONS if i.keyword == "RUN" for w in _commands(i) if w[:2] == ["pip", "wheel"]]
    assert wheel_builds and all("--no-deps" in w and "--no-build-isolation" in w for w in wheel_builds), (
        "the wheel is built with the locked build backend, fetching nothing"
    )


def test_both_ports_of_serve_are_exposed() -> None:
    exposed = {int(p.split("/")[0]) for i in INSTRUCTIONS if i.keyword == "EXPOSE" for p in i.args.split()}
    assert exposed == {Config.port, Config.metrics_port} == {8443, 8888}


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    users = [i for i in INSTRUCTIONS if i.keyword == "USER" and i.stage == FINAL]
    assert users, "the run stage sets no USER: it would run as root"
    user = users[-1].args
    assert re.fullmatch(r"\d+:\d+", user), f"USER {user}: numeric uid:gid, so runAsNonRoot can check it"
    uid, gid = (int(x) for x in user.split(":"))
    assert uid != 0 and gid != 0
    # The last USER comes after every RUN of the final stage: nothing later runs as root.
    assert max(i.line for i in INSTRUCTIONS if i.stage == FINAL and i.keyword == "RUN") < users[-1].line
    # The same uid the Deployment sets, so the pod's securityContext and the image agree.
    (deployment,) = [d for d in yaml.safe_load_all((REPO / "manifests/base/deployment.yaml").read_text()) if d]
    assert uid == deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    final = {i.keyword: i.args for i in INSTRUCTIONS if i.stage == FINAL}
    assert (final["ENTRYPOINT"], final["CMD"]) == ('["manifest-provider"]', '["serve"]')


def test_both_stages_start_from_python_3_11_slim_unless_told_otherwise() -> None:
    """The interpreter the lock was made for (requirements/lock.txt: CPython 3.11)."""
    args = {
        i.args.split("=", 1)[0]: i.args.split("=", 1)[1] for i in INSTRUCTIONS if i.keyword == "ARG" and "=" in i.args
    }
    assert args["PYTHON_IMAGE"].startswith("python:3.11-slim")
    froms = [i.args.split()[0] for i in INSTRUCTIONS if i.keyword == "FROM"]
    assert froms == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]


def _dockerignore_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as Docker reads it: ``**`` any number of directories, ``*`` within one."""
    out = ""
    rest = pattern.strip("/")
    while rest:
        if rest.startswith("**/"):
            out, rest = out + "(?:.*/)?", rest[3:]
        elif rest.startswith("**"):
            out, rest = out + ".*", rest[2:]
        elif rest[0] == "*":
            out, rest = out + "[^/]*", rest[1:]
        elif rest[0] == "?":
            out, rest = out + "[^/]", rest[1:]
        else:
            out, rest = out + re.escape(rest[0]), rest[1:]
    return re.compile(out)


def _context_allows(path: str) -> bool:
    """Whether .dockerignore lets a path into the build context: the last rule matching the path
    or a folder above it wins (Docker's own reading, moby/patternmatcher)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    allowed = True
    for line in (REPO / ".dockerignore").read_text().splitlines():
        rule = line.strip()
        if not rule or rule.startswith("#"):
            continue
        regex = _dockerignore_regex(rule.removeprefix("!"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            allowed = rule.startswith("!")
    return allowed


def test_every_copied_path_exists_and_is_in_the_build_context() -> None:
    copies = [i for i in INSTRUCTIONS if i.keyword in ("COPY", "ADD")]
    assert not [i for i in copies if i.keyword == "ADD"], "ADD fetches URLs and unpacks archives: COPY only"
    sources = []
    for instruction in copies:
        words = shlex.split(instruction.args)
        if any(w.startswith("--from=") for w in words):
            continue  # from another stage, not the build context
        *paths, _destination = [w for w in words if not w.startswith("--")]
        sources += paths
    assert len(sources) >= 5
    missing = [s for s in sources if not (REPO / s).exists()]
    assert not missing, f"COPY names paths that do not exist: {missing}"
    ignored = [s for s in sources if not _context_allows(s)]
    assert not ignored, f".dockerignore leaves these out of the build context: {ignored}"
    for kept_out in (".venv/bin/python", ".git/HEAD", "tests/data/README.md", "provider/__pycache__/x.pyc"):
        assert not _context_allows(kept_out), kept_out
    # The context is exactly what is copied: "*" first, then one exception per source.
    rules = [r.strip() for r in (REPO / ".dockerignore").read_text().splitlines() if r.strip() and r[0] != "#"]
    assert rules[0] == "*"
    assert {r[1:].rstrip("/") for r in rules if r.startswith("!")} == {s.rstrip("/") for s in sources}


def test_every_repository_path_the_comments_name_exists() -> None:
    comments = "\n".join(line for line in TEXT.splitlines() if line.lstrip().startswith("#"))
    named = set(re.findall(r"\b((?:provider|docs|requirements|manifests|tests)/[\w./-]*\w)", comments))
    assert "provider/service/config.py" in named
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert not missing, f"the Dockerfile's comments name paths that do not exist: {missing}"


def _docker_run() -> list[str]:
    header = _header(TEXT)
    start = next(n for n, line in enumerate(header) if line.startswith("docker run"))
    command = []
    for line in header[start:]:
        command.append(line.removesuffix("\\"))
        if not line.endswith("\\"):
            break
    return shlex.split(" ".join(command))


def test_the_example_docker_run_requires_client_certificates() -> None:
    words = _docker_run()
    env = dict(words[n + 1].split("=", 1) for n, w in enumerate(words) if w == "-e")
    known = {env_name(f.name) for f in dataclasses.fields(Config)}
    assert not env.keys() - known, f"settings the service does not know: {sorted(env.keys() - known)}"
    for needed in ("cert", "key", "client_ca"):
        assert env.get(env_name(needed)), f"the example sets no {env_name(needed)}"
    assert env_name("unsafe_http") not in env
    # The files are under the directory the example mounts.
    mounts = [words[n + 1].split(":") for n, w in enumerate(words) if w == "-v"]
    targets = {m[1] for m in mounts}
    for name in ("cert", "key", "client_ca"):
        assert any(env[env_name(name)].startswith(t + "/") for t in targets), env[env_name(name)]
    # Both exposed ports are published, and the callers are named, not left to chance.
    published = {int(words[n + 1].split(":")[-1]) for n, w in enumerate(words) if w == "-p"}
    assert published == {Config.port, Config.metrics_port}
    assert env.get(env_name("callers"), "").startswith("cert:")


@pytest.mark.parametrize(
    ("text", "keyword_args"),
    [
        ("FROM a AS b\nRUN x \\\n  # note\n  && y\n", [("FROM", "a AS b"), ("RUN", "x && y")]),
        ("# c\n\nuser 1:1\n", [("USER", "1:1")]),
    ],
    ids=["continuation-with-comment", "lower-case"],
)
def test_the_reader_joins_continuations_as_docker_does(text: str, keyword_args: list[tuple[str, str]]) -> None:
    assert [(i.keyword, i.args) for i in _instructions(text)] == keyword_args
