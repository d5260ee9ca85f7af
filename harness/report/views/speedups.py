"""What a task's speedup figure draws (the speedup pages, page one, and the HTML's): each
drafter's usable speedups with their interval, its speedup against the baseline's rerun,
its knee, the two factors of its decomposition, and the registered bars' lines."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.analysis.bar_common import speed_tasks
from harness.analysis.knee import knee_span
from harness.analysis.rows import KneeRow, SpeedupRow, curves
from harness.analysis.tables import Analysis
from harness.numbers import is_nan
from harness.report.views import arm_colours
from harness.report.views.series import Estimates, figures
from harness.rundir.verdict import Verdict

# The decomposition's four panels, over the same usable speedups (pages_decompose.py).
DECOMPOSITION_TITLES = (
    "speedup: measured, explained, predicted",
    "tokens per round",
    "round time vs plain step (ms)",
    "round cost (x plain step)",
)


@dataclass(frozen=True)
class RerunRatios:
    """The check bar's reruns: at each level with one, the drafter's speed over the rerun
    baseline's."""

    users: np.ndarray  # int
    ratio: np.ndarray


@dataclass(frozen=True)
class Factors:
    """The decomposition's two factors at each level that has both: tokens per round over
    the baseline's, and the round's cost over a plain step; their quotient is the
    explained speedup."""

    users: np.ndarray  # int
    tokens: np.ndarray
    cost: np.ndarray

    @property
    def empty(self) -> bool:
        return not len(self.users)


@dataclass(frozen=True)
class ArmSpeedups:
    """A drafter's usable speedups on one task, by level (ascending), and what explains
    them (analysis/decompose.py, analysis/predict.py)."""

    arm: str
    colour: str
    users: np.ndarray  # int: the levels of its usable speedups
    speedup: Estimates
    explained: np.ndarray  # tokens per round over the round cost ratio
    predicted: np.ndarray  # the roofline formula's
    tokens_per_round: np.ndarray  # from the client's chunks
    engine_tokens_per_round: np.ndarray  # 1 + sum(p_i) from the engine's counters
    round_time_ms: np.ndarray
    baseline_step_ms: np.ndarray  # a plain step of the baseline
    round_cost: Estimates  # a round's time over a plain step's
    predicted_round_cost: np.ndarray
    rerun: RerunRatios
    knee: float | None  # where its speedup crosses 1.0, located
    knee_span: tuple[float, float] | None  # the knee's interval, drawn at 1.0
    knee_interval: str
    knee_beyond: bool  # the knee lies beyond the highest level
    factors: Factors


@dataclass(frozen=True)
class BarLine:
    name: str  # pass, stop or check
    value: float
    colour: str


@dataclass(frozen=True)
class SpeedupsView:
    title: str
    subtitle: str  # what the figures show and how their intervals were made
    panels: list[SpeedupPanel]  # one a speed task


@dataclass(frozen=True)
class SpeedupPanel:
    task: str
    levels: list[int]
    arms: list[ArmSpeedups]
    top: float  # the highest interval edge drawn (at least 1.5)
    bars: list[BarLine]  # the check bar only when the speedups reach near it
    empty: bool  # no usable speedup
    no_factors: bool  # no decomposition (no chunk stamps)


def build_speedup_panel(a: Analysis, task: str) -> SpeedupPanel:
    study = a.run.study
    levels = study.loads.closed_loop.concurrency
    bars = study.bars
    colours = arm_colours(a)
    usable = a.speedups_of(task=task, usable=True)
    arms, top = [], 1.5
    for (arm, _), by_level in curves(usable).items():
        rows = [by_level[c] for c in sorted(by_level)]
        drafter = arm_speedups(rows, colours[arm], a.knee(arm, task), levels)
        arms.append(drafter)
        upper = drafter.speedup.upper[~np.isnan(drafter.speedup.upper)]
        if len(upper):
            top = max(top, float(upper.max()))
    lines = [
        BarLine("pass", bars.pass_.speed.threshold, "#1a7f37"),
        BarLine("stop", bars.stop.threshold, "#b26a00"),
    ]
    if top > bars.check.threshold * 0.9:
        lines.append(BarLine("check", bars.check.threshold, "#c62828"))
    no_factors = all(x.factors.empty for x in arms)
    return SpeedupPanel(task, levels, arms, top, lines, not usable, no_factors)


def arm_speedups(
    rows: list[SpeedupRow], colour: str, knee: KneeRow | None, levels: list[int]
) -> ArmSpeedups:
    """A drafter's rows on one task (one a level, ascending) as the series drawn."""

    def users(of: list[SpeedupRow]) -> np.ndarray:
        return np.array([r.concurrency for r in of], dtype=int)

    located = (
        knee is not None
        and knee.status in ("located", "below_first")
        and not is_nan(knee.knee_concurrency)
    )
    rerun = [r for r in rows if not is_nan(r.baseline_rerun_speed)]
    explained = [r for r in rows if not is_nan(r.explained_speedup)]
    with np.errstate(divide="ignore", invalid="ignore"):  # as the table's division: inf, NaN
        rerun_ratio = figures(r.speed_drafter for r in rerun) / figures(
            r.baseline_rerun_speed for r in rerun
        )
        tokens_ratio = figures(r.tokens_per_round for r in explained) / figures(
            r.baseline_tokens_per_round for r in explained
        )
    return ArmSpeedups(
        rows[0].arm,
        colour,
        users(rows),
        Estimates(
            figures(r.speedup for r in rows),
            figures(r.ci_lower for r in rows),
            figures(r.ci_upper for r in rows),
        ),
        figures(r.explained_speedup for r in rows),
        figures(r.predicted_speedup for r in rows),
        figures(r.tokens_per_round for r in rows),
        figures(r.engine_tokens_per_round for r in rows),
        figures(r.round_time_s for r in rows) * 1e3,
        figures(r.baseline_step_time_s for r in rows) * 1e3,
        Estimates(
            figures(r.round_cost_ratio for r in rows),
            figures(r.round_cost_ratio_ci_lower for r in rows),
            figures(r.round_cost_ratio_ci_upper for r in rows),
        ),
        figures(r.predicted_round_cost_ratio for r in rows),
        RerunRatios(users(rerun), rerun_ratio),
        float(knee.knee_concurrency) if located and knee is not None else None,  # type: ignore[arg-type]
        knee_span(knee, levels) if located and knee is not None else None,
        knee.interval if knee is not None else "",
        knee is not None and knee.status in ("beyond", "beyond_skipped"),
        Factors(
            users(explained),
            tokens_ratio,
            figures(r.round_cost_ratio for r in explained),
        ),
    )


def build_speedups_view(a: Analysis, v: Verdict) -> SpeedupsView:
    panels = [build_speedup_panel(a, task) for task in speed_tasks(a.run.study)]
    return SpeedupsView("Speedup vs concurrency", speedup_note(a), panels)


def speedup_note(a: Analysis) -> str:
    """What the speedup figures show and how their intervals were made."""
    study = a.run.study
    bars = study.bars
    note = (
        f"median per-user speed ratio vs the same-engine baseline; band = "
        f"{bars.intervals.level:.0%} interval (within a session a bootstrap of"
        f" {bars.intervals.bootstrap_resamples} resamples); knee = where the speedup crosses"
        " 1.0, its interval (the bar at 1.0) where the band's edges do"
    )
    if study.recording.sessions > 1:
        # The band over sessions is by the registered method (harness.analysis.intervals).
        how: str = bars.intervals.method
        if how == "auto":
            how += " (below 30 sessions a t interval on the sessions' log ratios)"
        note += f"; over {study.recording.sessions} sessions by interval method {how}"
    if marked := sum(not is_nan(r.interval_caveat) for r in a.speedups_of(usable=True)):
        note += f"; {marked} intervals marked (one session or < 20 requests: next page)"
    if a.run.stop_fired:
        note += "; STOP fired: higher levels skipped"
    return note
