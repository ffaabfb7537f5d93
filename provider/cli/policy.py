"""``manifest-provider policy ENGINE``: print a ready admission policy with your keys and options inlined.

Builds on the shipped signature policies (:mod:`provider.cli._generate` says
which fields it fills in) and takes the same policy flags as ``verify``
(``-k``, ``-c``, ``--signer``, ``--threshold``, ...), so the policy a cluster
enforces is the one ``verify`` checks files with. The policy is validated as
the service will read it before anything is printed.

The service CA comes from ``--ca-file`` or, as ``manifests/scripts/ca-bundle.sh``
reads it, from ``ca.crt`` of Secret ``manifest-provider-tls``
(``--ca-from-cluster``). ``--without-ca`` leaves it out: no Provider for
Gatekeeper (apply it with ``ca-bundle.sh --apply-provider``), the shipped
placeholder for the ClusterPolicy (every call fails, so everything in scope is
denied, until ``ca-bundle.sh --patch-kyverno``). The ValidatingPolicy
(``kyverno-cel``) takes no CA: Kyverno's CEL ``http.Client(ca)`` cannot call, so
Kyverno itself must trust the service CA (``ca-bundle.sh --kyverno-trust``).

Standard error names the scope written, read back from the documents
(:func:`provider.cli._generate.written_scope`), and warns about namespaces an
operator must think twice about (:func:`scope_warnings`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..bounds import LOCAL
from ..errors import ConfigError
from ..objects import DNS_LABEL, DNS_SUBDOMAIN
from ..version import __version__
from . import COMMANDS, EXIT_OK
from ._args import add_policy_flags, command_parser
from ._common import build_policy, names_trust, policy_where, read_text

HELP = COMMANDS["policy"]
EXAMPLES = (
    "manifest-provider policy gatekeeper -k team.pub --ca-from-cluster --enforce | kubectl apply -f -",
    "manifest-provider policy kyverno -k team.pub,ops.pub --threshold 2 --ca-file ca.crt --match-namespace prod",
    "manifest-provider policy kyverno-cel -c policy.yaml --match-kind Deployment,ConfigMap",
    "manifest-provider policy kyverno -k team.pub --without-ca --match-kind example.com/Widget --profile argocd",
    "manifest-provider policy webhook -k team.pub --match-namespace shop --enforce | kubectl apply -f -",
    "manifest-provider policy webhook -k team.pub --namespace shop --name team-signed",
)
#: Where each engine's service runs (manifests/overlays/<engine>), for --ca-from-cluster.
SERVICE_NAMESPACES = {
    "gatekeeper": "gatekeeper-system",
    "kyverno": "manifest-provider",
    "kyverno-cel": "manifest-provider",
    "webhook": "manifest-provider",
}
#: The Secret cert-manager writes the serving certificate to (manifests/base/certificate.yaml).
TLS_SECRET, CA_KEY = "manifest-provider-tls", "ca.crt"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from ._generate import ENGINES

    p = command_parser(sub, "policy", HELP, EXAMPLES)
    p.add_argument(
        "engine",
        choices=ENGINES,
        help="gatekeeper (Provider and K8sVerifyManifestSignature constraint), kyverno (ClusterPolicy), "
        "kyverno-cel (ValidatingPolicy) or webhook (the service's own ClusterManifestPolicy or ManifestPolicy)",
    )
    add_policy_flags(p)
    scope = p.add_argument_group("what the policy matches (default: as shipped, ConfigMaps and Deployments in demo)")
    scope.add_argument(
        "--match-kind",
        action="append",
        default=[],
        metavar="KIND",
        help="a kind to protect: built in, Kind or group/Kind (core/Event); a custom resource, group/Kind "
        "(example.com/Widget; kyverno-cel: group/Kind=plural); comma lists allowed (repeatable); the subresources "
        "its objects change through are matched too",
    )
    scope.add_argument(
        "--match-namespace",
        action="append",
        default=[],
        metavar="NS",
        help="a namespace to protect, comma lists allowed (repeatable); '*' for every namespace",
    )
    scope.add_argument(
        "--enforce",
        action="store_true",
        help="refuse what fails (Gatekeeper deny, Kyverno Enforce/Deny); default: audit, as shipped",
    )
    held = p.add_argument_group("the policy the service holds (webhook)")
    held.add_argument(
        "--namespace",
        metavar="NS",
        help="a ManifestPolicy for this namespace (a tenant's, applying there only) instead of a ClusterManifestPolicy",
    )
    held.add_argument("--name", metavar="NAME", help="the object's name (default: verify-manifest-signature)")
    ca = p.add_argument_group(
        "the service's CA (one is required for gatekeeper and kyverno; kyverno-cel and webhook take none)"
    ).add_mutually_exclusive_group()
    ca.add_argument("--ca-file", metavar="FILE", help="the CA certificate that signed the service's (PEM)")
    ca.add_argument(
        "--ca-from-cluster",
        action="store_true",
        help=f"read {CA_KEY} of Secret {TLS_SECRET} (cert-manager's, as manifests/scripts/ca-bundle.sh does)",
    )
    ca.add_argument(
        "--without-ca",
        action="store_true",
        help="no CA: Gatekeeper without its Provider, Kyverno with the shipped placeholder (denies until patched)",
    )
    p.add_argument(
        "--ca-namespace",
        metavar="NS",
        help="namespace of that Secret (default: gatekeeper-system for gatekeeper, else manifest-provider)",
    )
    p.add_argument(
        "--kubeconfig", metavar="FILE", help="for --ca-from-cluster (default: $KUBECONFIG or ~/.kube/config)"
    )
    p.add_argument(
        "--policies",
        metavar="DIR",
        type=Path,
        help="the policies folder to build on (default: the shipped policies, package data of this installation)",
    )
    p.set_defaults(run=run)


def _ca(args: argparse.Namespace) -> str | None:
    from ._generate import certificate_bundle

    if args.without_ca or args.engine == "kyverno-cel":
        return None
    if args.ca_file:
        return certificate_bundle(read_text(args.ca_file), args.ca_file)
    from ..kube.secrets import read_secret_value

    namespace = args.ca_namespace or SERVICE_NAMESPACES[args.engine]
    pem = read_secret_value(args.kubeconfig, namespace, TLS_SECRET, CA_KEY)
    return certificate_bundle(pem, f"{CA_KEY} of Secret {namespace}/{TLS_SECRET}")


def run(args: argparse.Namespace) -> int:
    from ..policy.schema import Policy
    from ._generate import (
        CEL_TAKES_NO_CA,
        DEFAULT_POLICIES_DIR,
        GATEKEEPER_VALUES,
        SHIPPED,
        Request,
        build,
        dump,
        parse_kinds,
        parse_namespaces,
        service_url,
        subresource_name,
        unsent_subresources,
        written_scope,
    )

    if not names_trust(args):
        raise ConfigError("name who may sign: -k KEY, --signer or -c POLICY.yaml")
    if args.engine == "webhook":
        return _run_webhook(args)
    if args.namespace or args.name:
        raise ConfigError("--namespace and --name go with policy webhook")
    if args.ca_namespace and not args.ca_from_cluster:
        raise ConfigError("--ca-namespace goes with --ca-from-cluster")
    chose_ca = bool(args.ca_file or args.ca_from_cluster or args.without_ca)
    if args.engine == "kyverno-cel" and chose_ca:
        raise ConfigError(CEL_TAKES_NO_CA)
    if args.engine != "kyverno-cel" and not chose_ca:
        raise ConfigError(f"policy {args.engine}: give the service's CA: --ca-file, --ca-from-cluster or --without-ca")
    policy = build_policy(args)
    # Refuse here what the service would refuse for every object. What a policy may name (trust-root files,
    # registries) is the serving operator's choice, unknown here: the service refuses what it does not allow.
    Policy.from_dict(policy, bounds=LOCAL, where=policy_where(args))
    request = Request(
        engine=args.engine,
        policy=policy,
        enforce=args.enforce,
        kinds=parse_kinds(args.match_kind) if args.match_kind else None,
        namespaces=parse_namespaces(args.match_namespace) if args.match_namespace else None,
        ca_pem=_ca(args),
    )
    root = args.policies or DEFAULT_POLICIES_DIR
    docs = build(request, root)
    source = SHIPPED["constraint" if args.engine == "gatekeeper" else args.engine]
    header = f"# Generated by manifest-provider {__version__} `policy {args.engine}` from policies/{source}.\n"
    if args.engine == "gatekeeper":
        header += (
            f"# Apply the ConstraintTemplate first: policies/{SHIPPED['template']} (the path of this installation's "
            "copy is on standard error).\n"
        )
    sys.stdout.write(dump(docs, header))
    scope = written_scope(args.engine, docs)
    mode = "enforcing" if args.enforce else "audit mode"
    say(f"{args.engine}, {mode}, {scope.describe()}")
    url = service_url(args.engine, docs, root)
    for warning in scope_warnings(args.engine, scope, url, args.ca_namespace):
        say("warning: " + warning)
    if args.engine == "gatekeeper":
        say(f"apply the ConstraintTemplate first: kubectl apply -f {root / SHIPPED['template']}")
    if args.engine == "gatekeeper" and request.kinds is not None:
        values = root.parent / GATEKEEPER_VALUES
        missing = unsent_subresources(request.kinds, values)
        if missing is None:
            needed = [subresource_name(ref, sub) for ref in request.kinds for sub in ref.subresources]
            if needed:
                say(
                    f"Gatekeeper must be sent {', '.join(needed)}: list them in validatingWebhookCustomRules of its "
                    f"Helm values ({GATEKEEPER_VALUES} in the repository; docs/policy.md, Subresources), or writes "
                    "through them go unchecked"
                )
        elif missing:
            say(
                f"Gatekeeper is not sent {', '.join(missing)}: add them to validatingWebhookCustomRules in "
                f"{GATEKEEPER_VALUES} (docs/policy.md, Subresources), or writes through them go unchecked"
            )
    if args.engine == "kyverno-cel":
        say(
            "Kyverno's admission controller must trust the service CA "
            "(manifests/scripts/ca-bundle.sh --kyverno-trust, docs/quickstart-kyverno.md)"
        )
    elif request.ca_pem is None:
        what = "no Provider" if args.engine == "gatekeeper" else "the placeholder CA: every call fails until patched"
        say(f"{what} (manifests/scripts/ca-bundle.sh)")
    return EXIT_OK


def _run_webhook(args: argparse.Namespace) -> int:
    """``policy webhook``: the object the service holds (:mod:`provider.cli._webhook`)."""
    from ..policy.schema import Policy
    from . import _webhook
    from ._generate import dump, parse_kinds, parse_namespaces

    if args.ca_file or args.ca_from_cluster or args.without_ca or args.ca_namespace:
        raise ConfigError(
            "policy webhook takes no CA: the service is called by the API server, whose "
            "ValidatingWebhookConfiguration carries the CA (docs/quickstart-webhook.md)"
        )
    if args.namespace is not None and not DNS_LABEL.match(args.namespace):
        raise ConfigError(f"--namespace {args.namespace!r}: not a namespace name (DNS-1123 label)")
    if args.name is not None and not DNS_SUBDOMAIN.match(args.name):
        raise ConfigError(f"--name {args.name!r}: not an object name (DNS-1123 subdomain)")
    policy = build_policy(args)
    Policy.from_dict(policy, bounds=LOCAL, where=policy_where(args))
    obj = _webhook.build(
        policy,
        enforce=args.enforce,
        kinds=parse_kinds(args.match_kind) if args.match_kind else None,
        namespaces=parse_namespaces(args.match_namespace) if args.match_namespace else None,
        name=args.name or _webhook.DEFAULT_NAME,
        tenant=args.namespace,
    )
    header = (
        f"# Generated by manifest-provider {__version__} `policy webhook`: held by the service as its own admission "
        "webhook (docs/quickstart-webhook.md).\n"
    )
    sys.stdout.write(dump([obj], header))
    scope = _webhook.written_scope(obj)
    mode = "enforcing" if args.enforce else "audit mode"
    say(f"webhook, {obj['kind']}, {mode}, {scope.describe()}")
    for warning in _webhook.scope_warnings(scope):
        say("warning: " + warning)
    return EXIT_OK


def say(message: str) -> None:
    print(f"manifest-provider policy: {message}", file=sys.stderr)


#: Namespaces whose objects the cluster itself writes, unsigned.
SYSTEM_NAMESPACE = "kube-system"


def scope_warnings(engine: str, scope: Any, url: str, ca_namespace: str | None = None) -> list[str]:
    """What an operator must know about the namespaces the written policy matches.

    * ``kube-system``: the cluster's own components write there, unsigned.
      Kyverno's default Helm values leave it out (kyverno/kyverno v1.19.0
      ``charts/kyverno/values.yaml``: ``config.resourceFilters`` holds
      ``[*/*,kube-system,*]``, ``config.webhooks.namespaceSelector`` excludes it),
      so a Kyverno policy naming it claims what is not checked; Gatekeeper checks
      it unless it is exempt, and enforcing then denies those writes.
    * the service's own namespace -- the one in the URL the policy calls (the
      overlays put the service there; ``--ca-namespace`` too, when it names
      another): enforcing, a change to the service must itself be signed, and
      while the service is down nothing there can be changed, not even the fix
      (the policies fail closed). Gatekeeper's chart exempts its own namespace
      (open-policy-agent/gatekeeper v3.23.0 ``charts/gatekeeper``: label
      ``admission.gatekeeper.sh/ignore``), where the Gatekeeper overlay runs
      the service: there the policy claims what is not checked.
    """
    from ._generate import service_namespace

    warnings = []
    if scope.includes(SYSTEM_NAMESPACE):
        if engine == "gatekeeper":
            why = "Gatekeeper checks it unless the namespace is exempt, and enforcing denies every unsigned write there"
        else:
            why = (
                "Kyverno's default Helm values leave it out (config.resourceFilters, "
                "config.webhooks.namespaceSelector), so nothing there is checked; with values that take it in, "
                "enforcing denies every unsigned write there"
            )
        warnings.append(
            f"the scope includes {SYSTEM_NAMESPACE}, where the cluster's own components write unsigned objects: {why}; "
            "name the namespaces to protect with --match-namespace"
        )
    own = [ns for ns in dict.fromkeys((service_namespace(url), ca_namespace)) if ns]
    for namespace in own:
        if not scope.includes(namespace):
            continue
        if engine == "gatekeeper":
            why = (
                "if Gatekeeper runs there too, its chart exempts the namespace and nothing there is checked; "
                "otherwise, enforcing"
            )
        else:
            why = "enforcing"
        warnings.append(
            f"the scope includes {namespace}, the service's own namespace ({url or 'from --ca-namespace'}): {why}, "
            "every change to the service must be signed, and while it is down nothing there can be changed, not even "
            "the fix; leave it out with --match-namespace"
        )
    return warnings
