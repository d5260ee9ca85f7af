"""What an earlier attempt at a run may have left running: its runner and its engines.

`specbench run` records its own process in the manifest (`runner`); `--resume`
refuses a run whose recorded runner is still alive (two runners in one folder would
measure each other's load), then stops every engine of the run that is still running
(harness/engines/running/stale.py), says so, and records it (`stale_engines`), so the resumed
run never measures a GPU shared with a stale server.
"""

from __future__ import annotations

import os
import time

import psutil
from rich.console import Console

from harness.engines.running.stale import find_stale_engines, stop_stale_engine
from harness.errors import SpecbenchError
from harness.run.store import RunStore
from harness.rundir.engines import StaleEngineRecord
from harness.rundir.manifest import Manifest, RunnerRecord

# Set by a script that wraps `specbench run FILE` (scripts/demo.sh): what the verdict's
# command to finish a run starts with instead.
INVOKED_AS = "SPECBENCH_INVOKED_AS"


def record_runner(store: RunStore) -> None:
    me = psutil.Process()
    runner = RunnerRecord(
        pid=me.pid,
        started_wall=me.create_time(),
        cmdline=me.cmdline(),
        invoked_as=os.environ.get(INVOKED_AS) or None,
    )
    store.edit_manifest(lambda m: setattr(m, "runner", runner))


def live_runner(store: RunStore) -> int | None:
    """The pid of the run's recorded runner when that process is still running (not us)."""
    runner = store.manifest().runner
    if runner is None or runner.pid == os.getpid():
        return None
    pid = runner.pid
    try:
        proc = psutil.Process(pid)
        same = abs(proc.create_time() - runner.started_wall) < 1.0
        return int(pid) if same and proc.status() != psutil.STATUS_ZOMBIE else None
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def clear_leftovers(store: RunStore, console: Console) -> None:
    """Refuse a run still being run; stop the engines an earlier attempt left behind."""
    pid = live_runner(store)
    if pid is not None:
        raise SpecbenchError(
            f"run {store.run_id} is still being run by process {pid}; stop it first"
            f" (kill {pid}) or wait for it to finish"
        )
    for stale in find_stale_engines(store.root):
        console.print(f"stopping a stale {stale.describe()}")
        left = stop_stale_engine(stale)
        if left:
            raise SpecbenchError(
                f"could not stop the stale {stale.describe()}: still alive {left};"
                f" stop it by hand (kill -KILL -{stale.pgid}) and resume again"
            )
        record = StaleEngineRecord(
            when=time.time(),
            arm=stale.arm,
            pid=stale.pid,
            pgid=stale.pgid,
            port=stale.port,
            port_held=stale.port_held,
            processes=stale.processes,
            action="stopped on resume",
        )

        def add_stale(m: Manifest, r: StaleEngineRecord = record) -> None:
            m.stale_engines.append(r)

        store.edit_manifest(add_stale)
