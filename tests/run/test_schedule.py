"""The schedule's barriers, whatever the executor: the stop bar is judged only once the
whole of stage 1 is measured, stage-2 speed cells are never handed out when it fired, and
a check-bar rerun asks for a fresh engine of the baseline."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from harness import analysis
from harness.prereg import load_study_file
from harness.run.progress import RunProgress
from harness.run.runner import new_run
from harness.run.schedule import Batch, run_schedule
from tests.run.conftest import ROOT

STUDY = ROOT / "examples" / "scripted-shards.yaml"


class RecordingExecutor:
    """Measures nothing; records each batch and what the schedule had judged by then."""

    def __init__(self, judged: list[str]) -> None:
        self.batches: list[Batch] = []
        self.judged = judged
        self.judged_at: list[list[str]] = []
        self.closed = False

    def run_batch(self, batch: Batch, progress: RunProgress) -> None:
        self.judged_at.append(list(self.judged))
        self.batches.append(batch)

    def close(self) -> None:
        self.closed = True


def test_the_stop_bar_waits_for_stage_one_and_keeps_stage_two_speed_cells_unstarted(
    tmp_path, monkeypatch
):
    loaded = load_study_file(STUDY)
    store = new_run(loaded, tmp_path / "results")
    judged: list[str] = []

    def judge_stop(root, study):
        judged.append("stop")
        return SimpleNamespace(fired=True, evidence={"why": "test"})

    def check_bar_targets(root, study):
        judged.append("check")
        return ["a-base/chat/speed/c001"]

    def open_loop_reference_rps(root, study):
        judged.append("open")
        return {a.name: 2.0 for a in study.arms}

    monkeypatch.setattr(analysis, "judge_stop", judge_stop)
    monkeypatch.setattr(analysis, "check_bar_targets", check_bar_targets)
    monkeypatch.setattr(analysis, "open_loop_reference_rps", open_loop_reference_rps)
    from harness.plan import plan_cells

    cells = plan_cells(loaded.study)
    executor = RecordingExecutor(judged)
    with RunProgress(Console(file=io.StringIO()), 0) as progress:
        run_schedule(store, loaded.study, cells, executor, progress)
    stages = [b.stage for b in executor.batches]
    assert stages == ["stage 1", "stage 2", "the check-bar reruns", "stage 3"]
    # Nothing judged before stage 1 was handed out and returned; the stop bar before stage 2.
    assert executor.judged_at == [[], ["stop"], ["stop", "check"], ["stop", "check", "open"]]
    stage1, stage2, reruns, open_loop = executor.batches
    assert stage1.smoke and {c.stage for c in stage1.cells} == {1}
    assert stage2.cells and all(c.kind != "speed" for c in stage2.cells)
    skipped = {s["cell"] for s in store.manifest().to_json()["skipped"]}
    assert skipped == {c.id for c in cells if c.stage == 2 and c.kind == "speed"}
    assert [c.id for c in reruns.cells] == ["a-base/chat/speed/c001/rerun1"]
    assert reruns.fresh_engines == {"a-base"}
    assert open_loop.rates == {a.name: 2.0 for a in loaded.study.arms}
    assert executor.closed and store.manifest().to_json()["status"] == "complete"


def test_stage_five_runs_the_schedule_recorded_once_and_skips_a_task_without_one(
    tmp_path, monkeypatch
):
    """surface.verify_schedule: after stage 4 the proposed schedule is recorded in the
    manifest and handed to the executor with stage 5's cells; a resumed run reuses the
    record (nothing proposed again); a task the surface proposes none for is skipped, once,
    with the reason."""
    from harness.plan import plan_cells
    from harness.run.schedule import verification_batch
    from harness.rundir.schedule import KScheduleRecord, ScheduledLevel

    loaded = load_study_file(ROOT / "examples" / "scripted-surface.yaml")
    store = new_run(loaded, tmp_path / "results")
    study = loaded.study
    cells = [c for c in plan_cells(study) if c.stage == 5]
    proposed: list[int] = []
    record = KScheduleRecord(
        arm="surface-schedule-chat",
        task="chat",
        ranges=[(1, 2, 3), (3, None, 2)],
        levels=[
            ScheduledLevel(concurrency=2, k=3, predicted_speedup=2.9, ci_lower=2.8, ci_upper=3.0)
        ],
        setting="scripted: ...",
        proposed_wall=1.0,
    )

    def k_schedule_records(a, when):
        proposed.append(1)
        return [record], {}

    monkeypatch.setattr(analysis, "analyse", lambda root, study: None)
    monkeypatch.setattr(analysis, "k_schedule_records", k_schedule_records)
    with RunProgress(Console(file=io.StringIO()), 0) as progress:
        batch = verification_batch(store, study, cells, progress)
        again = verification_batch(store, study, cells, progress)  # a resume
    assert proposed == [1] and store.manifest().k_schedules["surface-schedule-chat"] == record
    for b in (batch, again):
        assert b is not None
        assert b.stage == "stage 5 (the k schedule verified)" and b.cells == cells
        assert b.k_schedules == {"surface-schedule-chat": [(1, 2, 3), (3, None, 2)]}

    # No schedule proposed (the drafter's acceptance unmeasured): skipped, said once.
    fresh = new_run(loaded, tmp_path / "other")
    monkeypatch.setattr(
        analysis,
        "k_schedule_records",
        lambda a, when: ([], {"chat": "drafter's acceptance not measured"}),
    )
    with RunProgress(Console(file=io.StringIO()), 0) as progress:
        assert verification_batch(fresh, study, cells, progress) is None
        assert verification_batch(fresh, study, cells, progress) is None
    skipped = fresh.manifest().skipped
    assert [s.cell for s in skipped] == [c.id for c in cells]
    assert all(
        s.reason == "no k schedule proposed: drafter's acceptance not measured" for s in skipped
    )


def test_a_surface_cell_whose_baseline_cell_was_skipped_is_skipped_once_through_a_resume(
    tmp_path,
):
    from harness.plan import baseline_speed_cell_id, plan_cells
    from harness.run.schedule import surface_batch
    from harness.rundir.cell import Stage
    from harness.rundir.schedule import SkippedCell

    loaded = load_study_file(ROOT / "examples" / "scripted-surface.yaml")
    store = new_run(loaded, tmp_path / "results")
    study = loaded.study
    cells = [c for c in plan_cells(study) if c.stage == Stage.SURFACE]
    lost = cells[0]
    base = SkippedCell(cell=baseline_speed_cell_id(study, lost, lost.session), reason="stop")
    store.edit_manifest(lambda m: m.skipped.append(base))
    with RunProgress(Console(file=io.StringIO()), 0) as progress:
        for _ in range(2):  # the run, then its resume
            batch = surface_batch(store, study, cells, progress)
            assert lost not in batch.cells and 0 < len(batch.cells) < len(cells)
    said = [s.cell for s in store.manifest().skipped]
    assert lost.id in said and len(said) == len(set(said))
