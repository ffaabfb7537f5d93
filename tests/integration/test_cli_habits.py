"""kubectl sigstore and cosign habits, run through the real CLI: key lists and env:// keys, -c, -o yaml,
--disable-default-config, password prompts on a terminal, completion, version, examples in --help, and a
reader that goes away (``| head``)."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.cli import COMMANDS, build_parser
from provider.keys.pem import generate_key, private_pem, public_pem
from tests.support.manifests import configmap, sign

pytestmark = pytest.mark.integration
PASSWORD_VARIABLES = ("MANIFEST_PROVIDER_PASSWORD", "COSIGN_PASSWORD")


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PASSWORD_VARIABLES}
    return {**env, "COLUMNS": "100", **(extra or {})}


def cli(*args: str | Path, env: dict[str, str] | None = None, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "provider.cli", *map(str, args)],
        capture_output=True, text=True, env=clean_env(env), input=stdin, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("habits")
    team, ops = generate_key("ecdsa-p256"), generate_key("ed25519")
    (root / "team.pub").write_bytes(public_pem(team))
    (root / "ops.pub").write_bytes(public_pem(ops))
    (root / "team.key").write_bytes(private_pem(team, None))
    signed = sign([configmap("a"), configmap("b")], team)
    both = sign([configmap("a"), configmap("b")], team)
    from provider.signatures.signing import append_signature

    both = append_signature(both, ops)
    (root / "signed.yaml").write_text(yaml.safe_dump_all(signed))
    (root / "both.yaml").write_text(yaml.safe_dump_all(both))
    return {"root": root, "team": team, "ops": ops}


def reasons(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [r["reason"] for r in json.loads(proc.stdout)["results"]]


# --- keys ---------------------------------------------------------------------------------------


def test_a_comma_list_of_keys_is_several_keys(keys: dict[str, Any]) -> None:
    root = keys["root"]
    proc = cli("verify", "-f", root / "both.yaml", "-k", f"{root / 'team.pub'},{root / 'ops.pub'}", "--key-operation",
               "MustAll", "-o", "json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert reasons(proc) == ["verified", "verified"]
    only_team = cli("verify", "-f", root / "signed.yaml", "-k", f"{root / 'team.pub'},{root / 'ops.pub'}",
                    "--key-operation", "MustAll", "-o", "json")  # fmt: skip
    assert only_team.returncode == 1  # MustAll counted both keys of the list


def test_a_file_whose_name_has_a_comma_is_one_file(keys: dict[str, Any]) -> None:
    odd = keys["root"] / "team,old.pub"
    odd.write_bytes(public_pem(keys["team"]))
    assert cli("verify", "-f", keys["root"] / "signed.yaml", "-k", odd).returncode == 0


def test_env_keys_for_verify_and_sign(keys: dict[str, Any], tmp_path: Path) -> None:
    env = {
        "TEAM_PUBLIC_KEY": public_pem(keys["team"]).decode(),
        "TEAM_PRIVATE_KEY": private_pem(keys["team"], None).decode(),
    }
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(yaml.safe_dump(configmap("c")))
    signed = cli("sign", "-f", manifest, "-k", "env://TEAM_PRIVATE_KEY", env=env)
    assert signed.returncode == 0, signed.stderr
    proc = cli("verify", "-f", tmp_path / "cm.yaml.signed", "-k", "env://TEAM_PUBLIC_KEY", "-o", "json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert reasons(proc) == ["verified"]


@pytest.mark.parametrize(
    ("ref", "env", "message"),
    [
        ("env://NOT_SET_ANYWHERE", {}, "environment variable NOT_SET_ANYWHERE is not set"),
        ("env://EMPTY_KEY", {"EMPTY_KEY": " "}, "environment variable EMPTY_KEY is empty"),
        ("env://", {}, "name the environment variable"),
        ("https://example.com/cosign.pub", {}, "https:// is not supported"),
        # a key kept in a Secret is read through the kubeconfig: without a cluster, a usage error naming it
        ("k8s://ns/secret", {"KUBECONFIG": "/nonexistent/kubeconfig"}, "kubeconfig /nonexistent/kubeconfig"),
    ],
    ids=["unset", "empty", "no-name", "https", "k8s-without-a-cluster"],
)
def test_key_references_that_cannot_be_read_are_usage_errors(
    keys: dict[str, Any], ref: str, env: dict[str, str], message: str
) -> None:
    proc = cli("verify", "-f", keys["root"] / "signed.yaml", "-k", ref, env=env)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_an_env_key_never_reaches_the_output(keys: dict[str, Any]) -> None:
    proc = cli("verify", "-f", keys["root"] / "signed.yaml", "-k", "env://BROKEN", env={"BROKEN": "not a key"})
    assert proc.returncode == 2
    assert "not a key" not in proc.stderr + proc.stdout


# --- the policy file, output, the default config -------------------------------------------------


def test_c_is_config_and_o_yaml_is_the_json_as_yaml(keys: dict[str, Any], tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"keys": [public_pem(keys["team"]).decode()]}))
    as_yaml = cli("verify", "-f", keys["root"] / "signed.yaml", "-c", policy, "-o", "yaml")
    as_json = cli("verify", "-f", keys["root"] / "signed.yaml", "--config", policy, "-o", "json")
    assert as_yaml.returncode == as_json.returncode == 0
    assert yaml.safe_load(as_yaml.stdout) == json.loads(as_json.stdout)


def test_disable_default_config_drops_upstreams_ignore_list(keys: dict[str, Any], tmp_path: Path) -> None:
    """kubectl sigstore's --disable-default-config: the server's own fields are differences again."""
    (signed,) = sign(configmap("a"), keys["team"])
    signed["metadata"].update(uid="0d8f7d0e-0000-4000-8000-000000000000", resourceVersion="42")
    applied = tmp_path / "applied.yaml"
    applied.write_text(yaml.safe_dump(signed))
    pub = keys["root"] / "team.pub"
    assert cli("verify", "-f", applied, "-k", pub).returncode == 0
    proc = cli("verify", "-f", applied, "-k", pub, "--disable-default-config", "-o", "json")
    assert proc.returncode == 1
    assert reasons(proc) == ["content-mismatch"]


# --- password prompts ---------------------------------------------------------------------------


def on_terminal(args: list[str], answers: list[str], cwd: Path, timeout: float = 30) -> tuple[int, str]:
    """Run the CLI with a terminal as its controlling tty and standard streams; answer each prompt in turn."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once
        os.chdir(cwd)
        os.execve(sys.executable, [sys.executable, "-m", "provider.cli", *args], clean_env())
    seen, pending, deadline = b"", list(answers), time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        prompts = seen.count(b"password for private key") + seen.count(b"[y/N]")
        if pending and prompts > len(answers) - len(pending):
            os.write(fd, (pending.pop(0) + "\n").encode())
    else:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), seen.decode(errors="replace")


def test_sign_asks_for_the_password_of_an_encrypted_key_on_a_terminal(tmp_path: Path) -> None:
    key = generate_key("ecdsa-p256")
    (tmp_path / "team.key").write_bytes(private_pem(key, b"correct horse"))
    (tmp_path / "team.pub").write_bytes(public_pem(key))
    (tmp_path / "cm.yaml").write_text(yaml.safe_dump(configmap("c")))
    code, screen = on_terminal(["sign", "-f", "cm.yaml", "-k", "team.key"], ["correct horse"], tmp_path)
    assert code == 0, screen
    assert "Enter password for private key team.key" in screen
    assert "correct horse" not in screen  # not echoed
    assert cli("verify", "-f", tmp_path / "cm.yaml.signed", "-k", tmp_path / "team.pub").returncode == 0
    wrong, screen = on_terminal(["sign", "-f", "cm.yaml", "-k", "team.key", "-o", "x.yaml"], ["battery"], tmp_path)
    assert wrong == 2 and "team.key" in screen
    assert not (tmp_path / "x.yaml").exists()


def test_without_a_terminal_nothing_is_asked(tmp_path: Path) -> None:
    key = generate_key("ecdsa-p256")
    (tmp_path / "team.key").write_bytes(private_pem(key, b"secret"))
    (tmp_path / "cm.yaml").write_text(yaml.safe_dump(configmap("c")))
    proc = cli("sign", "-f", tmp_path / "cm.yaml", "-k", tmp_path / "team.key", stdin="secret\n")
    assert proc.returncode == 2
    assert "encrypted" in proc.stderr and "Enter password" not in proc.stderr
    ok = cli("sign", "-f", tmp_path / "cm.yaml", "-k", tmp_path / "team.key", env={"COSIGN_PASSWORD": "secret"})
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("key_format", ["pkcs8", "cosign"])
def test_keygen_on_a_terminal_encrypts_with_the_password_given_twice(tmp_path: Path, key_format: str) -> None:
    code, screen = on_terminal(["keygen", "-o", "team", "--format", key_format], ["s3cret", "s3cret"], tmp_path)
    assert code == 0, screen
    pem = (tmp_path / "team.key").read_bytes()
    assert b"ENCRYPTED" in pem
    from provider.keys.pem import load_private_key

    load_private_key(pem, b"s3cret")
    (tmp_path / "cm.yaml").write_text(yaml.safe_dump(configmap("c")))
    signed = cli("sign", "-f", tmp_path / "cm.yaml", "-k", tmp_path / "team.key",
                 env={"MANIFEST_PROVIDER_PASSWORD": "s3cret"})  # fmt: skip
    assert signed.returncode == 0, signed.stderr


def test_keygen_on_a_terminal_refuses_two_different_passwords(tmp_path: Path) -> None:
    code, screen = on_terminal(["keygen", "-o", "team"], ["one", "two"], tmp_path)
    assert code == 2 and "do not match" in screen
    assert not (tmp_path / "team.key").exists()


@pytest.mark.parametrize(("answer", "code", "written"), [("n", 1, False), ("", 1, False), ("y", 0, True)])
def test_keygen_asks_before_writing_an_unencrypted_key(tmp_path: Path, answer: str, code: int, written: bool) -> None:
    got, screen = on_terminal(["keygen", "-o", "team"], ["", answer], tmp_path)
    assert got == code, screen
    assert "unencrypted? Anyone who can read the file can sign as you. [y/N]" in screen
    assert (tmp_path / "team.key").exists() is written
    if written:
        assert b"ENCRYPTED" not in (tmp_path / "team.key").read_bytes()


def test_keygen_without_a_terminal_still_writes_and_says_so(tmp_path: Path) -> None:
    proc = cli("keygen", "-o", tmp_path / "team")
    assert proc.returncode == 0
    assert "unencrypted: set MANIFEST_PROVIDER_PASSWORD, or run on a terminal" in proc.stderr
    proc = cli("keygen", "-o", tmp_path / "enc", env={"MANIFEST_PROVIDER_PASSWORD": "pw"})
    assert b"ENCRYPTED PRIVATE KEY" in (tmp_path / "enc.key").read_bytes()


# --- completion, version, help ------------------------------------------------------------------


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_name_every_command(shell: str) -> None:
    proc = cli("completion", shell)
    assert proc.returncode == 0, proc.stderr
    for command in COMMANDS:
        assert command in proc.stdout
    for flag in ("disable-default-config", "match-kind", "ca-from-cluster"):
        assert (f"-l {flag}" if shell == "fish" else f"--{flag}") in proc.stdout
    if shutil.which(shell):
        check = subprocess.run([shell, "-n"], input=proc.stdout, capture_output=True, text=True, check=False)
        assert check.returncode == 0, check.stderr


def test_bash_completion_completes_commands_and_files(tmp_path: Path) -> None:
    script = tmp_path / "complete.bash"
    script.write_text(cli("completion", "bash").stdout)
    (tmp_path / "team.pub").write_text("x")
    probe = (
        f"source {script}\n"
        "complete -p manifest-provider >/dev/null || exit 3\n"
        "fn=$(complete -p manifest-provider | sed -E 's/.*-F ([^ ]+).*/\\1/')\n"
        "COMP_WORDS=(manifest-provider pol); COMP_CWORD=1; COMP_LINE='manifest-provider pol'; COMP_POINT=21\n"
        '$fn manifest-provider pol manifest-provider; echo "commands: ${COMPREPLY[*]}"\n'
        "COMP_WORDS=(manifest-provider verify -k te); COMP_CWORD=3; COMP_LINE='manifest-provider verify -k te'\n"
        'COMP_POINT=${#COMP_LINE}; $fn manifest-provider te -k; echo "files: ${COMPREPLY[*]}"\n'
    )
    proc = subprocess.run(["bash", "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "commands: policy" in proc.stdout
    assert "files: team.pub" in proc.stdout


def test_version_names_this_build_and_its_libraries() -> None:
    from provider.version import __version__

    text = cli("version")
    assert text.returncode == 0
    assert text.stdout.splitlines()[0].split() == ["manifest-provider:", __version__]
    found = json.loads(cli("version", "-o", "json").stdout)
    assert found["manifest-provider"] == __version__
    assert found["cryptography"] != "not installed"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_ends_with_examples_of_that_command(command: str) -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    text = sub.choices[command].format_help()  # type: ignore[union-attr]
    examples = text.split("\nexamples:\n", 1)[1].splitlines()
    assert examples
    for line in examples:
        assert f"manifest-provider {command}" in line, line


# --- a reader that goes away --------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["verify", "-f", "{many}", "-k", "{pub}", "-o", "json"], ["completion", "zsh"], ["verify", "--help"]],
    ids=["verify", "completion", "help"],
)
def test_a_closed_pipe_ends_quietly(keys: dict[str, Any], tmp_path: Path, args: list[str]) -> None:
    many = tmp_path / "many.yaml"
    many.write_text(yaml.safe_dump_all([configmap(f"cm-{i}") for i in range(800)]))
    argv = [a.format(many=many, pub=keys["root"] / "team.pub") for a in args]
    proc = subprocess.Popen(
        [sys.executable, "-m", "provider.cli", *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env({"COLUMNS": "100"}),
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)  # what `| head -c 10` reads, then goes away
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    code = proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert code in (141, 0)  # 0 only if everything fitted in the pipe before it closed
    if args[0] == "verify" and "--help" not in args:
        assert code == 141
