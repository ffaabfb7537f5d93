"""``manifest-provider sign``: sign manifests in the k8s-manifest-sigstore format."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import RequestError
from . import EXIT_OK
from ._common import command_parser, input_files, read_documents

HELP = "sign a manifest file or directory (writes <file>.signed)"
EXAMPLES = (
    "manifest-provider sign -f app.yaml -k team.key   # writes app.yaml.signed",
    "manifest-provider sign -f manifests/ -k cosign.key -o release.yaml",
    "manifest-provider sign -f app.yaml.signed -k ops.key --append-signature -o app.yaml.signed2",
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
        "-f", "--filename", required=True, metavar="FILE|DIR", help="manifest file, or a directory of .yaml/.yml files"
    )
    p.add_argument(
        "-k",
        "--key",
        required=True,
        metavar="PRIVATE.pem",
        help="private key: PKCS#8 PEM (ECDSA, RSA or Ed25519) or a cosign key file (cosign.key); a file or env://VAR",
    )
    p.add_argument("-o", "--output", metavar="OUT", help="output file (default <FILE>.signed; - for stdout)")
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


def _sign_image(args: argparse.Namespace, documents: list[Any], key: Any, domain: str, files: list[Path]) -> list[Any]:
    """Push the message as a bundle image, sign the image's digest, and annotate the documents with its reference."""
    import base64

    from ..bundles import Reference, simple_signing_payload
    from ..errors import VerificationFailure
    from ..keys import sign_bytes
    from ..oci.bundles import push_bundle, push_signature
    from ..oci.registry import RegistryClient
    from ..signing import message_payload, with_bundle_ref

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
    clean, payload = message_payload(documents, domain=domain, tarball_files=tarball)
    client = RegistryClient()
    digest = push_bundle(client, reference, payload)
    claim = simple_signing_payload(reference, digest)
    push_signature(client, reference, digest, claim, base64.b64encode(sign_bytes(key, claim)).decode())
    print(f"pushed {reference.name}@{digest} and its signature", file=sys.stderr)
    return with_bundle_ref(clean, args.image, domain)


def run(args: argparse.Namespace) -> int:
    from ..envelope import DEFAULT_DOMAIN
    from ..signing import append_signature, dump_yaml, sign_documents
    from ._keys import load_signing_key

    domain = args.annotation_domain or DEFAULT_DOMAIN
    key = load_signing_key(args.key)
    if args.filename == "-":
        raise RequestError("sign reads a file or directory, not standard input")
    files = input_files(args.filename)
    documents = [doc for path in files for doc in read_documents(str(path))]
    for index, doc in enumerate(documents):
        if not isinstance(doc, dict):
            raise RequestError(f"document {index + 1} is a {type(doc).__name__}, not a Kubernetes object")
    if args.image:
        if args.append_signature:
            raise RequestError("--image signs the bundle image; --append-signature does not apply")
        signed = _sign_image(args, documents, key, domain, files)
    elif args.append_signature:
        if args.tarball:
            raise RequestError("--append-signature reuses the existing message; --tarball does not apply")
        signed = append_signature(documents, key, domain=domain)
    else:
        base = Path(args.filename)
        tarball = (
            [(str(p.relative_to(base)) if base.is_dir() else p.name, p.read_bytes()) for p in files]
            if args.tarball
            else None
        )
        signed = sign_documents(documents, key, domain=domain, tarball_files=tarball)
    text = dump_yaml(signed)
    out = args.output or f"{args.filename.rstrip('/')}.signed"
    if out == "-":
        sys.stdout.write(text)
    else:
        Path(out).write_text(text)
        print(f"signed {len(signed)} object{'s' if len(signed) != 1 else ''} -> {out}", file=sys.stderr)
    return EXIT_OK
