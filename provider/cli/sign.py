"""``manifest-provider sign``: sign manifests in the k8s-manifest-sigstore format.

Input is a file, a directory of YAML files, or ``-`` (standard input, e.g.
``kustomize build | manifest-provider sign -f - -k key``); output goes to
``<FILE>.signed``, ``-o OUT``, or standard output when the input is standard
input. ``--post-renderer`` is Helm's post-renderer contract (helm/helm
pkg/postrender/exec.go: the rendered manifests on standard input, the
modified manifests read back from standard output, a non-zero exit with the
reason on standard error fails the install): standard input to standard
output, empty documents (a template that renders to nothing) dropped, an
empty stream (a release of hooks only) passed back empty.

A message is copied onto every object it signs, so a Secret signed with the
rest of a stream would put its data into every other object's annotations.
By default each sensitive object (``provider.signatures.signing.is_sensitive``: a
Secret, or a kind given with ``--sensitive-kind``) is signed in a message of
its own and the rest share one, with a note naming them; ``--tarball``,
``--image`` and ``--append-signature``, which cannot give each object its own
message, refuse such input with the reason. Splitting rather than refusing
keeps ``kustomize build | manifest-provider sign -f -`` working for the
streams that always hold Secrets (``secretGenerator``) without ever copying one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import RequestError
from . import COMMANDS, EXIT_OK, _signature_configmap
from ._args import command_parser
from ._common import input_files, read_documents

HELP = COMMANDS["sign"]
EXAMPLES = (
    "manifest-provider sign -f app.yaml -k team.key   # writes app.yaml.signed",
    "manifest-provider sign -f manifests/ -k cosign.key -o release.yaml",
    "manifest-provider sign -f app.yaml.signed -k ops.key --append-signature -o app.yaml.signed2",
    "kustomize build overlays/prod | manifest-provider sign -f - -k env://SIGNING_KEY > release.yaml",
    "manifest-provider sign --post-renderer -k team.key   # a Helm post-renderer: helm install --post-renderer",
    "manifest-provider sign -f app.yaml -k team.key -o k8s://ConfigMap/shop/app-sig   # writes k8s_ConfigMap_*.yaml",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = command_parser(
        sub,
        "sign",
        HELP,
        EXAMPLES,
        description=HELP + ". The private key's password is read from MANIFEST_PROVIDER_PASSWORD (or COSIGN_PASSWORD); "
        "without either, it is asked for when standard input is a terminal.",
    )
    p.add_argument(
        "-f",
        "--filename",
        metavar="FILE|DIR|-",
        help="manifest file, a directory of .yaml/.yml files, or - for standard input (required unless "
        "--post-renderer)",
    )
    p.add_argument(
        "-k",
        "--key",
        required=True,
        metavar="PRIVATE.pem",
        help="private key: PKCS#8 PEM (ECDSA, RSA or Ed25519) or a cosign key file (cosign.key); a file or env://VAR",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="output file (default <FILE>.signed; standard output for -f -; - for stdout), or "
        "k8s://ConfigMap/NAMESPACE/NAME: the message and signature in a ConfigMap, as kubectl sigstore writes it "
        "(to k8s_ConfigMap_NAMESPACE_NAME.yaml, or to the cluster with --apply-signature-configmap)",
    )
    p.add_argument(
        "--apply-signature-configmap",
        action="store_true",
        help="with -o k8s://ConfigMap/NAMESPACE/NAME: create or update the ConfigMap in the cluster (--kubeconfig)",
    )
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig for --apply-signature-configmap")
    p.add_argument(
        "--post-renderer",
        action="store_true",
        help="run as a Helm post-renderer: rendered manifests on standard input, signed ones on standard output",
    )
    p.add_argument(
        "--per-object",
        action="store_true",
        help="sign each object in a message of its own (a message over many objects is copied onto each of them)",
    )
    p.add_argument(
        "--sensitive-kind",
        action="append",
        default=[],
        metavar="KIND",
        help="another kind whose objects hold secret values, signed each in a message of its own like a Secret "
        "(repeatable, or comma-separated)",
    )
    p.add_argument(
        "--append-signature",
        action="store_true",
        help="add signature_N to already signed input, keeping earlier signatures valid",
    )
    p.add_argument(
        "--tarball",
        action="store_true",
        help="sign a tar.gz of the input files (upstream's deprecated --tarball=yes) instead of a YAML stream",
    )
    p.add_argument(
        "-i",
        "--image",
        metavar="REF",
        help="push the message as a resource bundle image to REF and sign the image as cosign does "
        "(kubectl sigstore sign -i); the output carries only the resourceBundleRef annotation",
    )
    p.add_argument(
        "--annotation-domain",
        default=None,
        metavar="D",
        help="signature annotation domain (default cosign.sigstore.dev)",
    )
    p.set_defaults(run=run)


def _source(args: argparse.Namespace) -> tuple[str, str]:
    """Where to read and where to write (``-`` is a standard stream)."""
    if args.post_renderer:
        if args.filename not in (None, "-") or args.output not in (None, "-"):
            raise RequestError("--post-renderer reads standard input and writes standard output; drop -f and -o")
        if args.tarball or args.append_signature or args.image:
            raise RequestError(
                "--post-renderer signs Helm's rendered stream; --tarball, --append-signature and --image do not apply"
            )
        return "-", "-"
    if args.filename is None:
        raise RequestError("give the manifests to sign: -f FILE, -f DIR, or -f - for standard input")
    if args.filename == "-":
        if args.tarball:
            raise RequestError("--tarball signs the bytes of files; standard input has none (sign the files instead)")
        return "-", args.output or "-"
    return args.filename, args.output or f"{args.filename.rstrip('/')}.signed"


def _objects(documents: list[Any], where: str) -> list[dict[str, Any]]:
    """The documents as objects; an empty document (``---`` with nothing after it) is no object and is dropped."""
    objects = []
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise RequestError(f"{where}: document {index + 1} is a {type(doc).__name__}, not a Kubernetes object")
        objects.append(doc)
    return objects


def _sensitive_kinds(args: argparse.Namespace) -> frozenset[str]:
    from ..signatures.signing import SENSITIVE_KINDS

    given = {kind.strip() for value in args.sensitive_kind for kind in value.split(",")}
    if "" in given:
        raise RequestError("--sensitive-kind: an empty kind (a doubled or trailing comma)")
    return SENSITIVE_KINDS | given


def _sign_image(args: argparse.Namespace, documents: list[Any], key: Any, domain: str, files: list[Path]) -> list[Any]:
    """Push the message as a bundle image, sign the image's digest, and annotate the documents with its reference."""
    import base64

    from ..errors import VerificationFailure
    from ..keys.pem import sign_bytes
    from ..objects import ObjectIdentity
    from ..oci.bundles import push_bundle, push_signature
    from ..oci.registry import RegistryClient
    from ..signatures.signing import is_sensitive, message_payload, with_bundle_ref
    from ..signatures.sources import Reference, simple_signing_payload

    kinds = _sensitive_kinds(args)
    for doc in documents:
        if is_sensitive(doc, kinds):
            raise RequestError(
                f"--image pushes the message to {args.image}, where anyone who may pull it reads it: "
                f"{ObjectIdentity.of(doc).describe()} holds secret values. Sign it without --image"
            )

    try:
        reference = Reference.parse(args.image, "--image")
    except VerificationFailure as exc:
        raise RequestError(exc.message) from exc
    if reference.digest:
        raise RequestError("--image names where to push: give a tag, not a digest")
    base = Path(args.filename)
    tarball = (
        [(str(p.relative_to(base)) if base.is_dir() else p.name, p.read_bytes()) for p in files]
        if args.tarball
        else None
    )
    clean, payload = message_payload(documents, domain=domain, tarball_files=tarball, sensitive_kinds=kinds)
    client = RegistryClient(credentials=_docker_credentials())
    digest = push_bundle(client, reference, payload)
    claim = simple_signing_payload(reference, digest)
    push_signature(client, reference, digest, claim, base64.b64encode(sign_bytes(key, claim)).decode())
    print(f"pushed {reference.name}@{digest} and its signature", file=sys.stderr)
    return with_bundle_ref(clean, args.image, domain)


def _docker_credentials() -> Any:
    """The user's Docker config as a registry client's credentials, as ``docker push`` and cosign read it."""
    import os

    from ..oci.auth import AuthFile

    auth = AuthFile(os.path.join(os.environ.get("DOCKER_CONFIG") or os.path.expanduser("~/.docker"), "config.json"))

    def credentials(registry: str) -> tuple[str, str] | None:
        found = auth.credentials().get(registry)
        return found.pair() if found is not None else None

    return credentials


def run(args: argparse.Namespace) -> int:
    from ..signatures.envelope import DEFAULT_DOMAIN
    from ..signatures.signing import (
        TOTAL_ANNOTATION_SIZE_LIMIT,
        AnnotationsTooLarge,
        SharedSecret,
        annotations_size,
        append_signature,
        dump_yaml,
        sign_documents,
        sign_each,
        sign_stream,
    )
    from ._keys import load_signing_key

    domain = args.annotation_domain or DEFAULT_DOMAIN
    source, out = _source(args)
    if source == "-" and args.key == "-":
        raise RequestError("standard input carries the manifests; give the key as a file or env://VAR, not -k -")
    key = load_signing_key(args.key)
    files = [] if source == "-" else input_files(source)
    documents = _objects(read_documents("-") if source == "-" else [d for p in files for d in read_documents(str(p))],
                         "standard input" if source == "-" else source)  # fmt: skip
    if args.post_renderer and not documents:
        return EXIT_OK  # a release of hooks only: Helm post-renders an empty stream, and gets one back
    kinds = _sensitive_kinds(args)
    if _signature_configmap.is_configmap_output(args.output):
        if args.image or args.append_signature or args.per_object or args.tarball or args.post_renderer:
            raise RequestError(
                "-o k8s://ConfigMap/... keeps one message and one signature in a ConfigMap; --image, "
                "--append-signature, --per-object, --tarball and --post-renderer do not apply"
            )
        ref = _signature_configmap.parse_output(args.output)
        configmap = _signature_configmap.signature_configmap(documents, key, ref, domain=domain, sensitive_kinds=kinds)
        return _signature_configmap.write(configmap, ref, apply=args.apply_signature_configmap,
                                          kubeconfig=args.kubeconfig)  # fmt: skip
    if args.apply_signature_configmap:
        raise RequestError("--apply-signature-configmap writes the ConfigMap -o k8s://ConfigMap/NAMESPACE/NAME names")
    apart: list[dict[str, Any]] = []
    try:
        if args.image:
            if args.append_signature or args.per_object:
                raise RequestError("--image signs the bundle image; --append-signature and --per-object do not apply")
            signed = _sign_image(args, documents, key, domain, files)
        elif args.append_signature:
            if args.tarball:
                raise RequestError("--append-signature reuses the existing message; --tarball does not apply")
            if args.per_object:
                signed = []
                for doc in documents:
                    signed.extend(append_signature([doc], key, domain=domain, sensitive_kinds=kinds))
            else:
                signed = append_signature(documents, key, domain=domain, sensitive_kinds=kinds)
        elif args.per_object:
            if args.tarball:
                raise RequestError("--per-object signs each object's YAML; --tarball signs whole files")
            signed = sign_each(documents, key, domain=domain)
        else:
            base = Path(source)
            tarball = (
                [(str(p.relative_to(base)) if base.is_dir() else p.name, p.read_bytes()) for p in files]
                if args.tarball
                else None
            )
            if tarball is not None:
                signed = sign_documents(documents, key, domain=domain, tarball_files=tarball, sensitive_kinds=kinds)
            else:
                signed, apart = sign_stream(documents, key, domain=domain, sensitive_kinds=kinds)
    except SharedSecret as exc:
        if args.tarball:
            raise SharedSecret(f"{exc.message} (--tarball signs every file in one message: sign without it)") from exc
        raise
    except AnnotationsTooLarge as exc:
        if args.per_object:
            raise
        raise AnnotationsTooLarge(f"{exc.message} (--per-object)") from exc
    if apart:
        from ..objects import ObjectIdentity

        names = ", ".join(ObjectIdentity.of(doc).describe() for doc in apart[:5])
        more = f" and {len(apart) - 5} more" if len(apart) > 5 else ""
        print(
            f"manifest-provider sign: note: {names}{more} signed in a message of its own: a message is copied onto "
            "every object it signs, and would put secret values where anyone who may read the other objects "
            "reads them",
            file=sys.stderr,
        )
    # kubectl's client-side apply copies the whole object, annotations included, into the
    # last-applied-configuration annotation: past half the limit, only server-side apply fits.
    crowded = [doc for doc in signed if 2 * annotations_size(doc) > TOTAL_ANNOTATION_SIZE_LIMIT]
    if crowded:
        print(
            f"manifest-provider sign: warning: {len(crowded)} object{'s carry' if len(crowded) != 1 else ' carries'} "
            f"more than {TOTAL_ANNOTATION_SIZE_LIMIT // 2} bytes of annotations; kubectl apply without --server-side "
            "copies them into kubectl.kubernetes.io/last-applied-configuration and the API server then refuses the "
            "object: apply server-side, or sign fewer objects per message (--per-object)",
            file=sys.stderr,
        )
    text = dump_yaml(signed)
    if out == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        Path(out).write_text(text)
        print(f"signed {len(signed)} object{'s' if len(signed) != 1 else ''} -> {out}", file=sys.stderr)
    return EXIT_OK
