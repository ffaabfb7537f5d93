"""``manifest-provider classify``: the paper's six-class table for a cluster's audit log.

Streams the log (memory does not grow with its length) through the same
decision the service makes and prints the table (``-o table|csv|json``).
``--events`` prints each write's class as a JSON line instead, ``--suggest``
proposed skipUsers entries as YAML; the table then goes to standard error,
so standard output is always one format. Reference: ``docs/classify.md``.

The policy is made from the same flags as ``verify``'s (``-c``, ``-k``, ...).
With none of ``-c``, ``-k`` or ``--signer`` the profiles are measured alone:
the policy trusts one throw-away key nobody holds, so no signature is
checked, and a signed write that no profile lets through is in class 5
(``invalid-signature``, reason ``signature-invalid``) -- what a policy that
trusts no key would do with it. Classes 1-3 and 6 are what they would be with
any keys.

On a terminal, standard error shows how far the replay is (lines, megabytes
and their rate, events classified), redrawn at most :data:`REFRESH_PER_SECOND`
times a second.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gzip
import io
import json
import os
import sys
import time
import zlib
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

from ..bounds import LOCAL
from ..errors import RequestError
from ..result import TRAFFIC_CLASSES
from . import COMMANDS, EXIT_DENIED, EXIT_OK, EXIT_USAGE
from ._args import add_policy_flags, command_parser
from ._common import build_policy, names_trust, policy_where

if TYPE_CHECKING:
    from ..audit.events import LineSource

HELP = COMMANDS["classify"]

#: Table headings for the classes, numbered as in the paper (section 4).
LABELS = {cls: f"{i} {cls}" for i, cls in enumerate(TRAFFIC_CLASSES, start=1)}
MAX_CELL = 100
#: Progress redraws per second at most: fast enough to look alive, rare enough to cost nothing.
REFRESH_PER_SECOND = 4
#: The name of the throw-away key of a profiles-only run, as messages show it.
PROFILES_ONLY_KEY = "profiles-only (no key trusted)"
EXAMPLES = (
    "manifest-provider classify -f audit.jsonl   # the built-in profiles alone: no policy, no key",
    "manifest-provider classify -f audit.jsonl.gz -c policy.yaml --by user -o json",
    "manifest-provider classify -f audit.jsonl -k team.pub --suggest > skip-users.yaml",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = command_parser(sub, "classify", HELP, EXAMPLES)
    p.add_argument(
        "-f",
        "--filename",
        required=True,
        metavar="AUDIT.jsonl",
        help="Kubernetes audit log, one audit.k8s.io/v1 Event per line (- for stdin; .gz is read compressed)",
    )
    add_policy_flags(p)
    p.add_argument(
        "--by",
        action="append",
        choices=("namespace", "user", "kind"),
        default=[],
        help="also break the table down by namespace, user or kind (repeatable)",
    )
    p.add_argument(
        "-o", "--output", choices=("table", "csv", "json"), default="table", help="table format (default: table)"
    )
    p.add_argument(
        "--top",
        type=int,
        default=10,
        metavar="N",
        help="unprocessed (user, kind, namespace) triples to list (default 10)",
    )
    p.add_argument(
        "--events",
        action="store_true",
        help="print each write's class as a JSON line (auditID, user, verb, resource, namespace, name, class, reason); "
        "the table goes to stderr",
    )
    p.add_argument(
        "--suggest",
        action="store_true",
        help="print proposed skipUsers entries (YAML, for review; never applied); the table goes to stderr",
    )
    p.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig for --dry-run (default: $KUBECONFIG or ~/.kube/config)"
    )
    p.set_defaults(run=run)


@contextlib.contextmanager
def open_log(path: str) -> Iterator[LineSource]:
    if path == "-":
        yield sys.stdin.buffer
    elif path.endswith(".gz"):
        with gzip.open(path, "rb") as handle:
            yield handle
    else:
        with open(path, "rb") as handle:
            yield handle


def _cell(text: str) -> str:
    """A log-supplied name made safe to print: printable, bounded."""
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def _share(count: int, total: int) -> str:
    return f"{100.0 * count / total:5.1f} %" if total else "    - "


def _grid(rows: list[list[str]], numeric: set[int]) -> list[str]:
    """Aligned columns; the ``numeric`` ones to the right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  "
        + "  ".join(
            c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def render_table(report: dict[str, Any], source: str) -> str:
    total = report["total"]
    lines = [f"Traffic classes of {total} write request{'s' if total != 1 else ''} in {_cell(source)}", ""]
    rows = [["class", "requests", "share"]]
    rows += [
        [LABELS[cls], str(report["classes"][cls]), _share(report["classes"][cls], total)] for cls in TRAFFIC_CLASSES
    ]
    rows.append(["total", str(total), _share(total, total)])
    lines += _grid(rows, {1, 2})
    for dim, groups in report["by"].items():
        lines += ["", f"By {dim}:"]
        head = [dim, "total", *(str(i) for i in range(1, len(TRAFFIC_CLASSES) + 1))]
        body = [
            [
                _cell(key) if key else "(cluster-scoped)" if dim == "namespace" else "(none)",
                str(row["total"]),
                *(str(row["classes"][cls]) for cls in TRAFFIC_CLASSES),
            ]
            for key, row in groups.items()
        ]
        lines += _grid([head, *body], set(range(1, len(head))))
    if report["topUnprocessed"]:
        lines += [
            "",
            "Most frequent unprocessed requests (in scope, unsigned, no profile) -- a missing skipUsers entry or "
            "unsigned change:",
        ]
        rows = [["count", "user", "kind", "namespace"]]
        rows += [
            [str(e["count"]), _cell(e["user"]), _cell(e["kind"]), _cell(e["namespace"]) or "(cluster-scoped)"]
            for e in report["topUnprocessed"]
        ]
        lines += _grid(rows, {0})
    return "\n".join(lines) + "\n"


def _csv_safe(text: str) -> str:
    # A spreadsheet runs a cell that starts with = + - @ as a formula (OWASP "CSV injection").
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def render_csv(report: dict[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["dimension", "key", "total", *TRAFFIC_CLASSES])
    writer.writerow(["all", "", report["total"], *(report["classes"][cls] for cls in TRAFFIC_CLASSES)])
    for dim, groups in report["by"].items():
        for key, row in groups.items():
            writer.writerow([dim, _csv_safe(key), row["total"], *(row["classes"][cls] for cls in TRAFFIC_CLASSES)])
    return out.getvalue()


def render(report: dict[str, Any], output: str, source: str) -> str:
    if output == "json":
        return json.dumps(report, indent=2) + "\n"
    if output == "csv":
        return render_csv(report)
    return render_table(report, source)


def _notes(summary: Any) -> list[str]:
    """What was read but is not in the table, for standard error."""
    notes = []
    if summary.malformed:
        first = "; ".join(f"line {m.line}: {_cell(m.message)}" for m in summary.malformed_examples)
        notes.append(f"{summary.malformed} malformed line{'s' if summary.malformed != 1 else ''} skipped ({first})")
    labels = {
        "read": "reads (not admission requests)",
        "non-resource": "non-resource requests",
        "repeated-stage": "events at a stage that repeats a logged request",
        "other-verb": "requests with a verb admission never sees",
        "no-body": "writes whose verdict needs the request body the audit level did not record (log writes at level "
        "Request)",
    }
    notes += [f"{n} {labels[why]} not counted" for why, n in sorted(summary.skipped.items())]
    if not summary.unprocessed.exact:
        notes.append(
            f"more than {summary.unprocessed.capacity} distinct unprocessed triples: their counts are upper bounds"
        )
    for dim, groups in summary.groups.items():
        if groups.overflowed:
            notes.append(f"{groups.overflowed} further {dim}s counted under (other)")
    return notes


def _dry_runner(args: argparse.Namespace, enabled: bool) -> Any:
    if not (args.dry_run or (enabled and args.kubeconfig)):
        return None
    from ..kube.dryrun import dry_runner_for

    return dry_runner_for(args.kubeconfig)


class CountingReader:
    """A line source that counts what passes through it (for the progress line)."""

    def __init__(self, stream: LineSource, name: str = "the audit log") -> None:
        self.stream = stream
        self.name = name
        self.bytes = 0
        self.lines = 0

    def readline(self, size: int = -1, /) -> bytes:
        try:
            line = self.stream.readline(size)
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:  # a .gz that is not one, or cut short
            raise RequestError(f"{self.name}: not a complete gzip file ({exc})") from exc
        self.bytes += len(line)
        if line.endswith(b"\n"):
            self.lines += 1
        return line


class Progress:
    """One line on a terminal's standard error, redrawn at most :data:`REFRESH_PER_SECOND` times a second."""

    def __init__(self, reader: CountingReader, out: IO[str], size: int | None, clock: Any = time.monotonic) -> None:
        self.reader, self.out, self.size, self.clock = reader, out, size, clock
        self.started = self.last = clock()
        self.classified = 0
        self.shown = 0
        self._calls = 0

    def line(self) -> str:
        elapsed = max(self.clock() - self.started, 1e-9)
        megabytes = self.reader.bytes / 1e6
        share = f", {100 * self.reader.bytes / self.size:.0f} %" if self.size else ""
        return (
            f"classify: {self.reader.lines:,} lines, {megabytes:,.1f} MB{share} ({megabytes / elapsed:,.1f} MB/s), "
            f"{self.classified:,} events classified"
        )

    def tick(self, classified: bool) -> None:
        self.classified += classified
        self._calls += 1
        if self._calls % 64:  # the clock is read every 64 events, not on each
            return
        now = self.clock()
        if now - self.last >= 1 / REFRESH_PER_SECOND:
            self.last = now
            self.out.write("\r\x1b[K" + self.line())
            self.out.flush()
            self.shown += 1

    def finish(self) -> None:
        """The final figures on a line of their own, before the table and notes."""
        self.out.write("\r\x1b[K" + self.line() + f" in {self.clock() - self.started:.1f} s\n")
        self.out.flush()
        self.shown += 1


def _size(path: str) -> int | None:
    """The log's size when ``path`` is a plain regular file (a share of it is then meaningful)."""
    if path == "-" or path.endswith(".gz"):
        return None
    try:
        size = os.stat(path).st_size
    except OSError:
        return None
    return size or None


def profiles_only_key() -> dict[str, str]:
    """A public key nobody holds the private half of: trusted by a profiles-only run, it verifies nothing."""
    from ..keys.pem import generate_key, public_pem

    return {"publicKey": public_pem(generate_key("ecdsa-p256")).decode(), "name": PROFILES_ONLY_KEY}


def run(args: argparse.Namespace) -> int:
    from ..audit.classify import Classified, Classifier, Summary, suggestion_yaml
    from ..audit.events import read_events
    from ..policy.schema import Policy

    prog = "manifest-provider classify"
    if args.events and args.suggest:
        print(f"{prog}: give --events or --suggest, not both (each takes standard output)", file=sys.stderr)
        return EXIT_USAGE
    if args.top < 0:
        print(f"{prog}: --top must be 0 or more", file=sys.stderr)
        return EXIT_USAGE
    data = build_policy(args)
    profiles_only = not names_trust(args)
    if profiles_only:
        data["keys"] = [profiles_only_key()]
    policy = Policy.from_dict(
        data, bounds=LOCAL, where=policy_where(args)
    )  # the operator's own policy (provider/bounds.py)
    summary = Summary(by=args.by, top=args.top)
    out = sys.stdout
    progress = None
    with contextlib.ExitStack() as stack:
        runner = _dry_runner(args, policy.dry_run.enabled)
        if runner is not None:
            stack.enter_context(runner)
        classifier = Classifier(policy, dry_runner=runner)
        stream = CountingReader(stack.enter_context(open_log(args.filename)), args.filename)
        if sys.stderr.isatty():
            progress = Progress(stream, sys.stderr, _size(args.filename))
        for item in classifier.classify_all(read_events(stream)):
            summary.add(item)
            if progress is not None:
                progress.tick(isinstance(item, Classified))
            if args.events and isinstance(item, Classified):
                out.write(json.dumps(item.to_dict()) + "\n")
    if progress is not None:
        progress.finish()
    if profiles_only:
        print(
            f"{prog}: profiles only (no -c, -k or --signer): no signature was checked; signed writes no profile lets "
            "through are in class 5, as a policy trusting no key would deny them",
            file=sys.stderr,
        )
    source = "standard input" if args.filename == "-" else args.filename
    table = render(dict(summary.to_dict()), args.output, source)
    if args.suggest:
        out.write(suggestion_yaml(summary, source))
    if args.events or args.suggest:
        sys.stderr.write(table)
    else:
        out.write(table)
    for note in _notes(summary):
        print(f"{prog}: {note}", file=sys.stderr)
    if summary.total == 0 and not summary.skipped:
        print(
            f"{prog}: {args.filename} holds no {'readable ' if summary.malformed else ''}audit event", file=sys.stderr
        )
        return EXIT_USAGE
    return EXIT_DENIED if summary.needs_attention else EXIT_OK
