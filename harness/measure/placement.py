"""Put the client on CPUs the engine does not use, where the host allows it.

An engine that pins its compute threads (vLLM's CPU build binds its OpenMP threads to
cores: VLLM_CPU_OMP_THREADS_BIND=auto keeps the last core for everything else) would
otherwise share those cores with the load generator, whose next send then waits for a
spinning thread's time slice. The client reads which CPUs the engine's threads are
bound to and pins every thread of its own process to the rest. Where nothing is left
(or the engine pins nothing, as GPU engines do) it is left where it was, and the
record says why. The engine's priority is the launcher's business (vllm_cpu_launcher
lowers its nice and its session's); the record shows what it was.

The engine's own unpinned spinner goes with its pinned threads: vLLM's engine-core
process waits for its worker's step on shared memory, busy-looping with sched_yield for a
second after each read (distributed/device_communicators/shm_broadcast.py, busy_loop_s),
so where the worker is pinned it spins on the very CPU left to the client. Measured
(issue 34, 2 cores, the engine's session at nice 0, the client's at nice 10 lifted to it):
the engine core took 45-100 % of the client's CPU, and half of specbench's runs starved
(delivered share 0.77 of the users); with it confined to the worker's CPU, 0.994, level
with `vllm bench serve` (0.996 of its concurrency), and the engine served 1.6x the
tokens a second.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

_ORIGINAL: set[int] | None = None  # this process's CPUs before any placement


def engine_process_tree(engine_pid: int) -> list[psutil.Process]:
    """The engine's process and every descendant (its engine core, workers); [] when gone."""
    try:
        root = psutil.Process(engine_pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


@dataclass
class CpuPlacement:
    allowed_cpus: list[int]
    engine_bound_cpus: list[int]
    client_cpus: list[int] | None  # None: not pinned (see reason)
    reason: str
    engine_nice: int | None = None
    engine_autogroup: str | None = None
    client_autogroup: str | None = None
    notes: list[str] = field(default_factory=list)
    # Why the engine runs ahead of the client for the CPU, or None (see engine_outranks).
    engine_outranks_client: str | None = None
    # The engine-core processes moved onto the engine's pinned CPUs (confine_engine_core).
    engine_core_confined: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def group_nice(autogroup: str | None) -> int | None:
    """The nice of a session's autogroup ("/autogroup-13 nice 10" -> 10)."""
    if autogroup and " nice " in autogroup:
        try:
            return int(autogroup.rsplit(" ", 1)[1])
        except ValueError:
            return None
    return None


def autogroups_on() -> bool:
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return False


def engine_outranks(engine_pid: int, client_pid: int | None = None) -> str | None:
    """Why the kernel would run the engine's processes ahead of the client, or None.

    An engine busy-polls (vLLM's engine core, a GPU engine feeding its kernels): where
    it outranks the client, a client with work to do waits for a CPU behind it, and
    the users it drives wait with it (issue 34: the engine's session at nice 0, the
    client's at nice 10, on 2 cores: both vllm bench and specbench got 2-10 % of a core
    and kept 1-3 of 4 users at the server). With autogroup scheduling, sessions are
    ranked by their autogroup's nice first; inside one, by each process's nice."""
    client_pid = client_pid or os.getpid()
    engine = engine_process_tree(engine_pid)
    try:
        client_nice = psutil.Process(client_pid).nice()
    except psutil.Error:
        return None
    nices = []
    for proc in engine:
        with contextlib.suppress(psutil.Error):
            nices.append(proc.nice())
    if not nices:
        return None
    engine_group, client_group = autogroup(engine_pid), autogroup(client_pid)
    if autogroups_on() and engine_group and client_group and engine_group != client_group:
        e, c = group_nice(engine_group), group_nice(client_group)
        if e is not None and c is not None and e < c:
            return (
                f"the engine's session runs at nice {e}, the client's at nice {c}: on a"
                " busy host the client waits for a CPU behind the engine; run specbench"
                " at the engine's priority or above"
            )
        return None
    if min(nices) < client_nice:
        return (
            f"the engine's processes run at nice {min(nices)}, the client at nice"
            f" {client_nice}: on a busy host the client waits for a CPU behind the"
            " engine; run specbench at the engine's priority or above"
        )
    return None


def autogroup(pid: int | str = "self") -> str | None:
    """A process's /proc autogroup line ("/autogroup-13 nice 10"), None where unreadable."""
    try:
        return Path(f"/proc/{pid}/autogroup").read_text().strip()
    except OSError:
        return None


def engine_bound_cpus(pid: int, allowed: set[int]) -> set[int]:
    """CPUs any thread of the engine's process tree is pinned to (narrower than `allowed`)."""
    bound: set[int] = set()
    for proc in engine_process_tree(pid):
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


# vLLM's engine-core process, as /proc/PID/comm shows it (15 characters of the title).
ENGINE_CORE_NAMES = ("VLLM::EngineCor",)


def confine_engine_core(engine_pid: int, cpus: set[int]) -> tuple[list[str], list[str]]:
    """Pin every thread of the engine's engine-core processes to `cpus` (the CPUs its
    worker is bound to), so their busy wait leaves the client's CPUs. Returns the moved
    processes ("name pid") and a note per thread that could not be moved."""
    moved: list[str] = []
    notes: list[str] = []
    for proc in engine_process_tree(engine_pid):
        try:
            name = proc.name()
            threads = proc.threads()
        except psutil.Error:
            continue
        if not name.startswith(ENGINE_CORE_NAMES):
            continue
        for thread in threads:
            try:
                os.sched_setaffinity(thread.id, cpus)
            except OSError as err:
                notes.append(f"engine core {proc.pid} thread {thread.id}: {err}")
        moved.append(f"{name} {proc.pid}")
    return moved, notes


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


def place_client(engine_pid: int | None) -> CpuPlacement:
    """Pin this process's threads to the allowed CPUs the engine's threads do not use."""
    global _ORIGINAL
    if not hasattr(os, "sched_setaffinity"):
        return CpuPlacement([], [], None, "the host has no CPU affinity (not Linux)")
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
    confined: list[str] = []
    if bound and free and engine_pid:
        confined, problems = confine_engine_core(engine_pid, bound)
        notes += problems
    nice = None
    if engine_pid:
        try:
            nice = psutil.Process(engine_pid).nice()
        except psutil.Error:
            pass
    return CpuPlacement(
        sorted(allowed),
        sorted(bound),
        free if target != allowed else None,
        reason,
        nice,
        autogroup(engine_pid) if engine_pid else None,
        autogroup(os.getpid()),
        notes,
        engine_outranks(engine_pid) if engine_pid else None,
        confined,
    )


def local_listener_pid(base_url: str) -> int | None:
    """The pid of the process listening on a local endpoint's port (an attached engine
    started on this host), or None (remote, or not visible to this user)."""
    url = httpx.URL(base_url)
    if url.host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0") or url.port is None:
        return None
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == url.port:
                return conn.pid
    except (psutil.Error, OSError):
        return None
    return None
