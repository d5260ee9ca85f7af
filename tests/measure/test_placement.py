"""The client moves off CPUs an engine's threads are pinned to, and says so."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.measure.placement import place_client

PINNED_CHILD = ("import os, sys, time; os.sched_setaffinity(0, {{{0}}}); "
                "print('ready', flush=True); time.sleep(60)")


# Every CPU of the machine: a test worker pinned to one of them (scripts/test.sh's first
# phase) would leave it nothing to move to.
@pytest.mark.alone
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and at least 2 CPUs")
def test_the_client_leaves_the_engines_pinned_cpu_and_comes_back():
    allowed = sorted(os.sched_getaffinity(0))
    pinned = allowed[0]
    child = subprocess.Popen([sys.executable, "-c", PINNED_CHILD.format(pinned)],
                             stdout=subprocess.PIPE, text=True)
    try:
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

