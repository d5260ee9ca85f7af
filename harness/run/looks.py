"""A group-sequential design's look in a run (`design: group_sequential`): after a look's
session (harness.run.schedule.session_batches) the bars are read on the run folder
(harness.analysis.sequential.judge_look); the later sessions' cells that no undecided bar
reads are skipped, never started, and the look is kept in the manifest (a resumed run
reads the look it took, not a new one)."""

from __future__ import annotations

import time

from harness.prereg.schema import Study
from harness.run.progress import RunProgress
from harness.run.store import RunStore
from harness.rundir import speed_cell_id
from harness.rundir.cell import Cell
from harness.rundir.looks import LookDecision, LookRecord
from harness.rundir.schedule import SkippedCell


def take_look(
    store: RunStore, study: Study, stage: int, look: int, later: list[Cell], progress: RunProgress
) -> None:
    """Read the bars after `look` sessions of `stage`; skip the later sessions' cells no
    undecided bar reads."""
    from harness.analysis import analyse
    from harness.analysis.design import look_levels
    from harness.analysis.load import load_run
    from harness.analysis.sequential import judge_look, needed_cells, reads_stage, run_at_look

    taken = store.manifest().looks
    if any(r.stage == stage and r.look == look for r in taken):
        return
    outcome = judge_look(analyse(run_at_look(load_run(store.root, study), stage, look)))
    seen = {(d.bar, d.part) for r in taken for d in r.decided}
    new = [
        LookDecision(bar=d.bar, part=d.part, outcome=d.outcome)
        for d in outcome.decided
        if (d.bar, d.part) not in seen and reads_stage(study, d.bar, stage)
    ]
    keep = needed_cells(study, outcome)
    lost = [c for c in later if speed_cell_id(c.arm, c.task, c.concurrency) not in keep]
    n = study.recording.sessions
    record = LookRecord(
        stage=stage,
        look=look,
        of=n,
        level=look_levels(study)[look],
        decided=new,
        skipped=[c.id for c in lost],
        judged_wall=time.time(),
    )
    reason = f"decided at look {look} of {n} (stage {stage}): no undecided bar reads it"

    def edit(m) -> None:
        m.looks.append(record)
        m.skipped.extend(SkippedCell(cell=c.id, reason=reason) for c in lost)

    store.edit_manifest(edit)
    for c in lost:
        progress.skip(c)
    said = ", ".join(f"{d.bar}{' ' + d.part if d.part else ''} ({d.outcome})" for d in new)
    progress.note(
        f"look {look} of {n} (stage {stage}, repeated intervals at"
        f" {record.level:.2%}): decided {said or 'nothing new'}; {len(lost)} cells"
        f" of the later sessions not measured"
    )
