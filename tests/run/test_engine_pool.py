"""Engines kept up across stages: `recording.engines_alive` caps how many."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from harness.prereg import load_study_file
from harness.run.progress import RunProgress
from harness.run.runner import ArmEngine, Runner, new_run
from harness.run.session import executed_study

PASS = Path(__file__).resolve().parents[2] / "examples" / "scripted-pass.yaml"


def sessions(tmp_path: Path, monkeypatch, engines_alive: int) -> list[tuple[str, int]]:
    """(arm, engine session) for every cell of the three stages and a baseline rerun, in
    the order they ran; nothing is measured and no engine really starts."""
    loaded = load_study_file(PASS)
    study = executed_study(loaded.study)
    study = study.model_copy(
        update={"recording": study.recording.model_copy(update={"engines_alive": engines_alive})}
    )
    runner = Runner(
        new_run(loaded, tmp_path / f"results-{engines_alive}"), study, Console(file=io.StringIO())
    )
    seen: list[ArmEngine] = []  # each engine session once, in order of first use
    ran: list[tuple[str, int]] = []

    def run_one(self, engine, cell, progress, rate=None, extra=None):
        if not any(e is engine for e in seen):
            seen.append(engine)
        ran.append((engine.arm.name, next(i for i, e in enumerate(seen, 1) if e is engine)))
        return True

    monkeypatch.setattr(Runner, "_run_one", run_one)
    monkeypatch.setattr(ArmEngine, "close", lambda self: None)
    rates = {"base": 1.0, "drafter": 1.0}
    with RunProgress(Console(file=io.StringIO()), 0) as progress:
        for stage in (1, 2, 3):
            runner._run_cells(
                [c for c in runner.cells if c.stage == stage],
                progress,
                rates,
                stage=f"stage {stage}",
            )
        base_cell = next(c for c in runner.cells if c.arm == "base" and c.kind == "speed")
        runner.close_engine("base")  # what rerun_baselines does before its cells
        runner._run_cells(runner.rerun_cells([base_cell.id]), progress, stage="reruns")
    return ran


def test_one_engine_up_restarts_at_each_change_of_arm(tmp_path, monkeypatch):
    ran = sessions(tmp_path, monkeypatch, engines_alive=1)
    # stage 1: base, drafter; stage 2: drafter (kept), base; stage 3: base (kept),
    # drafter; the rerun: a new base session
    changes = [ran[0]] + [b for a, b in zip(ran, ran[1:], strict=False) if a != b]
    assert [arm for arm, _ in changes] == ["base", "drafter", "base", "drafter", "base"]
    assert len({s for _, s in ran}) == 5


def test_engines_kept_up_start_once_per_arm_and_a_rerun_gets_a_new_session(tmp_path, monkeypatch):
    ran = sessions(tmp_path, monkeypatch, engines_alive=2)
    before_rerun, rerun = ran[:-1], ran[-1]
    assert {arm: {s for a, s in before_rerun if a == arm} for arm in ("base", "drafter")} == {
        "base": {1},
        "drafter": {2},
    }  # one engine session per arm across all three stages
    assert rerun == ("base", 3)  # the check bar's rerun measures a fresh baseline session


def smoke_only(tmp_path: Path, engines_alive: int) -> dict:
    """The smoke stage alone, on the real scripted engines; returns the manifest."""
    loaded = load_study_file(PASS)
    study = executed_study(loaded.study)
    study = study.model_copy(
        update={"recording": study.recording.model_copy(update={"engines_alive": engines_alive})}
    )
    store = new_run(loaded, tmp_path / f"results-{engines_alive}")
    runner = Runner(store, study, Console(file=io.StringIO()))
    try:
        with RunProgress(Console(file=io.StringIO()), 0) as progress:
            runner._smoke(progress)
    finally:
        runner.close()
    return store.manifest().to_json()


def test_engines_that_may_all_stay_up_start_together_before_the_smoke(tmp_path):
    manifest = smoke_only(tmp_path, engines_alive=2)
    assert manifest["smoke"]["status"] == "passed"
    starts = {arm: records for arm, records in manifest["engines"].items()}
    assert {arm: len(r) for arm, r in starts.items()} == {"base": 1, "drafter": 1}
    (base,), (drafter,) = starts["base"], starts["drafter"]
    # Each spawned before the other was ready: the starts overlapped.
    assert drafter["started_wall"] < base["started_wall"] + base["ready_after_s"]
    assert base["started_wall"] < drafter["started_wall"] + drafter["ready_after_s"]
    # The smoke counts them as its own starts, not engines it found up.
    checks = [
        c
        for c in map(
            json.loads,
            (tmp_path / "results-2").glob("*/smoke/arms.jsonl").__next__().read_text().splitlines(),
        )
        if c["kind"] == "arm"
    ]
    assert {c["arm"]: c["engine"] for c in checks} == {"base": "started", "drafter": "started"}


def test_one_engine_up_starts_each_when_its_arm_is_smoked(tmp_path):
    manifest = smoke_only(tmp_path, engines_alive=1)
    (base,), (drafter,) = manifest["engines"]["base"], manifest["engines"]["drafter"]
    first, second = sorted((base, drafter), key=lambda r: r["started_wall"])
    assert second["started_wall"] >= first["started_wall"] + first["ready_after_s"]
