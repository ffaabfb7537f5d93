"""Helpers shared by the CLI commands: their parsers, the policy flags, reading inputs and policies, printing results.

:func:`command_parser` makes every sub-command's parser, with its examples
under ``--help``. :func:`add_policy_flags` adds the flags that make a policy
(``-k``, ``-c/--config``, ``--signer``, ...) and :func:`build_policy` turns them
into the policy document: ``verify``, ``classify`` and ``policy`` share both,
so a flag means the same everywhere.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import PolicyError, RequestError, TransientError
from ..limits import DEFAULT_LIMITS

if TYPE_CHECKING:  # imported where used: a command's --help builds its parser without them
    from ..result import Result
    from ..review import Held, Review

from . import EXIT_DENIED, EXIT_OK, EXIT_UNVERIFIED, EXIT_USAGE
from ._args import UPSTREAM_DEFAULT_PROFILE

INPUT_SUFFIXES = (".yaml", ".yml", ".json")
#: A key read from an environment variable (provider/cli/_keys.py cites cosign and kubectl sigstore).
ENV_SCHEME = "env://"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


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
    from ..parsing import load_yaml_stream

    docs = load_yaml_stream(read_text(path), error=RequestError, what=path)
    expanded: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            expanded.extend(doc["items"])
        else:
            expanded.append(doc)
    return expanded


def read_policy_file(path: str) -> dict[str, Any]:
    from ..parsing import load_yaml_stream

    docs = load_yaml_stream(read_text(path), error=PolicyError, what=path)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise PolicyError(f"{path}: expected one policy mapping")
    return dict(docs[0])


def split_key_refs(values: list[str]) -> list[str]:
    """Every key reference of repeated ``-k`` flags, comma lists split (a value naming a file is kept whole)."""
    refs: list[str] = []
    for value in values:
        if "," in value and not Path(value).is_file():
            refs.extend(part.strip() for part in value.split(","))
        else:
            refs.append(value)
    for ref in refs:
        if not ref:
            raise PolicyError(f"an empty key reference in -k {','.join(values)!r}")
    return refs


def read_key_ref(ref: str) -> bytes:
    """The text of one key reference: a file, ``-``, or ``env://NAME`` (``k8s://``: :func:`read_public_keys`)."""
    scheme = _SCHEME.match(ref)
    if scheme is None:
        return read_text(ref)
    if not ref.startswith(ENV_SCHEME):
        hint = " (k8s://NAMESPACE/NAME names a public key only)" if ref.startswith("k8s://") else ""
        raise PolicyError(
            f"{ref}: keys are read from files or {ENV_SCHEME}NAME; {scheme.group(1)}:// is not supported here{hint}"
        )
    name = ref.removeprefix(ENV_SCHEME)
    if not name:
        raise PolicyError(f"{ref}: name the environment variable, e.g. {ENV_SCHEME}COSIGN_PUBLIC_KEY")
    value = os.environ.get(name)
    if value is None:
        raise PolicyError(f"{ref}: environment variable {name} is not set")
    data = value.encode()
    if not data.strip():
        raise PolicyError(f"{ref}: environment variable {name} is empty")
    if len(data) > DEFAULT_LIMITS.max_payload_bytes:
        raise PolicyError(f"{ref}: environment variable {name} is larger than {DEFAULT_LIMITS.max_payload_bytes} bytes")
    return data


def read_public_keys(values: list[str]) -> list[str]:
    """The PEM text of every key ``-k`` names (files, ``env://``, comma lists), in order.

    Each is loaded here, so that a file that holds no usable key is refused
    with its own name, not as an entry of the policy it is added to.
    """
    from ..keys.refs import is_key_reference, parse_key_reference
    from ..keys.trusted import load_trusted_keys

    keys = []
    for ref in split_key_refs(values):
        if is_key_reference(ref):  # a key kept in a Secret: read through the kubeconfig when verifying
            parse_key_reference(ref, f"-k {ref}")
            keys.append(ref)
            continue
        try:
            text = read_key_ref(ref).decode()
        except UnicodeDecodeError as exc:
            raise PolicyError(f"{ref}: not a PEM text file") from exc
        try:
            load_trusted_keys(text, None, DEFAULT_LIMITS.max_keys)
        except PolicyError as exc:
            raise PolicyError(f"{ref}: {exc.message}") from exc
        keys.append(text)
    return keys


def password() -> bytes | None:
    """``MANIFEST_PROVIDER_PASSWORD``, else cosign's ``COSIGN_PASSWORD`` (for cosign key files), else none."""
    value = os.environ.get("MANIFEST_PROVIDER_PASSWORD") or os.environ.get("COSIGN_PASSWORD")
    return value.encode() if value else None


def names_trust(args: argparse.Namespace) -> bool:
    """Whether the policy flags name anything to trust: a policy file, a key or a signer."""
    return bool(args.config or args.key or args.signer)


def policy_where(args: argparse.Namespace) -> str:
    """How policy errors name the policy: after the ``--config`` file it came from (``policy.yaml: policy.keys[0]``)."""
    config = getattr(args, "config", None)
    if not config:
        return "policy"
    return f"{'standard input' if config == '-' else config}: policy"


def warn_once(command: str) -> Callable[[str], None]:
    """A warning printer for ``command``'s standard error that prints each message once."""
    said: set[str] = set()

    def warn(message: str) -> None:
        if message not in said:
            said.add(message)
            print(f"manifest-provider {command}: warning: {message}", file=sys.stderr)

    return warn


def dropped_defaults(config: str, policy: dict[str, Any]) -> str | None:
    """The warning for a policy file whose ``defaults`` leaves out default profiles, else None.

    ``defaults`` replaces the list (docs/policy.md): ``defaults: [argocd]``
    also switches off the default profiles, which is rarely what was meant.
    """
    from ..policy.schema import DEFAULT_PROFILES

    defaults = policy.get("defaults")
    if not isinstance(defaults, list):
        return None  # absent: the defaults; anything else is refused by Policy.from_dict
    left_out = [name for name in DEFAULT_PROFILES if name not in defaults]
    if not left_out:
        return None
    added = [str(name) for name in defaults if name not in DEFAULT_PROFILES]
    plural = "s" if len(left_out) > 1 else ""
    hint = f"; to add {', '.join(added)} to the defaults, list them all or use --profile" if added else ""
    return (
        f"{config}: defaults {json.dumps(defaults)} leaves out the default profile{plural} {', '.join(left_out)}, "
        f"whose ignore and skip rules then do not apply{hint}"
    )


def _profiles(values: list[str]) -> list[str]:
    from ..policy.schema import PROFILES

    names = [part.strip() for value in values for part in value.split(",") if part.strip()]
    for name in names:
        if name not in PROFILES:
            import difflib

            guess = difflib.get_close_matches(name, PROFILES, n=1)
            hint = f"did you mean {guess[0]}? " if guess else ""
            raise PolicyError(f"--profile {name}: not a built-in profile; {hint}choose from {', '.join(PROFILES)}")
    return names


def build_policy(args: argparse.Namespace, *, warn: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The policy document the :func:`add_policy_flags` flags describe: ``--config``, with the flags added.

    ``--key`` files are appended to its ``keys``, ``--signer`` to its ``signers``,
    ``--profile`` to its ``defaults`` (the default profiles when it has none);
    ``--key-operation``, ``--threshold``, ``--annotation-domain``, ``--trusted-root``
    and the dry-run flags replace what it says; ``--disable-default-config`` takes
    the k8s-manifest-sigstore profile out of its ``defaults``. A ``defaults`` in
    the file that leaves out a default profile is said in a warning (``warn``;
    by default once per message on standard error).
    """
    warn = warn or warn_once(getattr(args, "command", None) or "policy")
    policy = read_policy_file(args.config) if args.config else {}
    if args.config:
        dropped = dropped_defaults("standard input" if args.config == "-" else args.config, policy)
        if dropped:
            warn(dropped)
    keys = read_public_keys(args.key)
    if keys:
        policy["keys"] = list(policy.get("keys") or []) + keys
    if args.signer:
        signers = list(policy.get("signers") or [])
        for text in args.signer:
            subject, _, issuer = text.partition(",")
            signers.append({"subject": subject, **({"issuer": issuer} if issuer else {})})
        policy["signers"] = signers
    if args.trusted_root:
        from ..keyless.trust import load_trusted_root
        from ..parsing import load_json

        # load_json: json.loads alone let RecursionError (a deep document) and int()'s digit limit through.
        try:
            policy["trustedRoot"] = load_json(read_text(args.trusted_root), error=PolicyError, what="the file")
        except PolicyError as exc:
            raise PolicyError(f"{args.trusted_root}: not a TrustedRoot JSON document ({exc.message})") from exc
        try:
            load_trusted_root(policy["trustedRoot"])
        except PolicyError as exc:
            raise PolicyError(f"{args.trusted_root}: {exc.message}") from exc
    if args.key_operation:
        policy["keyOperation"] = args.key_operation
    if args.threshold is not None:
        policy["threshold"] = args.threshold
    if args.annotation_domain:
        policy["annotationDomain"] = args.annotation_domain
    if args.disable_default_config:
        from ..policy.schema import DEFAULT_PROFILES

        defaults = policy.get("defaults", list(DEFAULT_PROFILES))
        if isinstance(defaults, list):  # anything else is the policy's own error, reported by Policy.from_dict
            policy["defaults"] = [name for name in defaults if name != UPSTREAM_DEFAULT_PROFILE]
    profiles = _profiles(getattr(args, "profile", None) or [])
    if profiles:
        from ..policy.schema import DEFAULT_PROFILES

        defaults = policy.get("defaults", list(DEFAULT_PROFILES))
        if isinstance(defaults, list):  # anything else is the policy's own error, reported by Policy.from_dict
            policy["defaults"] = defaults + [name for name in profiles if name not in defaults]
    if getattr(args, "dry_run", False) or getattr(args, "dry_run_namespace", None):
        dry_run = dict(policy.get("dryRun") or {})
        dry_run["enabled"] = True
        if getattr(args, "dry_run_namespace", None):
            dry_run["namespace"] = args.dry_run_namespace
        policy["dryRun"] = dry_run
    return policy


def exit_code(results: list[Result], *, admission: bool = False) -> int:
    """0 every document verified (with ``admission``: allowed), 1 some denied, 3 some allowed unverified."""
    if not all(r.allowed for r in results):
        return EXIT_DENIED
    if admission or all(r.verified for r in results):
        return EXIT_OK
    return EXIT_UNVERIFIED


@dataclass(frozen=True)
class Judged:
    """One document's verdict and which object it is about (``object`` as ``verify -o json`` prints it)."""

    object: dict[str, Any]
    result: Result
    #: No verdict on the object: the document could not be read as one, or the cluster could not be asked.
    error: bool = False
    #: The word for the object compared with the signed manifest in text output: ``stored`` for a live object.
    held: Held = "admitted"

    @property
    def outcome(self) -> str:
        """``pass``, ``fail``, ``skip`` or ``error``: what ``verify-resource`` and PolicyReports call a verdict."""
        if self.error:
            return "error"
        return ("pass" if self.result.verified else "skip") if self.result.allowed else "fail"

    def to_dict(self) -> dict[str, Any]:
        return {"object": self.object, "result": self.outcome, **self.result.to_dict()}


def object_of(doc: Any, review: Review | None, document: int, file: str | None) -> dict[str, Any]:
    """Which object a document is about: ``apiVersion``, ``group``, ``version``, ``kind``, ``namespace`` (when
    namespaced), ``name``, ``document`` (its position in the file, from 1, as messages count) and ``file``
    (when several files were read). The same fields as ``verify-resource -o json``'s ``object``, whose
    ``uid`` and ``resourceVersion`` are printed too when the object has them."""
    obj: Any = doc
    if review is not None:
        obj = review.object if review.object is not None else review.old_object
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}

    def text(value: Any) -> str:
        return value if isinstance(value, str) else ""

    api_version = text(obj.get("apiVersion")) if isinstance(obj, dict) else ""
    group, _, version = api_version.rpartition("/")
    out: dict[str, Any] = {
        "apiVersion": api_version,
        "group": group,
        "version": version,
        "kind": text(obj.get("kind")) if isinstance(obj, dict) else "",
        "name": text(meta.get("name")) or text(review.name if review else None),
    }
    namespace = text(meta.get("namespace")) or text(review.namespace if review else None)
    if namespace:
        out["namespace"] = namespace
    for field_name in ("uid", "resourceVersion"):
        if text(meta.get(field_name)):
            out[field_name] = meta[field_name]
    out["document"] = document
    if file is not None:
        out["file"] = file
    return out


def print_judged(judged: list[Judged], output: str, *, several_files: bool = False) -> None:
    """The verdicts as text, or ``{results: [...], summary: {...}}`` in JSON or YAML (``verify-resource``'s shape)."""
    if output in ("json", "yaml"):
        from ._summary import Summary

        summary = Summary("documents")
        for item in judged:
            summary.add(item)
        document = {"results": [item.to_dict() for item in judged], "summary": summary.to_dict()}
        if output == "json":
            json.dump(document, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            import yaml

            yaml.safe_dump(document, sys.stdout, sort_keys=False)
        return
    for item in judged:
        result = item.result
        mark = ("PASS" if result.verified else "ALLOW") if result.allowed else "FAIL"
        where = f"{item.object['file']}: " if several_files and "file" in item.object else ""
        print(f"{mark} [{result.reason}] {where}{result.message}")
        # A control-plane object is compared with what its writer writes, not with a signed manifest.
        source = "written" if result.reason == "control-plane-object-changed" else "signed"
        for diff in result.diff:
            print(f"    {diff.key}: {source} {json.dumps(diff.before)} -> {item.held} {json.dumps(diff.after)}")
        if result.diff_count > len(result.diff):
            print(f"    ... {result.diff_count - len(result.diff)} more")


def review_of(doc: Any, index: int) -> Review:
    """A document as the review it stands for: an AdmissionReview/AdmissionRequest as sent, else the object alone."""
    if not isinstance(doc, dict):
        raise RequestError(f"document {index + 1} is a {type(doc).__name__}, not a Kubernetes object")
    from ..review import Review

    if doc.get("kind") == "AdmissionReview" and isinstance(doc.get("request"), dict):
        return Review.from_admission(doc["request"], where=f"document {index + 1}.request")
    if isinstance(doc.get("kind"), dict) and "object" in doc:  # an AdmissionRequest
        return Review.from_admission(doc, where=f"document {index + 1}")
    return Review.for_object(doc)


def evaluate_documents(
    command: str,
    paths: str | Sequence[str],
    output: str,
    evaluate: Callable[[Review], Result],
    *,
    admission: bool = False,
) -> int:
    """Evaluate every document of ``paths`` (files, directories of YAML files, ``-``), print the verdicts, and
    return the exit code.

    A document that is not a usable review, or a transient failure (the cluster
    could not be asked), is a denial with its reason, never a skip.
    """
    from ..result import Result

    files = [str(f) for path in ([paths] if isinstance(paths, str) else paths) for f in _files_of(path)]
    several = len(files) > 1
    judged: list[Judged] = []
    for file in files:
        docs = read_documents(file)
        if not docs:
            print(f"manifest-provider {command}: {file} holds no documents", file=sys.stderr)
            return EXIT_USAGE
        for index, doc in enumerate(docs):
            review = None
            try:
                review = review_of(doc, index)
                result, error = evaluate(review), False
            except (RequestError, TransientError) as exc:
                result, error = Result.from_error(exc), True
            held: Held = review.held if review is not None else "admitted"
            judged.append(Judged(object_of(doc, review, index + 1, file if several else None), result, error, held))
    print_judged(judged, output, several_files=several)
    return exit_code([item.result for item in judged], admission=admission)


def _files_of(path: str) -> list[Path] | list[str]:
    return ["-"] if path == "-" else input_files(path)


def signature_sources(
    kubeconfig: str | None, policy: Any, *, in_cluster: bool = False, service_account_dir: str | None = None
) -> Any:
    """The policy's signature sources: the cluster for a signature ConfigMap and for keys kept in Secrets, a
    registry client for resource bundles.

    Module-level, so that a worker process can be sent it (``verify``, ``verify-resource`` and ``observe``).
    """
    from ..signatures.sources import Sources

    bundles = configmaps = keys = None
    if policy.resource_bundle is not None:
        from ..oci.auth import AuthFile
        from ..oci.bundles import OciBundleSource

        # As docker and cosign (go-containerregistry's default keychain): the user's own Docker config.
        docker = os.environ.get("DOCKER_CONFIG") or os.path.expanduser("~/.docker")
        bundles = OciBundleSource(auth_file=AuthFile(os.path.join(docker, "config.json")))
    if policy.signature_resource_ref is not None:
        from ..kube.configmaps import KubeConfigMapReader
        from ..kube.dryrun import dry_runner_for

        runner = functools.partial(
            dry_runner_for, kubeconfig, in_cluster=in_cluster, service_account_dir=service_account_dir
        )
        configmaps = KubeConfigMapReader(runner)
    if policy.secret_keys or (policy.resource_bundle is not None and policy.resource_bundle.pull_secrets):
        from ..kube.dryrun import dry_runner_for
        from ..kube.keysecrets import KubeKeySecretReader

        runner = functools.partial(
            dry_runner_for, kubeconfig, in_cluster=in_cluster, service_account_dir=service_account_dir
        )
        keys = KubeKeySecretReader(runner)
    return Sources(bundles=bundles, configmaps=configmaps, keys=keys)
