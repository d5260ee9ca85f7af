"""Engines an earlier attempt left running, found from what the run folder recorded.

Every launched engine is recorded in its run's manifest (`engines[arm]`) the moment
it exists: pid, process group, host, port, command and start time. An engine whose
harness died and whose guard could not stop it (both killed at once) is still
there; `specbench run --resume` stops the stale engines of the run it resumes, and
`specbench doctor` names those of every run under the results folder.

A recorded engine is stale when its process is alive and is still that process:
its command line is the recorded command (or, for an engine that retitles itself,
its start time is the recorded one, so a reused pid is never taken for it), or
when members of its process group started with it are alive (the leader dead, its
children, such as vLLM's EngineCore, left behind).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from harness.engines.running.process import port_in_use
from harness.errors import InputError
from harness.rundir.manifest import MANIFEST, read_manifest

# How far a process's start may lie from the recorded spawn (the record's clock is
# read just before the spawn) and still be the recorded engine.
START_SLACK_S = 5.0


@dataclass
class StaleEngine:
    run: str
    arm: str
    pid: int
    pgid: int | None
    host: str | None
    port: int | None
    command: list[str]
    processes: list[int] = field(default_factory=list)  # what is alive of it
    port_held: bool = False

    def describe(self) -> str:
        where = (
            f"port {self.port}" + (" (held)" if self.port_held else " (not held)")
            if self.port
            else "no port recorded"
        )
        return (
            f"engine of arm {self.arm!r} from run {self.run}: pid {self.pid},"
            f" process group {self.pgid}, {where}; alive: {self.processes}"
        )


def recorded_engines(run_root: Path) -> list[dict[str, Any]]:
    """The launched engines a run folder's manifest records (every start of every arm)."""
    try:
        manifest = read_manifest(run_root / MANIFEST)
    except InputError:  # not a run folder of a format this reads: nothing of ours to stop
        return []
    out = []
    here = socket.gethostname()
    for arm, entries in manifest.engines.items():
        for entry in entries:
            if not (entry.launched and entry.pid):
                continue
            # A shard's engine on another Ray node: its pid means nothing on this host.
            if entry.node_hostname not in (None, here):
                continue
            out.append({**entry.model_dump(), "arm": arm})
    return out


def _same_process(proc: psutil.Process, record: dict[str, Any]) -> bool:
    try:
        if record.get("command") and proc.cmdline() == list(record["command"]):
            return True
        started = record.get("started_wall")
        return started is not None and abs(proc.create_time() - float(started)) <= START_SLACK_S
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def _group_remnants(pgid: int, started: float | None) -> list[int]:
    """Live members of the group that started no earlier than the engine did."""
    out = []
    for proc in psutil.process_iter(["pid", "create_time", "status"]):
        try:
            if os.getpgid(proc.pid) != pgid or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
        except (ProcessLookupError, PermissionError):
            continue
        if started is None or proc.info["create_time"] >= float(started) - START_SLACK_S:
            out.append(proc.pid)
    return out


def stale_engine(run: str, record: dict[str, Any]) -> StaleEngine | None:
    """The recorded engine if any of it is still running, else None."""
    pid = int(record["pid"])
    pgid = record.get("pgid") or pid  # records before pgid was kept: the leader's own
    alive: list[int] = []
    leader: psutil.Process | None
    try:
        leader = psutil.Process(pid)
        if leader.status() == psutil.STATUS_ZOMBIE:
            leader = None
    except psutil.NoSuchProcess:
        leader = None
    if leader is not None:
        if not _same_process(leader, record):
            # The pid was reused, which Linux allows only once the engine's group was
            # empty: whatever is in a group of that id now is not the engine.
            return None
        alive.append(pid)
    alive += [p for p in _group_remnants(int(pgid), record.get("started_wall")) if p not in alive]
    if not alive:
        return None
    host, port = record.get("host") or "127.0.0.1", record.get("port")
    return StaleEngine(
        run=run,
        arm=str(record.get("arm")),
        pid=pid,
        pgid=int(pgid),
        host=host,
        port=port,
        command=list(record.get("command") or []),
        processes=sorted(alive),
        port_held=port_in_use(host, int(port)) if port else False,
    )


def find_stale_engines(run_root: Path) -> list[StaleEngine]:
    """The engines recorded in one run folder that are still running."""
    found = []
    for record in recorded_engines(run_root):
        stale = stale_engine(run_root.name, record)
        if stale is not None:
            found.append(stale)
    return found


def find_stale_in(results_dir: Path) -> list[StaleEngine]:
    """The stale engines of every run folder under results_dir."""
    found: list[StaleEngine] = []
    if results_dir.is_dir():
        for manifest in sorted(results_dir.glob("*/manifest.json")):
            found += find_stale_engines(manifest.parent)
    return found


def stop_stale_engine(stale: StaleEngine, grace_s: float = 30.0) -> list[int]:
    """SIGTERM what is left of the engine (its group and the recorded pid), SIGKILL after
    grace_s; returns the pids still alive afterwards (empty when it is gone)."""
    procs = [psutil.Process(p) for p in stale.processes if psutil.pid_exists(p)]

    def send(sig: signal.Signals) -> None:
        if stale.pgid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(stale.pgid, sig)
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                proc.send_signal(sig)

    def alive() -> list[psutil.Process]:
        out = []
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    out.append(proc)
        return out

    send(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive():
        send(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while alive() and time.monotonic() < deadline:
            time.sleep(0.1)
    return [p.pid for p in alive()]
