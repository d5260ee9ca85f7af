"""The stop bar (judged after the low-concurrency cells) and the check bar (baseline reruns).

Stop reads the registration's "below 1.3 times" as: on a task, *no* drafter reaches the
threshold at *any* registered stop concurrency (the fastest drafter's best figure there
is below it). Picking one drafter first would let a flat slow drafter stop a study whose
other drafter doubles one user's speed. Tasks combine by `fires_when`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis.bar_common import (
    BarResult,
    clean_json,
    drafter_arms,
    figure_of,
    register_bar,
    speed_tasks,
    stat_column,
)
from harness.analysis.cells import cell_speeds
from harness.analysis.tables import Analysis, analyse
from harness.prereg.schema import Study

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
    sp = a.speedups
    sel = sp[(sp["task"] == task) & sp["concurrency"].isin(stop.concurrencies)
             & sp["arm"].isin(drafter_arms(a.run.study))]
    ok = sel[sel["status"] == "ok"]
    by_arm = {arm: {int(r.concurrency): float(getattr(r, col)) for r in grp.itertuples()}
              for arm, grp in ok.groupby("arm", sort=False)}
    unusable = [f"{r.arm}/{task} c={r.concurrency}: {r.status}" for r in sel.itertuples()
                if r.status != "ok"]
    # by_arm for reading; figures (with their cells) for checking every number used.
    entry: dict = {"by_arm": by_arm, "unusable": unusable,
                   "figures": [{"arm": r.arm} | figure_of(r) for r in ok.itertuples()]}
    rows = list(ok.itertuples())
    reached = False
    entry["maximum"] = None
    if rows:
        top = max(rows, key=lambda r: float(getattr(r, col)))  # the first of equals
        value = float(getattr(top, col))
        entry["maximum"] = {"arm": top.arm, "concurrency": int(top.concurrency),
                            "value": value, "figure": figure_of(top)}
        reached = value >= stop.threshold
    if reached:
        entry["below_threshold_everywhere"] = False
    elif unusable or not rows:
        entry["below_threshold_everywhere"] = None
    else:
        entry["below_threshold_everywhere"] = True
    return entry


def stop_decision(a: Analysis) -> StopDecision:
    study = a.run.study
    stop = study.bars.stop
    evidence: dict = {"threshold": stop.threshold, "statistic": stop.statistic,
                      "concurrencies": stop.concurrencies, "fires_when": stop.fires_when,
                      "rule": (f"a task stops when no drafter's {stop.statistic} speedup reaches"
                               f" {stop.threshold:g} at any of c={stop.concurrencies}")}
    # Baseline cells count too: a drafter's figure needs its baseline's.
    # Every repeated session of them too: the stop bar is judged on the sessions' figure.
    needed = [s for arm in study.arms for t in speed_tasks(study) for c in stop.concurrencies
              for s in a.run.sessions_of(a.run.find(arm.name, t, "speed", c))]
    not_ready = [{"cell": c.id, "status": c.status, "reason": c.reason}
                 for c in needed if not c.usable]
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
        best = (f"fastest {m['arm']} {m['value']:.2f} at c={m['concurrency']}" if m
                else "no usable figure")
        state = {True: f"every drafter below {ev['threshold']:g}",
                 False: f"reaches {ev['threshold']:g}", None: "undetermined"}
        summary.append(f"{task}: {best} ({state[t['below_threshold_everywhere']]})")
    if d.fired is None:
        n = len(ev.get("not_judgeable", []))
        summary.append(f"not judgeable: {n} cells not usable")
        return BarResult("stop", "not_judged", summary, ev)
    if d.fired:
        skipped = [s.get("cell") for s in a.run.manifest.get("skipped") or []]
        ev["skipped_cells"] = skipped
        summary.append(f"fired: {len(skipped)} remaining speed cells skipped")
    return BarResult("stop", "fired" if d.fired else "not_fired", summary, ev)


# --- check ------------------------------------------------------------------------------


def _check_figures(a: Analysis) -> pd.DataFrame:
    check = a.run.study.bars.check
    sp = a.speedups
    return sp[(sp["status"] == "ok") & (sp["speedup"] > check.threshold)]


def rerun_states(a: Analysis) -> list[dict]:
    """Each baseline cell behind a figure above the check threshold, with its rerun."""
    check = a.run.study.bars.check
    out = []
    for baseline_id in dict.fromkeys(_check_figures(a)["baseline_cell"]):
        original = a.run.cell(baseline_id)
        reruns = sorted((c for c in a.run.cells.values() if c.rerun_of == baseline_id),
                        key=lambda c: c.id)
        figures = _check_figures(a)
        rerun = reruns[-1] if reruns else None
        # "cell" is the rerun's id and "of" its original, as in the manifest's reruns.
        entry: dict = {"cell": rerun.id if rerun else f"{baseline_id}/rerun1", "of": baseline_id,
                       "behind": [f"{r.drafter_cell}: {r.speedup:.2f}x"
                                  for r in figures.itertuples() if r.baseline_cell == baseline_id]}
        # The speedups' baseline figure: over repeated sessions, the mean of their medians.
        behind = figures[figures["baseline_cell"] == baseline_id]
        entry["original_speed"] = (float(behind["speed_baseline"].iloc[0]) if len(behind)
                                   else float(np.median(cell_speeds(original))))
        if rerun is None or rerun.status == "missing":
            entry.update(state="missing")
        elif not rerun.usable:
            entry.update(state="invalid", reason=rerun.reason)
        else:
            speed = float(np.median(cell_speeds(rerun)))
            diff = speed / entry["original_speed"] - 1.0
            entry.update(rerun_speed=speed, relative_difference=diff,
                         agree_within=check.agree_within,
                         state="agrees" if abs(diff) <= check.agree_within else "disagrees")
        out.append(entry)
    return out


def check_bar_targets(run_dir: str | Path, study: Study | None = None) -> list[str]:
    """Baseline cell ids behind a speedup above the check threshold with no rerun yet
    (a rerun that completed but is invalid is reported by the verdict, not rerun again)."""
    a = analyse(run_dir, study)
    return [r["of"] for r in rerun_states(a) if r["state"] == "missing"]


@register_bar("check", "check")
def check_bar(a: Analysis) -> BarResult:
    check = a.run.study.bars.check
    reruns = rerun_states(a)
    ev = {"threshold": check.threshold, "agree_within": check.agree_within,
          "baseline_used": "the original run; a rerun is shown beside it", "reruns": reruns}
    if not reruns:
        return BarResult("check", "not_fired", [f"no speedup above {check.threshold:g}"], ev)
    summary = []
    for r in reruns:
        if r["state"] in ("agrees", "disagrees"):
            summary.append(f"{r['of']}: rerun {r['state']} ({r['relative_difference']:+.1%},"
                           f" limit {check.agree_within:.0%}); behind {', '.join(r['behind'])}")
        else:
            summary.append(f"{r['of']}: rerun {r['state']}; behind {', '.join(r['behind'])}")
    status = "agreed" if all(r["state"] == "agrees" for r in reruns) else "unresolved"
    return BarResult("check", status, summary, ev)
