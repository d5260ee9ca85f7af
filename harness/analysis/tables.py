"""The whole analysis of a run folder, and the tables pandas users load directly."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.categories import category_table
from harness.analysis.cell_rows import CellRow, cell_rows_of
from harness.analysis.cells import cell_table
from harness.analysis.frame import R, columns, rows_of
from harness.analysis.identity import compare_identity
from harness.analysis.k_schedule import schedule_verification
from harness.analysis.knee import knee_table
from harness.analysis.load import RunData, load_run
from harness.analysis.open_loop import fleet_table, open_loop_table
from harness.analysis.predict import add_predictions
from harness.analysis.rows import AccuracyRow, IdentityRow, KneeRow, SpeedupRow
from harness.analysis.speedup import speedup_table
from harness.analysis.surface import (
    PlacementRow,
    break_even_table,
    drafter_placements,
    surface_table,
)
from harness.atomic import atomic_path
from harness.calibration import run_hardware
from harness.prereg.schema import Study
from harness.workloads.stats import wilson_interval


@dataclass
class Analysis:
    run: RunData
    cells: pd.DataFrame
    speedups: pd.DataFrame
    knees: pd.DataFrame
    identity: pd.DataFrame
    accuracy: pd.DataFrame
    open_loop: pd.DataFrame
    fleet: pd.DataFrame
    # The round-cost surface (analysis/surface.py; empty without `surface:`): its cells
    # paired with the baseline, the break-even per k and level, each drafter placed on it.
    surface_cells: pd.DataFrame
    surface: pd.DataFrame
    placements: list[PlacementRow]
    # The k schedule verified (surface.verify_schedule): per task and registered level,
    # predicted against measured (analysis/k_schedule.py schedule_verification).
    schedule: pd.DataFrame
    # SPEED-Bench tasks by category (analysis/categories.py; empty without such a task).
    categories: pd.DataFrame = field(default_factory=pd.DataFrame)
    # Each table's rows as its model, read once per DataFrame (one replaced, as the
    # sequential design's reading does, is read again).
    _rows: dict[tuple[str, type], tuple[pd.DataFrame, list]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def rows(
        self, table: str, row: type[R], read: Callable[[pd.DataFrame], list[R]] | None = None
    ) -> list[R]:
        """The table named `table` as `row`s, in table order (`read`: the model's own
        reader, where its fields are not the columns one for one)."""
        frame = getattr(self, table)
        held = self._rows.get((table, row))
        if held is None or held[0] is not frame:
            rows = read(frame) if read is not None else rows_of(frame, row)
            held = self._rows[table, row] = (frame, rows)
        return held[1]

    def cell_rows(
        self,
        arms: Collection[str] | None = None,
        kinds: Collection[str] | None = None,
        status: Collection[str] | None = None,
        first_measured: bool = False,
    ) -> list[CellRow]:
        """The cells of any of `arms`, `kinds` and `status`es (None: every one), in table
        order; `first_measured`: no reruns."""
        return [
            r
            for r in self.rows("cells", CellRow, cell_rows_of)
            if (arms is None or r.arm in arms)
            and (kinds is None or r.kind in kinds)
            and (status is None or r.status in status)
            and (not first_measured or r.rerun_of is None)
        ]

    def cell(self, cell_id: str) -> CellRow | None:
        return next((r for r in self.cell_rows() if r.cell_id == cell_id), None)

    def speedups_of(
        self,
        arm: str | Collection[str] | None = None,
        task: str | None = None,
        concurrencies: Collection[int] | None = None,
        usable: bool = False,
    ) -> list[SpeedupRow]:
        """The speedup rows of an arm (or any of several), a task and levels (None:
        every one), in table order; `usable`: only those with status ok."""
        arms = {arm} if isinstance(arm, str) else arm
        return [
            r
            for r in self.rows("speedups", SpeedupRow)
            if (arms is None or r.arm in arms)
            and (task is None or r.task == task)
            and (concurrencies is None or r.concurrency in concurrencies)
            and (not usable or r.status == "ok")
        ]

    def speedup(self, arm: str, task: str, concurrency: int) -> SpeedupRow | None:
        found = self.speedups_of(arm, task, (concurrency,))
        return found[0] if found else None

    def knee(self, arm: str, task: str) -> KneeRow | None:
        return next(
            (k for k in self.rows("knees", KneeRow) if (k.arm, k.task) == (arm, task)), None
        )


def identity_table(run: RunData) -> pd.DataFrame:
    """Every drafter arm x identity task, whether or not a bar judges it (no control arm:
    its text is not the target's, and it has no identity cells)."""
    rows = []
    for arm in run.study.arms:
        if arm.baseline is None or arm.is_control:
            continue
        for task in (t for t in run.study.tasks if "identity" in t.uses):
            d, b = (
                run.find(arm.name, task.name, "identity"),
                run.find(arm.baseline, task.name, "identity"),
            )
            row: dict[str, Any] = {
                "arm": arm.name,
                "baseline": arm.baseline,
                "task": task.name,
                "drafter_cell": d.id,
                "baseline_cell": b.id,
            }
            if d.usable and b.usable:
                bar = run.study.bars.pass_.identity
                res = (
                    compare_identity(d, b, bar.count, bar.near_tie_margin)
                    if bar
                    else compare_identity(d, b)
                )
                row.update(
                    status="ok",
                    n_compared=res.n_compared,
                    n_identical=res.n_identical,
                    n_numeric=res.n_numeric,
                    share=res.share,
                    mismatches=[asdict(m) for m in res.mismatches],
                    n_not_compared=len(res.not_compared),
                )
            else:
                row.update(
                    status="missing" if "missing" in (d.status, b.status) else "invalid",
                    mismatches=[],
                )
            rows.append(row)
    return pd.DataFrame(rows, columns=columns(IdentityRow))


def accuracy_table(run: RunData) -> pd.DataFrame:
    """Every accuracy cell: accuracy with its Wilson interval (the bars' level)."""
    level = run.study.bars.pass_.accuracy.level if run.study.bars.pass_.accuracy else 0.95
    rows = []
    for cell in run.cells.values():
        if cell.kind != "accuracy" or cell.rerun_of is not None:
            continue
        row: dict[str, Any] = {
            "arm": cell.arm,
            "task": cell.task,
            "cell_id": cell.id,
            "status": cell.status,
            "level": level,
        }
        if cell.usable and cell.scores is not None:
            n, k = len(cell.scores), sum(cell.scores.values())
            lo, hi = wilson_interval(k, n, level)
            row.update(n=n, correct=k, accuracy=k / n if n else None, ci_lower=lo, ci_upper=hi)
        rows.append(row)
    order = {arm.name: i for i, arm in enumerate(run.study.arms)}
    rows.sort(key=lambda r: (r["task"], order.get(r["arm"], len(order))))
    return pd.DataFrame(rows, columns=columns(AccuracyRow))


def analyse(run_dir: str | Path | RunData, study: Study | None = None) -> Analysis:
    run = run_dir if isinstance(run_dir, RunData) else load_run(run_dir, study)
    cells = cell_table(run)
    # Beside each measured speedup, the roofline formula's (analysis/predict.py), on the
    # bandwidth and FLOP rate measured at the run's start where it has them.
    figures = run_hardware(run.study, run.manifest).used
    speedups = add_predictions(run.study, speedup_table(run), cells, figures)
    open_table = open_loop_table(run)
    surface_cells = surface_table(run)
    surface = break_even_table(surface_cells)
    return Analysis(
        run,
        cells,
        speedups,
        knee_table(run, speedups),
        identity_table(run),
        accuracy_table(run),
        open_table,
        fleet_table(run, open_table),
        surface_cells,
        surface,
        drafter_placements(run.study, speedups, surface),
        schedule_verification(run),
        categories=category_table(run),
    )


def write_tables(analysis: Analysis) -> list[Path]:
    """cells and speedups (and, with a surface, surface and surface_cells) as parquet and
    CSV in the run folder."""
    out = []
    tables = [("cells", analysis.cells), ("speedups", analysis.speedups)]
    if analysis.run.study.surface is not None:
        tables += [("surface", analysis.surface), ("surface_cells", analysis.surface_cells)]
        if analysis.run.study.surface.verify_schedule:
            tables.append(("schedule", analysis.schedule))
    if len(analysis.categories):
        tables.append(("categories", analysis.categories))  # SPEED-Bench by category
    for name, df in tables:
        for ext in ("parquet", "csv"):
            path = analysis.run.run_dir / f"{name}.{ext}"
            with atomic_path(path) as tmp:
                if ext == "parquet":
                    df.to_parquet(tmp, index=False)
                else:
                    df.to_csv(tmp, index=False)
            out.append(path)
    return out
