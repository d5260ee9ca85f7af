"""What the round-cost surface section shows (issue 32), per surface task: a round's cost
over a plain step and the break-even acceptance length against load, one line per k, with
each real drafter's tokens per round placed on it and the text beneath; then, where the
study verifies it, the k schedule run at every registered level. Read by no bar."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.analysis.rows import SpeedupRow
from harness.analysis.tables import Analysis
from harness.prereg.schema import schedule_arm_name
from harness.rundir.verdict import (
    BreakEvenRow,
    Placement,
    SurfaceSummary,
    Verdict,
    VerifiedLevel,
)


@dataclass(frozen=True)
class RoundCost:
    """A round's cost over a plain step at each level, with its interval (NaN: not
    measured there)."""

    users: np.ndarray  # the levels, ascending (int)
    ratio: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


@dataclass(frozen=True)
class BreakEvenPoints:
    """The levels whose break-even acceptance length is located, and that length."""

    users: np.ndarray  # int
    length: np.ndarray


@dataclass(frozen=True)
class KLine:
    k: int
    cost: RoundCost
    break_even: BreakEvenPoints
    # (users, L, below): every L measured pays (below: under the lowest), or none does
    bounds: list[tuple[int, float, bool]]


@dataclass(frozen=True)
class PlacedDrafter:
    arm: str
    label: str  # the arm and its k
    placements: list[Placement]  # those that reach a figure (never empty)


@dataclass(frozen=True)
class Verification:
    title: str
    subtitle: str
    levels: list[int]  # the registered closed-loop levels
    rows: list[VerifiedLevel]
    ok: list[VerifiedLevel]  # measured, with a speedup
    predicted: list[VerifiedLevel]  # with a predicted speedup
    own: list[SpeedupRow]  # the drafter at its own k, in the registered stages' speedups
    lines: list[str]


@dataclass(frozen=True)
class SurfaceTask:
    task: str
    title: str
    ks: list[KLine]
    no_cell: bool  # no usable surface cell
    drafters: list[PlacedDrafter]
    lines: list[str]
    verification: Verification | None  # surface.verify_schedule


@dataclass(frozen=True)
class SurfaceView:
    title: str
    subtitle: str
    registered: bool  # a surface registered and summarised
    drafter: str
    levels: list[int]  # the surface's levels
    tasks: list[SurfaceTask]


def build_surface_view(a: Analysis, v: Verdict) -> SurfaceView:
    study = a.run.study
    surface, s = study.surface, v.surface
    if surface is None or s is None:
        return SurfaceView("The round-cost surface", "", False, "", [], [])
    tasks = []
    breaks = a.rows("surface", BreakEvenRow)
    for task in study.surface_tasks():
        rows = [r for r in breaks if r.task == task]
        tasks.append(
            SurfaceTask(
                task,
                f"The round-cost surface: task {task}",
                [_k_line(k, [r for r in rows if r.k == k]) for k in sorted({r.k for r in rows})],
                not any(_measured(r.round_cost_ratio) for r in rows),
                _placed(a, s, task),
                surface_text_lines(a, s, task),
                _verification(a, s, task) if surface.verify_schedule else None,
            )
        )
    return SurfaceView(
        "The round-cost surface",
        f"control arms of {surface.drafter} with acceptance set (k {surface.k}, L"
        f" {surface.acceptance_length}); break-even L: where the speedup's interval reaches"
        " 1.0, interpolated; read by no bar",
        True,
        surface.drafter,
        surface.concurrency,
        tasks,
    )


def _k_line(k: int, rows: list[BreakEvenRow]) -> KLine:
    """One k's rows (a task's), by level."""
    rows = sorted(rows, key=lambda r: r.concurrency)
    bounds = []
    for r in rows:
        lengths = [float(x) for x in str(r.lengths).split(",") if x]
        if r.status in ("below_measured", "above_measured") and lengths:
            below = r.status == "below_measured"
            bounds.append((int(r.concurrency), min(lengths) if below else max(lengths), below))
    located = [r for r in rows if r.status == "located"]
    return KLine(
        k,
        RoundCost(
            _levels(rows),
            _figures(r.round_cost_ratio for r in rows),
            _figures(r.round_cost_ratio_ci_lower for r in rows),
            _figures(r.round_cost_ratio_ci_upper for r in rows),
        ),
        BreakEvenPoints(_levels(located), _figures(r.break_even_length for r in located)),
        bounds,
    )


def _levels(rows: list[BreakEvenRow]) -> np.ndarray:
    return np.array([r.concurrency for r in rows], dtype=np.int64)


def _figures(values) -> np.ndarray:
    """Figures as floats, None as NaN (as the table holds a missing one)."""
    return np.array([math.nan if v is None else v for v in values], dtype=float)


def _measured(v: float | None) -> bool:
    return v is not None and not math.isnan(v)


def _placed(a: Analysis, s: SurfaceSummary, task: str) -> list[PlacedDrafter]:
    """Each real drafter arm with its placements on a task's surface that reach a figure."""
    out = []
    for arm in a.run.study.arms:
        if arm.drafter is None or arm.is_control:
            continue
        mine = [
            p
            for p in s.placements
            if p.arm == arm.name and p.task == task and p.reaches is not None
        ]
        if mine:
            out.append(
                PlacedDrafter(
                    arm.name, f"{arm.name} (k={arm.drafter.num_draft_tokens}) reaches", mine
                )
            )
    return out


def _verification(a: Analysis, s: SurfaceSummary, task: str) -> Verification:
    rows = [r for r in s.verification if r.task == task]
    return Verification(
        f"The k schedule verified: task {task}",
        f"{s.drafter}'s engine running the k the surface proposed per running batch size, at"
        " every registered level, against its baseline; read by no bar",
        a.run.study.loads.closed_loop.concurrency,
        rows,
        [r for r in rows if r.status == "ok" and r.speedup is not None],
        [r for r in rows if r.predicted_speedup is not None],
        a.speedups_of(s.drafter, task, usable=True),
        verification_lines(a, s, task),
    )


def surface_text_lines(a: Analysis, s: SurfaceSummary, task: str) -> list[str]:
    """Where each break-even lies, each drafter placed, why its gain falls, the schedule."""
    surface = a.run.study.surface
    assert surface is not None
    lines = ["break-even (v: every L measured pays; ^: none does):"]
    lines += [
        f"  k={r.k} c={r.concurrency}: {r.label}; round x{_num(r.round_cost_ratio)}"
        f" [{_num(r.round_cost_ratio_ci_lower)}, {_num(r.round_cost_ratio_ci_upper)}]"
        for r in s.break_even
        if r.task == task
    ]
    lines += ["drafters placed on it:"]
    lines += [
        f"  {p.arm} (k={p.k}) c={p.concurrency}: {p.label}" for p in s.placements if p.task == task
    ]
    lines += [f"  {line}" for line in s.loss_of_gain if f" / {task}," in line]
    verified = (
        "verified below"
        if surface.verify_schedule
        else "not verified by a run: surface.verify_schedule is off"
    )
    lines += [
        f"k schedule proposed for {surface.drafter} (its own per-position acceptance"
        f" over each k's round cost; {verified}):"
    ]
    lines += [
        f"  c={r.concurrency}: {r.label}"
        + (f" [{_num(r.ci_lower)}, {_num(r.ci_upper)}]" if r.k else "")
        + "; "
        + ", ".join(f"k={k} x{x:.2f}" for k, x in r.candidates.items())
        for r in s.schedule
        if r.task == task
    ]
    if task in s.schedule_settings:
        lines.append(f"  setting: {s.schedule_settings[task]}")
    return lines


def verification_lines(a: Analysis, s: SurfaceSummary, task: str) -> list[str]:
    """The k schedule run for a task: its ranges, its setting, each level's label."""
    record = a.run.manifest.k_schedules.get(schedule_arm_name(task))
    if record is not None:
        lines = [
            "schedule (batch sizes: k): "
            + ", ".join(
                f"{lo}-{hi if hi is not None else ''}: k={k}" for lo, hi, k in record.ranges
            ),
            f"  setting: {record.setting}",
        ]
    else:
        lines = ["no k schedule was proposed for this task (the run's skipped cells say why)"]
    return lines + [f"  {r.label}" for r in s.verification if r.task == task]


def _num(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.2f}"
