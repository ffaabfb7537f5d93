"""The built-in profiles are loaded from ``provider/data/profiles.json``, which must say what their YAML says.

The YAML in ``provider/policy/profiles/`` is the source of truth; ``tools/make_profiles.py``
writes its data as JSON, which :func:`provider.policy.schema.load_profile` reads (JSON loads
much faster than YAML, and a command-line ``verify`` loads the default profiles on every run).
A profile edited without rerunning ``make profiles`` fails here: the JSON is compared with the
YAML as the package's own reader and as PyYAML's safe loader read it, and the compiled
profiles with those built from the YAML.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.errors import PolicyError
from provider.parsing import load_yaml_stream
from provider.policy import schema
from provider.policy.schema import PROFILES, BuiltinProfile, load_profile
from tests.support.data import REPO

SOURCES = REPO / "provider" / "policy" / "profiles"
DATA = json.loads((REPO / "provider" / "data" / "profiles.json").read_text(encoding="utf-8"))


def yaml_files() -> list[Path]:
    found = sorted(SOURCES.glob("*.yaml"))
    assert len(found) == len(PROFILES) == 7, found
    return found


def test_the_json_holds_exactly_the_profiles_the_yaml_holds() -> None:
    assert list(DATA) == list(PROFILES)
    assert sorted(DATA) == sorted(p.stem for p in yaml_files())


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: p.stem)
def test_each_profile_s_json_is_its_yaml(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    (ours,) = load_yaml_stream(text, error=PolicyError, what=path.name)
    assert DATA[path.stem] == ours
    assert DATA[path.stem] == yaml.safe_load(text)  # an independent reader says the same
    assert any(isinstance(v, list) and v for v in DATA[path.stem].values()), "a profile with no rules read"


@pytest.mark.parametrize("name", PROFILES)
def test_the_loaded_profile_is_the_one_built_from_the_yaml(name: str) -> None:
    (data,) = load_yaml_stream((SOURCES / f"{name}.yaml").read_text(encoding="utf-8"), error=PolicyError, what=name)
    assert load_profile(name) == BuiltinProfile.from_dict(name, data)


def test_a_profile_missing_from_the_json_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    held: dict[str, Any] = {name: data for name, data in DATA.items() if name != "common"}
    monkeypatch.setattr(schema, "_profiles_data", lambda: held)
    with pytest.raises(PolicyError, match=r"'common' is missing from provider/data/profiles\.json"):
        load_profile.__wrapped__("common")
    assert load_profile.__wrapped__("kyverno") == load_profile("kyverno")
