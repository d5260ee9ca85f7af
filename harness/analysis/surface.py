"""The round-cost surface (issue 32): what a round costs at each k and load, measured
apart from any drafter's quality, and the acceptance a drafter needs there to pay.

The surface stage's control arms (plan_arms.surface_arms: the registered `surface.drafter`
at each k, its acceptance set to each L) are paired with that drafter's baseline at the
surface's levels, like any speedup (harness.analysis.speedup.session_figures: the ratio,
its interval, tokens per round x round cost), in the baseline's sessions there (session s
beside the baseline's s: harness.plan), so their intervals are over sessions too. From
those rows:

- `surface.csv|parquet`: one row per k x L x task x level, the speedup with its interval,
  the measured tokens per round and the round cost over a plain step with theirs;
- the break-even acceptance length per k x task x level: the L at which the speedup's
  interval reaches 1.0 (its lower bound, interpolated linearly between the two measured L
  on either side); below every L measured, or above every L ("no round is cheap enough
  here"), is said, not extrapolated;
- every real drafter placed on it: at each surface level, its own measured tokens per
  round (the speedups table) against the break-even L for its k;
- the k schedule it proposes, with its interval (k_schedule.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from harness.analysis.frame import framed, rows_of
from harness.analysis.k_schedule import proposed_schedule, schedule_ranges
from harness.analysis.load import RunData
from harness.analysis.rows import PlacementRow, SpeedupRow, SurfaceCellRow
from harness.analysis.speedup import pair_figures, pair_key
from harness.plan_arms import surface_arms
from harness.prereg.schema import Study
from harness.rundir.verdict import BreakEvenRow  # the verdict's row is the table's

if TYPE_CHECKING:
    from harness.analysis.tables import Analysis


def surface_table(run: RunData) -> pd.DataFrame:
    """One row per surface arm x task x level (empty without a registered surface)."""
    study = run.study
    rows = []
    surface = study.surface
    if surface is not None:
        for arm in surface_arms(study):
            assert arm.drafter is not None and arm.drafter.synthetic is not None
            assert arm.baseline is not None
            for task in study.surface_tasks():
                for c in surface.concurrency:
                    dc = run.find(arm.name, task, "speed", c)
                    bc = run.find(arm.baseline, task, "speed", c)
                    row: dict = {
                        "arm": arm.name,
                        "baseline": arm.baseline,
                        "task": task,
                        "concurrency": c,
                        "k": arm.drafter.num_draft_tokens,
                        "acceptance_length": arm.drafter.synthetic.acceptance_length,
                        "drafter_cell": dc.id,
                        "baseline_cell": bc.id,
                    }
                    # Measured in the baseline's sessions there (harness.plan), session
                    # s beside the baseline's s.
                    sessions = run.sessions_of(dc)
                    row["sessions"] = len(sessions)
                    row.update(pair_figures(study, sessions, run.sessions_of(bc), pair_key(dc, bc)))
                    rows.append(row)
    return framed(rows, SurfaceCellRow)


@dataclass(frozen=True)
class BreakEven:
    status: str  # located | below_measured | above_measured | incomplete
    length: float | None  # the break-even L (located), else None

    def label(self, lengths: list[float]) -> str:
        if self.status == "located":
            return f"break-even at {self.length:.2f} tokens a round"
        if self.status == "below_measured":
            return f"pays at every L measured (from {min(lengths):g})"
        if self.status == "above_measured":
            return f"no round is cheap enough here (not even at L {max(lengths):g})"
        return "incomplete: some surface cell is not usable"


def break_even(lengths: list[float], lower: list[float | None]) -> BreakEven:
    """The L at which the speedup's lower bound reaches 1.0, interpolated linearly
    between the measured L on either side of it (L ascending)."""
    if not lengths or any(v is None or not math.isfinite(v) for v in lower):
        return BreakEven("incomplete", None)
    values = [float(v) for v in lower]  # type: ignore[arg-type]
    if values[0] >= 1.0:
        return BreakEven("below_measured", None)
    for i in range(1, len(lengths)):
        lo, hi = values[i - 1], values[i]
        if lo < 1.0 <= hi:
            share = (1.0 - lo) / (hi - lo)
            return BreakEven("located", lengths[i - 1] + share * (lengths[i] - lengths[i - 1]))
    return BreakEven("above_measured", None)


def break_even_table(surface: pd.DataFrame) -> pd.DataFrame:
    """Per task x k x level: the break-even acceptance length and the round's cost over
    a plain step (the median over the L measured, with the widest interval among them)."""
    groups: dict[tuple[str, int, int], list[SurfaceCellRow]] = {}
    for r in rows_of(surface, SurfaceCellRow):
        groups.setdefault((r.task, r.k, r.concurrency), []).append(r)
    rows = []
    for task, k, c in sorted(groups):
        group = sorted(groups[task, k, c], key=lambda r: r.acceptance_length)
        lengths = [float(r.acceptance_length) for r in group]
        ok = [r for r in group if r.status == "ok"]
        found = break_even(lengths, [r.ci_lower if r.status == "ok" else None for r in group])
        costs = _figures(r.round_cost_ratio for r in ok)
        lower, upper = (
            _figures(r.round_cost_ratio_ci_lower for r in ok),
            _figures(r.round_cost_ratio_ci_upper for r in ok),
        )
        rows.append(
            {
                "task": task,
                "k": int(k),
                "concurrency": int(c),
                "status": found.status,
                "break_even_length": found.length,
                "round_cost_ratio": float(np.median(costs)) if costs else None,
                "round_cost_ratio_ci_lower": min(lower) if lower else None,
                "round_cost_ratio_ci_upper": max(upper) if upper else None,
                "lengths": ",".join(f"{v:g}" for v in lengths),
                "label": found.label(lengths),
            }
        )
    return framed(rows, BreakEvenRow)


def _figures(values: Iterable[float | None]) -> list[float]:
    """The figures present (neither None nor NaN), as floats."""
    return [float(v) for v in values if v is not None and not math.isnan(v)]


def drafter_placements(
    study: Study, speedups: pd.DataFrame, breaks: pd.DataFrame
) -> list[PlacementRow]:
    """Every real drafter at each surface level: its measured tokens per round against
    the break-even L for its k (its k not on the surface: said)."""
    out: list[PlacementRow] = []
    if study.surface is None or breaks.empty:
        return out
    measured = {(r.arm, r.task, r.concurrency): r for r in rows_of(speedups, SpeedupRow)}
    at_level: dict[tuple[str, int, int], BreakEvenRow] = {}
    for b in rows_of(breaks, BreakEvenRow):
        at_level.setdefault((b.task, b.k, b.concurrency), b)
    for arm in study.arms:
        if arm.drafter is None or arm.is_control:
            continue
        k = arm.drafter.num_draft_tokens
        for task in study.surface_tasks():
            for c in study.surface.concurrency:
                at = at_level.get((task, k, c))
                mine = measured.get((arm.name, task, c))
                reaches = mine.tokens_per_round if mine else None
                reaches = reaches if reaches is not None and pd.notna(reaches) else None
                if at is None:
                    placed = Placed(
                        "k_not_on_surface", None, f"k={k} is not on the surface (k {_ks(at_level)})"
                    )
                else:
                    placed = _placed(at, reaches)
                out.append(
                    PlacementRow(
                        arm=arm.name,
                        task=task,
                        concurrency=c,
                        k=k,
                        reaches=reaches,
                        status=placed.status,
                        needs=placed.needs,
                        needs_below=placed.needs_below,
                        label=placed.label,
                    )
                )
    return out


def _ks(at_level: dict[tuple[str, int, int], BreakEvenRow]) -> str:
    return ", ".join(str(int(k)) for k in sorted({k for _, k, _ in at_level}))


@dataclass(frozen=True)
class Placed:
    """Where a drafter's tokens per round fall against one level's break-even."""

    status: str  # PlacementRow.status
    needs: float | None
    label: str
    needs_below: float | None = None  # every L measured pays: at most the lowest


def _placed(at: BreakEvenRow, reaches: float | None) -> Placed:
    status = at.status
    needs = at.break_even_length if status == "located" else None
    lengths = [float(v) for v in str(at.lengths).split(",") if v]
    if status == "incomplete" or reaches is None:
        why = (
            "its own tokens per round are not measured here"
            if reaches is None
            else "the surface is incomplete here"
        )
        return Placed("unknown", needs, f"not placed: {why}")
    if status == "above_measured":  # no L measured pays: one below them cannot either
        if reaches <= max(lengths):
            return Placed(
                "does_not_pay",
                None,
                f"does not pay: no round is cheap enough here (not even at L"
                f" {max(lengths):g}; reaches {reaches:.2f})",
            )
        return Placed(
            "unknown",
            None,
            f"not placed: it reaches {reaches:.2f}, above every L measured, none of which pays",
        )
    if status == "below_measured":  # every L measured pays: one above them does too
        if reaches >= min(lengths):
            return Placed(
                "pays",
                None,
                f"pays: every L measured pays, from {min(lengths):g} (reaches {reaches:.2f})",
                needs_below=min(lengths),
            )
        return Placed(
            "unknown",
            None,
            f"not placed: it reaches {reaches:.2f}, below every L measured"
            f" (from {min(lengths):g}), all of which pay",
        )
    assert at.break_even_length is not None  # "located", the one status left
    needs = float(at.break_even_length)
    verdict = "pays" if reaches >= needs else "does not pay"
    return Placed(
        verdict.replace(" ", "_"), needs, f"{verdict}: needs {needs:.2f}, reaches {reaches:.2f}"
    )


def loss_of_gain(placements: list[PlacementRow]) -> list[str]:
    """Per drafter and task placed at two or more surface levels: from the lowest to the
    highest, did the acceptance it needs rise more (the round's cost) or what it reaches
    fall more (its acceptance)? A level where no L measured pays needs more than any."""
    by: dict[tuple[str, str], list[tuple[PlacementRow, float]]] = {}
    for p in placements:
        if p.reaches is not None and p.status in ("pays", "does_not_pay"):
            by.setdefault((p.arm, p.task), []).append((p, p.reaches))
    lines = []
    for (arm, task), rows in by.items():
        rows.sort(key=lambda r: r[0].concurrency)
        if len(rows) < 2:
            continue
        (lo, lo_reaches), (hi, hi_reaches) = rows[0], rows[-1]
        lo_needs = lo.needs if lo.needs is not None else lo.needs_below
        below = "" if lo.needs is not None else "at most "
        fall = lo_reaches - hi_reaches
        where = f"{arm} / {task}, c={lo.concurrency} -> c={hi.concurrency}"
        if hi.needs is None and hi.status == "does_not_pay":
            lines.append(
                f"{where}: no acceptance measured pays at c={hi.concurrency}"
                f" (reaches {lo_reaches:.2f} -> {hi_reaches:.2f}): the gain is lost"
                " to the round's cost"
            )
            continue
        if lo_needs is None or hi.needs is None:
            continue
        rise = hi.needs - lo_needs
        if rise <= 0 and fall <= 0:
            continue
        cause = "the round's cost" if rise >= fall else "its acceptance"
        lines.append(
            f"{where}: needs {below}{lo_needs:.2f} -> {hi.needs:.2f}, reaches"
            f" {lo_reaches:.2f} -> {hi_reaches:.2f}: the gain falls with load"
            f" for {cause}"
        )
    return lines


def surface_summary(a: Analysis) -> dict:
    """verdict.json's `surface` (outside the bars)."""
    study = a.run.study
    assert study.surface is not None
    rows = a.surface.astype(object).where(pd.notna(a.surface), None).to_dict(orient="records")
    schedule = proposed_schedule(study, a.cells, a.surface_cells, a.speedups)
    arm = study.arm(study.surface.drafter)
    from harness.engines import get_engine_kind

    kind = get_engine_kind(arm.engine)
    settings = {
        task: kind.k_schedule_setting(arm, ranges)
        for task in study.surface_tasks()
        if (ranges := schedule_ranges(schedule, task))
    }
    verified = a.schedule.astype(object).where(pd.notna(a.schedule), None)
    return {
        "drafter": study.surface.drafter,
        "break_even": rows,
        "placements": [asdict(p) for p in a.placements],
        "loss_of_gain": loss_of_gain(a.placements),
        "schedule": [asdict(r) for r in schedule],
        "schedule_settings": settings,
        "verification": verified.to_dict(orient="records"),
        "collapses": [r["label"] for r in verified.to_dict(orient="records") if r["collapse"]],
    }


__all__ = [
    "BreakEven",
    "break_even",
    "break_even_table",
    "drafter_placements",
    "loss_of_gain",
    "surface_summary",
    "surface_table",
]
