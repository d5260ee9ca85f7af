"""The k schedule proposed from the round-cost surface (issue 32 part 4), its interval
(issue 46 part 4), and stage 5's verification of it.

Per task and surface level, each k on the surface up to the drafter's own is predicted
to run at E(k) / C(k): E(k) = 1 + p_1 + ... + p_k, the tokens a round from the drafter's
own per-position acceptance at that level (the engine's counters, accept_rate_pos<i> of
its speed cell), C(k) the surface's round cost at k over a plain step (the geometric
mean over the acceptance lengths measured: the cost of a round does not depend on how
many of its drafts are kept, and each L's arm is another engine start measuring it).

Its interval is taken over sessions, as every speedup's is: the surface's cells are
measured in the baseline's sessions (harness.plan), so session s gives E_s(k) from the
drafter's session-s cell and C_s(k) from the surface's session-s cells over the
baseline's session s, and the prediction's interval is the t interval on the sessions'
log(E_s / C_s) (intervals.t_interval): the acceptance's own session-to-session variation
is propagated with the cost's, neither is taken as exact. One session (a level measured
once), or sessions that do not pair up: E from its session, divided by the cost's
within-session interval (the widest over L), and the label says that session variation
is not in it (at the lab's session variation it then held the truth 0.68-0.77 of the
time, the sessions' 0.94-0.97: benchmarks/compare_schedule_coverage.py). The model itself
(the p_i measured at the drafter's own k hold at a smaller k) is an assumption the
verification checks: at the drafter's own k the prediction is shown beside the speedup
its registered cell measured.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from harness.analysis.cell_rows import CellRow, cell_rows_of
from harness.analysis.frame import framed, rows_of
from harness.analysis.intervals import t_interval
from harness.analysis.load import RunData
from harness.analysis.rows import ProposedScheduleRow, SpeedupRow, SurfaceCellRow
from harness.analysis.speedup import pair_figures, pair_key
from harness.prereg.schema import Study, schedule_arm_name
from harness.rundir.schedule import KScheduleRecord, ScheduledLevel
from harness.rundir.verdict import VerifiedLevel

if TYPE_CHECKING:
    from harness.analysis.tables import Analysis

WITHIN_NOTE = "one session: session variation not in the interval"


def session_tokens(
    cells: list[CellRow], arm: str, task: str, c: int, k: int
) -> list[list[float]] | None:
    """The drafter's per-position acceptance rates (positions 1..k) of each session of its
    speed cell at (task, c), in session order (None: some session has none)."""
    rows = [
        r
        for r in cells
        if (r.arm, r.task, r.kind, r.concurrency) == (arm, task, "speed", c) and r.rerun_of is None
    ]
    if not rows:
        return None
    rows.sort(key=lambda r: (r.session is not None, r.session or 0))  # measured once first
    if any(len(r.accept_rate_by_position) < k for r in rows):
        return None
    return [list(r.accept_rate_by_position[:k]) for r in rows]


def surface_at(surface: pd.DataFrame) -> dict[tuple[str, int, int], list[SurfaceCellRow]]:
    """The surface's cells (surface.surface_table) by task, k and level, one per L."""
    out: dict[tuple[str, int, int], list[SurfaceCellRow]] = {}
    for r in rows_of(surface, SurfaceCellRow):
        out.setdefault((r.task, r.k, r.concurrency), []).append(r)
    return out


def session_costs(at: list[SurfaceCellRow]) -> list[list[float]]:
    """The surface's round cost ratios at one task, k and level (`at`: its cells there): per
    acceptance length measured, its sessions' (round_cost_ratio_sessions), in session
    order; [] where one is not usable."""
    if not at or any(r.status != "ok" for r in at):
        return []
    out = []
    for r in at:
        text = r.round_cost_ratio_sessions
        values = json.loads(text) if isinstance(text, str) else []
        if not values or any(v is None or not v > 0 for v in values):
            return []
        out.append([float(v) for v in values])
    return out


@dataclass(frozen=True)
class KPrediction:
    """E(k) / C(k) at one k and level, with its interval."""

    predicted_speedup: float
    ci_lower: float | None
    ci_upper: float | None
    interval_method: str  # t_sessions, or within: one session's cost interval alone
    sessions: int


def predict(
    tokens: list[float], costs: list[list[float]], at: list[SurfaceCellRow], level: float
) -> KPrediction | None:
    """E(k) / C(k) at one level with its interval (the module's rule): `tokens` E_s(k) per
    session, `costs` per L its sessions' cost, `at` the surface's cells there. None
    without a cost."""
    if not costs or not tokens:
        return None
    log_cost = np.mean(np.log(np.array(costs)), axis=0)  # per session, over L
    if len(tokens) == len(log_cost) >= 2:
        logs = np.log(tokens) - log_cost
        ci = t_interval(logs, level)
        if ci is not None:
            return KPrediction(
                predicted_speedup=math.exp(float(np.mean(logs))),
                ci_lower=ci[0],
                ci_upper=ci[1],
                interval_method="t_sessions",
                sessions=len(tokens),
            )
    # One session (or sessions that do not pair): the cost's within-session interval alone.
    e = float(np.mean(tokens))
    point = e / math.exp(float(np.mean(log_cost)))
    hi_cost = _figures(r.round_cost_ratio_ci_upper for r in at)
    lo_cost = _figures(r.round_cost_ratio_ci_lower for r in at)
    return KPrediction(
        predicted_speedup=point,
        ci_lower=e / max(hi_cost) if hi_cost else None,
        ci_upper=e / min(lo_cost) if lo_cost else None,
        interval_method="within",
        sessions=len(tokens),
    )


def _figures(values: Iterable[float | None]) -> list[float]:
    """The figures present (neither None nor NaN), as floats."""
    return [float(v) for v in values if v is not None and not math.isnan(v)]


def proposed_schedule(
    study: Study, cells: pd.DataFrame, surface: pd.DataFrame, speedups: pd.DataFrame
) -> list[ProposedScheduleRow]:
    """Per task and surface level, the k the surface's drafter would best run there (the
    module's prediction; k = 0, no drafts, is 1.0). Only the k on the surface and at
    most the drafter's own are candidates. `surface`: the surface's cells
    (surface.surface_table)."""
    if study.surface is None or surface.empty:
        return []
    arm = study.arm(study.surface.drafter)
    assert arm.drafter is not None
    own_k = arm.drafter.num_draft_tokens
    level = study.bars.intervals.level
    measured_at = {(r.arm, r.task, r.concurrency): r for r in rows_of(speedups, SpeedupRow)}
    cells_at = surface_at(surface)
    cell_rows = cell_rows_of(cells)  # a hand-made table too: a column it lacks is None
    out = []
    for task in study.surface_tasks():
        for c in study.surface.concurrency:
            rates = session_tokens(cell_rows, arm.name, task, c, own_k)
            candidates = {"0": 1.0}
            if rates is None:
                out.append(
                    ProposedScheduleRow(
                        task=task,
                        concurrency=c,
                        candidates=candidates,
                        k=None,
                        predicted_speedup=None,
                        ci_lower=None,
                        ci_upper=None,
                        own_k_measured=None,
                        label=f"{arm.name}'s per-position acceptance at {c} users is not measured",
                    )
                )
                continue
            # k = 0, no drafts, is the baseline exactly: a k must beat it to be proposed.
            best_k, best = 0, KPrediction(1.0, 1.0, 1.0, "exact", len(rates))
            for k in (k for k in study.surface.k if k <= own_k):
                tokens = [1.0 + sum(r[:k]) for r in rates]
                at = cells_at.get((task, k, c), [])
                found = predict(tokens, session_costs(at), at, level)
                if found is None:
                    continue
                candidates[str(k)] = round(found.predicted_speedup, 4)
                if found.predicted_speedup > best.predicted_speedup:
                    best_k, best = k, found
            label = (
                f"k={best_k}: predicted x{best.predicted_speedup:.2f}"
                if best_k
                else "k=0: no k on the surface is predicted to pay; do not draft"
            )
            if best.interval_method == "within":
                label += f" ({WITHIN_NOTE})"
            # The one k a registered cell measured: the drafter's own.
            mine = measured_at.get((arm.name, task, c))
            own = candidates.get(str(own_k))
            measured = mine.speedup if mine and mine.status == "ok" else None
            if own is not None and measured is not None:
                label += f"; at its own k={own_k}: predicted x{own:.2f}, measured x{measured:.2f}"
            out.append(
                ProposedScheduleRow(
                    task=task,
                    concurrency=c,
                    candidates=candidates,
                    k=best_k,
                    predicted_speedup=best.predicted_speedup,
                    ci_lower=best.ci_lower,
                    ci_upper=best.ci_upper,
                    own_k_measured=measured,
                    label=label,
                )
            )
    return out


def schedule_ranges(
    schedule: list[ProposedScheduleRow], task: str
) -> list[tuple[int, int | None, int]]:
    """One task's schedule as inclusive batch-size ranges from 1: each level's k up to
    that level, the last one open; neighbours with the same k merged."""
    rows = sorted(
        ((r.concurrency, r.k) for r in schedule if r.task == task and r.k is not None),
    )
    ranges: list[tuple[int, int | None, int]] = []
    start = 1
    for i, (c, k) in enumerate(rows):
        end = None if i == len(rows) - 1 else c
        if ranges and ranges[-1][2] == k:
            ranges[-1] = (ranges[-1][0], end, k)
        else:
            ranges.append((start, end, k))
        start = c + 1
    return ranges


def k_schedule_records(a: Analysis, when: float) -> tuple[list[KScheduleRecord], dict[str, str]]:
    """Per surface task, the k schedule the surface proposes (proposed_schedule) as the
    verification arm runs it; and, per task it proposes none for, why."""
    study = a.run.study
    assert study.surface is not None
    schedule = proposed_schedule(study, a.cells, a.surface_cells, a.speedups)
    template = study.arm(study.surface.drafter)
    from harness.engines import get_engine_kind

    kind = get_engine_kind(template.engine)
    records, missing = [], {}
    for task in study.surface_tasks():
        rows = [r for r in schedule if r.task == task]
        ranges = schedule_ranges(schedule, task)
        if not ranges:
            missing[task] = (
                "; ".join(r.label for r in rows) or "no surface level has a round cost measured"
            )
            continue
        records.append(
            KScheduleRecord(
                arm=schedule_arm_name(task),
                task=task,
                ranges=ranges,
                levels=[
                    ScheduledLevel(
                        concurrency=r.concurrency,
                        k=r.k,
                        predicted_speedup=r.predicted_speedup,
                        ci_lower=r.ci_lower,
                        ci_upper=r.ci_upper,
                    )
                    for r in rows
                    if r.k is not None and r.predicted_speedup is not None  # one has both
                ],
                setting=kind.k_schedule_setting(template, ranges),
                proposed_wall=when,
            )
        )
    return records, missing


def k_in(ranges: list[tuple[int, int | None, int]], batch: int) -> int:
    for first, last, k in ranges:
        if first <= batch and (last is None or batch <= last):
            return k
    return ranges[-1][2]


def schedule_verification(run: RunData) -> pd.DataFrame:
    """Stage 5: per task and registered level, the schedule arm's measured speedup over
    the baseline beside the surface's prediction for the k in force there (1.0 where it
    drafts nothing; none at a level off the surface that drafts). A threshold level is
    the first whose k differs from the level below's; a collapse, a level measured
    below surface.collapse_below x its prediction (its interval's upper bound)."""
    study = run.study
    rows = []
    surface = study.surface
    if surface is not None and surface.verify_schedule:
        for record in run.manifest.k_schedules.values():
            arm = study.arm(record.arm)
            assert arm.baseline is not None
            predicted = {lv.concurrency: lv for lv in record.levels}
            before: int | None = None
            for c in study.loads.closed_loop.concurrency:
                k = k_in(record.ranges, c)
                dc = run.find(arm.name, record.task, "speed", c)
                bc = run.find(arm.baseline, record.task, "speed", c)
                row: dict = {
                    "arm": arm.name,
                    "baseline": arm.baseline,
                    "task": record.task,
                    "concurrency": c,
                    "k": k,
                    "threshold": before is not None and k != before,
                    "drafter_cell": dc.id,
                    "baseline_cell": bc.id,
                }
                before = k
                if c in predicted:
                    lv = predicted[c]
                    row.update(
                        predicted_speedup=lv.predicted_speedup,
                        predicted_ci_lower=lv.ci_lower,
                        predicted_ci_upper=lv.ci_upper,
                    )
                elif k == 0:  # no drafts: the baseline's speed, exactly
                    row.update(
                        predicted_speedup=1.0, predicted_ci_lower=1.0, predicted_ci_upper=1.0
                    )
                # In the baseline's sessions there (harness.plan: stage 5 repeats as it does).
                row.update(
                    pair_figures(study, run.sessions_of(dc), run.sessions_of(bc), pair_key(dc, bc))
                )
                row["collapse"] = row.get("status") == "ok" and collapsed(
                    row.get("ci_upper"), row.get("predicted_speedup"), surface.collapse_below
                )
                row["label"] = _verified_label(row, surface.collapse_below)
                rows.append(row)
    return framed(rows, VerifiedLevel)  # the verdict's row is the table's


def collapsed(measured_upper: float | None, predicted: float | None, below: float) -> bool:
    """A level collapsed: even its measured speedup's upper bound is below `below` x the
    prediction (a level without either is not judged)."""
    if measured_upper is None or predicted is None:
        return False
    return bool(measured_upper < below * predicted)


def _verified_label(row: dict, collapse_below: float) -> str:
    where = f"k={row['k']} at {row['concurrency']} users"
    if row["threshold"]:
        where += " (a threshold: k changes here)"
    predicted = row.get("predicted_speedup")
    said = (
        f"predicted x{predicted:.2f}"
        if predicted is not None
        else "no prediction (not a surface level)"
    )
    if row.get("status") != "ok":
        return f"{where}: {said}; not measured ({row.get('status')}: {row.get('reason')})"
    measured = f"measured x{row['speedup']:.2f} [{row['ci_lower']:.2f}, {row['ci_upper']:.2f}]"
    line = f"{where}: {said}, {measured}"
    if row["collapse"]:
        line += (
            f"; COLLAPSE: below {collapse_below:g} x the prediction (the failure"
            " vllm#49548 reports at a schedule's threshold)"
        )
    return line
