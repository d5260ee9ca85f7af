"""The stop bar (judged after the low-concurrency cells) and the check bar (baseline reruns).

Stop reads the registration's "below 1.3 times" as: on a task, *no* drafter reaches the
threshold at *any* registered stop concurrency (the fastest drafter's best figure there
is below it). Picking one drafter first would let a flat slow drafter stop a study whose
other drafter doubles one user's speed. Tasks combine by `fires_when`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.analysis.bar_common import (
    BarResult,
    clean_json,
    figure_of,
    judged_speedups,
    register_bar,
    speed_tasks,
    stat_column,
)
from harness.analysis.cells import cell_speeds
from harness.analysis.intervals import t_quantile
from harness.analysis.load import CellData
from harness.analysis.rows import SpeedupRow
from harness.analysis.tables import Analysis, analyse
from harness.prereg.schema import Study
from harness.rundir.cell import rerun_id
from harness.rundir.verdict import BarStatus

# --- stop -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StopDecision:
    fired: bool | None  # None: not judgeable yet (a needed cell is missing or invalid)
    evidence: dict


def _task_stop(a: Analysis, task: str) -> dict:
    """Every drafter's figures at the stop levels on one task, and their maximum.

    below: True when every figure is usable and all are below the threshold; False as
    soon as one usable figure reaches it (unusable cells cannot undo that); None when
    the usable figures are all below but some are missing.
    """
    stop = a.run.study.bars.stop
    col = stat_column(stop.statistic)
    sel = judged_speedups(a, task, stop.concurrencies)
    ok = [r for r in sel if r.status == "ok"]
    by_arm: dict[str, dict[int, float]] = {}
    for r in ok:
        by_arm.setdefault(r.arm, {})[int(r.concurrency)] = float(getattr(r, col))
    unusable = [f"{r.arm}/{task} c={r.concurrency}: {r.status}" for r in sel if r.status != "ok"]
    # by_arm for reading; figures (with their cells) for checking every number used.
    entry: dict = {
        "by_arm": by_arm,
        "unusable": unusable,
        "figures": [{"arm": r.arm} | figure_of(r) for r in ok],
    }
    reached = False
    entry["maximum"] = None
    if ok:
        top = max(ok, key=lambda r: float(getattr(r, col)))  # the first of equals
        value = float(getattr(top, col))
        entry["maximum"] = {
            "arm": top.arm,
            "concurrency": int(top.concurrency),
            "value": value,
            "figure": figure_of(top),
        }
        reached = value >= stop.threshold
    if reached:
        entry["below_threshold_everywhere"] = False
    elif unusable or not ok:
        entry["below_threshold_everywhere"] = None
    else:
        entry["below_threshold_everywhere"] = True
    return entry


def stop_decision(a: Analysis) -> StopDecision:
    study = a.run.study
    stop = study.bars.stop
    evidence: dict = {
        "threshold": stop.threshold,
        "statistic": stop.statistic,
        "concurrencies": stop.concurrencies,
        "fires_when": stop.fires_when,
        "rule": (
            f"a task stops when no drafter's {stop.statistic} speedup reaches"
            f" {stop.threshold:g} at any of c={stop.concurrencies}"
        ),
    }
    # Baseline cells count too: a drafter's figure needs its baseline's.
    # Every repeated session of them too: the stop bar is judged on the sessions' figure.
    needed = [
        s
        for arm in study.arms
        for t in speed_tasks(study)
        for c in stop.concurrencies
        for s in a.run.sessions_of(a.run.find(arm.name, t, "speed", c))
    ]
    not_ready = [
        {"cell": c.id, "status": c.status, "reason": c.reason} for c in needed if not c.usable
    ]
    tasks = {t: _task_stop(a, t) for t in speed_tasks(study)}
    evidence["tasks"] = tasks
    flags = [t["below_threshold_everywhere"] for t in tasks.values()]
    fired: bool | None
    if stop.fires_when == "all_tasks":
        fired = False if False in flags or not flags else (None if None in flags else True)
    else:
        fired = True if True in flags else (None if None in flags or not flags else False)
    if not_ready:
        evidence["not_judgeable" if fired is None else "unusable_cells"] = not_ready
    return StopDecision(fired, clean_json(evidence))


def judge_stop(run_dir: str | Path, study: Study | None = None) -> StopDecision:
    """Judged once every arm's speed cells at the stop bar's levels are complete."""
    return stop_decision(analyse(run_dir, study))


@register_bar("stop", "stop")
def stop_bar(a: Analysis) -> BarResult:
    d = stop_decision(a)
    ev = d.evidence
    summary = []
    for task, t in ev["tasks"].items():
        m = t["maximum"]
        best = (
            f"fastest {m['arm']} {m['value']:.2f} at c={m['concurrency']}"
            if m
            else "no usable figure"
        )
        state = {
            True: f"every drafter below {ev['threshold']:g}",
            False: f"reaches {ev['threshold']:g}",
            None: "undetermined",
        }
        summary.append(f"{task}: {best} ({state[t['below_threshold_everywhere']]})")
    if d.fired is None:
        n = len(ev.get("not_judgeable", []))
        summary.append(f"not judgeable: {n} cells not usable")
        return BarResult("stop", "not_judged", summary, ev)
    if d.fired:
        skipped = [s.cell for s in a.run.manifest.skipped]
        ev["skipped_cells"] = skipped
        summary.append(f"fired: {len(skipped)} remaining speed cells skipped")
    return BarResult("stop", "fired" if d.fired else "not_fired", summary, ev)


# --- check ------------------------------------------------------------------------------
#
# The check bar reruns every session of the baseline behind an implausible figure (one
# rerun cell per original session, each a fresh engine start) and judges agreement by
# `bars.check.agreement`. session_spread: the reruns' mean log speed against the original
# sessions', within a two-sample t tolerance from the sessions' pooled spread at the
# intervals' level, never tighter than agree_within; a sound baseline then disagrees at
# about the interval's own error rate (benchmarks/interval_coverage.py: ~30 % under the
# fixed +-10 % at the lab's session variation). fixed_share: the means within agree_within.


def _check_figures(a: Analysis) -> list[SpeedupRow]:
    threshold = a.run.study.bars.check.threshold
    # A control arm's speed is set by its acceptance, not checked.
    return [r for r in judged_speedups(a) if r.status == "ok" and (r.speedup or 0.0) > threshold]


def _latest_rerun(a: Analysis, cell_id: str) -> CellData | None:
    reruns = [c for c in a.run.cells.values() if c.rerun_of == cell_id]
    return max(reruns, key=lambda c: c.id) if reruns else None


def agreement(
    original: list[float], rerun: list[float], agree_within: float, rule: str, level: float
) -> dict:
    """Whether the rerun sessions' speeds (session medians) agree with the original's.

    The difference is of the mean log speeds (a ratio: +10 % is exp(0.095)). fixed_share:
    agrees within log(1 + agree_within). session_spread: within that, or within
    t_{n1+n2-2} * s_pooled * sqrt(1/n1 + 1/n2) of the sessions' log speeds, whichever is
    wider (one session a side: no spread, agree_within alone)."""
    lo, lr = np.log(original), np.log(rerun)
    diff = float(np.mean(lr) - np.mean(lo))
    floor = math.log1p(agree_within)
    out: dict = {
        "relative_difference": math.expm1(diff),
        "agree_within": agree_within,
        "agreement": rule,
    }
    tolerance = floor
    df = len(lo) + len(lr) - 2
    if rule == "session_spread" and df > 0:
        ss = float(np.sum((lo - lo.mean()) ** 2) + np.sum((lr - lr.mean()) ** 2))
        spread = t_quantile(level, df) * math.sqrt(ss / df) * math.sqrt(1 / len(lo) + 1 / len(lr))
        out["session_log_sd"] = math.sqrt(ss / df)
        tolerance = max(floor, spread)
    out["tolerance"] = math.expm1(tolerance)  # as a share, the way agree_within reads
    out["state"] = "agrees" if abs(diff) <= tolerance else "disagrees"
    return out


def _session_median(cell: CellData) -> float:
    return float(np.median(cell_speeds(cell)))


def rerun_states(a: Analysis) -> list[dict]:
    """Each baseline behind a figure above the check threshold: every session of it with
    its rerun, and whether they agree."""
    check = a.run.study.bars.check
    figures = _check_figures(a)
    out = []
    for baseline_id in dict.fromkeys(r.baseline_cell for r in figures):
        sessions = a.run.sessions_of(a.run.cell(baseline_id))
        reruns = [_latest_rerun(a, c.id) for c in sessions]
        behind = [r for r in figures if r.baseline_cell == baseline_id]
        # "cell" is the first rerun's id and "of" its original, as in the manifest's
        # reruns; "cells" and "sessions" hold every session's.
        pairs = list(zip(sessions, reruns, strict=True))
        cells = [r.id if r else rerun_id(c.id, 1) for c, r in pairs]
        entry: dict = {
            "cell": cells[0],
            "of": baseline_id,
            "cells": cells,
            "sessions": [c.id for c in sessions],
            "behind": [f"{r.drafter_cell}: {r.speedup:.2f}x" for r in behind],
        }
        original = [_session_median(c) for c in sessions]
        entry["original_speed"] = float(np.mean(original))  # the speedups' baseline figure
        entry["original_session_speeds"] = original
        missing = [c.id for c, r in pairs if r is None or r.status == "missing"]
        invalid = [r for r in reruns if r is not None and r.status != "missing" and not r.usable]
        if missing:
            entry.update(state="missing", missing=missing)
        elif invalid:
            entry.update(state="invalid", reason="; ".join(f"{r.id}: {r.reason}" for r in invalid))
        else:
            speeds = [_session_median(r) for r in reruns if r is not None]  # none missing
            entry.update(rerun_speed=float(np.mean(speeds)), rerun_session_speeds=speeds)
            entry.update(
                agreement(
                    original,
                    speeds,
                    check.agree_within,
                    check.agreement,
                    a.run.study.bars.intervals.level,
                )
            )
        out.append(entry)
    return out


def check_bar_targets(run_dir: str | Path, study: Study | None = None) -> list[str]:
    """Baseline cell ids (every session's) behind a speedup above the check threshold with
    no rerun yet (a rerun that completed but is invalid is reported by the verdict, not
    rerun again)."""
    a = analyse(run_dir, study)
    return [cell for r in rerun_states(a) if r["state"] == "missing" for cell in r["missing"]]


@register_bar("check", "check")
def check_bar(a: Analysis) -> BarResult:
    check = a.run.study.bars.check
    reruns = rerun_states(a)
    ev = {
        "threshold": check.threshold,
        "agree_within": check.agree_within,
        "agreement": check.agreement,
        "baseline_used": "the original run; a rerun is shown beside it",
        "reruns": reruns,
    }
    if not reruns:
        return BarResult("check", "not_fired", [f"no speedup above {check.threshold:g}"], ev)
    summary = []
    for r in reruns:
        n = len(r["sessions"])
        what = f"rerun of {n} sessions" if n > 1 else "rerun"
        if r["state"] in ("agrees", "disagrees"):
            summary.append(
                f"{r['of']}: {what} {r['state']} ({r['relative_difference']:+.1%},"
                f" limit {r['tolerance']:.0%}); behind {', '.join(r['behind'])}"
            )
        else:
            summary.append(f"{r['of']}: {what} {r['state']}; behind {', '.join(r['behind'])}")
    status: BarStatus = "agreed" if all(r["state"] == "agrees" for r in reruns) else "unresolved"
    return BarResult("check", status, summary, ev)
