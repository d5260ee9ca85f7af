"""`specbench run FILE --resume [RUN] --remeasure-invalid`: every cell left invalid by a
cause that passes with the moment (a busy host, a client that fell behind, a delivered
load short of its users, bursts, an engine that died, a GPU that throttled under
`recording.gpu_throttle: remeasure`) gets a fresh `recording.cell_retries` budget, and the
run's schedule then measures it again like any unfinished cell.

Every earlier attempt stays in cell.json and requests.jsonl; the budget starts after them
(cell.json `fresh_budget_after`, which travels with the cell to a shard's worker), and the
manifest's `remeasured` says which cells, when, and why each had been invalid. A valid
cell is never measured again, its pair partner included: the registered design gives
each arm's session its own engine start, and so its own session effect
(benchmarks/interval_coverage.py simulates it so), so a cell measured in a later engine
start pairs with its partner as the first one did; measuring a valid partner again would
let the resume choose between two valid figures. Cells invalid for a cause that is the
engine's or the study's (aborted for errors, nothing succeeded, no request with a
per-user speed) are named and left: a new measurement would meet it again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from harness.analysis.load import CellData, RunData, load_run
from harness.plan_arms import schedule_arms, surface_arms
from harness.prereg.schema import Study
from harness.run.store import RunStore
from harness.rundir import rerun_of
from harness.rundir.manifest import Manifest
from harness.rundir.remeasure import RemeasureRecord

PAIRED_KINDS = ("speed", "identity", "accuracy")


def partner_cells(run: RunData, cell: CellData) -> list[str]:
    """The cells a bar or a table reads this one against: a drafter's baseline cell and a
    baseline's drafters' cells at the same task, kind, level and session; a check-bar
    rerun's original. None for an open-loop cell (read against its own arm's knee)."""
    original = rerun_of(cell.id)
    if original is not None:
        return [original] if original in run.cells else []
    if cell.kind not in PAIRED_KINDS:
        return []
    study = run.study
    rest = cell.id.split("/", 1)[1]
    arms = [*study.arms, *surface_arms(study), *schedule_arms(study)]
    names = {a.name for a in arms if a.baseline == cell.arm}
    own = next((a for a in arms if a.name == cell.arm), None)
    if own is not None and own.baseline is not None:
        names.add(own.baseline)
    return [f"{name}/{rest}" for name in sorted(names) if f"{name}/{rest}" in run.cells]


def remeasure_invalid(
    store: RunStore, study: Study, say: Callable[[str], None]
) -> list[RemeasureRecord]:
    """Give each cell invalid for a cause that passes a fresh budget, record it in the
    manifest, and say what is measured again and what is not."""
    run = load_run(store.root, study)
    now = time.time()
    records: list[RemeasureRecord] = []
    for cell in run.cells.values():
        died = cell.status == "missing" and any(c.kind == "engine_died" for c in cell.causes)
        if cell.status != "invalid" and not died:
            continue
        if not all(c.passes for c in cell.causes):
            say(
                f"not measured again: {cell.id}: {cell.reason} (the engine's or the study's"
                " doing, not the moment's: a new measurement would meet it again)"
            )
            continue
        before = store.give_fresh_budget(cell.id)
        records.append(
            RemeasureRecord(
                cell=cell.id,
                when=now,
                causes=[c.kind for c in cell.causes],
                reason=cell.reason or "",
                attempts_before=before,
                partners=partner_cells(run, cell),
            )
        )

    def add(manifest: Manifest) -> None:
        manifest.remeasured.extend(records)

    if records:
        store.edit_manifest(add)
    budget = study.recording.cell_retries + 1
    if not records:
        say("--remeasure-invalid: no cell is invalid for a cause that passes")
        return records
    n = len(records)
    say(
        f"--remeasure-invalid: {n} {'cells' if n > 1 else 'cell'} invalid for a cause that"
        f" passes {'are' if n > 1 else 'is'} measured again, each with a fresh budget of"
        f" {budget} measurement{'s' if budget > 1 else ''}"
    )
    for r in records:
        kept = f"; kept as measured: {', '.join(r.partners)}" if r.partners else ""
        say(f"  {r.cell} (after {r.attempts_before} attempts): {r.reason}{kept}")
    return records
