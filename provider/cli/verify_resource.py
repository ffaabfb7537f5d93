"""``manifest-provider verify-resource``: verify the objects a cluster holds now.

``KIND[,KIND...] [NAME ...]`` as kubectl reads it (any kind discovery lists,
custom resources included; plural, singular, kind, short name, ``kind.group``),
in the kubeconfig context's namespace, ``-n NS`` or every namespace (``-A``),
optionally by label selector (``-l``). Objects are listed in pages
(:mod:`provider.kube.lister`) and verified as stored objects
(:mod:`provider.audit.live`: a difference an exempt controller made is named,
not failed), on ``--concurrency`` worker processes; memory does not grow with
the number of objects -- every output streams, and the summary holds counts.

Outputs: ``table`` (one line per object, then the summary), ``json`` and
``yaml`` (``{results: [...], summary: {...}}``), ``policyreport`` (one
``wgpolicyk8s.io/v1alpha2`` report per object, :mod:`provider.audit.reports`;
printed, or written to the cluster with ``--apply``). A progress line goes to
standard error while it is a terminal. Exit codes as ``verify``
(``provider/cli/__init__.py``); an object named on the command line that does
not exist counts as denied.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any, TextIO

from ..bounds import LOCAL
from ..errors import RequestError
from . import COMMANDS, EXIT_DENIED, EXIT_OK, EXIT_UNVERIFIED
from ._args import add_policy_flags, command_parser
from ._common import build_policy, policy_where, signature_sources
from ._summary import Summary

HELP = COMMANDS["verify-resource"]
EXAMPLES = (
    "manifest-provider verify-resource deployments -n shop -k team.pub",
    "manifest-provider verify-resource cm,deploy -A -l app=web -k team.pub,ops.pub -o json",
    "manifest-provider verify-resource deployment web api -n shop -c policy.yaml --dry-run",
    "manifest-provider verify-resource deployments.apps -A -k env://TEAM_PUBLIC_KEY --concurrency 4",
    "manifest-provider verify-resource deployments -A -k team.pub -o policyreport --apply",
)
OUTPUTS = ("table", "json", "yaml", "policyreport")
#: Most worker processes ``--concurrency`` starts.
MAX_CONCURRENCY = 64
#: Seconds between two updates of the progress line.
PROGRESS_INTERVAL = 0.2


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = command_parser(sub, "verify-resource", HELP, EXAMPLES)
    p.add_argument(
        "kind",
        metavar="KIND[,KIND...]",
        help="resource types as kubectl takes them: deployments, deploy, Deployment.apps, cm,deploy, ...",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="only these objects (default: every object of KIND)")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", metavar="NS", help="namespace (default: the kubeconfig context's)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="objects in every namespace")
    p.add_argument("-l", "--selector", metavar="SELECTOR", help="label selector, e.g. app=web,tier!=cache")
    add_policy_flags(p)
    p.add_argument("-o", "--output", choices=OUTPUTS, default="table", help="output format (default: table)")
    p.add_argument(
        "--apply",
        action="store_true",
        help="with -o policyreport: create or update the reports in the cluster instead of printing them",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=1,
        metavar="N",
        help="verify on N worker processes (default: 1, in this process; at most the cores help)",
    )
    p.add_argument("--chunk-size", type=int, default=250, metavar="N", help="objects per list page (default: 250)")
    p.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig of the cluster (default: $KUBECONFIG or ~/.kube/config)"
    )
    p.add_argument(
        "--admission",
        action="store_true",
        help="admission semantics for the exit code: 0 when every object is allowed, verified or not",
    )
    p.set_defaults(run=run)


# --- counting -------------------------------------------------------------------------------------------


class Progress:
    """``checked N, R/s, F failed`` on one line of a terminal, rewritten at most every :data:`PROGRESS_INTERVAL` s."""

    def __init__(self, stream: TextIO, summary: Summary) -> None:
        self.stream = stream
        self.summary = summary
        self.enabled = stream.isatty()
        self._last = 0.0
        self._width = 0

    def update(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self._last < PROGRESS_INTERVAL):
            return
        self._last = now
        s = self.summary
        seconds = now - s.started
        text = f"verify-resource: {s.total} checked, {s.total / seconds if seconds > 0 else 0:.0f}/s, {s.failed} failed"
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()
        self._width = len(text)

    def clear(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()


# --- outputs --------------------------------------------------------------------------------------------


def _mark(checked: Any) -> str:
    if checked.error:
        return "ERROR"
    return ("PASS" if checked.result.verified else "ALLOW") if checked.result.allowed else "FAIL"


def object_dict(ref: Any) -> dict[str, Any]:
    """The ``object`` of a result: the reference PolicyReports use, with ``group`` and ``version`` apart (as
    ``verify -o json`` prints them)."""
    found = ref.to_dict()
    group, _, version = ref.api_version.rpartition("/")
    return {"apiVersion": found.pop("apiVersion"), "group": group, "version": version, **found}


def _item(checked: Any) -> dict[str, Any]:
    from ..audit.reports import outcome

    return {"object": object_dict(checked.ref), "result": outcome(checked), **checked.result.to_dict()}


class TableOutput:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        out.write(f"{'RESULT':<6} {'OBJECT':<48} {'REASON':<24} MESSAGE\n")

    def add(self, checked: Any) -> None:
        ref = checked.ref
        kind = f"{ref.kind.lower()}.{ref.group}" if ref.group else ref.kind.lower()
        where = f"{ref.namespace}/" if ref.namespace else ""
        message = " ".join(checked.result.message.split())
        self.out.write(
            f"{_mark(checked):<6} {kind + '/' + where + ref.name:<48} {checked.result.reason:<24} {message}\n"
        )

    def close(self, summary: Summary) -> None:
        self.out.write("\n" + "\n".join(summary.lines()) + "\n")


class JsonOutput:
    """``{"results": [...], "summary": {...}}``, written one result at a time."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.count = 0
        out.write('{"results": [')

    def add(self, checked: Any) -> None:
        self.out.write(("," if self.count else "") + "\n  " + json.dumps(_item(checked)))
        self.count += 1

    def close(self, summary: Summary) -> None:
        self.out.write(("\n" if self.count else "") + '], "summary": ' + json.dumps(summary.to_dict()) + "}\n")


def _yaml_dump(value: Any) -> str:
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return str(yaml.dump(value, Dumper=dumper, sort_keys=False, default_flow_style=False))


class YamlOutput:
    """``results:`` then ``summary:``, one result at a time."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.count = 0

    def add(self, checked: Any) -> None:
        if not self.count:
            self.out.write("results:\n")
        self.out.write(_yaml_dump([_item(checked)]))
        self.count += 1

    def close(self, summary: Summary) -> None:
        if not self.count:
            self.out.write("results: []\n")
        self.out.write(_yaml_dump({"summary": summary.to_dict()}))


class ReportOutput:
    """One PolicyReport per object: a YAML stream, or (``writer``) create-or-update in the cluster."""

    def __init__(self, out: TextIO, writer: Any = None) -> None:
        self.out = out
        self.writer = writer
        self.written: Counter[str] = Counter()

    def add(self, checked: Any) -> None:
        from ..audit.reports import report_for

        report = report_for(checked, now=time.time())
        if self.writer is None:
            self.out.write("---\n" + _yaml_dump(report))
            return
        done = self.writer.write(report)
        self.written[done] += 1
        self.out.write(f"{report['kind'].lower()}.wgpolicyk8s.io/{report['metadata']['name']} {done}\n")

    def close(self, summary: Summary) -> None:
        lines = summary.lines()
        if self.writer is not None:
            lines.append("  reports: " + ", ".join(f"{n} {what}" for what, n in sorted(self.written.items())))
        print("\n".join(lines), file=sys.stderr)


# --- the command ----------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    from ..audit.live import LiveChecker
    from ..audit.reports import MANAGED_BY, same_content
    from ..kube.dryrun import dry_runner_for
    from ..kube.lister import KubeLister
    from ..kube.writer import KubeWriter

    if not 1 <= args.concurrency <= MAX_CONCURRENCY:
        raise RequestError(f"--concurrency must be between 1 and {MAX_CONCURRENCY}, got {args.concurrency}")
    if args.apply and args.output != "policyreport":
        raise RequestError("--apply writes PolicyReports: it needs -o policyreport")
    if args.names and (args.all_namespaces or args.selector):
        raise RequestError("NAME arguments cannot be combined with -A or -l (kubectl neither)")
    from ..policy.schema import Policy

    policy_data = build_policy(args)
    Policy.from_dict(policy_data, where=policy_where(args))  # refused here, naming the file, before any work
    kinds = [k for k in args.kind.split(",") if k] or [args.kind]
    if args.names and len(kinds) > 1:
        raise RequestError("NAME arguments need one KIND (kubectl neither takes names for several)")
    factory = functools.partial(dry_runner_for, args.kubeconfig)
    # Built first: its worker processes start (and import) while this one imports the kubernetes client.
    sources = functools.partial(signature_sources, args.kubeconfig)
    with LiveChecker(  # the policy file is the person's running this: LOCAL bounds (provider/bounds.py)
        policy_data, concurrency=args.concurrency, runner_factory=factory, sources_factory=sources, bounds=LOCAL
    ) as checker:
        runner = dry_runner_for(args.kubeconfig)
        with runner:
            checker.dry_runner = runner  # in this process: the lister's client and discovery cache
            lister = KubeLister(runner, page_size=args.chunk_size, on_inconsistent=_warn)
            resources = [lister.resolve(kind) for kind in kinds]
            namespace = None
            if any(r.namespaced for r in resources) and not args.all_namespaces:
                namespace = args.namespace or runner.default_namespace
            where = (
                f"namespace {namespace}" if namespace else ("all namespaces" if args.all_namespaces else "the cluster")
            )
            summary = Summary(f"{', '.join(r.describe() for r in resources)} in {where}")

            def objects() -> Iterator[dict[str, Any]]:
                for resource in resources:
                    scope = namespace if resource.namespaced else None
                    if not args.names:
                        for page in lister.pages(resource, scope, args.selector):
                            yield from page
                        continue
                    for name in args.names:
                        found = lister.get(resource, name, scope)
                        if found is None:
                            summary.missing.append(name)
                            _warn(
                                f'{resource.describe()} "{name}" not found{f" in namespace {scope}" if scope else ""}'
                            )
                        else:
                            yield found

            out = sys.stdout
            writer = KubeWriter(runner, labels=MANAGED_BY, same=same_content) if args.apply else None
            output: TableOutput | JsonOutput | YamlOutput | ReportOutput
            if args.output == "json":
                output = JsonOutput(out)
            elif args.output == "yaml":
                output = YamlOutput(out)
            elif args.output == "policyreport":
                output = ReportOutput(out, writer)
            else:
                output = TableOutput(out)
            progress = Progress(sys.stderr, summary)
            for checked in checker.check_all(objects()):
                summary.add(checked)
                output.add(checked)
                progress.update()
            progress.clear()
            output.close(summary)
            out.flush()
    if summary.failed:
        return EXIT_DENIED
    if args.admission or summary.unverified == 0:
        return EXIT_OK
    return EXIT_UNVERIFIED


def _warn(message: str) -> None:
    print(f"manifest-provider verify-resource: {message}", file=sys.stderr)
