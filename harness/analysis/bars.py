"""The registered bars, judged exactly as the study states them, each with its evidence.

Verdict: STOP if the stop bar fired; else INCOMPLETE if a cell some bar needs is
missing or invalid, or a fired check bar's baseline rerun is missing or disagrees;
else PASS if every registered pass bar passes, else FAIL (a bar failed, or the knee
was not located: the knee is read on the point estimates, and a point still above 1.0
at the top registered level, or at or below it at the first, is a bound, not a location,
unless the study registers `bars.pass.knee.beyond_top` / `below_first: pass`). Invalid cells
(client unhealthy, or aborted at the error-rate limit) are never used, and are named.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from harness.analysis import stop_check  # noqa: F401  (registers the stop and check bars)
from harness.analysis.accuracy import compare_accuracy
from harness.analysis.bar_common import (
    BARS,
    ArmJudgement,
    BarResult,
    BarStatus,
    bars_of,
    clean_json,
    figure_of,
    judge_per_task,
    pass_best,
    register_bar,
    speed_tasks,
    stat_column,
)
from harness.analysis.design import design_record
from harness.analysis.gpu import throttled_cells
from harness.analysis.identity import compare_identity
from harness.analysis.load import CellData, RunData, load_run
from harness.analysis.pays import speculation_pays
from harness.analysis.regime import host_regime
from harness.analysis.rows import KneeRow
from harness.analysis.surface import surface_summary
from harness.analysis.tables import Analysis, analyse
from harness.analysis.unfinished import remeasured_cells, unfinished
from harness.atomic import write_json
from harness.prereg.schema import Study
from harness.rundir.verdict import VERDICT, Verdict

MAX_MISMATCHES_IN_EVIDENCE = 50


# --- pass: speed ----------------------------------------------------------------------


@register_bar("pass.speed", "pass")
def speed_bar(a: Analysis) -> BarResult:
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
            figures = [
                figure_of(r) | {"passes": bool(getattr(r, col) >= sp.threshold)}
                for r in a.speedups_of(best.arm, task, sp.concurrencies)
            ]
            ok = all(f["passes"] for f in figures)
            entry.update(status="pass" if ok else "fail", figures=figures)
            shown = ", ".join(f"c={f['concurrency']}: {f[col]:.2f}" for f in figures)
            summary.append(
                f"{task}: best {best.arm} {sp.statistic} {shown} "
                f"{'>=' if ok else 'not all >='} {sp.threshold:g}"
            )
            flagged = sorted({c for f in figures for c in f["gpu_throttled"]})
            if flagged:
                summary.append(f"{task}: measured while the GPU throttled: {', '.join(flagged)}")
        per_task[task] = entry
    statuses = [e["status"] for e in per_task.values()]
    status: BarStatus
    if "incomplete" in statuses:
        status = "incomplete"
    elif sp.require == "every_task":
        status = "pass" if all(s == "pass" for s in statuses) else "fail"
    else:
        status = "pass" if any(s == "pass" for s in statuses) else "fail"
    evidence = {
        "threshold": sp.threshold,
        "statistic": sp.statistic,
        "concurrencies": sp.concurrencies,
        "require": sp.require,
        "best_drafter_mode": sp.best_drafter,
        "tasks": per_task,
    }
    return BarResult("pass.speed", status, summary, evidence)


# --- pass: identity, accuracy, knee ---------------------------------------------------


def _unusable(*cells: CellData) -> dict[str, str]:
    return {x.id: f"{x.status} ({x.reason})" for x in cells if not x.usable}


@register_bar("pass.identity", "pass")
def identity_bar(a: Analysis) -> BarResult:
    bar = a.run.study.bars.pass_.identity
    if bar is None:
        return BarResult("pass.identity", "not_registered", ["not registered"], {})

    def judge(task: str, name: str) -> ArmJudgement:
        arm = a.run.study.arm(name)
        assert arm.baseline is not None  # drafter_arms: each judged arm has its baseline
        d, b = a.run.find(name, task, "identity"), a.run.find(arm.baseline, task, "identity")
        if not (d.usable and b.usable):
            return ArmJudgement("incomplete", {"cells": _unusable(d, b)}, "incomplete")
        res = compare_identity(d, b, bar.count, bar.near_tie_margin)
        detail = {
            "drafter_cell": d.id,
            "baseline_cell": b.id,
            "n_compared": res.n_compared,
            "n_identical": res.n_identical,
            "n_numeric": res.n_numeric,
            "n_counted_identical": res.n_counted_identical,
            "share": res.share,
            "not_compared": [asdict(n) for n in res.not_compared],
            "mismatches": [asdict(m) for m in res.mismatches[:MAX_MISMATCHES_IN_EVIDENCE]],
            "mismatches_total": len(res.mismatches),
            "divergence_kinds": {
                k: sum(1 for m in res.mismatches if m.divergence and m.divergence.kind == k)
                for k in ("numeric", "real", "unknown")
            },
        }
        skipped = (
            f"; {len(res.not_compared)} not compared (a request failed)" if res.not_compared else ""
        )
        if res.share is None:
            return ArmJudgement(
                "incomplete", detail, f"no item has an output from both arms{skipped}"
            )
        ok = res.share >= bar.min_identical_share
        numeric = (
            f", {res.n_numeric} of them near-tie divergences (margin < {bar.near_tie_margin:g})"
            if bar.count == "beyond_near_ties" and res.n_numeric
            else ""
        )
        return ArmJudgement(
            "pass" if ok else "fail",
            detail,
            f"{res.n_counted_identical}/{res.n_compared} identical{numeric}"
            f" ({res.share:.1%}; need >= {bar.min_identical_share:.0%}){skipped}",
        )

    tasks = [t.name for t in a.run.study.tasks if "identity" in t.uses]
    per = judge_per_task(a, tasks, bar.arms, judge)
    ev = {
        "concurrency": bar.concurrency,
        "min_identical_share": bar.min_identical_share,
        "count": bar.count,
        "near_tie_margin": bar.near_tie_margin,
        "arms": bar.arms,
        "tasks": per.tasks,
    }
    return BarResult("pass.identity", per.status, per.summary, ev)


@register_bar("pass.accuracy", "pass")
def accuracy_bar(a: Analysis) -> BarResult:
    bar = a.run.study.bars.pass_.accuracy
    if bar is None:
        return BarResult("pass.accuracy", "not_registered", ["not registered"], {})

    def judge(task: str, name: str) -> ArmJudgement:
        arm = a.run.study.arm(name)
        assert arm.baseline is not None  # drafter_arms: each judged arm has its baseline
        d, b = a.run.find(name, task, "accuracy"), a.run.find(arm.baseline, task, "accuracy")
        if not (d.usable and b.usable and d.scores is not None and b.scores is not None):
            cells = {x.id: f"{x.status} ({x.reason or 'no scores'})" for x in (d, b)}
            return ArmJudgement("incomplete", {"cells": cells}, "incomplete")
        cmp = compare_accuracy(d, b, bar.level)
        lo, hi = cmp.baseline_interval
        p = cmp.paired
        line = (
            f"{cmp.accuracy:.3f} {'inside' if cmp.within else 'outside'} {arm.baseline}"
            f" [{lo:.3f}, {hi:.3f}] (n={cmp.n}; only-drafter {p.only_a}, only-baseline"
            f" {p.only_b}, McNemar p={p.mcnemar_p:.3g})"
        )
        return ArmJudgement(
            "pass" if cmp.within else "fail",
            {"drafter_cell": d.id, "baseline_cell": b.id} | cmp.to_dict(),
            line,
        )

    per = judge_per_task(a, bar.tasks, bar.arms, judge)
    ev = {"rule": bar.rule, "level": bar.level, "arms": bar.arms, "tasks": per.tasks}
    return BarResult("pass.accuracy", per.status, per.summary, ev)


KNEE_READING = (
    "the knee is where the best drafter's speedup crosses 1.0, read on the point"
    " estimates and interpolated linearly in the speedup over log2(concurrency)"
    " between the measured levels around it; its interval runs from where the"
    " speedup's lower bound crosses 1.0 to where its upper bound falls below it;"
    " a point still above 1.0 at the top registered level is a bound (> top), and"
    " one at or below 1.0 at the first level a bound (<= first): neither is a"
    " located knee"
)


def _knee_bound(kb, status: str) -> str | None:
    """The registered reading a bound is held to (bars.pass.knee), or None: not a bound."""
    return {
        "beyond": kb.beyond_top,
        "beyond_skipped": "not_located",
        "below_first": kb.below_first,
    }.get(status)


@register_bar("pass.knee", "pass")
def knee_bar(a: Analysis) -> BarResult:
    kb = a.run.study.bars.pass_.knee
    top = max(a.run.study.loads.closed_loop.concurrency)
    knees = a.rows("knees", KneeRow)

    def judge(task: str, arm: str) -> ArmJudgement:
        k = a.knee(arm, task)
        if k is None:
            return ArmJudgement("incomplete", {}, "no knee row")
        detail = {"knee": k.label, "knee_status": k.status, "interval": k.interval, "note": k.note}
        if k.status == "located":
            return ArmJudgement(
                "pass", detail, f"knee {k.label} users, interval {k.interval} ({k.note})"
            )
        reading = _knee_bound(kb, k.status)
        field = "beyond_top" if k.status == "beyond" else "below_first"
        if reading == "pass":
            return ArmJudgement(
                "pass",
                detail,
                f"knee {k.label}: a bound, accepted as registered (bars.pass.knee.{field}: pass)",
            )
        if reading is not None:
            return ArmJudgement(
                "not_located", detail, f"not located: knee {k.label}, a bound ({k.note})"
            )
        return ArmJudgement("incomplete", detail, f"incomplete ({k.note})")

    per = judge_per_task(a, speed_tasks(a.run.study), "best_drafter", judge)
    judged = {(arm, task) for task, e in per.tasks.items() for arm in (e["judged"] or {})}
    others = [k for k in knees if (k.arm, k.task) not in judged]
    summary = per.summary + [f"beside (not judged): {k.arm}/{k.task}: {k.label}" for k in others]
    status: BarStatus = per.status if kb.required else "not_required"
    if status == "not_located":
        summary.append(
            f"a point still above 1.0 at c={top}, the top registered level, or"
            " already at or below it at the first, is a bound, not a located"
            " knee; a study that accepts a bound registers"
            " bars.pass.knee.beyond_top (or below_first): pass"
        )
    summary.append(f"reading: {KNEE_READING}")
    ev = {
        "required": kb.required,
        "beyond_top": kb.beyond_top,
        "below_first": kb.below_first,
        "top_level": top,
        "rule": KNEE_READING,
        "tasks": per.tasks,
        "knees": [asdict(k) for k in knees],
    }
    return BarResult("pass.knee", status, summary, ev)


# --- the verdict -------------------------------------------------------------------------

NOT_LOCATED_REASON = (
    "a speedup still above 1.0 at the top registered level, or already at"
    " or below it at the first, is a bound, not a located knee"
    " (bars.pass.knee.beyond_top / below_first: pass registers otherwise)"
)


def evaluate(a: Analysis) -> Verdict:
    """Every registered bar, in the registry's order, and the verdict they give."""
    run = a.run
    passes = [b.judge(a) for b in bars_of("pass")]
    stop = BARS["stop"].judge(a)
    check = BARS["check"].judge(a)
    judged = [b for b in passes if b.status not in ("not_registered", "not_required")]
    reasons: list[str] = []
    if stop.status == "fired":
        verdict = "STOP"
        reasons.append("the stop bar fired")
    else:
        incomplete = [b.name for b in judged if b.status == "incomplete"]
        if check.status == "unresolved":
            incomplete.append("check (baseline rerun missing, invalid or disagreeing)")
        if incomplete:
            verdict = "INCOMPLETE"
            reasons.append("incomplete: " + ", ".join(incomplete))
        elif all(b.status == "pass" for b in judged):
            verdict = "PASS"
        else:
            verdict = "FAIL"
            failed = [b.name for b in judged if b.status == "fail"]
            if failed:
                reasons.append("failed: " + ", ".join(failed))
            if any(b.status == "not_located" for b in judged):
                reasons.append(f"not located: pass.knee ({NOT_LOCATED_REASON})")
    finish = None
    if verdict == "INCOMPLETE":  # each cause, its cells per bar, the command that finishes it
        unfinished_bars = [b.name for b in judged if b.status == "incomplete"]
        unfinished_bars += ["check"] if check.status == "unresolved" else []
        finish = unfinished(
            run, unfinished_bars, [r.get("state") for r in check.evidence.get("reruns", [])]
        )
        reasons.extend(finish.lines)
    excluded = [
        {"cell": c.id, "reason": c.reason} for c in run.cells.values() if c.status == "invalid"
    ]
    out = {
        "seal": run.manifest.seal,
        "run_id": run.run_id,
        "verdict": verdict,
        "reasons": reasons,
        "bars": [b.to_dict() for b in (*passes, stop, check)],
        "reruns": check.evidence.get("reruns", []),
        "excluded_cells": excluded,
        # Cells measured while the GPU throttled: flagged, and used by the bars unless
        # recording.gpu_throttle: remeasure made them invalid.
        "gpu_throttle_policy": run.study.recording.gpu_throttle,
        "gpu_throttled_cells": throttled_cells(run),
        "skipped_cells": [s.model_dump() for s in run.manifest.skipped],
        # Per drafter and task: where the gain is shown and where it is gone, and the
        # engine setting that would gate speculation where it is gone (analysis/pays.py).
        "speculation_pays": speculation_pays(run.study, a.speedups),
        # Arms with synthetic acceptance (drafter.synthetic): in the tables, read by no bar.
        "control_arms": run.study.control_arms(),
        # Each baseline's plain step by level, timed in the smoke (analysis/regime.py):
        # whether this host could let speculation pay at the pass levels at all.
        "host_regime": host_regime(run.manifest),
        # The round-cost surface, outside the bars (analysis/surface.py).
        "surface": surface_summary(a) if run.study.surface is not None else None,
        # design: group_sequential: the look each bar was decided at (analysis/design.py).
        "design": design_record(a, [*passes, stop, check]),
        "generated_wall": time.time(),
        "unfinished": finish.model_dump() if finish is not None else None,
        "remeasured": [r.model_dump() for r in remeasured_cells(run)],
    }
    # Checked against verdict.json's model as it is made, so a bar that writes what the
    # report cannot read fails here, not after the hours.
    return Verdict.model_validate(clean_json(out))


def write_verdict(
    run_dir: str | Path | RunData, study: Study | None = None, analysis: Analysis | None = None
) -> Verdict:
    """Judge every bar and write verdict.json into the run folder; returns the verdict."""
    a = analysis or analyse(run_dir if isinstance(run_dir, RunData) else load_run(run_dir, study))
    verdict = evaluate(a)
    write_json(a.run.run_dir / VERDICT, verdict.to_json())
    return verdict
