"""The schedule of a run: its stages and barriers as a generator of cell batches.

The schedule decides what is measured next from what the run folder already holds
(GuideLLM's profile yields its next strategy from the last result the same way); an
executor measures each batch (harness.run.runner's LocalExecutor on this machine, or
harness.run.ray_executor's shards on several GPUs) and returns only when all of it is
done, which is the barrier:

  stage 1        the smoke stage, then identity cells and the stop bar's speed cells
                 (under a group-sequential design, stages 1 and 2 session by session, the
                 bars read at each look: harness.run.looks)
  (barrier)      the stop bar is judged on the whole of stage 1; if it fires the
                 remaining speed cells are skipped, never started
  stage 2        the remaining speed cells, the accuracy cells
  (barrier)      the check bar: baseline cells behind an implausible speedup are
                 measured again, each in a fresh engine session of its arm
  stage 3        the open loop, at rates relative to each arm's knee
  stage 4        the round-cost surface (`surface:`), paired with the baseline's cells
  (barrier)      the surface proposes a k schedule per task (kept in the manifest)
  stage 5        that schedule run at every registered level (`surface.verify_schedule`)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from harness.errors import SpecbenchError
from harness.plan import baseline_speed_cell_id
from harness.prereg.schema import Study
from harness.run.attempts import needs_measuring
from harness.run.progress import RunProgress
from harness.run.store import RunStore
from harness.rundir import rerun_of
from harness.rundir.cell import Cell, Stage
from harness.rundir.manifest import Manifest, RunStatus
from harness.rundir.schedule import RerunRecord, SkippedCell, StopDecisionRecord


@dataclass(frozen=True)
class Batch:
    """Cells an executor measures before the schedule looks at the folder again."""

    stage: str  # what the person watching is told ("stage 1", "the check-bar reruns", ...)
    cells: list[Cell]
    smoke: bool = False  # every arm of the executor shown working first (harness.run.smoke)
    rates: dict[str, float] | None = None  # open loop: each arm's knee throughput (req/s)
    # Arms whose engine must be a fresh start before these cells (a check-bar rerun).
    fresh_engines: frozenset[str] = field(default_factory=frozenset)
    # Stage 5: each schedule arm's k schedule (harness.plan_arms), known only now.
    k_schedules: dict[str, list[tuple[int, int | None, int]]] = field(default_factory=dict)


class Executor(Protocol):
    def run_batch(self, batch: Batch, progress: RunProgress) -> None: ...

    def close(self) -> None: ...


def _analysis():
    # The analysis stage is imported late: the schedule hands it only the folder.
    from harness import analysis

    return analysis


def rerun_cells(cells: list[Cell], targets: list[str]) -> list[Cell]:
    """The check bar's baseline reruns: one more measurement of each cell (every session
    of a baseline measured in sessions), as `Cell.rerun_cell` builds it. A session's
    rerun is a session of its own, numbered after the registered ones (session s reruns
    as N + s), so each is a fresh engine start of its own and an engine that draws its
    state per session number draws a new one; one arm's reruns of a session share it."""
    by_id = {c.id: c for c in cells}
    last = max((c.session for c in cells if c.session is not None), default=0)
    reruns = []
    for target in targets:
        if target not in by_id:
            raise SpecbenchError(f"check bar named {target}, which is not a cell of this plan")
        reruns.append(by_id[target].rerun_cell(last))
    return sorted(reruns, key=lambda c: (c.arm, c.session or 0))


def rerun_batch(
    store: RunStore, study: Study, cells: list[Cell], progress: RunProgress
) -> Batch | None:
    """The check bar's batch, recorded in the manifest (None: the bar did not fire)."""
    targets = _analysis().check_bar_targets(store.root, study)
    # A rerun left invalid is not rerun again, unless `--remeasure-invalid` gave it a fresh
    # budget (harness.run.remeasure): then it is measured again like the first time.
    granted = [o for r in store.manifest().remeasured if (o := rerun_of(r.cell))]
    again = [
        c.planned().id
        for c in rerun_cells(cells, list(dict.fromkeys(o for o in granted if o not in targets)))
        if needs_measuring(store, study, c, None)
    ]
    if not targets and not again:
        return None
    if targets:
        progress.note(f"check bar fired: rerunning baseline cells {', '.join(targets)}")
    reruns = rerun_cells(cells, targets + again)
    recorded = {r.cell for r in store.manifest().reruns}
    new = [
        RerunRecord(
            cell=cell.id,
            of=cell.planned().id,
            reason="check bar fired",
            when=time.time(),
        )
        for cell in reruns
        if cell.id not in recorded
    ]
    if new:
        store.edit_manifest(lambda m: m.reruns.extend(new))
    # A rerun is a new engine session of the baseline, whatever is up: what it checks is
    # that the first measurement was not a session's accident.
    return Batch("the check-bar reruns", reruns, fresh_engines=frozenset(c.arm for c in reruns))


def study_schedule(
    store: RunStore, study: Study, cells: list[Cell], progress: RunProgress
) -> Iterator[Batch]:
    """The batches of a whole run, each decided once the one before is measured."""
    planned = {s: [c for c in cells if c.stage == s] for s in Stage}
    yield from session_batches(store, study, planned[Stage.STOP], progress, "stage 1", smoke=True)
    stop = _analysis().judge_stop(store.root, study)
    decision = StopDecisionRecord(fired=stop.fired, judged_wall=time.time(), evidence=stop.evidence)
    store.edit_manifest(lambda m: setattr(m, "stop", decision))
    stage2 = planned[Stage.REST]
    if stop.fired:
        skipped = [c for c in stage2 if c.kind == "speed"]
        _skip(store, progress, skipped, "stop bar fired", f"skipping {len(skipped)} speed cells")
        stage2 = [c for c in stage2 if c.kind != "speed"]
    yield from session_batches(store, study, stage2, progress, "stage 2")
    if reruns := rerun_batch(store, study, cells, progress):
        yield reruns
    for stage, batch_of in LATER_STAGES.items():
        if planned[stage] and (batch := batch_of(store, study, planned[stage], progress)):
            yield batch


def session_batches(
    store: RunStore,
    study: Study,
    cells: list[Cell],
    progress: RunProgress,
    name: str,
    smoke: bool = False,
) -> Iterator[Batch]:
    """One stage's cells: one batch under a fixed design; else one per session, each
    look taken after its session."""
    if study.design.kind == "fixed" or not any(c.session for c in cells):
        yield Batch(name, cells, smoke=smoke)
        return
    n = study.recording.sessions
    looks = study.design.looks_of(n)
    for s in range(1, n + 1):
        skipped = store.manifest().skipped_reasons()
        yield Batch(
            f"{name}, session {s} of {n}",
            [c for c in cells if (c.session or 1) == s and c.id not in skipped],
            smoke=smoke and s == 1,
        )
        if s in looks and s < n:
            from harness.run.looks import take_look

            take_look(
                store,
                study,
                cells[0].stage,
                s,
                [c for c in cells if (c.session or 0) > s],
                progress,
            )


def open_loop_batch(
    store: RunStore, study: Study, cells: list[Cell], progress: RunProgress
) -> Batch | None:
    """Stage 3, the open loop at rates relative to each arm's knee. Without a usable knee
    cell there is no rate to run at: say so and go on to the verdict, which names it."""
    try:
        rates = _analysis().open_loop_reference_rps(store.root, study)
    except SpecbenchError as err:
        _skip(store, progress, cells, " ".join(err.lines), "open loop skipped")
        return None
    return Batch("stage 3", cells, rates=rates)


def surface_batch(store: RunStore, study: Study, cells: list[Cell], progress: RunProgress) -> Batch:
    """Stage 4, the round-cost surface: each of its cells is paired with its baseline's
    cell at the same level and task, so where the stop bar skipped that one, it is
    skipped too (there is nothing to divide by)."""
    skipped = store.manifest().skipped_reasons()
    paired = {c.id: baseline_speed_cell_id(study, c, c.session) for c in cells}
    lost = [c for c in cells if paired[c.id] in skipped]
    if lost:
        _skip(
            store,
            progress,
            lost,
            "its baseline's cell was skipped (stop bar fired, or a look decided its bars)",
            f"surface: {len(lost)} cells skipped",
        )
    return Batch("stage 4 (the round-cost surface)", [c for c in cells if c not in lost])


def verification_batch(
    store: RunStore, study: Study, cells: list[Cell], progress: RunProgress
) -> Batch | None:
    """Stage 5, the k schedule verified: the schedule the measured surface proposes per
    task, recorded in the manifest once (a resumed run runs the one it recorded), run by
    each task's schedule arm at every registered level. A task the surface proposes no
    schedule for, and a level whose baseline cell was skipped, are skipped and say why."""
    schedules = store.manifest().k_schedules
    if not schedules:
        records, missing = _analysis().k_schedule_records(
            _analysis().analyse(store.root, study), time.time()
        )
        if records:
            store.edit_manifest(lambda m: m.k_schedules.update({r.arm: r for r in records}))
            for r in records:
                progress.note(f"k schedule for {r.task}: {r.setting}")
        said = store.manifest().skipped_reasons()
        for task, why in missing.items():
            lost = [c for c in cells if c.task == task and c.id not in said]  # once, on resume too
            if lost:
                _skip(
                    store,
                    progress,
                    lost,
                    f"no k schedule proposed: {why}",
                    f"schedule verification on {task}: {len(lost)} cells skipped",
                )
        schedules = store.manifest().k_schedules
    skipped = store.manifest().skipped_reasons()
    lost = [
        c
        for c in cells
        if c.id not in skipped
        and c.arm in schedules
        and baseline_speed_cell_id(study, c) in skipped
    ]
    if lost:
        _skip(
            store,
            progress,
            lost,
            "its baseline's cell was skipped (stop bar fired)",
            f"schedule verification: {len(lost)} cells skipped",
        )
    run = [c for c in cells if c.arm in schedules and c not in lost]
    if not run:
        return None
    return Batch(
        "stage 5 (the k schedule verified)",
        run,
        k_schedules={arm: list(r.ranges) for arm, r in schedules.items()},
    )


# The stages after the closed loop's: each batches its planned cells, or skips them (None).
LATER_STAGES = {
    Stage.OPEN_LOOP: open_loop_batch,
    Stage.SURFACE: surface_batch,
    Stage.SCHEDULE: verification_batch,
}


def _skip(
    store: RunStore, progress: RunProgress, cells: list[Cell], reason: str, said: str
) -> None:
    """Record the cells skipped and why; a cell said before (a resumed run's) is said once."""
    progress.note(f"{said}: {reason}")
    skips = {cell.id: SkippedCell(cell=cell.id, reason=reason) for cell in cells}
    store.edit_manifest(
        lambda m: setattr(
            m, "skipped", [s for s in m.skipped if s.cell not in skips] + [*skips.values()]
        )
    )
    for cell in cells:
        progress.skip(cell)


def run_schedule(
    store: RunStore, study: Study, cells: list[Cell], executor: Executor, progress: RunProgress
) -> None:
    """Every batch of the schedule through the executor; the manifest's status says how
    it ended (the caller then finishes the run: harness.finalize)."""
    from harness.run.smoke import SmokeFailed

    status: RunStatus = "interrupted"
    try:
        for batch in study_schedule(store, study, cells, progress):
            executor.run_batch(batch, progress)
        status = "complete"
    except SmokeFailed:
        status = "smoke_failed"
        raise
    finally:
        executor.close()

        def ended(m: Manifest) -> None:
            m.status, m.ended_wall = status, time.time()

        store.edit_manifest(ended)
