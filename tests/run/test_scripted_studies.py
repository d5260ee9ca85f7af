"""Whole studies on the scripted test engine: the bars decide as registered."""

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
import yaml

from harness.engines.running.process import alive, free_port, group_members, port_in_use
from harness.rundir import cell_dirname
from tests.run.conftest import ROOT, copy_of_run, run_folder, specbench, start_run, verdict_of


def bar(verdict: dict, name: str) -> dict:
    found = [b for b in verdict["bars"] if b["name"] == name]
    assert found, f"no bar {name!r} in {[b['name'] for b in verdict['bars']]}"
    return found[0]


def complete_cells(run: Path) -> dict[str, dict]:
    out = {}
    for cell_dir in (run / "cells").iterdir():
        marker = cell_dir / "complete.json"
        if marker.exists():
            info = json.loads((cell_dir / "cell.json").read_text())
            out[info["cell"]["id"]] = json.loads(marker.read_text())
    return out


def usable_attempt(run: Path, cell: str, marker: dict) -> bool:
    info = json.loads((run / "cells" / cell_dirname(cell) / "cell.json").read_text())
    return any(
        a["attempt"] == marker["attempt"] and a["status"] == "complete" for a in info["attempts"]
    )


@pytest.fixture(scope="module")
def pass_run(tmp_path_factory) -> Path:
    """examples/scripted-pass.yaml run once, uninterrupted (a reference for the resume test)."""
    out = tmp_path_factory.mktemp("pass")
    specbench(
        "run",
        "examples/scripted-pass.yaml",
        "--results",
        str(out / "results"),
        "--reports",
        str(out / "reports"),
    )
    return run_folder(out / "results")


def test_scripted_pass_study_passes(pass_run):
    run = pass_run
    verdict = verdict_of(run)
    assert verdict["verdict"] == "PASS", json.dumps(verdict, indent=1)[:3000]
    speed = json.dumps(bar(verdict, "pass.speed")["evidence"])
    for c in ("c001", "c002", "c004"):
        assert f"drafter/chat/speed/{c}" in speed and f"base/chat/speed/{c}" in speed
    assert (run.parent.parent / "reports" / f"{run.name}.pdf").stat().st_size > 10_000
    # A finished run leaves the tables the README promises, from the same analysis.
    for name in ("cells.csv", "cells.parquet", "speedups.csv", "speedups.parquet"):
        assert (run / name).stat().st_size > 0, name
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["stop"]["fired"] is False
    # The smoke timed the baseline's plain step at 1, 2 and 4 users: the scripted 10 ms
    # weight pass holds it flat, so the host is memory-bound at the pass levels.
    regime = manifest["regime"]["base"]
    assert regime["memory_bound"] is True and regime["compute_bound_at"] == [], regime
    assert [lv["users"] for lv in regime["levels"]] == [1, 2, 4]
    assert all(9.0 < lv["step_ms"] < 15.0 for lv in regime["levels"]), regime
    assert verdict["host_regime"][0]["line"].startswith("Host regime: memory-bound")
    # Each engine environment's full package list (the scripted engine's is the harness's).
    env = manifest["engine_environments"][sys.executable]
    assert env["arms"] == ["base", "drafter"]
    assert {"pydantic", "httpx"} <= {p["name"].lower() for p in env["packages"]}
    # Open-loop cells ran at rates relative to the knee's throughput.
    open_cells = [c for c in complete_cells(run) if "/open/" in c]
    assert len(open_cells) == 6


def stop_study(folder: Path) -> Path:
    """examples/scripted-stop.yaml without its open loop (which runs after the stop bar,
    ~25 s, and no test here reads it)."""
    data = yaml.safe_load((ROOT / "examples" / "scripted-stop.yaml").read_text())
    del data["loads"]["open_loop"]
    path = folder / "stop.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def stop_run(tmp_path_factory) -> Path:
    """One finished run of stop_study (levels 1-16, the stop fired at 4), in a folder
    holding stop.yaml and results/: read by the stop test, and copied by each test that
    resumes a finished run (copy_of_run)."""
    folder = tmp_path_factory.mktemp("stop")
    specbench("run", str(stop_study(folder)), "--results", str(folder / "results"), "--no-report")
    return folder


def test_scripted_stop_study_stops_and_skips_the_expensive_cells(stop_run):
    run = run_folder(stop_run / "results")
    verdict = verdict_of(run)
    assert verdict["verdict"] == "STOP", json.dumps(verdict, indent=1)[:3000]
    evidence = json.dumps(bar(verdict, "stop")["evidence"])
    assert "drafter/chat/speed/c004" in evidence
    done = complete_cells(run)
    assert not [c for c in done if c.endswith(("c008", "c016"))], sorted(done)
    # Identity and accuracy still ran.
    assert "drafter/chat/identity" in done and "drafter/gsm8k/accuracy" in done
    skipped = json.loads((run / "manifest.json").read_text())["skipped"]
    assert {s["cell"] for s in skipped} == {
        f"{arm}/chat/speed/c{c:03d}" for arm in ("base", "drafter") for c in (8, 16)
    }


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_killed_runner_resumes_to_the_same_verdict_without_rerunning_cells(results, pass_run):
    """SIGKILL `specbench run` mid-cell (a crash: nothing of it gets to clean up): no
    engine process survives it, and `--resume` finishes the study without rerunning cells."""
    reference = verdict_of(pass_run)

    proc = start_run(
        "examples/scripted-pass.yaml",
        results,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    children: list[psutil.Process] = []
    try:

        def mid_cell() -> bool:
            if len(list(results.glob("*/cells/*/complete.json"))) < 4:
                return False
            # The newest engine serving, and a cell measuring on it (requests, no marker).
            manifest = json.loads(next(results.glob("*/manifest.json")).read_text())
            newest = max(
                (e for es in manifest["engines"].values() for e in es),
                key=lambda e: e["started_wall"],
            )
            measuring = [
                c
                for c in results.glob("*/cells/*")
                if (c / "requests.jsonl").exists()
                and not (c / "complete.json").exists()
                and (c / "requests.jsonl").stat().st_size > 0
            ]
            return (
                newest["state"] == "ready" and psutil.pid_exists(newest["pid"]) and bool(measuring)
            )

        _wait_for(mid_cell, 120, "four complete cells and a cell in progress")
        # The engine and its guard each run in a session of their own: the kill of the
        # runner's group below misses them, as a crash of the runner would.
        children = psutil.Process(proc.pid).children(recursive=True)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    run = run_folder(results)
    manifest = json.loads((run / "manifest.json").read_text())
    records = [e for es in manifest["engines"].values() for e in es]
    assert records and all(e["pgid"] and e["port"] and e["pid"] for e in records), records
    serving = max(records, key=lambda e: e["started_wall"])
    assert serving["state"] == "ready" and serving["pid"] in {c.pid for c in children}
    # Nothing stops them but what the harness set up before it died.
    deadline = time.monotonic() + 30
    while (
        alive(children) or any(group_members(e["pgid"]) for e in records)
    ) and time.monotonic() < deadline:
        time.sleep(0.2)
    survivors = [(p.pid, p.cmdline()) for p in alive(children)]
    assert not survivors, f"processes outlived the SIGKILLed runner: {survivors}"
    assert not [e["pgid"] for e in records if group_members(e["pgid"])]
    for e in records:
        assert not port_in_use("127.0.0.1", e["port"]), e
    run = run_folder(results)
    # A cell whose latest attempt is unusable (client lag) has a complete.json too, and
    # the resume rightly measures it again: only usable cells must be left alone.
    before = {c: m for c, m in complete_cells(run).items() if usable_attempt(run, c, m)}
    sizes = {c: (run / "cells" / cell_dirname(c) / "requests.jsonl").stat().st_size for c in before}
    assert len(before) >= 3
    smoked = (run / "smoke" / "arms.jsonl").read_text()
    assert smoked.count('"status":"passed"') == 3  # base, drafter, drafter against base

    specbench(
        "run", "examples/scripted-pass.yaml", "--results", str(results), "--resume", "--no-report"
    )
    after = complete_cells(run)
    # The smoke passed before the kill and the arms are unchanged: not redone.
    assert (run / "smoke" / "arms.jsonl").read_text() == smoked
    assert json.loads((run / "manifest.json").read_text())["smoke"]["smoked_now"] == []
    for cell, marker in before.items():
        assert after[cell] == marker, f"{cell} was run again"
        size = (run / "cells" / cell_dirname(cell) / "requests.jsonl").stat().st_size
        assert size == sizes[cell], f"{cell} got more records"
    assert verdict_of(run)["verdict"] == reference["verdict"] == "PASS"
    assert {b["name"]: b["status"] for b in verdict_of(run)["bars"]} == {
        b["name"]: b["status"] for b in reference["bars"]
    }


def test_resume_under_a_changed_study_needs_allow_deviation(stop_run, tmp_path):
    study, results = copy_of_run(stop_run, "stop.yaml", tmp_path)
    data = yaml.safe_load(study.read_text())
    data["tasks"][0]["max_tokens"] = 24
    study.write_text(yaml.safe_dump(data, sort_keys=False))
    refused = specbench(
        "run", str(study), "--results", str(results), "--resume", "--no-report", check=False
    )
    assert refused.returncode == 2
    assert "--allow-deviation" in refused.stderr and "Traceback" not in refused.stderr
    specbench(
        "run", str(study), "--results", str(results), "--resume", "--allow-deviation", "--no-report"
    )
    manifest = json.loads((run_folder(results) / "manifest.json").read_text())
    assert len(manifest["deviations"]) == 1
    assert any("max_tokens" in change for change in manifest["deviations"][0]["changes"])


def test_engine_killed_mid_cell_is_restarted_and_the_cell_retried(results, tmp_path):
    # Steps of 30 ms instead of 10: the target cell lasts several seconds, so the kill
    # lands mid-cell.
    study = tmp_path / "slow-stop.yaml"
    text = (ROOT / "examples" / "scripted-stop.yaml").read_text()
    assert "weight_bytes: 2.0e10" in text
    data = yaml.safe_load(text.replace("weight_bytes: 2.0e10", "weight_bytes: 6.0e10"))
    # The target is the first cell, and nothing before it: no smoke stage, no identity
    # cell (at 30 ms steps they took ~9 s before the target began).
    data["recording"]["smoke"] = False
    data["tasks"][0]["uses"] = ["speed"]
    data["bars"]["pass"]["identity"] = None
    study.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = start_run(
        study,
        results,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    target = "base__chat__speed__c001"
    try:

        def requests_started() -> bool:
            path = next(iter(results.glob(f"*/cells/{target}/requests.jsonl")), None)
            return path is not None and len(path.read_text().splitlines()) >= 1

        _wait_for(requests_started, 120, "the first requests of base/chat/speed/c001")
        run = run_folder(results)
        engines = json.loads((run / "manifest.json").read_text())["engines"]["base"]
        os.kill(engines[-1]["pid"], signal.SIGKILL)

        # Once a retry has measured the cell usably, Ctrl-C the runner: it stops its engine
        # and leaves every finished cell readable. (complete.json alone is not that: it also
        # names an attempt that ended invalid, which a busy host can make of a retry, and
        # the runner then measures again; a Ctrl-C there interrupts that attempt.)
        def retried_and_usable() -> bool:
            cell_json = run / "cells" / target / "cell.json"
            attempts = json.loads(cell_json.read_text())["attempts"] if cell_json.exists() else []
            return any(a.get("status") == "complete" for a in attempts)

        _wait_for(retried_and_usable, 180, "a retry of the cell to be measured usably")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out[-3000:]
    info = json.loads((run / "cells" / target / "cell.json").read_text())
    statuses = [a["status"] for a in info["attempts"]]
    assert statuses[0] == "failed" and statuses[-1] == "complete", info["attempts"]
    assert "exited" in info["attempts"][0]["error"]
    manifest = json.loads((run / "manifest.json").read_text())
    assert len(manifest["engines"]["base"]) >= 2  # the restart is recorded
    assert manifest["status"] == "interrupted"
    marker = json.loads((run / "cells" / target / "complete.json").read_text())
    assert marker["attempt"] == len(statuses)
    # No engine outlives the interrupted runner.
    for engine in manifest["engines"]["base"]:
        with pytest.raises(ProcessLookupError):
            os.kill(engine["pid"], 0)


def test_resume_stops_a_stale_engine_and_refuses_a_live_runner(stop_run, tmp_path):
    """An engine an earlier attempt left running (recorded in the manifest, still
    serving its port) is stopped by `--resume`, named, and recorded; a run whose
    recorded runner is still alive is refused."""
    study, results = copy_of_run(stop_run, "stop.yaml", tmp_path)
    run = run_folder(results)
    manifest_path = run / "manifest.json"
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "harness.testengine",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--spec-json",
        "{}",
        "--served-model-name",
        "scripted",
    ]
    started = time.time()
    stale = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    sleeper = None
    try:
        _wait_for(lambda: port_in_use("127.0.0.1", port), 30, "the stale engine's port")
        manifest = json.loads(manifest_path.read_text())
        recorded = dict(manifest["engines"]["base"][-1])
        recorded.update(
            pid=stale.pid,
            pgid=stale.pid,
            host="127.0.0.1",
            port=port,
            command=command,
            started_wall=started,
            guard_pid=None,
            base_url=f"http://127.0.0.1:{port}",
        )
        manifest["engines"]["base"].append(recorded)
        manifest_path.write_text(json.dumps(manifest))

        # A runner still alive (its recorded pid and start time) keeps the run its own.
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        saved = json.loads(manifest_path.read_text())
        saved["runner"] = {
            "pid": sleeper.pid,
            "cmdline": ["specbench"],
            "invoked_as": None,
            "started_wall": psutil.Process(sleeper.pid).create_time(),
        }
        manifest_path.write_text(json.dumps(saved))
        refused = specbench(
            "run", str(study), "--results", str(results), "--resume", "--no-report", check=False
        )
        assert refused.returncode == 1, refused.stderr
        assert f"still being run by process {sleeper.pid}" in refused.stderr
        assert stale.poll() is None  # refused before touching anything

        sleeper.kill()
        sleeper.wait()
        out = specbench("run", str(study), "--results", str(results), "--resume", "--no-report")
        assert (
            f"stopping a stale engine of arm 'base' from run {run.name}: pid {stale.pid}"
            in out.stdout
        ), out.stdout
        assert f"port {port} (held)" in out.stdout
        assert stale.wait(timeout=10) is not None
        assert not port_in_use("127.0.0.1", port)
        after = json.loads(manifest_path.read_text())
        assert [(s["pid"], s["action"]) for s in after["stale_engines"]] == [
            (stale.pid, "stopped on resume")
        ]
        assert after["status"] == "complete" and after["runner"]["pid"] != sleeper.pid
    finally:
        for proc in (stale, sleeper):
            if proc is not None and proc.poll() is None:
                proc.kill()
