"""An engine that would run ahead of the client for the CPU is named, and an attached
engine on this host is found by its port (harness/measure/placement.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

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
