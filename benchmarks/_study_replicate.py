"""One simulated run of a registered study, judged by the harness's own bars.

Every drafter arm, speed task and closed-loop level of the study is measured in the
sessions its plan gives (design.sessions_at), each session of an arm and plan stage one
engine start whose effect every cell of that stage shares (`share` of the session
variance; the rest is each cell's own), with per-request user and request noise
(_synthetic.speeds). Each pair goes through harness.analysis.intervals.session_ratio, the
rows through the speedup table's pooling (harness.analysis.pooling) and the knee table
(harness.analysis.knee), and the bars are the registered ones: bars.speed_bar,
stop_check.stop_decision, the check bar's firing rule, bars.knee_bar, pays.speculation_pays.
The bars read the run through SyntheticRun: every cell usable, nothing skipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pandas as pd
from _synthetic import Design, speeds, units

from harness.analysis.bar_common import drafter_arms, speed_tasks
from harness.analysis.bars import knee_bar, speed_bar
from harness.analysis.design import intervals_at
from harness.analysis.frame import framed
from harness.analysis.intervals import session_ratio
from harness.analysis.knee import knee_table
from harness.analysis.pays import speculation_pays
from harness.analysis.pooling import pool_session_variance
from harness.analysis.stop_check import _check_figures, stop_decision
from harness.plan import speed_stage
from harness.prereg.schema import Study


class SyntheticRun:
    """What the bars read of a run (harness.analysis.load.RunData): its study, and every
    cell usable."""

    def __init__(self, study: Study) -> None:
        self.study = study
        self.stop_fired = False
        self.manifest = SimpleNamespace(skipped=[])

    def find(self, arm: str, task: str, kind: str, concurrency: int | None = None):
        return SimpleNamespace(
            id=f"{arm}/{task}/{kind}/c{concurrency}", usable=True, status="complete", reason=None
        )

    def sessions_of(self, cell) -> list:
        return [cell]


@dataclass
class StudyShape:
    study: Study
    design: Design
    drafters: list[str]
    baseline_of: dict[str, str]
    tasks: list[str]
    levels: list[int]
    pooled_study: Study = field(init=False)  # the same design, pooling: stage_cells

    def __post_init__(self) -> None:
        bars = self.study.bars.model_copy(
            update={
                "intervals": self.study.bars.intervals.model_copy(update={"pooling": "stage_cells"})
            }
        )
        self.pooled_study = self.study.model_copy(update={"bars": bars})


def shape_of(study: Study, design: Design) -> StudyShape:
    drafters = drafter_arms(study)
    return StudyShape(
        study,
        design,
        drafters,
        {a: study.arm(a).baseline for a in drafters},
        speed_tasks(study),
        design.levels,
    )


# The columns the bars, the knee and the pooling read (the rest of the table is not
# simulated: it would only slow pandas' row iteration).
BAR_COLUMNS = [
    "arm",
    "baseline",
    "task",
    "concurrency",
    "drafter_cell",
    "baseline_cell",
    "status",
    "speedup",
    "ci_lower",
    "ci_upper",
    "interval_method",
    "sessions",
    "speed_drafter",
    "speed_baseline",
    "session_speeds_drafter",
    "session_speeds_baseline",
    "pooling",
]
OBJECT_COLUMNS = [
    "arm",
    "baseline",
    "task",
    "drafter_cell",
    "baseline_cell",
    "status",
    "interval_method",
    "session_speeds_drafter",
    "session_speeds_baseline",
    "pooling",
]


Cells = dict[tuple[str, str, int], list]


def draw(
    shape: StudyShape,
    truth: dict[str, list[float]],
    session_sd: float,
    share: float,
    rng: np.random.Generator,
    levels: list[int] | None = None,
) -> Cells:
    """Every cell's sessions (Units) of one simulated run, all that the plan could
    measure; truth: each drafter's true speedup by level (every task alike). `levels`:
    only these (the stage-1 bars read no other)."""
    d = shape.design
    levels = levels or shape.levels
    start_sd, cell_sd = session_sd * np.sqrt(share), session_sd * np.sqrt(1.0 - share)
    arms = [*shape.drafters, *dict.fromkeys(shape.baseline_of.values())]
    starts = {
        (arm, stage): rng.normal(0.0, start_sd, size=d.sessions) for arm in arms for stage in (1, 2)
    }
    cells: Cells = {}
    for arm in arms:
        for task in shape.tasks:
            for c in levels:
                factor = truth[arm][shape.levels.index(c)] if arm in truth else 1.0
                shift = starts[(arm, speed_stage(shape.study, c))]
                cells[(arm, task, c)] = [
                    units(
                        factor * speeds(rng, c, d.requests(c), shift[s] + rng.normal(0.0, cell_sd)),
                        c,
                    )
                    for s in range(d.sessions_at(c))
                ]
    return cells


def table_of(
    shape: StudyShape, cells: Cells, sessions: dict | None = None, missing: bool = False
) -> pd.DataFrame:
    """The speedup table of the cells drawn; `sessions`: (arm, task, c) -> how many of
    each cell's sessions are measured (a pair reads the first n of both, its interval the
    design's at n: harness.analysis.sequential); `missing`: rows for the levels not drawn,
    as a run in progress has them."""
    rows = []
    study = shape.study
    for arm in shape.drafters:
        base = shape.baseline_of[arm]
        for task in shape.tasks:
            for c in shape.levels:
                key = f"{arm}/{task}/c{c}"
                row = {
                    "arm": arm,
                    "baseline": base,
                    "task": task,
                    "concurrency": c,
                    "drafter_cell": key,
                    "baseline_cell": f"{base}/{task}/c{c}",
                }
                if (arm, task, c) not in cells:
                    if missing:
                        rows.append(row | {"status": "missing"})
                    continue
                du, bu = cells[(arm, task, c)], cells[(base, task, c)]
                if sessions is not None:
                    n = min(sessions[(arm, task, c)], sessions[(base, task, c)])
                    du, bu = du[:n], bu[:n]
                iv = intervals_at(study, len(du), shape.design.intervals)
                r = session_ratio(du, bu, iv, f"{arm}|{task}|{c}")
                rows.append(
                    row
                    | {
                        "status": "ok",
                        "speedup": r.point,
                        "ci_lower": r.ci_lower,
                        "ci_upper": r.ci_upper,
                        "interval_method": r.method,
                        "sessions": r.sessions,
                        "speed_drafter": float(np.mean(r.speeds_drafter)),
                        "speed_baseline": float(np.mean(r.speeds_baseline)),
                        "session_speeds_drafter": json.dumps(r.speeds_drafter),
                        "session_speeds_baseline": json.dumps(r.speeds_baseline),
                    }
                )
    # Plain Python strings, not pandas 3's Arrow-backed str: the bars' row iteration over
    # such columns costs most of a replicate, and the values read are the same.
    return framed(rows, BAR_COLUMNS).astype({c: object for c in OBJECT_COLUMNS})


def measure(
    shape: StudyShape,
    truth: dict[str, list[float]],
    session_sd: float,
    share: float,
    rng: np.random.Generator,
    levels: list[int] | None = None,
) -> pd.DataFrame:
    """The speedup table of one simulated run under the fixed design (draw, table_of)."""
    return table_of(shape, draw(shape, truth, session_sd, share, rng, levels))


def judge(shape: StudyShape, speedups: pd.DataFrame, full: bool = True) -> dict:
    """The registered bars on one simulated run's table (the study's pooling applied);
    full=False: the stage-1 bars alone (speed, stop, check), on stage-1 rows."""
    study = shape.study
    table = pool_session_variance(speedups, study)
    run = SyntheticRun(study)
    a = SimpleNamespace(run=run, speedups=table, knees=None)
    speed = speed_bar(a)
    out = {
        "table": table,
        "speed": speed.status,
        "stop": bool(stop_decision(a).fired),
        "check": bool(len(_check_figures(a))),
        "best": {t: e["best_drafter"] for t, e in speed.evidence["tasks"].items()},
    }
    if full:
        a.knees = knee_table(run, table)
        out |= {
            "knees": a.knees,
            "knee": knee_bar(a).status,
            "pays": speculation_pays(study, table),
        }
    return out


def pooled(shape: StudyShape, speedups: pd.DataFrame) -> pd.DataFrame:
    """The same table with the session variance pooled over each stage's cells."""
    return pool_session_variance(speedups, shape.pooled_study)
