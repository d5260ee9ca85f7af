"""Put the client on CPUs the engine does not use, where the host allows it.

An engine that pins its compute threads (vLLM's CPU build binds its OpenMP threads to
cores: VLLM_CPU_OMP_THREADS_BIND=auto keeps the last core for everything else) would
otherwise share those cores with the load generator, whose next send then waits for a
spinning thread's time slice. The client reads which CPUs the engine's threads are
bound to and pins every thread of its own process to the rest. Where nothing is left
(or the engine pins nothing, as GPU engines do) it is left where it was, and the
record says why. The engine's priority is the launcher's business (vllm_cpu_launcher
lowers its nice and its session's); the record shows what it was.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

_ORIGINAL: set[int] | None = None  # this process's CPUs before any placement


@dataclass
class Placement:
    allowed_cpus: list[int]
    engine_bound_cpus: list[int]
    client_cpus: list[int] | None  # None: not pinned (see reason)
    reason: str
    engine_nice: int | None = None
    engine_autogroup: str | None = None
    client_autogroup: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _autogroup(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/autogroup").read_text().strip()
    except OSError:
        return None


def engine_bound_cpus(pid: int, allowed: set[int]) -> set[int]:
    """CPUs any thread of the engine's process tree is pinned to (narrower than `allowed`)."""
    bound: set[int] = set()
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return bound
    for proc in procs:
        try:
            threads = proc.threads()
        except psutil.Error:
            continue
        for thread in threads:
            try:
                cpus = os.sched_getaffinity(thread.id)
            except OSError:
                continue
            if cpus < allowed:
                bound |= cpus
    return bound


def pin_threads(cpus: set[int]) -> list[str]:
    """Pin every thread of this process (not only the caller's) to `cpus`; what it starts
    later inherits them. Returns a note per thread that could not be moved."""
    notes = []
    for thread in psutil.Process().threads():
        try:
            os.sched_setaffinity(thread.id, cpus)
        except OSError as err:
            notes.append(f"thread {thread.id}: {err}")
    return notes


def place_client(engine_pid: int | None) -> Placement:
    """Pin this process's threads to the allowed CPUs the engine's threads do not use."""
    global _ORIGINAL
    if not hasattr(os, "sched_setaffinity"):
        return Placement([], [], None, "the host has no CPU affinity (not Linux)")
    if _ORIGINAL is None:
        _ORIGINAL = os.sched_getaffinity(0)
    allowed = set(_ORIGINAL)
    bound = engine_bound_cpus(engine_pid, allowed) if engine_pid else set()
    free = sorted(allowed - bound)
    if not bound:
        target, reason = allowed, "the engine pins no threads: the client shares every CPU"
    elif not free:
        target, reason = allowed, "the engine's threads are pinned to every CPU: nothing to spare"
    else:
        target, reason = set(free), "pinned to the CPUs the engine's threads are not bound to"
    notes = pin_threads(target)
    nice = None
    if engine_pid:
        try:
            nice = psutil.Process(engine_pid).nice()
        except psutil.Error:
            pass
    return Placement(sorted(allowed), sorted(bound), free if target != allowed else None,
                     reason, nice, _autogroup(engine_pid) if engine_pid else None,
                     _autogroup(os.getpid()), notes)
