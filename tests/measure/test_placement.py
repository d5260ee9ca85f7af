"""The client moves off CPUs an engine's threads are pinned to, and says so."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.measure.placement import place_client

PINNED_CHILD = (
    "import os, sys, time; os.sched_setaffinity(0, {{{0}}}); "
    "print('ready', flush=True); time.sleep(60)"
)


# Every CPU of the machine: a test worker pinned to one of them (scripts/test.sh's first
# phase) would leave it nothing to move to.
@pytest.mark.alone
@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity and at least 2 CPUs",
)
def test_the_client_leaves_the_engines_pinned_cpu_and_comes_back():
    allowed = sorted(os.sched_getaffinity(0))
    pinned = allowed[0]
    child = subprocess.Popen(
        [sys.executable, "-c", PINNED_CHILD.format(pinned)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        placed = place_client(child.pid)
        assert placed.engine_bound_cpus == [pinned]
        assert placed.client_cpus == allowed[1:]
        assert os.sched_getaffinity(0) == set(allowed[1:])
    finally:
        child.kill()
        child.wait()
        back = place_client(None)  # no engine: every CPU again
    assert back.client_cpus is None and "pins no threads" in back.reason
    assert os.sched_getaffinity(0) == set(allowed)


ENGINE_TREE = """
import ctypes, os, subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", "import os, time;"
                           " os.sched_setaffinity(0, {{{0}}}); time.sleep(60)"])
core = subprocess.Popen([sys.executable, "-c", "import ctypes, threading, time;"
                         " ctypes.CDLL(None).prctl(15, b'VLLM::EngineCore', 0, 0, 0);"
                         " threading.Thread(target=time.sleep, args=(60,)).start();"
                         " time.sleep(60)"])
time.sleep(1.0)
print(worker.pid, core.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.alone
@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity and at least 2 CPUs",
)
def test_the_engine_core_spinner_goes_to_the_workers_cpu():
    """vLLM's engine-core process busy-waits for its pinned worker: moved onto the
    worker's CPU, every thread of it, and recorded; the client keeps the rest."""
    import psutil

    allowed = sorted(os.sched_getaffinity(0))
    pinned = allowed[0]
    engine = subprocess.Popen(
        [sys.executable, "-c", ENGINE_TREE.format(pinned)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert engine.stdout is not None
        worker_pid, core_pid = (int(x) for x in engine.stdout.readline().split())
        core = psutil.Process(core_pid)
        assert core.name() == "VLLM::EngineCor" and len(core.threads()) == 2
        assert os.sched_getaffinity(core_pid) == set(allowed)
        placed = place_client(engine.pid)
        assert placed.engine_bound_cpus == [pinned]
        assert placed.client_cpus == allowed[1:]
        assert placed.engine_core_confined == [f"VLLM::EngineCor {core_pid}"]
        for thread in core.threads():
            assert os.sched_getaffinity(thread.id) == {pinned}, thread.id
        # The engine's other processes stay where they were.
        assert os.sched_getaffinity(engine.pid) == set(allowed)
        assert os.sched_getaffinity(worker_pid) == {pinned}
        assert placed.to_dict()["engine_core_confined"] == placed.engine_core_confined
    finally:
        for proc in psutil.Process(engine.pid).children(recursive=True):
            proc.kill()
        engine.kill()
        engine.wait()
        place_client(None)
    assert os.sched_getaffinity(0) == set(allowed)
