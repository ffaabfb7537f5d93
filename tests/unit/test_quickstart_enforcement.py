"""Both quickstarts say how to test enforcement for real, and why ``kubectl apply --dry-run=server`` cannot.

The service allows every request with ``dryRun: true`` (``dry-run-request``: docs/api.md,
"Admission semantics"), so a server-side dry-run of a tampered object passes under an
enforcing policy. Each quickstart's section runs here as far as it runs without a
cluster: its ``sed`` and ``manifest-provider sign`` lines in a scratch directory; then
the object its ``kubectl apply`` would send is decided as a real write (denied) and as a
dry-run (allowed), so the page's claim and the service's rule are held together.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from provider.keys.pem import generate_key, private_pem, public_pem
from provider.policy.schema import Policy
from provider.review import Review
from provider.verifier import decide
from tests.support.data import REPO
from tests.support.server import command

QUICKSTARTS = sorted((REPO / "docs").glob("quickstart-*.md"))
#: The section's heading, numbered or not (the Gatekeeper quickstart numbers its steps).
SECTION = re.compile(r"^## (?:\d+\. )?Testing enforcement for real$", re.MULTILINE)
#: The ConfigMap the quickstarts write as app.yaml in their step 3 (a page with its own ``cat > app.yaml``: that one).
APP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
  namespace: demo
data:
  mode: production
"""


def section(page: Path) -> str:
    text = page.read_text()
    found = SECTION.search(text)
    assert found, f"{page.name}: no section {SECTION.pattern!r}"
    rest = text[found.end() :]
    return rest.split("\n## ", 1)[0]


def commands(text: str) -> list[str]:
    (block,) = re.findall(r"```sh\n(.*?)```", text, re.DOTALL)
    return [line.split(" #", 1)[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("page", QUICKSTARTS, ids=lambda p: p.stem)
def test_the_quickstart_says_why_a_server_side_dry_run_proves_nothing(page: Path) -> None:
    text = " ".join(section(page).split())
    assert "`kubectl apply --dry-run=server`" in text and "**passes**" in text
    assert "`dry-run-request`" in text and "dry-run changes nothing" in text
    lines = commands(section(page))
    assert lines[0] == "kubectl create namespace demo-enforcement-test"
    assert lines[-1] == "kubectl delete namespace demo-enforcement-test"
    applies = [line for line in lines if "kubectl apply" in line]
    assert len(applies) == 2 and not any("--dry-run" in line for line in lines)


@pytest.mark.parametrize("page", QUICKSTARTS, ids=lambda p: p.stem)
def test_the_tampered_object_it_applies_is_denied_as_a_write_and_allowed_as_a_dry_run(
    page: Path, tmp_path: Path
) -> None:
    key = generate_key("ecdsa-p256")
    (tmp_path / "team.key").write_bytes(private_pem(key, None))
    own = re.search(r"cat > app\.yaml <<'EOF'\n(.*?\n)EOF\n", page.read_text(), re.DOTALL)
    (tmp_path / "app.yaml").write_text(own[1] if own else APP)
    local = [line for line in commands(section(page)) if "kubectl" not in line]
    assert [line.split()[0] for line in local] == ["sed", "manifest-provider"]
    script = "\n".join(["set -eu", *(line.replace("manifest-provider ", f"{' '.join(command())} ") for line in local)])
    subprocess.run(["bash", "-c", script], cwd=tmp_path, check=True, timeout=120)
    (apply_tampered,) = [line for line in commands(section(page)) if line.endswith("| kubectl apply -f -")]
    producer = apply_tampered.rsplit("|", 1)[0]
    tampered_text = subprocess.run(
        ["bash", "-c", producer], cwd=tmp_path, check=True, capture_output=True, text=True, timeout=60
    ).stdout
    signed = yaml.safe_load((tmp_path / "test.yaml.signed").read_text())
    tampered = yaml.safe_load(tampered_text)
    assert signed["metadata"]["namespace"] == tampered["metadata"]["namespace"] == "demo-enforcement-test"
    policy = Policy.from_dict({"keys": [public_pem(key).decode()]})

    def review(obj: dict[str, object], dry_run: bool) -> Review:
        return Review.from_admission(
            {
                "operation": "CREATE",
                "userInfo": {"username": "alice@example.com"},
                "dryRun": dry_run,
                "namespace": "demo-enforcement-test",
                "name": "app-config",
                "object": obj,
            }
        )

    assert decide(review(signed, dry_run=False), policy).reason == "verified"
    written = decide(review(tampered, dry_run=False), policy)
    assert (written.allowed, written.reason) == (False, "content-mismatch")
    rehearsed = decide(review(tampered, dry_run=True), policy)
    assert (rehearsed.allowed, rehearsed.reason) == (True, "dry-run-request")  # what --dry-run=server would see
