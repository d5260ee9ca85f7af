"""Speedups of each drafter arm over its same-engine baseline, with their intervals.

Speedup = median per-user speed of the drafter cell / that of its baseline's cell
at the same task and concurrency; over repeated sessions, the mean of the session
medians of each. The interval (harness.analysis.intervals) follows the registered rule
over sessions (bars.intervals.method: a t interval on the paired sessions' log ratios
below 30 sessions) with the within-session bootstrap (users in a closed loop, time
blocks otherwise) beside it; one session has the within-session interval alone, marked.
The decomposition (decompose.py) is read under the same draws and rule. The generator
is seeded by the study's interval seed and the pair's cell ids, so a figure never
depends on the order cells are analysed in. `bootstrap_ratio` (independent requests)
is kept for callers that have bare speeds and no records.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.analysis.cells import cell_speeds
from harness.analysis.decompose import decompose
from harness.analysis.design import intervals_at
from harness.analysis.frame import columns, framed
from harness.analysis.intervals import (
    draw_pair,
    interval_caveat,
    session_ratio,
    session_spread,
    session_units,
)
from harness.analysis.load import CellData, RunData
from harness.analysis.pooling import pool_session_variance
from harness.analysis.rows import MeasuredSpeedup, SpeedupRow
from harness.derived.throttle import gpu_throttle


def pair_key(drafter: CellData, baseline: CellData) -> str:
    return f"{drafter.id}|{baseline.id}"


def _latest_rerun(run: RunData, cell_id: str) -> CellData | None:
    reruns = [c for c in run.cells.values() if c.rerun_of == cell_id]
    return max(reruns, key=lambda c: c.id) if reruns else None


def _rerun_figures(run: RunData, baseline: list[CellData], original: float | None) -> dict:
    """The check bar's reruns of a baseline, one per session: their ids, the worst status,
    and (all usable) the mean of their medians beside the original's."""
    reruns = [r for c in baseline if (r := _latest_rerun(run, c.id)) is not None]
    if not reruns:
        return {}
    bad = [r for r in reruns if not r.usable]
    out: dict[str, str | float] = {
        "baseline_rerun_cell": "; ".join(r.id for r in reruns),
        "baseline_rerun_status": bad[0].status if bad else reruns[0].status,
    }
    medians = [float(np.median(s)) for r in reruns if len(s := cell_speeds(r))]
    if not bad and len(medians) == len(reruns) and original:
        speed = float(np.mean(medians))
        out["baseline_rerun_speed"] = speed
        out["baseline_rerun_ratio"] = speed / original
    return out


def _throttled(*cells: CellData) -> str | None:
    """The cells of a pair during which the GPU throttled, "; "-joined (None: neither)."""
    hit = [c.id for c in cells if (t := gpu_throttle(c.gpu_samples)) is not None and t.throttled]
    return "; ".join(hit) or None


def session_figures(drafter: list[CellData], baseline: list[CellData], study, key: str) -> dict:
    """A pair's speeds, speedup, intervals and decomposition over its sessions (one: the
    cells), the decomposition under the speedup's own draws; under a group-sequential
    design the interval is the repeated one of the look its sessions reach."""
    intervals = intervals_at(study, len(drafter))
    d_units = [session_units(c) for c in drafter]
    b_units = [session_units(c) for c in baseline]
    n_d, n_b = sum(u.n for u in d_units), sum(u.n for u in b_units)
    row: dict = {
        "n_drafter": n_d,
        "n_baseline": n_b,
        "interval_caveat": interval_caveat(len(drafter), n_d, n_b),
    }
    if not all(u.n for u in d_units + b_units):
        return row | {
            "status": "invalid",
            "reason": "a session with no request with a per-user speed",
            "speed_drafter": math.nan,
            "speed_baseline": math.nan,
        }
    draws = draw_pair(d_units, b_units, intervals, key)
    ratio = session_ratio(d_units, b_units, intervals, key, draws)
    assert ratio is not None
    row |= {
        "status": "ok",
        "speedup": ratio.point,
        "ci_lower": ratio.ci_lower,
        "ci_upper": ratio.ci_upper,
        "interval_method": ratio.method,
        "ci_lower_within": ratio.within_lower,
        "ci_upper_within": ratio.within_upper,
        "speed_drafter": float(np.mean(ratio.speeds_drafter)),
        "speed_baseline": float(np.mean(ratio.speeds_baseline)),
        "session_speeds_drafter": json.dumps([round(v, 4) for v in ratio.speeds_drafter]),
        "session_speeds_baseline": json.dumps([round(v, 4) for v in ratio.speeds_baseline]),
        "session_spread_drafter": session_spread(ratio.speeds_drafter),
        "session_spread_baseline": session_spread(ratio.speeds_baseline),
        "resample_unit": ratio.unit,
    }
    return row | decompose(
        drafter,
        baseline,
        intervals,
        ratio.point,
        study.bars.decomposition.tolerance,
        (d_units, b_units),
        draws,
    )


def pair_figures(study, drafter: list[CellData], baseline: list[CellData], key: str) -> dict:
    """A pair's figures over its sessions (session_figures), or why it has none: a cell
    that is not usable, or the two arms measured in different numbers of sessions (under
    a group-sequential design, where one arm's cells stopped at an earlier look, the
    sessions both measured)."""
    if study.design.kind != "fixed":
        n = min(len(drafter), len(baseline))
        drafter, baseline = drafter[:n], baseline[:n]
    bad = [x for x in (*drafter, *baseline) if not x.usable]
    if bad:
        return {
            "status": bad[0].status,
            "reason": "; ".join(f"{x.id}: {x.status} ({x.reason})" for x in bad),
        }
    if len(drafter) != len(baseline):
        return {"status": "invalid", "reason": "the arms measured different numbers of sessions"}
    return session_figures(drafter, baseline, study, key)


def speedup_table(run: RunData) -> pd.DataFrame:
    """One row per drafter arm x speed task x concurrency level, whatever its state.

    status: ok, or missing / invalid / skipped naming the cell that is not usable.
    The original baseline run is always the one used; a rerun is shown beside it.
    """
    study = run.study
    rows = []
    for arm in study.arms:
        if arm.baseline is None:
            continue
        for task in (t for t in study.tasks if "speed" in t.uses):
            for c in study.loads.closed_loop.concurrency:
                dc = run.find(arm.name, task.name, "speed", c)
                bc = run.find(arm.baseline, task.name, "speed", c)
                row: dict = {
                    "arm": arm.name,
                    "baseline": arm.baseline,
                    "task": task.name,
                    "concurrency": c,
                    "drafter_cell": dc.id,
                    "baseline_cell": bc.id,
                }
                d_sessions, b_sessions = run.sessions_of(dc), run.sessions_of(bc)
                row["sessions"] = len(d_sessions)
                row.update(pair_figures(study, d_sessions, b_sessions, pair_key(dc, bc)))
                # Flagged, not judged here: recording.gpu_throttle decides whether such a
                # cell was measured again (harness.derived.usable).
                row["gpu_throttled_cells"] = _throttled(*d_sessions, *b_sessions)
                row.update(_rerun_figures(run, b_sessions, row.get("speed_baseline")))
                rows.append(row)
    return pool_session_variance(framed(rows, MeasuredSpeedup), study)[columns(MeasuredSpeedup)]


# --- the best drafter --------------------------------------------------------------


@dataclass(frozen=True)
class BestDrafter:
    arm: str | None  # None when some drafter lacks a figure at a listed level
    minima: dict[str, float | None]  # each drafter's minimum over the levels (None: incomplete)
    rule: str
    missing: list[str]  # rows that kept it undetermined: "arm/task c=N: status"


def best_drafter(
    speedups: list[SpeedupRow], tasks: list[str], concurrencies: list[int], statistic: str
) -> BestDrafter:
    """Among drafter arms, the one with the highest minimum speedup (`statistic`:
    speedup or ci_lower) over `concurrencies` and `tasks` (one task = per task,
    several = pooled). Ties go to the first arm in the study's order."""
    rule = (
        f"best drafter = the drafter arm with the highest minimum {statistic} over "
        f"concurrencies {concurrencies} on task(s) {', '.join(tasks)}"
    )
    sel = [r for r in speedups if r.task in tasks and r.concurrency in concurrencies]
    minima: dict[str, float | None] = {}
    missing: list[str] = []
    for arm in dict.fromkeys(r.arm for r in speedups):
        rows = [r for r in sel if r.arm == arm]
        bad = [r for r in rows if r.status != "ok"]
        if not rows:  # no row at the levels: undetermined (was a TypeError in max)
            minima[arm] = None
            missing.append(f"{arm}: no row on task(s) {', '.join(tasks)} at {concurrencies}")
        elif bad:
            minima[arm] = None
            missing.extend(f"{r.arm}/{r.task} c={r.concurrency}: {r.status}" for r in bad)
        else:  # NaN skipped, as pandas' min does
            minima[arm] = float(pd.Series([getattr(r, statistic) for r in rows]).min())
    judged = {arm: m for arm, m in minima.items() if m is not None}
    if missing or not judged:
        return BestDrafter(None, minima, rule, missing)
    best = max(judged, key=judged.__getitem__)  # max keeps the first of equals
    return BestDrafter(best, minima, rule, missing)
