"""Helpers every bar uses: which figure a statistic reads, the best drafter, JSON-safe evidence."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.speedup import BestDrafter, best_drafter
from harness.analysis.tables import Analysis
from harness.prereg.schema import Study


def stat_column(statistic: str) -> str:
    return {"point": "speedup", "ci_lower": "ci_lower", "ci_upper": "ci_upper"}[statistic]


def speed_tasks(study: Study) -> list[str]:
    return [t.name for t in study.tasks if "speed" in t.uses]


def figure_of(row: Any) -> dict:
    return {"concurrency": int(row.concurrency), "drafter_cell": row.drafter_cell,
            "baseline_cell": row.baseline_cell, "status": row.status,
            "speedup": row.speedup, "ci_lower": row.ci_lower, "ci_upper": row.ci_upper,
            "speed_drafter": row.speed_drafter, "speed_baseline": row.speed_baseline}


def best_by_task(a: Analysis, concurrencies: list[int], statistic: str) -> dict[str, BestDrafter]:
    """The best drafter per speed task (or one pooled choice for every task)."""
    study = a.run.study
    tasks = speed_tasks(study)
    col = stat_column(statistic)
    if study.bars.pass_.speed.best_drafter == "pooled":
        pooled = best_drafter(a.speedups, tasks, concurrencies, col)
        return {t: pooled for t in tasks}
    return {t: best_drafter(a.speedups, [t], concurrencies, col) for t in tasks}


def pass_best(a: Analysis) -> dict[str, BestDrafter]:
    sp = a.run.study.bars.pass_.speed
    return best_by_task(a, sp.concurrencies, sp.statistic)


def best_for_task(a: Analysis, task: str) -> BestDrafter:
    """For a task without the speed use (e.g. MMLU), the pooled choice over speed tasks."""
    best = pass_best(a)
    if task in best:
        return best[task]
    sp = a.run.study.bars.pass_.speed
    return best_drafter(a.speedups, speed_tasks(a.run.study), sp.concurrencies,
                        stat_column(sp.statistic))


def bar_dict(name: str, status: str, summary: list[str], evidence: dict) -> dict:
    return {"name": name, "status": status, "summary": summary, "evidence": evidence}


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
