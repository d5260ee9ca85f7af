"""No engine outlives its harness: a harness SIGKILLed with an engine up leaves nothing
running (the parent-death signal and the engine guard), and what a run recorded finds
whatever an earlier attempt did leave (harness/engines/running/stale.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.engines.running.process import port_in_use
from harness.engines.running.stale import find_stale_engines, find_stale_in, stop_stale_engine
from tests.tiny_study import tiny_study

FAKE = Path(__file__).with_name("fake_engine.py")
HARNESS = Path(__file__).with_name("lifetime_harness.py")
ROOT = Path(__file__).resolve().parents[2]


def fake_arm(pids: Path, **env: str) -> dict:
    return {
        "name": "fake",
        "engine": "vllm",
        "launch": {
            "command": [sys.executable, str(FAKE)],
            "env": {"FAKE_ENGINE_MODE": "ok", "FAKE_ENGINE_PIDS": str(pids), **env},
            "startup_timeout_s": 30,
            "stop_grace_s": 5,
        },
    }


def alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            continue
    return out


def wait_gone(pids: list[int], timeout_s: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(pids)


class Harness:
    """lifetime_harness.py in a process of its own, with one engine up."""

    def __init__(
        self,
        tmp_path: Path,
        arm: dict,
        *,
        thread: bool = False,
        model_dir: Path | None = None,
        others: list[dict] | None = None,
    ) -> None:
        # `others`: arms the study needs beside the one started (a drafter's baseline).
        study = tiny_study(model_dir or tmp_path, [arm, *(others or [])])
        spec = tmp_path / "study.json"
        spec.write_text(study.model_dump_json(by_alias=True))
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(HARNESS),
                str(spec),
                str(tmp_path / "logs"),
                *(["thread"] if thread else []),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the harness exited {self.proc.wait(timeout=10)} before its engine was up"
        self.info = json.loads(line)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)  # a crash: nothing of it gets to clean up
        self.proc.wait(timeout=10)

    def cleanup(self, pids: list[int]) -> None:
        if self.proc.poll() is None:
            self.kill()
        for pid in alive(pids):  # only after a failed assertion
            os.kill(pid, signal.SIGKILL)


def read_pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()]


@pytest.mark.parametrize("escape", [False, True], ids=["child-in-group", "child-in-own-session"])
def test_sigkilled_harness_leaves_no_engine_process(tmp_path: Path, escape: bool) -> None:
    pids_file = tmp_path / "pids"
    env = {"FAKE_ENGINE_CHILD_SESSION": "1"} if escape else {}
    harness = Harness(tmp_path, fake_arm(pids_file, **env))
    pids = read_pids(pids_file) + [harness.info["guard_pid"]]
    try:
        assert harness.info["pgid"] == harness.info["pid"] == pids[0]
        assert len(alive(pids)) == 3  # engine, its child, the guard
        time.sleep(1.5)  # the guard has looked at the engine's processes at least once
        harness.kill()
        assert wait_gone(pids) == [], "engine processes outlived their harness"
        assert not port_in_use("127.0.0.1", harness.info["port"])
    finally:
        harness.cleanup(pids)


def test_engine_started_from_a_passing_thread_lives_as_long_as_its_harness(tmp_path: Path) -> None:
    """The parent-death signal fires when the forking *thread* exits: an engine started
    from a thread that has ended must keep running, and still die with the harness."""
    pids_file = tmp_path / "pids"
    harness = Harness(tmp_path, fake_arm(pids_file), thread=True)
    pids = read_pids(pids_file) + [harness.info["guard_pid"]]
    try:
        time.sleep(2)
        assert alive(pids) == pids, "the engine died with the thread that started it"
        harness.kill()
        assert wait_gone(pids) == []
    finally:
        harness.cleanup(pids)


def write_run(results: Path, name: str, records: list[dict]) -> Path:
    run = results / name
    run.mkdir(parents=True)
    engines: dict[str, list] = {}
    for record in records:
        engines.setdefault(record["arm"], []).append(record)
    (run / "manifest.json").write_text(json.dumps({"run_id": name, "engines": engines}))
    return run


def test_a_stale_engine_is_found_from_its_record_and_stopped(tmp_path: Path) -> None:
    """Harness and guard killed at once (the one case neither can handle): the leader
    dies of its parent-death signal, its child is left. The run's record finds it."""
    pids_file = tmp_path / "pids"
    harness = Harness(tmp_path, fake_arm(pids_file))
    engine, child = read_pids(pids_file)
    pids = [engine, child, harness.info["guard_pid"]]
    try:
        os.kill(harness.info["guard_pid"], signal.SIGKILL)
        harness.kill()
        assert wait_gone([engine]) == []
        assert alive([child]) == [child]  # a remnant in the engine's group
        record = {**harness.info, "state": "ready"}
        run = write_run(tmp_path / "results", "run-1", [record])
        # Records whose processes are gone or are other processes are not stale.
        me = psutil.Process()
        write_run(
            tmp_path / "results",
            "run-0",
            [
                {**record, "pid": 999_999_999, "pgid": 999_999_999},
                {
                    **record,
                    "pid": me.pid,
                    "pgid": os.getpgid(me.pid),
                    "command": ["python", "x"],
                    "started_wall": me.create_time() - 3600,
                },
            ],
        )
        found = find_stale_engines(run)
        assert [(s.arm, s.pid, s.pgid, s.processes) for s in found] == [
            ("fake", engine, engine, [child])
        ]
        assert [s.run for s in find_stale_in(tmp_path / "results")] == ["run-1"]
        assert "arm 'fake' from run run-1" in found[0].describe()
        assert stop_stale_engine(found[0], grace_s=5) == []
        assert alive([child]) == [] and find_stale_engines(run) == []
    finally:
        harness.cleanup(pids)


def test_a_live_engine_matches_its_record_and_a_reused_pid_does_not(tmp_path: Path) -> None:
    pids_file = tmp_path / "pids"
    harness = Harness(tmp_path, fake_arm(pids_file))
    pids = read_pids(pids_file) + [harness.info["guard_pid"]]
    try:
        record = {**harness.info, "state": "ready"}
        run = write_run(tmp_path / "results", "run-live", [record])
        (stale,) = find_stale_engines(run)
        assert stale.pid == harness.info["pid"] and stale.port_held
        assert sorted(stale.processes) == sorted(pids[:2])
        # The same pid recorded with another command and start time: a reused pid.
        other = write_run(
            tmp_path / "results",
            "run-reused",
            [{**record, "command": ["vllm", "serve", "x"], "started_wall": 0.0}],
        )
        assert find_stale_engines(other) == []
    finally:
        harness.cleanup(pids)
