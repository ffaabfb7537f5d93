"""The policy flags every policy-making command shares: key references and --disable-default-config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provider.cli import build_parser
from provider.cli._common import build_policy, split_key_refs
from provider.errors import PolicyError
from provider.policy.schema import DEFAULT_PROFILES


@pytest.mark.parametrize(
    ("values", "refs"),
    [
        (["a.pub"], ["a.pub"]),
        (["a.pub,b.pub"], ["a.pub", "b.pub"]),
        (["a.pub, env://K", "c.pub"], ["a.pub", "env://K", "c.pub"]),
    ],
    ids=["one", "comma-list", "mixed-and-repeated"],
)
def test_comma_lists_and_repeats(values: list[str], refs: list[str]) -> None:
    assert split_key_refs(values) == refs


def test_an_empty_item_in_a_list_is_refused() -> None:
    with pytest.raises(PolicyError, match="an empty key reference"):
        split_key_refs(["a.pub,"])


def parse(*args: str) -> object:
    return build_parser().parse_args(["verify", "-f", "x.yaml", *args])


@pytest.mark.parametrize(
    ("defaults", "expected"),
    [
        (None, [p for p in DEFAULT_PROFILES if p != "k8s-manifest-sigstore"]),
        (["k8s-manifest-sigstore", "kyverno"], ["kyverno"]),
        ([], []),
    ],
    ids=["built-in-defaults", "the-files-own", "already-none"],
)
def test_disable_default_config_takes_out_upstreams_profile_only(
    tmp_path: Path, defaults: list[str] | None, expected: list[str]
) -> None:
    config = tmp_path / "policy.yaml"
    config.write_text(yaml.safe_dump({"keys": ["k"], **({"defaults": defaults} if defaults is not None else {})}))
    assert build_policy(parse("-c", str(config), "--disable-default-config"))["defaults"] == expected  # type: ignore[arg-type]
    without = build_policy(parse("-c", str(config)))  # type: ignore[arg-type]
    assert without.get("defaults", None) == defaults
