"""An engine that would run ahead of the client for the CPU is named, and an attached
engine on this host is found by its port (harness/measure/placement.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.measure.placement import autogroups_on

# A sleeping process in a session of its own, its session (autogroup) and itself at `nice`.
SESSION_AT_NICE = (
    "import os, time\n"
    "try:\n"
    "    open('/proc/self/autogroup', 'w').write('{0}')\n"
    "except OSError:\n"
    "    pass\n"
    "os.nice({0})\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def _session_at(nice: int) -> subprocess.Popen:
    child = subprocess.Popen(
        [sys.executable, "-c", SESSION_AT_NICE.format(nice)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert child.stdout is not None
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


# A client in a session of its own at nice 10 that matches the engine's priority, prints
# what it did and its session's nice, puts it back and prints the nice again.
CLIENT_MATCHES = (
    "import json, os, sys\n"
    "open('/proc/self/autogroup', 'w').write('10')\n"
    "os.nice(10)\n"
    "from harness.measure.priority import match_engine_priority, restore_priority, _autogroup_nice\n"
    "lift = match_engine_priority(int(sys.argv[1]))\n"
    "lifted = _autogroup_nice()\n"
    "restored = restore_priority()\n"
    "print(json.dumps({'lift': lift.to_dict(), 'lifted': lifted,"
    " 'after': _autogroup_nice(), 'restored': restored}))\n"
)

# A client that starts an engine in its own session (one autogroup), then lowers itself
# and a thread of its own to nice 10 and matches the engine.
CLIENT_BESIDE_ENGINE = (
    "import json, os, subprocess, sys, threading, time\n"
    "engine = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "os.setpriority(os.PRIO_PROCESS, 0, 10)\n"
    "gate = threading.Event(); tid = []\n"
    "def worker():\n"
    "    tid.append(threading.get_native_id()); gate.wait()\n"
    "t = threading.Thread(target=worker); t.start()\n"
    "while not tid: time.sleep(0.01)\n"
    "from harness.measure.priority import match_engine_priority, restore_priority\n"
    "lift = match_engine_priority(engine.pid)\n"
    "nices = [os.getpriority(os.PRIO_PROCESS, 0), os.getpriority(os.PRIO_PROCESS, tid[0])]\n"
    "restore_priority()\n"
    "back = [os.getpriority(os.PRIO_PROCESS, 0), os.getpriority(os.PRIO_PROCESS, tid[0])]\n"
    "gate.set(); t.join(); engine.kill()\n"
    "print(json.dumps({'lift': lift.to_dict(), 'nices': nices, 'back': back}))\n"
)


def _run_client(script: str, *args: str) -> dict:
    import json

    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        start_new_session=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux scheduling")
def test_a_client_below_the_engines_session_raises_its_own_to_the_engines_and_puts_it_back():
    engine = _session_at(0)
    try:
        got = _run_client(CLIENT_MATCHES, str(engine.pid))
    finally:
        engine.kill()
        engine.wait()
    lift = got["lift"]
    if not autogroups_on():  # no session is ranked: the threads' nice is what counts
        assert lift["engine_session_nice"] is None and not any(
            "session" in line for line in lift["changed"] + lift["refused"]
        )
        return
    # Any user may set an autogroup nice of 0 or more: the lift is never refused here.
    assert lift["engine_session_nice"] == 0 and lift["client_session_nice_before"] == 10
    assert lift["changed"] == ["session nice 10 -> 0"] and lift["refused"] == []
    assert got["lifted"] == 0 and lift["client_session_nice"] == 0
    assert got["after"] == 10 and got["restored"] == ["session nice -> 10"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux scheduling")
def test_a_client_below_an_engine_in_its_own_session_raises_its_threads_where_allowed():
    import resource

    got = _run_client(CLIENT_BESIDE_ENGINE)
    lift = got["lift"]
    assert lift["engine_nice"] == 0 and lift["client_nice_before"] == 10
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    allowed = os.geteuid() == 0 or soft >= 20  # RLIMIT_NICE 20 allows nice 0
    if allowed:
        assert lift["refused"] == [] and lift["changed"] and got["nices"] == [0, 0]
        assert got["back"] == [10, 10]  # put back
    else:
        assert got["nices"] == [10, 10] and "CAP_SYS_NICE" in lift["refused"][0]
    # Never above the engine's: the engine at nice 0, no thread went below it.
    assert min(got["nices"]) >= 0


# A run's engine start in a client session at nice 10: the scripted engine starts in a
# session of its own (nice 0); what the manifest records of the client's priority.
RUN_START = (
    "import io, json, sys\n"
    "open('/proc/self/autogroup', 'w').write('10')\n"
    "from rich.console import Console\n"
    "from harness.prereg import load_study_file\n"
    "from harness.run.progress import RunProgress\n"
    "from harness.run.runner import ArmEngine, new_run\n"
    "from harness.run.session import executed_study\n"
    "from harness.measure.priority import _autogroup_nice\n"
    "loaded = load_study_file(sys.argv[1])\n"
    "study = executed_study(loaded.study)\n"
    "study = study.model_copy(update={'recording': study.recording.model_copy(\n"
    "    update={'client_priority': sys.argv[3]})})\n"
    "import pathlib\n"
    "store = new_run(loaded, pathlib.Path(sys.argv[2]))\n"
    "with RunProgress(Console(file=io.StringIO()), 0) as progress:\n"
    "    engine = ArmEngine(store, study.arm('base'), study, progress)\n"
    "    engine.ensure('test')\n"
    "    during = _autogroup_nice()\n"
    "    engine.close()\n"
    "record = store.manifest().to_json()['engines']['base'][0]\n"
    "print(json.dumps({'priority': record.get('client_priority'), 'during': during,\n"
    "                  'outranks': record['client_placement']['engine_outranks_client']}))\n"
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux scheduling")
@pytest.mark.parametrize("reading", ["match_engine", "as_started"])
def test_a_run_started_below_its_engine_matches_it_and_records_so(tmp_path, reading):
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "scripted-pass.yaml"
    got = _run_client(RUN_START, str(example), str(tmp_path / "results"), reading)
    if reading == "as_started":
        assert got["priority"] is None and got["during"] == 10
        if autogroups_on():
            assert "nice 0" in got["outranks"] and "nice 10" in got["outranks"]
        return
    lift = got["priority"]
    if autogroups_on():
        assert lift["changed"] == ["session nice 10 -> 0"] and got["during"] == 0
        assert got["outranks"] is None  # level with the engine now
    else:
        assert lift["engine_session_nice"] is None
