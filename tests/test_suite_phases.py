"""scripts/test.sh's two phases: what runs beside other tests, what runs alone, and the
pinning that keeps each worker of the first phase on a core of its own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.run.conftest import ROOT

PHASE_1 = "not (vllm or timing or alone)"  # as scripts/test.sh selects it


def collected(marker_expression: str, *paths: str) -> set[str]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            marker_expression,
            *paths,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, 5), proc.stdout + proc.stderr  # 5: nothing selected
    return {line.strip() for line in proc.stdout.splitlines() if "::" in line}


def test_every_test_that_needs_the_engine_or_the_machine_is_kept_out_of_the_first_phase():
    paths = (
        "tests/engines/test_vllm_cpu.py",
        "tests/measure/test_vllm_crosscheck.py",
        "tests/run/test_demo_cpu.py",
        "tests/run/test_ray_shards.py",
        "tests/measure/test_placement.py",
    )
    everything = collected("", *paths)
    assert len(everything) >= 15, everything
    # The engine tests carry no marker of their own: conftest adds `vllm` to each that asks
    # for the engine's interpreter, directly or through a fixture.
    assert collected(PHASE_1, *paths) == set()
    # ...and only to those: a scripted study is in the first phase.
    assert collected(PHASE_1, "tests/run/test_remeasure.py")


# `alone`: under the first phase this process is pinned to one CPU already, and the child
# would inherit it.
@pytest.mark.alone
@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity and at least 2 CPUs",
)
@pytest.mark.parametrize(
    ("worker", "count"),
    [
        ("gw0", 2),  # every other CPU, from the first
        ("gw1", 2),  # every other CPU, from the second
        ("gw2", 4),  # on 2 CPUs, more workers than CPUs: one CPU each, in turn (the first)
        ("gw1", 1000),  # ...(the second)
        ("", 0),  # not under xdist: left on all of them
    ],
)
def test_an_xdist_worker_is_pinned_to_its_own_cpus(worker, count):
    cpus = sorted(os.sched_getaffinity(0))
    if not worker:
        expected = cpus
    elif count > len(cpus):
        expected = [cpus[int(worker[2:]) % len(cpus)]]
    else:
        expected = cpus[int(worker[2:]) % count :: count]
    code = (
        "import os, threading, time\n"
        "t = threading.Thread(target=time.sleep, args=(5,), daemon=True); t.start()\n"
        "from tests.conftest import pin_xdist_worker\n"
        "pin_xdist_worker()\n"
        "print(sorted(os.sched_getaffinity(0)))\n"
        "print(sorted(os.sched_getaffinity(t.native_id)))\n"
    )
    env = {**os.environ, "PYTEST_XDIST_WORKER": worker, "PYTEST_XDIST_WORKER_COUNT": str(count)}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    # The thread started before the pinning is pinned too: every thread of the worker.
    assert proc.stdout.splitlines() == [str(expected), str(expected)], proc.stdout
