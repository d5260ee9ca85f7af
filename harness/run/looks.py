"""A group-sequential design's looks in a run (`design: group_sequential`): a stage's
repeated sessions become one batch each, and after each look's session the bars are read
on the run folder (harness.analysis.sequential.judge_look); the later sessions' cells that
no undecided bar reads are skipped, never started, and the look is kept in the manifest
(a resumed run reads the look it took, not a new one)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from harness.plan import Cell
from harness.prereg.schema import Study
from harness.run.progress import RunProgress
from harness.run.schedule import Batch
from harness.run.store import RunStore
from harness.rundir.looks import LookDecision, LookRecord
from harness.rundir.manifest import SkippedCell


def session_batches(store: RunStore, study: Study, cells: list[Cell], progress: RunProgress,
                    name: str, smoke: bool = False) -> Iterator[Batch]:
    """One stage's cells: one batch under a fixed design; else one per session, each
    look taken after its session."""
    if study.design.kind == "fixed" or not any(c.session for c in cells):
        yield Batch(name, cells, smoke=smoke)
        return
    n = study.recording.sessions
    looks = study.design.looks_of(n)
    for s in range(1, n + 1):
        skipped = store.manifest().skipped_reasons()
        yield Batch(f"{name}, session {s} of {n}", [c for c in cells if (c.session or 1) == s
                                                      and c.id not in skipped],
                    smoke=smoke and s == 1)
        if s in looks and s < n:
            take_look(store, study, cells[0].stage, s,
                      [c for c in cells if (c.session or 0) > s], progress)


def take_look(store: RunStore, study: Study, stage: int, look: int, later: list[Cell],
              progress: RunProgress) -> None:
    """Read the bars after `look` sessions of `stage`; skip the later sessions' cells no
    undecided bar reads."""
    from harness.analysis import analyse
    from harness.analysis.load import load_run
    from harness.analysis.sequential import (
        judge_look,
        look_levels,
        needed_cells,
        reads_stage,
        run_at_look,
    )

    taken = store.manifest().looks
    if any(r.stage == stage and r.look == look for r in taken):
        return
    outcome = judge_look(analyse(run_at_look(load_run(store.root, study), stage, look)))
    seen = {(d.bar, d.part) for r in taken for d in r.decided}
    new = [LookDecision(bar=d.bar, part=d.part, outcome=d.outcome) for d in outcome.decided
           if (d.bar, d.part) not in seen and reads_stage(study, d.bar, stage)]
    keep = needed_cells(study, outcome)
    lost = [c for c in later if f"{c.arm}/{c.task}/speed/c{c.concurrency:03d}" not in keep]
    n = study.recording.sessions
    record = LookRecord(stage=stage, look=look, of=n, level=look_levels(study)[look],
                        decided=new, skipped=[c.id for c in lost], judged_wall=time.time())
    reason = f"decided at look {look} of {n} (stage {stage}): no undecided bar reads it"

    def edit(m) -> None:
        m.looks.append(record)
        m.skipped.extend(SkippedCell(cell=c.id, reason=reason) for c in lost)

    store.edit_manifest(edit)
    for c in lost:
        progress.skip(c)
    said = ", ".join(f"{d.bar}{' ' + d.part if d.part else ''} ({d.outcome})" for d in new)
    progress.note(f"look {look} of {n} (stage {stage}, repeated intervals at"
                  f" {record.level:.2%}): decided {said or 'nothing new'}; {len(lost)} cells"
                  f" of the later sessions not measured")
