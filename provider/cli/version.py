"""``manifest-provider version``: this build and what it runs on, as ``kubectl sigstore version`` reports its own."""

from __future__ import annotations

import argparse
import json
import platform
import sys
from importlib import metadata

from ..version import __version__
from . import COMMANDS, EXIT_OK
from ._args import command_parser

HELP = COMMANDS["version"]
EXAMPLES = ("manifest-provider version", "manifest-provider version -o json")
#: The distributions whose versions decide what a verdict is (signatures, keyless, YAML, the service).
LIBRARIES = ("cryptography", "pynacl", "sigstore", "pyyaml", "flask", "gunicorn", "kubernetes")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = command_parser(sub, "version", HELP, EXAMPLES)
    p.add_argument("-o", "--output", choices=("text", "json"), default="text", help="output format (default: text)")
    p.set_defaults(run=run)


def versions() -> dict[str, str]:
    found = {"manifest-provider": __version__, "python": f"{platform.python_version()} ({sys.implementation.name})"}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    found["platform"] = f"{sys.platform}/{platform.machine()}"
    return found


def run(args: argparse.Namespace) -> int:
    found = versions()
    if args.output == "json":
        print(json.dumps(found, indent=2))
    else:
        width = max(len(name) for name in found)
        for name, value in found.items():
            print(f"{name + ':':<{width + 1}}  {value}")
    return EXIT_OK
