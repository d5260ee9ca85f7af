"""The registered bars, judged exactly as the study states them, each with its evidence.

Verdict: STOP if the stop bar fired; else INCOMPLETE if a cell some bar needs is
missing or invalid, or a fired check bar's baseline rerun is missing or disagrees;
else PASS if every registered pass bar passes, else FAIL. Invalid cells (client
unhealthy, or aborted at the error-rate limit) are never used, and are named.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.accuracy import compare_accuracy
from harness.analysis.cells import cell_speeds
from harness.analysis.identity import compare_identity
from harness.analysis.load import RunData, load_run
from harness.analysis.speedup import BestDrafter, best_drafter
from harness.analysis.tables import Analysis, analyse
from harness.prereg.schema import Study

MAX_MISMATCHES_IN_EVIDENCE = 50


def _stat_column(statistic: str) -> str:
    return {"point": "speedup", "ci_lower": "ci_lower", "ci_upper": "ci_upper"}[statistic]


def _speed_tasks(study: Study) -> list[str]:
    return [t.name for t in study.tasks if "speed" in t.uses]


def _figure(row: Any) -> dict:
    return {"concurrency": int(row.concurrency), "drafter_cell": row.drafter_cell,
            "baseline_cell": row.baseline_cell, "status": row.status,
            "speedup": row.speedup, "ci_lower": row.ci_lower, "ci_upper": row.ci_upper,
            "speed_drafter": row.speed_drafter, "speed_baseline": row.speed_baseline}


def _best_by_task(a: Analysis, concurrencies: list[int], statistic: str) -> dict[str, BestDrafter]:
    """The best drafter per speed task (or one pooled choice for every task)."""
    study = a.run.study
    tasks = _speed_tasks(study)
    col = _stat_column(statistic)
    if study.bars.pass_.speed.best_drafter == "pooled":
        pooled = best_drafter(a.speedups, tasks, concurrencies, col)
        return {t: pooled for t in tasks}
    return {t: best_drafter(a.speedups, [t], concurrencies, col) for t in tasks}


def _pass_best(a: Analysis) -> dict[str, BestDrafter]:
    sp = a.run.study.bars.pass_.speed
    return _best_by_task(a, sp.concurrencies, sp.statistic)


def _best_for_task(a: Analysis, task: str) -> BestDrafter:
    """For a task without the speed use (e.g. MMLU), the pooled choice over speed tasks."""
    best = _pass_best(a)
    if task in best:
        return best[task]
    sp = a.run.study.bars.pass_.speed
    return best_drafter(a.speedups, _speed_tasks(a.run.study), sp.concurrencies,
                        _stat_column(sp.statistic))


def _bar(name: str, status: str, summary: list[str], evidence: dict) -> dict:
    return {"name": name, "status": status, "summary": summary, "evidence": evidence}


# --- pass: speed ----------------------------------------------------------------------


def speed_bar(a: Analysis) -> dict:
    sp = a.run.study.bars.pass_.speed
    col = _stat_column(sp.statistic)
    per_task: dict[str, dict] = {}
    summary: list[str] = []
    for task, best in _pass_best(a).items():
        entry: dict = {"rule": best.rule, "minima": best.minima, "best_drafter": best.arm}
        if best.arm is None:
            entry.update(status="incomplete", missing=best.missing)
            summary.append(f"{task}: incomplete ({'; '.join(best.missing[:3])})")
        else:
            rows = a.speedups[(a.speedups["arm"] == best.arm) & (a.speedups["task"] == task)
                              & a.speedups["concurrency"].isin(sp.concurrencies)]
            figures = [_figure(r) | {"passes": bool(getattr(r, col) >= sp.threshold)}
                       for r in rows.itertuples()]
            ok = all(f["passes"] for f in figures)
            entry.update(status="pass" if ok else "fail", figures=figures)
            shown = ", ".join(f"c={f['concurrency']}: {f[col]:.2f}" for f in figures)
            summary.append(f"{task}: best {best.arm} {sp.statistic} {shown} "
                           f"{'>=' if ok else 'not all >='} {sp.threshold:g}")
        per_task[task] = entry
    statuses = [e["status"] for e in per_task.values()]
    if "incomplete" in statuses:
        status = "incomplete"
    elif sp.require == "every_task":
        status = "pass" if all(s == "pass" for s in statuses) else "fail"
    else:
        status = "pass" if any(s == "pass" for s in statuses) else "fail"
    evidence = {"threshold": sp.threshold, "statistic": sp.statistic,
                "concurrencies": sp.concurrencies, "require": sp.require,
                "best_drafter_mode": sp.best_drafter, "tasks": per_task}
    return _bar("pass.speed", status, summary, evidence)


# --- stop -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StopDecision:
    fired: bool | None  # None: not judgeable yet (a needed cell is missing or invalid)
    evidence: dict


def stop_decision(a: Analysis) -> StopDecision:
    study = a.run.study
    stop = study.bars.stop
    col = _stat_column(stop.statistic)
    sel = a.speedups[a.speedups["concurrency"].isin(stop.concurrencies)]
    evidence: dict = {"threshold": stop.threshold, "statistic": stop.statistic,
                      "concurrencies": stop.concurrencies, "fires_when": stop.fires_when}
    # Every arm's cells at the stop levels, baselines included, must be usable.
    needed = [a.run.find(arm.name, t, "speed", c) for arm in study.arms
              for t in _speed_tasks(study) for c in stop.concurrencies]
    not_ready = [{"cell": c.id, "status": c.status, "reason": c.reason}
                 for c in needed if not c.usable]
    if not_ready:
        evidence["not_judgeable"] = not_ready
        return StopDecision(None, _clean(evidence))
    tasks: dict[str, dict] = {}
    for task, best in _best_by_task(a, stop.concurrencies, stop.statistic).items():
        rows = sel[(sel["arm"] == best.arm) & (sel["task"] == task)]
        figures = [_figure(r) for r in rows.itertuples()]
        below = bool(figures) and all(f[col] < stop.threshold for f in figures)
        tasks[task] = {"best_drafter": best.arm, "rule": best.rule, "minima": best.minima,
                       "figures": figures, "below_threshold_everywhere": below}
    flags = [t["below_threshold_everywhere"] for t in tasks.values()]
    fired = all(flags) if stop.fires_when == "all_tasks" else any(flags)
    evidence["tasks"] = tasks
    return StopDecision(bool(fired), _clean(evidence))


def judge_stop(run_dir: str | Path, study: Study | None = None) -> StopDecision:
    """Judged once every arm's speed cells at the stop bar's levels are complete."""
    return stop_decision(analyse(run_dir, study))


def stop_bar(a: Analysis) -> dict:
    d = stop_decision(a)
    ev = d.evidence
    if d.fired is None:
        n = len(ev["not_judgeable"])
        return _bar("stop", "not_judged", [f"not judgeable: {n} cells not usable"], ev)
    summary = []
    for task, t in ev["tasks"].items():
        col = _stat_column(ev["statistic"])
        shown = ", ".join(f"c={f['concurrency']}: {f[col]:.2f}" for f in t["figures"])
        summary.append(f"{task}: best {t['best_drafter']} {shown}"
                       f" ({'all' if t['below_threshold_everywhere'] else 'not all'} "
                       f"< {ev['threshold']:g})")
    if d.fired:
        skipped = [s.get("cell") for s in a.run.manifest.get("skipped") or []]
        ev["skipped_cells"] = skipped
        summary.append(f"fired: {len(skipped)} remaining speed cells skipped")
    return _bar("stop", "fired" if d.fired else "not_fired", summary, ev)


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
        return _bar("check", "not_fired", [f"no speedup above {check.threshold:g}"], ev)
    summary = []
    for r in reruns:
        if r["state"] in ("agrees", "disagrees"):
            summary.append(f"{r['of']}: rerun {r['state']} ({r['relative_difference']:+.1%},"
                           f" limit {check.agree_within:.0%}); behind {', '.join(r['behind'])}")
        else:
            summary.append(f"{r['of']}: rerun {r['state']}; behind {', '.join(r['behind'])}")
    status = "agreed" if all(r["state"] == "agrees" for r in reruns) else "unresolved"
    return _bar("check", status, summary, ev)


# --- pass: identity, accuracy, knee ---------------------------------------------------


def _judged_arms(a: Analysis, task: str, arms_rule: str) -> tuple[list[str] | None, str]:
    drafters = [arm.name for arm in a.run.study.arms if arm.baseline is not None]
    if arms_rule == "all_drafters":
        return drafters, "every drafter arm"
    best = _best_for_task(a, task)
    return ([best.arm] if best.arm else None), best.rule


def identity_bar(a: Analysis) -> dict:
    bar = a.run.study.bars.pass_.identity
    if bar is None:
        return _bar("pass.identity", "not_registered", ["not registered"], {})
    tasks: dict[str, dict] = {}
    summary: list[str] = []
    for task in (t.name for t in a.run.study.tasks if "identity" in t.uses):
        arms, rule = _judged_arms(a, task, bar.arms)
        entry: dict = {"arms_rule": rule, "arms": {}}
        if arms is None:
            entry["status"] = "incomplete"
            summary.append(f"{task}: incomplete (best drafter undetermined)")
            tasks[task] = entry
            continue
        states = []
        for name in arms:
            arm = a.run.study.arm(name)
            d, b = a.run.find(name, task, "identity"), a.run.find(arm.baseline, task, "identity")
            if not (d.usable and b.usable):
                states.append("incomplete")
                entry["arms"][name] = {"status": "incomplete", "cells": {
                    x.id: f"{x.status} ({x.reason})" for x in (d, b) if not x.usable}}
                summary.append(f"{task}/{name}: incomplete")
                continue
            res = compare_identity(d, b)
            ok = res.share is not None and res.share >= bar.min_identical_share
            states.append("pass" if ok else "fail")
            mism = [m.__dict__ for m in res.mismatches[:MAX_MISMATCHES_IN_EVIDENCE]]
            entry["arms"][name] = {"status": "pass" if ok else "fail", "drafter_cell": d.id,
                                   "baseline_cell": b.id, "n_compared": res.n_compared,
                                   "n_identical": res.n_identical, "share": res.share,
                                   "mismatches": mism,
                                   "mismatches_total": len(res.mismatches)}
            summary.append(f"{task}/{name}: {res.n_identical}/{res.n_compared} identical"
                           f" ({res.share:.1%}; need >= {bar.min_identical_share:.0%})")
        entry["status"] = ("incomplete" if "incomplete" in states
                           else "pass" if all(s == "pass" for s in states) else "fail")
        tasks[task] = entry
    status = _combine([t["status"] for t in tasks.values()])
    ev = {"concurrency": bar.concurrency, "min_identical_share": bar.min_identical_share,
          "arms": bar.arms, "tasks": tasks}
    return _bar("pass.identity", status, summary, ev)


def accuracy_bar(a: Analysis) -> dict:
    bar = a.run.study.bars.pass_.accuracy
    if bar is None:
        return _bar("pass.accuracy", "not_registered", ["not registered"], {})
    tasks: dict[str, dict] = {}
    summary: list[str] = []
    for task in bar.tasks:
        arms, rule = _judged_arms(a, task, bar.arms)
        entry: dict = {"arms_rule": rule, "arms": {}}
        if arms is None:
            entry["status"] = "incomplete"
            summary.append(f"{task}: incomplete (best drafter undetermined)")
            tasks[task] = entry
            continue
        states = []
        for name in arms:
            arm = a.run.study.arm(name)
            d, b = a.run.find(name, task, "accuracy"), a.run.find(arm.baseline, task, "accuracy")
            if not (d.usable and b.usable and d.scores is not None and b.scores is not None):
                states.append("incomplete")
                entry["arms"][name] = {"status": "incomplete", "cells": {
                    x.id: f"{x.status} ({x.reason or 'no scores'})" for x in (d, b)}}
                summary.append(f"{task}/{name}: incomplete")
                continue
            cmp = compare_accuracy(d, b, bar.level)
            states.append("pass" if cmp.within else "fail")
            entry["arms"][name] = {"status": "pass" if cmp.within else "fail",
                                   "drafter_cell": d.id, "baseline_cell": b.id} | cmp.to_dict()
            lo, hi = cmp.baseline_interval
            p = cmp.paired
            summary.append(
                f"{task}/{name}: {cmp.accuracy:.3f} {'inside' if cmp.within else 'outside'} "
                f"{arm.baseline} [{lo:.3f}, {hi:.3f}] (n={cmp.n}; only-drafter {p.only_a}, "
                f"only-baseline {p.only_b}, McNemar p={p.mcnemar_p:.3g})")
        entry["status"] = ("incomplete" if "incomplete" in states
                           else "pass" if all(s == "pass" for s in states) else "fail")
        tasks[task] = entry
    status = _combine([t["status"] for t in tasks.values()])
    ev = {"rule": bar.rule, "level": bar.level, "arms": bar.arms, "tasks": tasks}
    return _bar("pass.accuracy", status, summary, ev)


def knee_bar(a: Analysis) -> dict:
    required = a.run.study.bars.pass_.knee.required
    knees = a.knees.to_dict(orient="records")
    summary = [f"{k['arm']}/{k['task']}: {k['label']}" for k in knees]
    done = all(k["status"] in ("located", "below_first", "beyond") for k in knees)
    status = ("pass" if done else "incomplete") if required else "not_required"
    ev = {"required": required, "rule": "first level whose interval's lower bound <= 1,"
          " interpolated linearly in the lower bound over log2(concurrency)", "knees": knees}
    return _bar("pass.knee", status, summary, ev)


def _combine(statuses: list[str]) -> str:
    if "incomplete" in statuses:
        return "incomplete"
    return "pass" if all(s == "pass" for s in statuses) else "fail"


# --- the verdict -------------------------------------------------------------------------


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN and infinities become null, numpy scalars plain numbers."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is pd.NA or obj is pd.NaT:
        return None
    return obj


def evaluate(a: Analysis) -> dict:
    run = a.run
    reruns = rerun_states(a)
    stop = stop_bar(a)
    check = check_bar(a, reruns)
    passes = [speed_bar(a), identity_bar(a), accuracy_bar(a), knee_bar(a)]
    judged = [b for b in passes if b["status"] not in ("not_registered", "not_required")]
    reasons: list[str] = []
    if stop["status"] == "fired":
        verdict = "STOP"
        reasons.append("the stop bar fired")
    else:
        incomplete = [b["name"] for b in judged if b["status"] == "incomplete"]
        if check["status"] == "unresolved":
            incomplete.append("check (baseline rerun missing, invalid or disagreeing)")
        if incomplete:
            verdict = "INCOMPLETE"
            reasons.append("incomplete: " + ", ".join(incomplete))
        elif all(b["status"] == "pass" for b in judged):
            verdict = "PASS"
        else:
            verdict = "FAIL"
            reasons.append("failed: " + ", ".join(b["name"] for b in judged
                                                   if b["status"] == "fail"))
    excluded = [{"cell": c.id, "reason": c.reason} for c in run.cells.values()
                if c.status == "invalid"]
    out = {
        "seal": run.manifest.get("seal"),
        "run_id": run.run_id,
        "verdict": verdict,
        "reasons": reasons,
        "bars": [*passes, stop, check],
        "reruns": reruns,
        "excluded_cells": excluded,
        "skipped_cells": run.manifest.get("skipped") or [],
        "generated_wall": time.time(),
    }
    return _clean(out)


def write_verdict(run_dir: str | Path | RunData, study: Study | None = None,
                  analysis: Analysis | None = None) -> dict:
    """Judge every bar and write verdict.json into the run folder; returns the verdict."""
    a = analysis or analyse(run_dir if isinstance(run_dir, RunData) else load_run(run_dir, study))
    verdict = evaluate(a)
    path = a.run.run_dir / "verdict.json"
    tmp = path.with_name(".verdict.json.tmp")
    tmp.write_text(json.dumps(verdict, indent=2) + "\n")
    tmp.replace(path)
    return verdict
