"""``manifest-provider observe``: re-verify what a cluster holds on a schedule, and keep PolicyReports current.

The loop is :class:`provider.audit.observer.Observer`: every ``--interval``
seconds one pass lists the targets of ``--targets`` (kinds, namespaces,
selectors), verifies each object whose ``resourceVersion``, policy or trust
material changed since its last verdict, and creates or updates its
PolicyReport when the verdict changed. The policy -- the same flags as
``verify``, ``--config`` and key files included -- is read again before each
pass, so a rotated key or an edited ConfigMap takes effect on the next pass.
Metrics are served on a plain-HTTP port of their own
(:mod:`provider.cli._observer_metrics`); each pass is logged as one JSON line on
standard error. ``--once`` runs a single pass and exits (1 when a target could
not be read), for a CronJob or a first look.

In a pod (``KUBERNETES_SERVICE_HOST`` set, no ``--kubeconfig``) it talks to
the cluster as the pod's service account; elsewhere through the kubeconfig.
``manifests/overlays/observer/`` deploys it with least-privilege RBAC.

``--watch`` follows changes as they happen instead (:mod:`provider.cli._follow`):
each target is listed, then watched (:mod:`provider.kube.watcher`), an object
is verified when it is created or changed and its report deleted when it is
deleted; ``--interval`` then says how often the policy is read again (a changed
one lists and verifies everything anew). Each verdict is a ``checked`` log
line; ``listed``, ``deleted``, ``relist`` (a 410), ``watch-error`` (with the
backoff before the next try) and, every interval, ``watching`` say the rest.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..bounds import LOCAL
from ..errors import PolicyError, RequestError
from ..parsing import load_yaml_stream
from . import COMMANDS, EXIT_DENIED, EXIT_OK
from ._args import add_policy_flags, command_parser
from ._common import build_policy, policy_where, read_text

HELP = COMMANDS["observe"]
EXAMPLES = (
    "manifest-provider observe --targets targets.yaml -k team.pub --once --no-reports --metrics-port 0",
    "manifest-provider observe --targets targets.yaml -c policy.yaml --interval 600 --concurrency 2",
    "manifest-provider observe --targets targets.yaml -k env://TEAM_PUBLIC_KEY --metrics-port 9090",
    "manifest-provider observe --targets targets.yaml -k team.pub --watch   # verify each change as it happens",
)
#: Default seconds between the starts of two passes.
DEFAULT_INTERVAL = 300.0
#: Default port of the metrics server (plain HTTP; 0: none).
DEFAULT_METRICS_PORT = 9090


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = command_parser(sub, "observe", HELP, EXAMPLES)
    p.add_argument(
        "--targets",
        required=True,
        metavar="TARGETS.yaml",
        help="what to observe: {targets: [{resource: deployments.apps, namespaces: [shop], selector: app=web}, ...]} "
        "(no namespaces: all)",
    )
    add_policy_flags(p)
    p.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL,
        metavar="SECONDS",
        help="seconds between passes; with --watch, between two reads of the policy (default: 300)",
    )
    p.add_argument("--once", action="store_true", help="run one pass and exit (1 when a target could not be read)")
    p.add_argument(
        "--watch",
        action="store_true",
        help="list, then watch the targets and verify each object as it changes (its report deleted with it); "
        "--interval then says how often the policy is read again",
    )
    p.add_argument("--no-reports", action="store_true", help="write no PolicyReports (metrics and logs only)")
    p.add_argument("--concurrency", type=int, default=1, metavar="N", help="verify on N worker processes (default: 1)")
    p.add_argument("--chunk-size", type=int, default=250, metavar="N", help="objects per list page (default: 250)")
    p.add_argument(
        "--cache-size",
        type=int,
        default=100_000,
        metavar="N",
        help="verdicts remembered between passes (default: 100000)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=DEFAULT_METRICS_PORT,
        metavar="PORT",
        help="plain-HTTP /metrics port (0: none)",
    )
    # A pod's metrics are scraped over the pod network; the NetworkPolicy narrows who may.
    all_interfaces = "0.0.0.0"  # noqa: S104
    p.add_argument(
        "--metrics-address",
        default=all_interfaces,
        metavar="ADDR",
        help="address the metrics port binds (default: all)",
    )
    p.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig of the cluster (default: in a pod its service account, else $KUBECONFIG or ~/.kube/config)",
    )
    p.add_argument(
        "--service-account-dir",
        metavar="DIR",
        help="in a pod without --kubeconfig: where its service-account token, ca.crt and namespace are "
        "(default: /var/run/secrets/kubernetes.io/serviceaccount)",
    )
    p.set_defaults(run=run)


def read_targets_file(path: str) -> Any:
    from ..audit.observer import read_targets

    docs = load_yaml_stream(read_text(path), error=PolicyError, what=path)
    if len(docs) != 1:
        raise PolicyError(f"{path}: expected one YAML document")
    return read_targets(docs[0], path)


class KubeSource:
    """The observer's :class:`~provider.audit.observer.ObjectSource`: a target's objects through the lister."""

    def __init__(self, lister: Any) -> None:
        self.lister = lister

    def objects(self, target: Any) -> Iterator[dict[str, Any]]:
        resource = self.lister.resolve(target.resource)
        namespaces = target.namespaces if resource.namespaced and target.namespaces else (None,)
        for namespace in namespaces:
            for page in self.lister.pages(resource, namespace, target.selector):
                yield from page


def checked_policy(args: argparse.Namespace, warn: Any) -> dict[str, Any]:
    """The policy the flags make, checked as the verifier will read it, its errors naming the policy file."""
    from ..policy.schema import Policy

    data = build_policy(args, warn=warn)
    Policy.from_dict(data, where=policy_where(args))
    return data


def follow(observer: Any, targets: Any, lister: Any, interval: float, stop: threading.Event) -> None:
    """``--watch``: a watcher per target and namespace (:mod:`provider.cli._follow`)."""
    from ..kube.watcher import KubeWatcher
    from ._follow import Follower, Relay

    follower = Follower(observer, interval, log)
    for target in targets:
        for namespace in target.namespaces or (None,):

            def make(relay: Relay, target: Any = target, namespace: str | None = namespace) -> KubeWatcher:
                resource = lister.resolve(target.resource)
                scope = namespace if resource.namespaced else None
                return KubeWatcher(lister, resource, scope, target.selector, relay)

            follower.add(target, make)
    follower.run(stop)


def log(event: str, **fields: Any) -> None:
    print(json.dumps({"time": round(time.time(), 3), "event": event, **fields}), file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from ..audit.live import LiveChecker
    from ..audit.observer import Observer, VerdictCache
    from ..audit.reports import MANAGED_BY, same_content
    from ..kube.dryrun import dry_runner_for
    from ..kube.lister import KubeLister
    from ..kube.writer import KubeWriter
    from ._common import signature_sources
    from ._observer_metrics import PrometheusObserverMetrics
    from .verify_resource import MAX_CONCURRENCY

    if args.interval <= 0 or not 1 <= args.concurrency <= MAX_CONCURRENCY or args.cache_size < 0:
        raise RequestError(
            f"--interval must be positive, --concurrency between 1 and {MAX_CONCURRENCY}, --cache-size 0 or more"
        )
    if args.watch and args.once:
        raise RequestError("--watch follows changes until stopped; --once runs one pass: give one of them")
    targets = read_targets_file(args.targets)
    said: set[str] = set()

    def warn(message: str) -> None:  # once each: the policy is read again before every pass
        if message not in said:
            said.add(message)
            log("warning", message=message)

    in_cluster = not args.kubeconfig and "KUBERNETES_SERVICE_HOST" in os.environ
    accounts = args.service_account_dir
    runner = dry_runner_for(args.kubeconfig, in_cluster=in_cluster, service_account_dir=accounts)
    factory = functools.partial(dry_runner_for, args.kubeconfig, in_cluster=in_cluster, service_account_dir=accounts)
    metrics = PrometheusObserverMetrics()
    if args.metrics_port:
        metrics.serve(args.metrics_port, args.metrics_address)
    lister = KubeLister(runner, page_size=args.chunk_size, on_inconsistent=lambda m: log("warning", message=m))
    observer = Observer(
        targets,
        KubeSource(lister),
        load_policy=lambda: checked_policy(args, warn),
        make_checker=lambda data: LiveChecker(
            data,
            concurrency=args.concurrency,
            dry_runner=runner,
            runner_factory=factory,
            sources_factory=functools.partial(
                signature_sources, args.kubeconfig, in_cluster=in_cluster, service_account_dir=accounts
            ),
            bounds=LOCAL,  # the policy file is the operator's: provider/bounds.py
        ),
        sink=None if args.no_reports else KubeWriter(runner, labels=MANAGED_BY, same=same_content),
        cache=VerdictCache(args.cache_size),
        metrics=metrics,
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    log(
        "started",
        targets=[t.describe() for t in targets],
        interval=args.interval,
        reports=not args.no_reports,
        watch=args.watch,
    )
    if args.watch:
        try:
            follow(observer, targets, lister, args.interval, stop)
        finally:
            observer.close()
            runner.close()
        log("stopped")
        return EXIT_OK
    try:
        while True:
            began = time.monotonic()
            try:
                stats = observer.run_pass()
            except PolicyError as exc:
                # A policy edited into something invalid: keep the last reports, say why, try again next pass.
                log("policy-invalid", message=exc.message)
                if args.once:
                    raise
            else:
                log(
                    "pass",
                    seconds=round(stats.finished - stats.started, 3),
                    objects=stats.objects,
                    verified=stats.verified_now,
                    cached=stats.cache_hits,
                    results=dict(stats.by_outcome),
                    failing=dict(stats.failing_reasons),
                    reports=dict(stats.reports),
                    failedTargets=[{"target": t.describe(), "error": why} for t, why in stats.failed_targets],
                )
                if args.once:
                    return EXIT_OK if stats.complete else EXIT_DENIED
            if stop.wait(max(0.0, args.interval - (time.monotonic() - began))):
                log("stopped")
                return EXIT_OK
    finally:
        observer.close()
        runner.close()
