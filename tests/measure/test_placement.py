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


# A sleeping process in a session of its own, its session (autogroup) and itself at `nice`.
SESSION_AT_NICE = ("import os, time\n"
                   "try:\n"
                   "    open('/proc/self/autogroup', 'w').write('{0}')\n"
                   "except OSError:\n"
                   "    pass\n"
                   "os.nice({0})\n"
                   "print('ready', flush=True)\n"
                   "time.sleep(60)\n")


def _session_at(nice: int) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", SESSION_AT_NICE.format(nice)],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert child.stdout.readline().strip() == "ready"
    return child


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux scheduling")
def test_an_engine_that_outranks_the_client_is_named_and_an_equal_one_is_not():
    from harness.measure.placement import engine_outranks

    engine, client, level = _session_at(0), _session_at(10), _session_at(10)
    try:
        why = engine_outranks(engine.pid, client.pid)
        assert why is not None and "nice 0" in why and "nice 10" in why, why
        assert "run specbench at the engine's priority" in why
        assert engine_outranks(client.pid, engine.pid) is None  # a lowered engine: fine
        assert engine_outranks(level.pid, client.pid) is None  # level with the client
    finally:
        for child in (engine, client, level):
            child.kill()
            child.wait()


def test_an_attached_engine_on_this_host_is_found_by_its_port():
    import socket

    from harness.measure.placement import local_listener_pid

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        assert local_listener_pid(f"http://127.0.0.1:{port}") == os.getpid()
    assert local_listener_pid("http://example.invalid:8000") is None
