"""What a task's speedup figure draws (the speedup pages, page one, and the HTML's): each
drafter's usable speedups with their interval, its speedup against the baseline's rerun,
its knee, the two factors of its decomposition, and the registered bars' lines."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.analysis.bar_common import speed_tasks
from harness.analysis.knee import knee_span
from harness.analysis.tables import Analysis
from harness.numbers import is_nan
from harness.report.views import arm_colours
from harness.rundir.verdict import Verdict

# The decomposition's four panels, over the same usable speedups (pages_decompose.py).
DECOMPOSITION_TITLES = (
    "speedup: measured, explained, predicted",
    "tokens per round",
    "round time vs plain step (ms)",
    "round cost (x plain step)",
)


@dataclass(frozen=True)
class ArmSpeedups:
    arm: str
    colour: str
    rows: pd.DataFrame  # its usable speedups by concurrency: speedup, ci_lower, ci_upper, ...
    rerun: pd.DataFrame  # concurrency, ratio: its speed over the rerun baseline's (check bar)
    knee: float | None  # where its speedup crosses 1.0, located
    knee_span: tuple[float, float] | None  # the knee's interval, drawn at 1.0
    knee_interval: str
    knee_beyond: bool  # the knee lies beyond the highest level
    factors: pd.DataFrame  # concurrency, tokens (per round / baseline's), cost (round / step)


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
    sp = a.speedups[(a.speedups["task"] == task) & (a.speedups["status"] == "ok")]
    arms, top = [], 1.5
    for arm, grp in sp.groupby("arm", sort=False):
        g = grp.sort_values("concurrency")
        rerun = g[g["baseline_rerun_speed"].notna()]
        ratio = rerun["speed_drafter"].astype(float) / rerun["baseline_rerun_speed"].astype(float)
        explained = g[g["explained_speedup"].notna()]
        tokens = explained["tokens_per_round"].astype(float)
        knee = a.knee(str(arm), task)
        located = (
            knee is not None
            and knee.status in ("located", "below_first")
            and not is_nan(knee.knee_concurrency)
        )
        arms.append(
            ArmSpeedups(
                str(arm),
                colours[str(arm)],
                g,
                pd.DataFrame({"concurrency": rerun["concurrency"], "ratio": ratio}),
                float(knee.knee_concurrency) if located and knee is not None else None,  # type: ignore[arg-type]
                knee_span(knee, levels) if located and knee is not None else None,
                knee.interval if knee is not None else "",
                knee is not None and knee.status in ("beyond", "beyond_skipped"),
                pd.DataFrame(
                    {
                        "concurrency": explained["concurrency"],
                        "tokens": tokens / explained["baseline_tokens_per_round"].astype(float),
                        "cost": explained["round_cost_ratio"].astype(float),
                    }
                ),
            )
        )
        top = max(top, float(g["ci_upper"].astype(float).max()))
    lines = [
        BarLine("pass", bars.pass_.speed.threshold, "#1a7f37"),
        BarLine("stop", bars.stop.threshold, "#b26a00"),
    ]
    if top > bars.check.threshold * 0.9:
        lines.append(BarLine("check", bars.check.threshold, "#c62828"))
    no_factors = not any(len(x.factors) for x in arms)
    return SpeedupPanel(task, levels, arms, top, lines, sp.empty, no_factors)


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
