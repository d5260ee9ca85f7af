"""The registered bars, judged exactly as the study states them, each with its evidence.

Verdict: STOP if the stop bar fired; else INCOMPLETE if a cell some bar needs is
missing or invalid, or a fired check bar's baseline rerun is missing or disagrees;
else PASS if every registered pass bar passes, else FAIL. Invalid cells (client
unhealthy, or aborted at the error-rate limit) are never used, and are named.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from harness.analysis.accuracy import compare_accuracy
from harness.analysis.bar_common import (
    bar_dict,
    best_for_task,
    clean_json,
    figure_of,
    pass_best,
    stat_column,
)
from harness.analysis.identity import compare_identity
from harness.analysis.load import RunData, load_run
from harness.analysis.stop_check import (
    check_bar,
    rerun_states,
    stop_bar,
)
from harness.analysis.tables import Analysis, analyse
from harness.prereg.schema import Study

MAX_MISMATCHES_IN_EVIDENCE = 50


# --- pass: speed ----------------------------------------------------------------------


def speed_bar(a: Analysis) -> dict:
    sp = a.run.study.bars.pass_.speed
    col = stat_column(sp.statistic)
    per_task: dict[str, dict] = {}
    summary: list[str] = []
    for task, best in pass_best(a).items():
        entry: dict = {"rule": best.rule, "minima": best.minima, "best_drafter": best.arm}
        if best.arm is None:
            entry.update(status="incomplete", missing=best.missing)
            summary.append(f"{task}: incomplete ({'; '.join(best.missing[:3])})")
        else:
            rows = a.speedups[(a.speedups["arm"] == best.arm) & (a.speedups["task"] == task)
                              & a.speedups["concurrency"].isin(sp.concurrencies)]
            figures = [figure_of(r) | {"passes": bool(getattr(r, col) >= sp.threshold)}
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
    return bar_dict("pass.speed", status, summary, evidence)

# --- pass: identity, accuracy, knee ---------------------------------------------------


def _judged_arms(a: Analysis, task: str, arms_rule: str) -> tuple[list[str] | None, str]:
    drafters = [arm.name for arm in a.run.study.arms if arm.baseline is not None]
    if arms_rule == "all_drafters":
        return drafters, "every drafter arm"
    best = best_for_task(a, task)
    return ([best.arm] if best.arm else None), best.rule


def identity_bar(a: Analysis) -> dict:
    bar = a.run.study.bars.pass_.identity
    if bar is None:
        return bar_dict("pass.identity", "not_registered", ["not registered"], {})
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
    return bar_dict("pass.identity", status, summary, ev)


def accuracy_bar(a: Analysis) -> dict:
    bar = a.run.study.bars.pass_.accuracy
    if bar is None:
        return bar_dict("pass.accuracy", "not_registered", ["not registered"], {})
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
    return bar_dict("pass.accuracy", status, summary, ev)


def knee_bar(a: Analysis) -> dict:
    required = a.run.study.bars.pass_.knee.required
    knees = a.knees.to_dict(orient="records")
    summary = [f"{k['arm']}/{k['task']}: {k['label']}" for k in knees]
    done = all(k["status"] in ("located", "below_first", "beyond") for k in knees)
    status = ("pass" if done else "incomplete") if required else "not_required"
    ev = {"required": required, "rule": "first level whose interval's lower bound <= 1,"
          " interpolated linearly in the lower bound over log2(concurrency)", "knees": knees}
    return bar_dict("pass.knee", status, summary, ev)


def _combine(statuses: list[str]) -> str:
    if "incomplete" in statuses:
        return "incomplete"
    return "pass" if all(s == "pass" for s in statuses) else "fail"


# --- the verdict -------------------------------------------------------------------------

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
    return clean_json(out)


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
