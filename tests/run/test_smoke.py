"""The smoke stage: a broken arm stops the run in seconds, before any registered cell,
with one line naming the arm and its engine's log line; a passed smoke is not redone on
resume unless its arm changed; an arm's cells on both sides of a stage boundary (the
smoke's included) share one engine start."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import psutil
import yaml
from rich.console import Console

from harness.analysis.load import load_run
from harness.prereg import load_study_file
from harness.report.views.verdict import smoke_summary
from harness.run import arm_engine as arm_engine_module
from harness.run import runner as runner_module
from harness.run.arm_engine import ArmEngine
from harness.run.progress import RunProgress
from harness.run.runner import Runner, new_run
from harness.run.session import executed_study
from harness.rundir.schedule import SmokeSummary
from tests.run.conftest import run_folder, specbench, verdict_of
from tests.run.test_remeasure import study_file

SMOKE_ON = {"smoke": True}


def smoke_lines(run: Path) -> list[dict]:
    path = run / "smoke" / "arms.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def said(proc) -> str:
    """What the run printed, with rich's line wrapping undone."""
    return re.sub(r"\s+", " ", proc.stdout + proc.stderr)


def specbench_errors(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("specbench: ")]


def starts(run: Path) -> dict[str, list[str | None]]:
    """Per arm, what each engine start was for (the smoke, or the cell that needed it)."""
    engines = json.loads((run / "manifest.json").read_text())["engines"]
    return {arm: [e["started_for"] for e in entries] for arm, entries in engines.items()}


def no_engine_left(run: Path) -> None:
    for entries in json.loads((run / "manifest.json").read_text())["engines"].values():
        for entry in entries:
            assert (
                not psutil.pid_exists(entry["pid"])
                or psutil.Process(entry["pid"]).status() == psutil.STATUS_ZOMBIE
            ), f"engine {entry['pid']} survived"


def test_a_drafter_whose_counter_does_not_move_stops_the_run_before_any_cell(results, tmp_path):
    study = study_file(tmp_path, drafter={"frozen_spec_counters": True}, recording=SMOKE_ON)
    proc = specbench("run", str(study), "--results", str(results), "--no-report", check=False)
    assert proc.returncode == 1, said(proc)[-3000:]
    errors = specbench_errors(proc)
    # One line: the arm, what failed, and the engine log's last relevant line.
    assert errors[0].startswith(
        "specbench: smoke: arm 'drafter': its speculation counter"
        " vllm:spec_decode_num_drafts_total did not move over 2 greedy requests"
    ), errors
    assert errors[0].endswith(
        "| engine log: WARNING scripted engine: speculation counters"
        " frozen (frozen_spec_counters): they never move"
    ), errors
    assert "Traceback" not in proc.stderr
    run = run_folder(results)
    assert not (run / "cells").exists()  # no registered cell was started
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "smoke_failed"
    assert (manifest["smoke"]["status"], manifest["smoke"]["arm"]) == ("failed", "drafter")
    # Baselines first, then drafters, the first cell's arm (base) last: the drafter is
    # smoked first here, so base never started.
    (check,) = smoke_lines(run)
    assert (check["kind"], check["arm"], check["status"], check["failed_check"]) == (
        "arm",
        "drafter",
        "failed",
        "counter",
    )
    assert check["counter"]["before"] == check["counter"]["after"] and not check["counter"]["moved"]
    assert [a["ok"] for a in check["answers"]] == [True, True]  # it did answer
    requests = (run / "smoke" / "requests.jsonl").read_text().splitlines()
    assert [json.loads(r)["cell_id"] for r in requests] == ["smoke/drafter"] * 2
    assert starts(run) == {"drafter": ["smoke"]}
    no_engine_left(run)
    # The report's verdict page says where the smoke stopped.
    summary = smoke_summary(load_run(run))
    assert summary[0].startswith(
        "Smoke stage: FAILED at arm drafter: arm 'drafter': its speculation counter"
    )


def test_a_drafter_below_its_acceptance_floor_stops_the_run_in_the_smoke(results, tmp_path):
    # A stale head: its first draft agrees 7 % of the time, so about 1.1 tokens a round
    # against a registered floor of 2.
    study = study_file(
        tmp_path, drafter={"accept_probs": [0.07, 0.5, 0.5, 0.5]}, recording=SMOKE_ON
    )
    data = yaml.safe_load(study.read_text())
    arm = next(a for a in data["arms"] if a["name"] == "drafter")
    arm["drafter"]["expect"] = {"acceptance_length_min": 2.0}
    study.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = specbench("run", str(study), "--results", str(results), "--no-report", check=False)
    assert proc.returncode == 1, said(proc)[-3000:]
    first = specbench_errors(proc)[0]
    assert re.match(
        r"specbench: smoke: arm 'drafter': 1\.\d\d tokens per round over 2 greedy"
        r" prompts at one user, below its drafter\.expect\.acceptance_length_min 2 ",
        first,
    ), first
    run = run_folder(results)
    assert not (run / "cells").exists()  # no registered cell was measured
    (check,) = smoke_lines(run)
    assert (check["arm"], check["status"], check["failed_check"]) == (
        "drafter",
        "failed",
        "acceptance",
    )
    assert check["acceptance"]["floor"] == 2.0 and check["acceptance"]["below"] is True
    assert 1.0 <= check["acceptance"]["tokens_per_round"] < 1.5
    assert json.loads((run / "manifest.json").read_text())["status"] == "smoke_failed"
    no_engine_left(run)


def test_a_drafter_whose_text_differs_stops_the_run_and_a_fixed_arm_alone_is_smoked_again(
    results, tmp_path
):
    study = study_file(tmp_path, drafter={"output_salt": 7}, recording=SMOKE_ON)
    proc = specbench("run", str(study), "--results", str(results), "--no-report", check=False)
    assert proc.returncode == 1, said(proc)[-3000:]
    first = specbench_errors(proc)[0]
    assert re.match(
        r"specbench: smoke: arm 'drafter': its greedy output differs from its"
        r" baseline 'base' on item \S+ at token 0 '.+' vs '.+' \(the target's margin 5"
        r" drafter, 5 baseline; a near-tie is below 0.5\), character \d+: ",
        first,
    ), first
    assert " -- real: " in first, first
    assert first.endswith(
        "| engine log: WARNING scripted engine: output salted (output_salt 7):"
        " greedy text differs from an unsalted engine's"
    ), first
    run = run_folder(results)
    assert not (run / "cells").exists()
    lines = smoke_lines(run)
    assert [(r["kind"], r["arm"], r["status"]) for r in lines] == [
        ("arm", "drafter", "passed"),
        ("arm", "base", "passed"),
        ("identity", "drafter", "failed"),
    ]
    assert (
        lines[0]["counter"]["moved"]
        and lines[0]["counter"]["after"] > lines[0]["counter"]["before"]
    )

    # The drafter fixed (a changed arm, so a deviation): the resume smokes the drafter
    # again, compares it with base's recorded answers, and leaves base's passed smoke be.
    data = yaml.safe_load(study.read_text())
    del next(a for a in data["arms"] if a["name"] == "drafter")["scripted"]["output_salt"]
    study.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = specbench(
        "run", str(study), "--results", str(results), "--resume", "--allow-deviation", "--no-report"
    )
    lines = smoke_lines(run)
    assert [(r["kind"], r["arm"], r["status"], r.get("attempt")) for r in lines[3:]] == [
        ("arm", "drafter", "passed", 2),
        ("identity", "drafter", "passed", None),
    ]
    assert lines[4]["compared"] == 2
    assert verdict_of(run)["verdict"] == "PASS"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["smoke"]["smoked_now"] == ["drafter"]
    # base was not smoked again: its stage-1 engine is the resume's first start for it.
    assert starts(run)["base"] == ["smoke", "base/chat/identity"]

    # A finished run resumed again: nothing to measure, nothing smoked.
    specbench("run", str(study), "--results", str(results), "--resume", "--no-report")
    assert len(smoke_lines(run)) == 5


def test_an_arm_whose_cells_span_a_stage_boundary_keeps_its_engine(results, tmp_path):
    study = study_file(tmp_path, recording=SMOKE_ON)
    proc = specbench("run", str(study), "--results", str(results), "--no-report")
    run = run_folder(results)
    assert verdict_of(run)["verdict"] == "PASS"
    # Engines in order: smoke drafter, smoke base | stage 1 base, drafter | stage 2
    # drafter, base. Six visits, four starts: the smoke's base engine serves base's
    # stage-1 cells, and the drafter's stage-1 engine its stage-2 accuracy cell.
    assert starts(run) == {
        "drafter": ["smoke", "drafter/chat/identity"],
        "base": ["smoke", "base/gsm8k/accuracy"],
    }
    text = said(proc)
    assert len(re.findall(r"starting scripted engine for arm", text)) == 4
    assert "keeping the engine of arm base from the smoke stage for stage 1 (no restart)" in text
    assert "keeping the engine of arm drafter from stage 1 for stage 2 (no restart)" in text
    # The same process: its arrival numbers go on from the smoke's (1 was the start-up
    # warm-up, 2 and 3 the smoke prompts, then the regime's timing at 1, 2 and 4 users: a
    # warm-up and two measured requests per user), where a fresh engine would answer 2 first.
    regime = sum(3 * users for users in (1, 2, 4))
    first = json.loads(
        (run / "cells" / "base__chat__identity" / "requests.jsonl").read_text().splitlines()[0]
    )
    assert first["response_id"] == f"chatcmpl-{4 + regime:08d}"
    lines = smoke_lines(run)
    assert [(r["kind"], r["arm"], r["status"]) for r in lines] == [
        ("arm", "drafter", "passed"),
        ("arm", "base", "passed"),
        ("identity", "drafter", "passed"),
    ]
    assert [r["engine"] for r in lines[:2]] == ["started", "started"]
    assert "smoke passed: 2 arms" in text
    summary = smoke_summary(load_run(run))
    assert summary == [
        "Smoke stage: passed for all 2 arms before the first cell: each started"
        " and answered 2 greedy prompts; drafter moved their speculation"
        " counters and matched their baselines' text"
    ]


def test_a_stage_begins_with_the_arm_whose_engine_is_running(tmp_path, monkeypatch):
    """Baseline reruns of an arm other than the first leave its engine up: stage 3 takes
    that arm first (the plan's order would restart it later)."""
    loaded = load_study_file(
        Path(__file__).resolve().parents[2] / "examples" / "scripted-pass.yaml"
    )
    store = new_run(loaded, tmp_path / "results")
    runner = Runner(store, executed_study(loaded.study), Console(file=io.StringIO()))
    ran: list[str] = []

    def run_one(self, engine, cell, progress, rate=None, extra=None) -> bool:
        ran.append(engine.arm.name)
        return True

    monkeypatch.setattr(Runner, "_run_one", run_one)
    open_cells = [c for c in runner.cells if c.stage == 3]
    assert [c.arm for c in open_cells][:1] == ["base"]  # the plan's order
    with RunProgress(Console(file=io.StringIO()), 0) as progress:
        runner._engines["drafter"] = ArmEngine(
            store, runner.study.arm("drafter"), runner.study, progress
        )
        runner._run_cells(open_cells, progress, {"base": 1.0, "drafter": 1.0}, stage="stage 3")
        assert ran == ["drafter"] * 3 + ["base"] * 3
        ran.clear()
        runner._engines.clear()  # nothing running: the plan's order
        runner._run_cells(open_cells, progress, {"base": 1.0, "drafter": 1.0}, stage="stage 3")
        assert ran == ["base"] * 3 + ["drafter"] * 3


def test_the_smoke_is_off_only_when_the_study_says_so(tmp_path, monkeypatch):
    loaded = load_study_file(study_file(tmp_path, recording={"smoke": False}))
    assert loaded.study.recording.smoke is False
    default = yaml.safe_load(Path(study_file(tmp_path)).read_text())
    del default["recording"]["smoke"]
    path = tmp_path / "default.yaml"
    path.write_text(yaml.safe_dump(default))
    assert load_study_file(path).study.recording.smoke is True  # unset: on

    store = new_run(loaded, tmp_path / "results")
    runner = Runner(store, executed_study(loaded.study), Console(file=io.StringIO()))
    started: list[str] = []
    monkeypatch.setattr(arm_engine_module, "start_engine", lambda arm, *a, **k: started.append(arm))
    with RunProgress(Console(file=io.StringIO()), 0) as progress:
        runner._smoke(progress)
    assert started == [] and not (store.root / "smoke").exists()
    assert store.manifest().smoke == SmokeSummary(status="off")
    assert smoke_summary(load_run(store.root)) == [
        "Smoke stage: off (the study registers recording.smoke: false)"
    ]


def test_no_smoke_when_every_cell_is_measured(tmp_path, monkeypatch):
    loaded = load_study_file(study_file(tmp_path, recording=SMOKE_ON))
    store = new_run(loaded, tmp_path / "results")
    runner = Runner(store, executed_study(loaded.study), Console(file=io.StringIO()))
    monkeypatch.setattr(type(store), "is_complete", lambda self, cell_id: True)
    called: list = []
    monkeypatch.setattr(runner_module, "SmokeStage", lambda *a: called.append(a))
    with RunProgress(Console(file=io.StringIO()), 0) as progress:
        runner._smoke(progress)
    assert called == []


def test_a_host_whose_plain_step_grows_with_users_is_named_compute_bound_beside_the_verdict(
    results, tmp_path
):
    # A 1 ms weight pass and 4 ms of arithmetic per token: the plain step is 4 ms at one
    # user, 8 at two and 16 at four, like the bfloat16 demo on a CPU without AVX-512.
    compute = {"weight_bytes": 2.0e9, "flops_per_token": 1.6e11}
    study = study_file(tmp_path, base=compute, drafter=compute, recording=SMOKE_ON)
    proc = specbench("run", str(study), "--results", str(results), "--no-report", check=False)
    run = run_folder(results)
    regime = json.loads((run / "manifest.json").read_text())["regime"]["base"]
    steps = {lv["users"]: lv["step_ms"] for lv in regime["levels"]}
    assert 3.5 < steps[1] < 6 and 1.7 < steps[2] / steps[1] < 2.3, steps
    assert regime["memory_bound"] is False and regime["compute_bound_at"] == [2, 4], regime
    # One line per timed baseline in smoke/regime.jsonl, the drafter not timed.
    lines = (run / "smoke" / "regime.jsonl").read_text().splitlines()
    assert [json.loads(x)["arm"] for x in lines] == ["base"]
    (entry,) = verdict_of(run)["host_regime"]
    assert entry["line"].startswith(
        f"This host is compute-bound at 2 users: step"
        f" x{steps[2] / steps[1]:.1f} (base's plain step "
    ), entry
    assert entry["line"].endswith("tolerance x1.3); speculation cannot pay here")
    assert "compute-bound at 2 users" in said(proc)  # said as the smoke timed it
    # The verdict page carries the same sentence (and whatever verdict the bars gave).
    from harness.report.views.verdict import regime_summary
    from harness.rundir.manifest import read_manifest

    assert regime_summary(read_manifest(run / "manifest.json")) == [entry["line"]]
