"""What every bar shares: the typed result, the registry, the best drafter per task, and one
per-task x arm judging loop, so no bar copies another's body."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from harness.analysis.rows import SpeedupRow
from harness.analysis.speedup import BestDrafter, best_drafter
from harness.analysis.tables import Analysis
from harness.prereg.schema import Study
from harness.rundir.verdict import BarStatus  # verdict.json names the statuses

# pass bars: pass | fail | not_located | incomplete | not_registered | not_required;
# stop: fired | not_fired | not_judged; check: not_fired | agreed | unresolved.
BarKind = Literal["pass", "stop", "check"]


@dataclass(frozen=True)
class BarResult:
    name: str
    status: BarStatus
    summary: list[str]
    evidence: dict

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "status": self.status,
            "summary": self.summary,
            "evidence": self.evidence,
        }


Bar = Callable[[Analysis], BarResult]


@dataclass(frozen=True)
class RegisteredBar:
    name: str
    kind: BarKind
    judge: Bar


# The registry, in the order the verdict lists bars within a kind.
BARS: dict[str, RegisteredBar] = {}


def register_bar(name: str, kind: BarKind) -> Callable[[Bar], Bar]:
    def wrap(fn: Bar) -> Bar:
        BARS[name] = RegisteredBar(name, kind, fn)
        return fn

    return wrap


def bars_of(kind: BarKind) -> list[RegisteredBar]:
    return [b for b in BARS.values() if b.kind == kind]


# --- figures ---------------------------------------------------------------------------


def stat_column(statistic: str) -> str:
    return {"point": "speedup", "ci_lower": "ci_lower", "ci_upper": "ci_upper"}[statistic]


def speed_tasks(study: Study) -> list[str]:
    return [t.name for t in study.tasks if "speed" in t.uses]


def drafter_arms(study: Study) -> list[str]:
    """The drafter arms the bars read: control arms (drafter.synthetic) never are."""
    return [arm.name for arm in study.arms if arm.baseline is not None and not arm.is_control]


def judged_speedups(
    a: Analysis, task: str | None = None, concurrencies: Collection[int] | None = None
) -> list[SpeedupRow]:
    """The speedup rows a bar may read (of a task, at levels): those of the drafter arms,
    no control arm's."""
    return a.speedups_of(drafter_arms(a.run.study), task, concurrencies)


def figure_of(row: SpeedupRow) -> dict:
    throttled = row.gpu_throttled_cells
    return {
        "concurrency": int(row.concurrency),
        "drafter_cell": row.drafter_cell,
        "baseline_cell": row.baseline_cell,
        "status": row.status,
        "speedup": row.speedup,
        "ci_lower": row.ci_lower,
        "ci_upper": row.ci_upper,
        "speed_drafter": row.speed_drafter,
        "speed_baseline": row.speed_baseline,
        # What the interval rests on (harness.analysis.intervals).
        "sessions": row.sessions,
        "interval_method": row.interval_method,
        "interval_caveat": row.interval_caveat,
        # The pair's cells measured while the GPU throttled (recording.gpu_throttle).
        "gpu_throttled": throttled.split("; ") if isinstance(throttled, str) else [],
    }


# --- the best drafter ----------------------------------------------------------------


def pass_best(a: Analysis) -> dict[str, BestDrafter]:
    """The pass bar's best drafter per speed task (one pooled choice for every task when
    the study registers `best_drafter: pooled`)."""
    study = a.run.study
    sp = study.bars.pass_.speed
    tasks = speed_tasks(study)
    col = stat_column(sp.statistic)
    speedups = judged_speedups(a)
    if sp.best_drafter == "pooled":
        pooled = best_drafter(speedups, tasks, sp.concurrencies, col)
        return {t: pooled for t in tasks}
    return {t: best_drafter(speedups, [t], sp.concurrencies, col) for t in tasks}


@dataclass(frozen=True)
class JudgedArms:
    """The drafters a bar judges on one task, each with why; arms None: undetermined."""

    arms: dict[str, str] | None
    rule: str
    missing: list[str] = field(default_factory=list)


def judged_drafters(a: Analysis, task: str, arms_rule: str) -> JudgedArms:
    """`all_drafters`: every drafter. `best_drafter`: on a speed task, that task's best;
    on a task without speed cells (MMLU), every drafter that is best on some speed task,
    so no task's winner escapes this task's bar."""
    if arms_rule == "all_drafters":
        return JudgedArms(
            {d: "every drafter arm is judged" for d in drafter_arms(a.run.study)},
            "every drafter arm",
        )
    best = pass_best(a)
    pooled = a.run.study.bars.pass_.speed.best_drafter == "pooled"
    if task in best:
        b = best[task]
        if b.arm is None:
            return JudgedArms(None, b.rule, b.missing)
        why = (
            "the best drafter over the speed tasks pooled"
            if pooled
            else f"the best drafter on {task}"
        )
        return JudgedArms({b.arm: why}, b.rule, [])
    wins: dict[str, list[str]] = {}
    missing: list[str] = []
    for t, b in best.items():
        if b.arm is None:
            missing.extend(b.missing or [f"best drafter on {t} undetermined"])
        else:
            wins.setdefault(b.arm, []).append(t)
    rule = (
        f"{task} has no speed cells: every drafter that is best on at least one speed"
        f" task ({', '.join(best)}) is judged"
    )
    if missing or not wins:
        return JudgedArms(None, rule, missing)
    return JudgedArms({arm: f"best on {', '.join(ts)}" for arm, ts in wins.items()}, rule)


# --- one task x arm judging loop ------------------------------------------------------


@dataclass(frozen=True)
class ArmJudgement:
    status: BarStatus  # pass | fail | not_located | incomplete
    detail: dict
    line: str  # one summary line


# Worst first: one incomplete arm leaves its task incomplete, and so on.
_SEVERITY: tuple[BarStatus, ...] = ("incomplete", "fail", "not_located", "pass")


def worst_status(statuses: Iterable[str]) -> BarStatus:
    present = set(statuses)
    for s in _SEVERITY:
        if s in present:
            return s
    return "pass"


@dataclass
class PerTask:
    status: BarStatus
    tasks: dict[str, dict]
    summary: list[str]


def judge_per_task(
    a: Analysis, tasks: Iterable[str], arms_rule: str, judge: Callable[[str, str], ArmJudgement]
) -> PerTask:
    """For each task, judge each drafter `judged_drafters` names; a task whose drafters
    are undetermined (a speed cell missing) is incomplete."""
    out: dict[str, dict] = {}
    summary: list[str] = []
    for task in tasks:
        chosen = judged_drafters(a, task, arms_rule)
        entry: dict = {"arms_rule": chosen.rule, "judged": chosen.arms, "arms": {}}
        if chosen.arms is None:
            entry.update(status="incomplete", missing=chosen.missing)
            summary.append(
                f"{task}: incomplete (drafters to judge undetermined:"
                f" {'; '.join(chosen.missing[:3])})"
            )
            out[task] = entry
            continue
        states = []
        for arm, why in chosen.arms.items():
            j = judge(task, arm)
            states.append(j.status)
            entry["arms"][arm] = {"status": j.status, "why_judged": why} | j.detail
            summary.append(f"{task}/{arm}: {j.line}")
        entry["status"] = worst_status(states)
        out[task] = entry
    return PerTask(worst_status(e["status"] for e in out.values()), out, summary)


# --- JSON ---------------------------------------------------------------------------


def clean_json(obj: Any) -> Any:
    """JSON-safe: NaN and infinities become null, numpy scalars plain numbers."""
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean_json(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is pd.NA or obj is pd.NaT:
        return None
    return obj
