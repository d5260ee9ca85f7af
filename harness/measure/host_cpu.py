"""How much of the host's CPU went elsewhere during a cell: other programs, the hypervisor.

A process busy on the host takes CPU from the engine and the client alike and moves
every timing, and neither the client's lag nor the engine's metrics see it. Over a
cell this reads the host's CPU time (the aggregate `cpu` line of /proc/stat, in clock
ticks) and the CPU time (utime + stime, live and exited threads included) of the
processes that are the measurement's own:
- the engine's: every process in its process group or session (it leads its own
  session) and their descendants. An attached engine has no processes known here, so
  only the harness is own, and a local attached engine's CPU counts as foreign;
- the harness's: this process (the client and its threads) and its descendants, which
  include other arms' engines kept up (`recording.engines_alive`): the run's, not another
  program's.

    foreign share = max(0, busy - own) / total      busy = total - idle - iowait - steal
    steal share   = steal / total

where total is every CPU's ticks over the cell: the host's CPUs x the wall time.
/proc/stat is the machine's even inside a container, and so is what competes for it.

Own processes are scanned at the start and the end (a cell's run; scans between, by
HostCpuSampler's thread, are for a caller that can spare the interpreter: a scan holds it
8-20 ms on 2 cores, which a client's stamping thread would wait on), and each is counted
from its first sighting to its last; one that started after the first scan from zero. Own time is lost, and so counted as foreign, when a
process exits (its CPU since its last sighting, at most a scan interval) or lives and
dies between two scans: the foreign share errs high, never low. (A reaped child's time,
cutime, is not added back: it would count again what was seen while the child lived.)
Linux only: where
/proc/stat cannot be read nothing is recorded.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class HostTicks:
    """The aggregate line of /proc/stat: clock ticks since boot, every CPU together."""

    total: int  # user nice system idle iowait irq softirq steal (guest is inside user)
    idle: int  # idle + iowait: a waiting CPU is free for anyone
    steal: int  # taken by the hypervisor for other guests

    @property
    def busy(self) -> int:
        return self.total - self.idle - self.steal


def parse_host_ticks(text: str) -> HostTicks:
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            # guest and guest_nice (fields 9, 10) are already counted in user and nice.
            user, nice, system, idle, iowait, irq, softirq, steal = (
                [int(x) for x in fields[1:9]] + [0] * 8
            )[:8]
            total = user + nice + system + idle + iowait + irq + softirq + steal
            return HostTicks(total=total, idle=idle + iowait, steal=steal)
    raise ValueError("no aggregate cpu line in /proc/stat")


@dataclass(frozen=True)
class ProcessTicks:
    """One process, from /proc/PID/stat."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    start: int  # ticks after boot: with the pid, names the process across pid reuse
    cpu: int  # utime + stime, ticks

    @property
    def key(self) -> tuple[int, int]:
        return self.pid, self.start


def parse_process_ticks(text: str) -> ProcessTicks:
    # The command name (field 2) may hold spaces and parentheses: split after its last ")".
    head, _, rest = text.rpartition(")")
    pid = int(head.split("(", 1)[0])
    f = rest.split()  # f[0] is field 3 (state)
    return ProcessTicks(
        pid=pid,
        ppid=int(f[1]),
        pgid=int(f[2]),
        sid=int(f[3]),
        cpu=int(f[11]) + int(f[12]),
        start=int(f[19]),
    )


@dataclass(frozen=True)
class HostCpu:
    """The host's CPU over one cell, as shares of every CPU's time."""

    foreign_share: float  # busy, but not the engine's or the harness's
    steal_share: float
    engine_counted: bool  # False: an attached engine, whose CPU (if local) is foreign

    def health_fields(self, limit: float | None) -> dict[str, Any]:
        """The ClientHealth fields that record it, with the registered limit."""
        return {
            "host_foreign_cpu_share": self.foreign_share,
            "host_steal_share": self.steal_share,
            "host_foreign_cpu_limit": limit,
            "host_engine_counted": self.engine_counted,
        }


class HostCpuMeter:
    """start(), sample() as often as wanted, finish(). `engine_group`: the engine's
    process group and session id (None: attached). `proc` is /proc (tests pass a fake)."""

    def __init__(
        self, engine_group: int | None, harness_pid: int | None = None, proc: Path = Path("/proc")
    ) -> None:
        self.engine_group = engine_group
        self.harness_pid = os.getpid() if harness_pid is None else harness_pid
        self.proc = proc
        self._start: HostTicks | None = None
        self._before: set[tuple[int, int]] = set()  # every process alive at the first scan
        self._seen: dict[tuple[int, int], tuple[int, int]] = {}  # own: (first, last) cpu
        self._lock = threading.Lock()  # the sampler thread and finish() both scan

    def start(self) -> None:
        try:
            self._start = parse_host_ticks((self.proc / "stat").read_text())
        except (OSError, ValueError):
            self._start = None  # not Linux, or no /proc: nothing is recorded
            return
        processes = self._processes()
        self._before = {p.key for p in processes}
        self._count(processes)

    def sample(self) -> None:
        if self._start is not None:
            self._count(self._processes())

    def finish(self) -> HostCpu | None:
        if self._start is None:
            return None
        self._count(self._processes())
        try:
            end = parse_host_ticks((self.proc / "stat").read_text())
        except (OSError, ValueError):
            return None
        total = end.total - self._start.total
        if total <= 0:
            return None
        own = sum(last - first for first, last in self._seen.values())
        busy = end.busy - self._start.busy
        return HostCpu(
            foreign_share=max(0, busy - own) / total,
            steal_share=max(0, end.steal - self._start.steal) / total,
            engine_counted=self.engine_group is not None,
        )

    def _processes(self) -> list[ProcessTicks]:
        found = []
        for name in os.listdir(self.proc):
            if name.isdigit():
                try:
                    found.append(parse_process_ticks((self.proc / name / "stat").read_text()))
                except (OSError, ValueError, IndexError):  # gone since the listing
                    continue
        return found

    def _count(self, processes: list[ProcessTicks]) -> None:
        with self._lock:
            for p in own_processes(processes, self.harness_pid, self.engine_group):
                first, _ = self._seen.get(p.key, (None, None))
                if first is None:  # first sighting: one born since the first scan from zero
                    first = p.cpu if p.key in self._before else 0
                self._seen[p.key] = (first, p.cpu)


def own_processes(
    processes: Iterable[ProcessTicks], harness_pid: int, engine_group: int | None
) -> list[ProcessTicks]:
    """The harness and the engine's group or session, with all their descendants."""
    processes = list(processes)
    children: dict[int, list[ProcessTicks]] = {}
    for p in processes:
        children.setdefault(p.ppid, []).append(p)
    todo = [
        p
        for p in processes
        if p.pid == harness_pid or (engine_group is not None and engine_group in (p.pgid, p.sid))
    ]
    own: dict[int, ProcessTicks] = {}
    while todo:
        p = todo.pop()
        if p.pid not in own:
            own[p.pid] = p
            todo.extend(children.get(p.pid, []))
    return list(own.values())


class HostCpuSampler:
    """A meter scanned every `interval_s` on its own thread, so that processes the
    engine starts and ends during a cell are seen. stop() is safe to call twice."""

    def __init__(self, meter: HostCpuMeter, interval_s: float = 1.0) -> None:
        self.meter, self.interval_s = meter, interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._result: HostCpu | None = None
        self._stopping = threading.Lock()  # a cancelled cell's cleanup may stop it again

    def start(self) -> None:
        self.meter.start()
        self._thread = threading.Thread(target=self._run, daemon=True, name="specbench-host-cpu")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.meter.sample()

    def stop(self) -> HostCpu | None:
        with self._stopping:
            if self._thread is not None:
                self._stop.set()
                self._thread.join(5.0)
                self._thread = None
                self._result = self.meter.finish()
            return self._result
