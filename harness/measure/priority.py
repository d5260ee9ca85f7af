"""Bring the client level with the engine's CPU priority, where the kernel allows it.

An engine busy-polls (vLLM's engine core, a GPU engine feeding its kernels). Where it
outranks the client, the client waits for a CPU behind it the moment a request ends,
and the users it drives wait with it: on 2 cores, 4 users, the engine's session at nice 0
and the client's at nice 10, both specbench and `vllm bench serve` got 2-10 % of a core
and the engine held 1-3 of the 4 users (issue 34; benchmarks/README.md, "a starved
client"). Level with the engine, the client keeps its users. So, under
`recording.client_priority: match_engine`, the client raises itself to the engine's
priority, never above it:

- with autogroup scheduling (sessions ranked by their autogroup's nice first), its
  session's autogroup nice is set to the engine's. The kernel lets any user set an
  autogroup nice of 0 or more (kernel/sched/autogroup.c: only a negative one needs
  CAP_SYS_NICE), so this works unprivileged for an engine at nice 0 or above;
- inside one group, or without autogroups, each of its threads' nice is set to the
  engine's lowest; lowering a nice needs CAP_SYS_NICE or RLIMIT_NICE, so an unprivileged
  client may not manage it, and says so.

What was changed is put back by `restore_priority()` (the run's end, or the benchmark between two
clients): the session is the user's shell's too.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from harness.measure.placement import (
    autogroup,
    autogroups_on,
    engine_process_tree,
    group_nice,
)

AUTOGROUP = Path("/proc/self/autogroup")


@dataclass
class PriorityLift:
    """What `match_engine_priority` found and did."""

    engine_session_nice: int | None  # the engine's autogroup nice (None: no autogroups)
    engine_nice: int | None  # the lowest nice among the engine's processes
    client_session_nice_before: int | None
    client_nice_before: int | None  # the calling thread's
    client_session_nice: int | None  # after
    client_nice: int | None  # after, the calling thread's
    changed: list[str] = field(default_factory=list)  # what was raised, in words
    refused: list[str] = field(default_factory=list)  # what the kernel did not allow

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _autogroup_nice(pid: int | str = "self") -> int | None:
    return group_nice(autogroup(pid))


def _autogroup_name(pid: int | str = "self") -> str | None:
    line = autogroup(pid)
    return line.split()[0] if line else None


def _engine_nices(engine_pid: int) -> list[int]:
    nices = []
    for proc in engine_process_tree(engine_pid):
        with contextlib.suppress(psutil.Error):
            nices.append(proc.nice())
    return nices


def _thread_ids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:  # no /proc: the calling thread only
        return [0]


def _write_autogroup(nice: int) -> None:
    """Set this session's autogroup nice; the kernel refuses a second change within
    100 ms to an unprivileged caller (EAGAIN), so that is waited out once."""
    try:
        AUTOGROUP.write_text(str(nice))
    except BlockingIOError:
        time.sleep(0.15)
        AUTOGROUP.write_text(str(nice))


# What this process changed, to put back: the autogroup nice before, each thread's nice.
_saved_group: int | None = None
_saved_threads: dict[int, int] = {}
_restore_registered = False


def match_engine_priority(engine_pid: int) -> PriorityLift:
    """Raise this process (its session's autogroup, its threads) to the priority of the
    engine's process tree where the engine outranks it; never above the engine's."""
    global _saved_group, _restore_registered
    nices = _engine_nices(engine_pid)
    engine_nice = min(nices) if nices else None
    grouped = autogroups_on() and _autogroup_name(engine_pid) is not None
    engine_group = _autogroup_nice(engine_pid) if grouped else None
    group_before = _autogroup_nice() if grouped else None
    own_before = os.getpriority(os.PRIO_PROCESS, 0)
    lift = PriorityLift(
        engine_group, engine_nice, group_before, own_before, group_before, own_before
    )
    separate = grouped and _autogroup_name(engine_pid) != _autogroup_name()
    if (
        separate
        and engine_group is not None
        and group_before is not None
        and engine_group < group_before
    ):
        # A negative nice needs CAP_SYS_NICE; without it, 0 is as near as a user gets.
        for target in dict.fromkeys([engine_group, max(engine_group, 0)]):
            if target >= group_before:
                break
            try:
                _write_autogroup(target)
            except OSError as err:
                lift.refused.append(f"session nice {group_before} -> {target}: {err.strerror}")
                continue
            if _saved_group is None:
                _saved_group = group_before
            lift.changed.append(f"session nice {group_before} -> {target}")
            break
        lift.client_session_nice = _autogroup_nice()
    # Inside one group (or without autogroups) the threads' own nice ranks them.
    if not separate and engine_nice is not None:
        raised, refused = 0, None
        for tid in _thread_ids():
            try:
                current = os.getpriority(os.PRIO_PROCESS, tid)
                if current <= engine_nice:
                    continue
                os.setpriority(os.PRIO_PROCESS, tid, engine_nice)
            except PermissionError as err:
                refused = f"threads' nice -> {engine_nice}: {err.strerror}"
                break
            except OSError:  # the thread ended meanwhile
                continue
            _saved_threads.setdefault(tid, current)
            raised += 1
        if raised:
            lift.changed.append(f"{raised} threads' nice -> {engine_nice}")
        if refused:
            lift.refused.append(refused + " (lowering a nice needs CAP_SYS_NICE or RLIMIT_NICE)")
        lift.client_nice = os.getpriority(os.PRIO_PROCESS, 0)
    if lift.changed and not _restore_registered:
        atexit.register(restore_priority)
        _restore_registered = True
    return lift


def restore_priority() -> list[str]:
    """Put back what match_engine_priority changed (raising a nice is always allowed);
    what was put back, in words."""
    global _saved_group
    done = []
    if _saved_group is not None:
        with contextlib.suppress(OSError):
            _write_autogroup(_saved_group)
            done.append(f"session nice -> {_saved_group}")
        _saved_group = None
    for tid, nice in list(_saved_threads.items()):
        with contextlib.suppress(OSError):  # a thread that has ended
            os.setpriority(os.PRIO_PROCESS, tid, nice)
            done.append(f"thread {tid} nice -> {nice}")
        del _saved_threads[tid]
    return done
