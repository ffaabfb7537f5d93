"""``manifest-provider serve``: the HTTPS service for Gatekeeper and Kyverno.

Every flag is also an environment variable ``MANIFEST_PROVIDER_<NAME>`` (a
flag wins; ``--no-metrics-port`` is ``METRICS_PORT=0``); settings without a flag
(cache sizes, token cache, key threads, ``METRICS_CALLERS``,
``HEAD_TIMEOUT_SECONDS``, ``MAX_CONNECTIONS``) are environment-only. See
``docs/api.md`` and :mod:`provider.service.config`.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..service.config import env_name
from . import COMMANDS
from ._args import command_parser

HELP = COMMANDS["serve"]
EXAMPLES = (
    "manifest-provider serve --cert tls.crt --key tls.key --client-ca gatekeeper-ca.crt",
    "MANIFEST_PROVIDER_TOKEN_AUDIENCE=kyverno-svc.kyverno.io manifest-provider serve --cert tls.crt --key tls.key",
)

#: (flag, setting, type, metavar, help)
FLAGS: tuple[tuple[str, str, type, str, str], ...] = (
    ("--port", "port", int, "P", "TCP port (default 8443)"),
    ("--bind", "bind", str, "ADDR", "address to listen on (default 0.0.0.0; fd://N for an inherited socket)"),
    ("--cert", "cert", str, "FILE", "server certificate chain (PEM); required unless --unsafe-http"),
    ("--key", "key", str, "FILE", "server private key (PEM)"),
    ("--client-ca", "client_ca", str, "FILE", "CA bundle (PEM): API calls then need a client certificate it issued"),
    ("--workers", "workers", int, "N", "worker processes (default: one per CPU)"),
    ("--threads", "threads", int, "N", "requests served at once per worker (default 8)"),
    (
        "--token-audience",
        "token_audience",
        str,
        "AUD",
        "also accept bearer tokens a TokenReview accepts for AUD (e.g. kyverno-svc.kyverno.io)",
    ),
    (
        "--callers",
        "callers",
        str,
        "LIST",
        "who may call, comma-separated cert:<name> and token:<username> "
        "(default: Gatekeeper's webhook certificate and Kyverno's admission controller)",
    ),
    (
        "--kubeconfig",
        "kubeconfig",
        str,
        "FILE",
        "cluster for dry-runs and token reviews (default: in-cluster config inside a pod, else none)",
    ),
    (
        "--trusted-root-files",
        "trusted_root_files",
        str,
        "LIST",
        "absolute paths of trust-root files a policy's trustedRoot may name, comma-separated (default: none; "
        "inline TrustedRoots and the shipped root only)",
    ),
    (
        "--signature-namespaces",
        "signature_namespaces",
        str,
        "LIST",
        "namespaces any policy's signatureResourceRef may read besides the object's own, comma-separated "
        "(default: none)",
    ),
    (
        "--dry-run-namespaces",
        "dry_run_namespaces",
        str,
        "LIST",
        "namespaces any policy's dryRun.namespace may name besides the object's own, comma-separated (default: none)",
    ),
    (
        "--bundle-repositories",
        "bundle_repositories",
        str,
        "LIST",
        "registries or repositories (registry[/path]) resource bundles may come from; a policy's list must lie "
        "under them (default: none, no bundle is fetched)",
    ),
    (
        "--registry-hosts",
        "registry_hosts",
        str,
        "LIST",
        "host[:port] a registry may redirect a bundle fetch to or name as its token realm, besides itself "
        "(default: none)",
    ),
    (
        "--key-secret-namespaces",
        "key_secret_namespaces",
        str,
        "LIST",
        "namespaces whose Secrets a policy may name as keys (k8s://NS/NAME, secretRef), comma-separated "
        "(default: none)",
    ),
    (
        "--key-secret-ttl-seconds",
        "key_secret_ttl_seconds",
        float,
        "S",
        "seconds a key read from a Secret is used before it is read again (default 30; 0: every time)",
    ),
    (
        "--pull-secret-namespaces",
        "pull_secret_namespaces",
        str,
        "LIST",
        "namespaces whose pull Secrets a policy may name (resourceBundleRef.pullSecrets), comma-separated "
        "(default: none)",
    ),
    (
        "--registry-auth-file",
        "registry_auth_file",
        str,
        "FILE",
        "Docker config (.dockerconfigjson) whose credentials bundle fetches use, each for its own registry",
    ),
    (
        "--tuf-url",
        "tuf_url",
        str,
        "URL",
        "TUF repository the keyless trust root is refreshed from in the background (default: sigstore's "
        "public-good one; empty: none)",
    ),
    ("--tuf-root", "tuf_root", str, "FILE", "the pinned TUF root.json (default: the public-good one)"),
    (
        "--policy-file",
        "policy_file",
        str,
        "PATH",
        "ClusterManifestPolicy/ManifestPolicy objects for POST /v1/admission/validate: a YAML file or a directory "
        "(a mounted ConfigMap), read again when it changes (default: none)",
    ),
    ("--deadline-seconds", "deadline_seconds", float, "S", "answer within S seconds or fail the request (default 1.5)"),
    ("--max-body-bytes", "max_body_bytes", int, "N", "largest request body (default 16 MiB; 413 beyond)"),
    ("--max-keys", "max_keys", int, "N", "most keys in one Gatekeeper request (default 128)"),
    ("--log-level", "log_level", str, "LEVEL", "debug, info (default), warning or error"),
    (
        "--cert-expiry-warning-days",
        "cert_expiry_warning_days",
        float,
        "D",
        "warn in the log when a certificate of --cert or --client-ca expires within D days (default 14)",
    ),
    (
        "--metrics-port",
        "metrics_port",
        int,
        "P",
        "plain-HTTP port serving GET /metrics without credentials (default 8888; 0: none)",
    ),
    (
        "--metrics-bind",
        "metrics_bind",
        str,
        "ADDR",
        "address the metrics port listens on (default: the API's address; fd://N for an inherited socket)",
    ),
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = command_parser(sub, "serve", HELP, EXAMPLES)
    for flag, setting, kind, metavar, text in FLAGS:
        p.add_argument(
            flag, dest=setting, type=kind, metavar=metavar, default=None, help=f"{text} [{env_name(setting)}]"
        )
    p.add_argument(
        "--unsafe-http",
        dest="unsafe_http",
        action="store_true",
        default=None,
        help="serve plain HTTP for local experiments; warns on every request; never for a cluster "
        f"[{env_name('unsafe_http')}]",
    )
    p.add_argument(
        "--watch-policies",
        dest="watch_policies",
        action="store_true",
        default=None,
        help="hold the cluster's ClusterManifestPolicy and ManifestPolicy objects for POST /v1/admission/validate "
        f"(their CRDs installed; needs a cluster) [{env_name('watch_policies')}]",
    )
    p.add_argument(
        "--no-signature-own-namespace",
        dest="signature_own_namespace",
        action="store_const",
        const=False,
        help="signatureResourceRef may not read the admitted object's own namespace either, only "
        f"--signature-namespaces [{env_name('signature_own_namespace')}=false]",
    )
    p.add_argument(
        "--no-metrics-port",
        dest="metrics_port",
        action="store_const",
        const=0,
        help=f"serve no metrics port (/metrics stays on the API port, with its callers) [{env_name('metrics_port')}=0]",
    )
    p.set_defaults(run=run)


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given as flags, by upper-case name (flags not given are left to the environment)."""
    names = [setting for _, setting, *_ in FLAGS] + ["unsafe_http", "signature_own_namespace", "watch_policies"]
    return {name.upper(): getattr(args, name) for name in names if getattr(args, name) is not None}


def run(args: argparse.Namespace) -> int:
    from ..service.serve import serve  # gunicorn loads only for this command

    return serve(overrides(args))
