"""The standard ``process_*`` series for the whole server: the gunicorn master and its workers together.

prometheus_client's multiprocess mode exposes only what the processes write to
their files, so its ``ProcessCollector`` (which reads ``/proc/self``) is not
part of a multiprocess scrape, and a per-process figure would be one process's
anyway. :class:`ServerProcesses` reads ``/proc`` at each scrape for the master
and every live child of it, and reports the server as one process would be
reported:

* ``process_cpu_seconds_total`` -- user and system CPU of the master, of every
  live worker, and of every worker that has exited and been reaped (the kernel
  adds those to the master's ``cutime``/``cstime``, ``proc(5)``), so the counter
  never goes down when gunicorn replaces a worker. The master is read before
  its children: a worker reaped in between is missed by one scrape, never
  counted twice.
* ``process_resident_memory_bytes`` -- resident memory with each page counted
  once: the sum of the processes' proportional set sizes (``Pss`` in
  ``/proc/PID/smaps_rollup``; a page shared by three processes counts a third
  in each). The workers share the preloaded app's pages with the master, so a
  sum of their RSS would count those once per process; the PSS sum compares
  with the pod's memory limit. Where ``smaps_rollup`` cannot be read (kernels
  before 4.14), the RSS sum, an overcount.
* ``process_open_fds`` -- file descriptors open in all of them (sockets,
  the metrics files, the log); each process has its own limit, so no
  ``process_max_fds`` is given (a ratio of a sum to one process's limit means
  nothing).
* ``process_start_time_seconds`` -- when the master started: the server's start.

Linux only (``/proc``); elsewhere nothing is reported.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

PROC = "/proc"
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class _Stat:
    cpu_ticks: int  # utime + stime
    children_ticks: int  # cutime + cstime: reaped children
    start_ticks: int  # since boot
    rss_pages: int


def _stat(pid: int) -> _Stat:
    with open(f"{PROC}/{pid}/stat", "rb") as handle:
        text = handle.read().decode()
    # The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
    fields = text[text.rindex(")") + 2 :].split()
    # proc(5) numbers fields from 1; fields[0] here is field 3 (state).
    utime, stime, cutime, cstime = (int(fields[i - 3]) for i in (14, 15, 16, 17))
    return _Stat(utime + stime, cutime + cstime, int(fields[22 - 3]), int(fields[24 - 3]))


def _children(pid: int) -> list[int]:
    """Every child of ``pid``, whichever of its threads forked it."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"{PROC}/{pid}/task"):
            with contextlib.suppress(OSError), open(f"{PROC}/{pid}/task/{task}/children") as handle:
                found += [int(child) for child in handle.read().split()]
    return found


def _pss_bytes(pid: int) -> int | None:
    try:
        with open(f"{PROC}/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"{PROC}/{pid}/fd"))
    except OSError:
        return 0


def _boot_time() -> float:
    with open(f"{PROC}/stat") as handle:
        for line in handle:
            if line.startswith("btime "):
                return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


@dataclass(frozen=True)
class Totals:
    cpu_seconds: float
    resident_bytes: float
    open_fds: int
    start_time: float
    processes: int


def totals(master: int) -> Totals | None:
    """The server's figures: ``master`` and its live children. ``None`` when ``/proc`` cannot tell."""
    try:
        head = _stat(master)
        boot = _boot_time()
    except (OSError, ValueError, IndexError):
        return None
    ticks = head.cpu_ticks + head.children_ticks
    pss = _pss_bytes(master)
    resident = [pss if pss is not None else head.rss_pages * _PAGE]
    fds = _open_fds(master)
    count = 1
    for child in _children(master):
        try:
            stat = _stat(child)
        except (OSError, ValueError, IndexError):
            continue  # gone since the list was read
        count += 1
        ticks += stat.cpu_ticks
        child_pss = _pss_bytes(child)
        resident.append(child_pss if child_pss is not None else stat.rss_pages * _PAGE)
        fds += _open_fds(child)
    return Totals(ticks / _TICKS, float(sum(resident)), fds, boot + head.start_ticks / _TICKS, count)


class ServerProcesses(Collector):
    """The ``process_*`` families for the master (:attr:`master`, default: this process) and its children."""

    def __init__(self) -> None:
        #: The gunicorn master's pid; the launcher sets it before the workers fork.
        self.master: int | None = None

    def collect(self) -> Iterator[Metric]:
        found = totals(self.master or os.getpid())
        if found is None:
            return
        yield CounterMetricFamily(
            "process_cpu_seconds", "User and system CPU time of the server's processes, exited workers included.",
            value=found.cpu_seconds,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "process_resident_memory_bytes",
            "Resident memory of the server's processes, each shared page counted once (sum of PSS).",
            value=found.resident_bytes,
        )
        yield GaugeMetricFamily(
            "process_open_fds", "File descriptors open in the server's processes.", value=found.open_fds
        )
        yield GaugeMetricFamily(
            "process_start_time_seconds", "When the server (its master process) started, in Unix seconds.",
            value=found.start_time,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "manifest_provider_processes", "The server's live processes: the master and its workers.",
            value=found.processes,
        )  # fmt: skip
