"""Generate ``provider/data/profiles.json``: the built-in profiles' YAML, read once, as JSON.

The YAML files in ``provider/policy/profiles/`` are the source of truth: people
read and edit them, and the docs quote them. A command-line ``verify`` loads the
default profiles on every run, and reading their YAML (``common.yaml`` is 25 KB)
cost the run about as much as the verification itself; ``json.loads`` of the same
data is some twenty times faster. So this script reads each profile with the
package's own YAML reader (:func:`provider.parsing.load_yaml_stream`, the one the
profiles were read with before) and writes the data it returns, unchanged, into
one JSON document keyed by profile name; :func:`provider.policy.schema.load_profile`
validates that data exactly as it validated the YAML's.

``tests/policies/test_generators.py`` reruns this script and compares its output with
the committed file, and ``tests/unit/test_profiles_data.py`` compares the committed
file with the YAML: a profile edited without rerunning ``make profiles`` fails both.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from provider.errors import PolicyError
from provider.parsing import load_yaml_stream
from provider.policy import schema

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "provider" / "data" / "profiles.json"
#: The YAML, beside the installed package's schema module (the repository's, in an editable install).
SOURCES = Path(schema.__file__).with_name("profiles")


def document() -> dict[str, object]:
    """``{name: data}`` for every built-in profile, in :data:`provider.policy.schema.PROFILES` order."""
    found = sorted(p.stem for p in SOURCES.glob("*.yaml"))
    if found != sorted(schema.PROFILES):
        raise SystemExit(f"{SOURCES} holds {found}, the schema names {sorted(schema.PROFILES)}")
    profiles: dict[str, object] = {}
    for name in schema.PROFILES:
        text = (SOURCES / f"{name}.yaml").read_text(encoding="utf-8")
        (profiles[name],) = load_yaml_stream(text, error=PolicyError, what=f"profile {name}")
    return profiles


def main(output: Path = OUTPUT) -> None:
    """Write the document to ``output`` (``python tools/make_profiles.py [--output PATH]``; default: the package's)."""
    profiles = document()
    # indent=1: a change to a profile is a readable diff of this file too.
    output.write_text(json.dumps(profiles, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{output}: {len(profiles)} profiles from {SOURCES}")


if __name__ == "__main__":
    arguments = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    arguments.add_argument("--output", type=Path, default=OUTPUT, help="where to write (default: %(default)s)")
    main(arguments.parse_args().output)
