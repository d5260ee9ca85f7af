"""What the speed-curve figures draw: per task, each arm's per-user speed and output
throughput at each level of its complete, first-measured speed cells."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.analysis.bar_common import speed_tasks
from harness.analysis.tables import Analysis
from harness.report.views import arm_colours
from harness.report.views.series import figures
from harness.rundir.verdict import Verdict


@dataclass(frozen=True)
class ArmCurve:
    """An arm's complete, first-measured speed cells on one task, by level (ascending)."""

    arm: str
    colour: str
    drafter: bool
    users: np.ndarray  # int
    per_user_speed: np.ndarray  # tok/s: the median over requests
    throughput: np.ndarray  # output tok/s over the measured wall time


@dataclass(frozen=True)
class SpeedCurvesView:
    title: str
    subtitle: str
    levels: list[int]
    tasks: dict[str, list[ArmCurve]]  # every speed task; [] where it has no complete cell


def build_speed_curves_view(a: Analysis, v: Verdict) -> SpeedCurvesView:
    colours = arm_colours(a)
    cells = a.cell_rows(kinds=("speed",), status=("complete",), first_measured=True)
    tasks: dict[str, list[ArmCurve]] = {}
    for task in speed_tasks(a.run.study):
        tasks[task] = []
        for arm in a.run.study.arms:
            rows = sorted(
                (r for r in cells if r.task == task and r.arm == arm.name),
                key=lambda r: (r.concurrency or 0, r.session or 0),  # sessions in order
            )
            if rows:
                curve = ArmCurve(
                    arm.name,
                    colours[arm.name],
                    arm.baseline is not None,
                    np.array([r.concurrency for r in rows], dtype=int),
                    figures([r.per_user_speed for r in rows]),
                    figures([r.output_throughput_tok_s for r in rows]),
                )
                tasks[task].append(curve)
    return SpeedCurvesView(
        "Per-user speed and throughput vs concurrency",
        "per-user speed = median over requests of (tokens - 1) / (end - first token);"
        " throughput = output tokens / measured wall time",
        a.run.study.loads.closed_loop.concurrency,
        tasks,
    )
