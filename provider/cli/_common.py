"""Helpers shared by the CLI commands: reading inputs and policies, printing results."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import PolicyError, RequestError, TransientError
from ..limits import DEFAULT_LIMITS
from ..parsing import load_yaml_stream
from ..result import Result
from ..review import Review
from . import EXIT_DENIED, EXIT_OK, EXIT_UNVERIFIED, EXIT_USAGE

INPUT_SUFFIXES = (".yaml", ".yml", ".json")


def read_text(path: str) -> bytes:
    """A file's bytes, ``-`` for standard input, refusing anything over the payload limit."""
    limit = DEFAULT_LIMITS.max_payload_bytes
    if path == "-":
        data = sys.stdin.buffer.read(limit + 1)
    else:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    if len(data) > limit:
        raise RequestError(f"{path} is larger than {limit} bytes")
    return data


def input_files(path: str) -> list[Path]:
    """``path`` itself, or every YAML file under the directory ``path``, sorted."""
    root = Path(path)
    if root.is_dir():
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in INPUT_SUFFIXES)
        if not files:
            raise RequestError(f"{path} holds no .yaml, .yml or .json files")
        return files
    return [root]


def read_documents(path: str) -> list[Any]:
    """Every document in a YAML/JSON file (or ``-``); ``kind: List`` is expanded."""
    docs = load_yaml_stream(read_text(path), error=RequestError, what=path)
    expanded: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            expanded.extend(doc["items"])
        else:
            expanded.append(doc)
    return expanded


def read_policy_file(path: str) -> dict[str, Any]:
    docs = load_yaml_stream(read_text(path), error=PolicyError, what=path)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise PolicyError(f"{path}: expected one policy mapping")
    return dict(docs[0])


def read_key_files(paths: list[str]) -> list[str]:
    keys = []
    for path in paths:
        try:
            keys.append(read_text(path).decode())
        except UnicodeDecodeError as exc:
            raise PolicyError(f"{path}: not a PEM text file") from exc
    return keys


def password() -> bytes | None:
    """``MANIFEST_PROVIDER_PASSWORD``, else cosign's ``COSIGN_PASSWORD`` (for cosign key files), else none."""
    value = os.environ.get("MANIFEST_PROVIDER_PASSWORD") or os.environ.get("COSIGN_PASSWORD")
    return value.encode() if value else None


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="output format (default: text)"
    )
    parser.add_argument(
        "--admission",
        action="store_true",
        help="admission semantics for the exit code: 0 when every document is allowed, verified or not "
        "(default: 0 only when every document verified, 3 when some were allowed unverified)",
    )


def exit_code(results: list[Result], *, admission: bool = False) -> int:
    """0 every document verified (with ``admission``: allowed), 1 some denied, 3 some allowed unverified."""
    if not all(r.allowed for r in results):
        return EXIT_DENIED
    if admission or all(r.verified for r in results):
        return EXIT_OK
    return EXIT_UNVERIFIED


def print_results(results: list[Result], output: str) -> None:
    if output == "json":
        json.dump({"results": [r.to_dict() for r in results]}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    for result in results:
        mark = ("PASS" if result.verified else "ALLOW") if result.allowed else "FAIL"
        print(f"{mark} [{result.reason}] {result.message}")
        for item in result.diff:
            print(f"    {item.key}: signed {json.dumps(item.before)} -> admitted {json.dumps(item.after)}")
        if result.diff_count > len(result.diff):
            print(f"    ... {result.diff_count - len(result.diff)} more")


def review_of(doc: Any, index: int) -> Review:
    """A document as the review it stands for: an AdmissionReview/AdmissionRequest as sent, else the object alone."""
    if not isinstance(doc, dict):
        raise RequestError(f"document {index + 1} is a {type(doc).__name__}, not a Kubernetes object")
    if doc.get("kind") == "AdmissionReview" and isinstance(doc.get("request"), dict):
        return Review.from_admission(doc["request"], where=f"document {index + 1}.request")
    if isinstance(doc.get("kind"), dict) and "object" in doc:  # an AdmissionRequest
        return Review.from_admission(doc, where=f"document {index + 1}")
    return Review.for_object(doc)


def evaluate_documents(
    command: str, path: str, output: str, evaluate: Callable[[Review], Result], *, admission: bool = False
) -> int:
    """Evaluate every document of ``path``, print the verdicts, and return the exit code.

    A document that is not a usable review, or a transient failure (the cluster
    could not be asked), is a denial with its reason, never a skip.
    """
    docs = read_documents(path)
    if not docs:
        print(f"manifest-provider {command}: {path} holds no documents", file=sys.stderr)
        return EXIT_USAGE
    results = []
    for index, doc in enumerate(docs):
        try:
            results.append(evaluate(review_of(doc, index)))
        except (RequestError, TransientError) as exc:
            results.append(Result.from_error(exc))
    print_results(results, output)
    return exit_code(results, admission=admission)
