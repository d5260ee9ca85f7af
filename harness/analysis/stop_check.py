"""The stop bar (judged after the low-concurrency cells) and the check bar (baseline reruns)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis.bar_common import (
    bar_dict,
    best_by_task,
    clean_json,
    figure_of,
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


def stop_decision(a: Analysis) -> StopDecision:
    study = a.run.study
    stop = study.bars.stop
    col = stat_column(stop.statistic)
    sel = a.speedups[a.speedups["concurrency"].isin(stop.concurrencies)]
    evidence: dict = {"threshold": stop.threshold, "statistic": stop.statistic,
                      "concurrencies": stop.concurrencies, "fires_when": stop.fires_when}
    # Every arm's cells at the stop levels, baselines included, must be usable.
    needed = [a.run.find(arm.name, t, "speed", c) for arm in study.arms
              for t in speed_tasks(study) for c in stop.concurrencies]
    not_ready = [{"cell": c.id, "status": c.status, "reason": c.reason}
                 for c in needed if not c.usable]
    if not_ready:
        evidence["not_judgeable"] = not_ready
        return StopDecision(None, clean_json(evidence))
    tasks: dict[str, dict] = {}
    for task, best in best_by_task(a, stop.concurrencies, stop.statistic).items():
        rows = sel[(sel["arm"] == best.arm) & (sel["task"] == task)]
        figures = [figure_of(r) for r in rows.itertuples()]
        below = bool(figures) and all(f[col] < stop.threshold for f in figures)
        tasks[task] = {"best_drafter": best.arm, "rule": best.rule, "minima": best.minima,
                       "figures": figures, "below_threshold_everywhere": below}
    flags = [t["below_threshold_everywhere"] for t in tasks.values()]
    fired = all(flags) if stop.fires_when == "all_tasks" else any(flags)
    evidence["tasks"] = tasks
    return StopDecision(bool(fired), clean_json(evidence))


def judge_stop(run_dir: str | Path, study: Study | None = None) -> StopDecision:
    """Judged once every arm's speed cells at the stop bar's levels are complete."""
    return stop_decision(analyse(run_dir, study))


def stop_bar(a: Analysis) -> dict:
    d = stop_decision(a)
    ev = d.evidence
    if d.fired is None:
        n = len(ev["not_judgeable"])
        return bar_dict("stop", "not_judged", [f"not judgeable: {n} cells not usable"], ev)
    summary = []
    for task, t in ev["tasks"].items():
        col = stat_column(ev["statistic"])
        shown = ", ".join(f"c={f['concurrency']}: {f[col]:.2f}" for f in t["figures"])
        summary.append(f"{task}: best {t['best_drafter']} {shown}"
                       f" ({'all' if t['below_threshold_everywhere'] else 'not all'} "
                       f"< {ev['threshold']:g})")
    if d.fired:
        skipped = [s.get("cell") for s in a.run.manifest.get("skipped") or []]
        ev["skipped_cells"] = skipped
        summary.append(f"fired: {len(skipped)} remaining speed cells skipped")
    return bar_dict("stop", "fired" if d.fired else "not_fired", summary, ev)


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
        entry["original_speed"] = float(np.median(cell_speeds(original)))
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


def check_bar(a: Analysis, reruns: list[dict]) -> dict:
    check = a.run.study.bars.check
    ev = {"threshold": check.threshold, "agree_within": check.agree_within,
          "baseline_used": "the original run; a rerun is shown beside it", "reruns": reruns}
    if not reruns:
        return bar_dict("check", "not_fired", [f"no speedup above {check.threshold:g}"], ev)
    summary = []
    for r in reruns:
        if r["state"] in ("agrees", "disagrees"):
            summary.append(f"{r['of']}: rerun {r['state']} ({r['relative_difference']:+.1%},"
                           f" limit {check.agree_within:.0%}); behind {', '.join(r['behind'])}")
        else:
            summary.append(f"{r['of']}: rerun {r['state']}; behind {', '.join(r['behind'])}")
    status = "agreed" if all(r["state"] == "agrees" for r in reruns) else "unresolved"
    return bar_dict("check", status, summary, ev)
