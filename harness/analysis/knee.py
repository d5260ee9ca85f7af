"""The knee: where the best drafter's speedup crosses 1.0, read on the effect.

The registered reading (STUDY.md, "Readings the project takes"): the crossing is located
on the point estimates, interpolated linearly in the speedup over log2(concurrency)
between the last level above 1.0 and the first at or below it. Its interval runs from
where the speedup's lower bound crosses 1.0 to where its upper bound does, each
interpolated the same way. A point still above 1.0 at the top registered level is a
bound ("> top"), and one already at or below 1.0 at the first level a bound ("<= first"):
neither is a located knee (bars.pass.knee.beyond_top / below_first register otherwise).
Read on the lower bound instead, the knee measured the intervals' width: a drafter flat
at 1.5x was "located" 47 % of the time at the lab's session variation, a crossing at 23.4
users put at a median of 14.1 (benchmarks/bar_characteristics.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from harness.analysis.frame import framed, rows_of
from harness.analysis.load import RunData
from harness.analysis.rows import KneeRow, SpeedupRow, curves


@dataclass(frozen=True)
class Crossing:
    """Where one curve first falls to 1.0 (or below: strict=False): `at` the interpolated
    concurrency; `below_first` when already there at the first level; `above` (a bound,
    the last level read) when it never does before the levels end or a value is missing."""

    at: float | None = None
    below_first: bool = False
    above: int | None = None

    def label(self) -> str:
        if self.at is not None:
            return f"{self.at:.1f}"
        return "<= first level" if self.below_first else f"> {self.above}"


def crossing(
    levels: Sequence[int], values: Sequence[float | None], strict: bool = False
) -> Crossing:
    """The first level whose value is <= 1.0 (< 1.0 with strict), interpolated linearly in
    the value over log2(concurrency) from the level before it."""
    last: int | None = None
    for i, (c, v) in enumerate(zip(levels, values, strict=True)):
        if v is None or not math.isfinite(v):
            return Crossing(above=last)
        if (v < 1.0) if strict else (v <= 1.0):
            if i == 0:
                return Crossing(below_first=True)
            c0, v0 = levels[i - 1], values[i - 1]
            assert v0 is not None
            x0, x1 = math.log2(c0), math.log2(c)
            return Crossing(at=2.0 ** (x0 + (v0 - 1.0) / (v0 - v) * (x1 - x0)))
        last = c
    return Crossing(above=last)


@dataclass(frozen=True)
class Knee:
    # located | below_first (a bound: at or below the first level) | beyond (a bound: the
    # gain is left at the top level) | beyond_skipped (a bound: the stop bar skipped the
    # higher levels) | incomplete
    status: str
    concurrency: float | None  # interpolated; the first level for below_first; None otherwise
    bracket: tuple[int, int] | None  # the levels it lies between
    note: str
    bound: int | None = None  # beyond*: the knee lies above this level
    low: Crossing | None = None  # the interval: where the lower bound crosses 1.0
    high: Crossing | None = None  # and where the upper bound falls below it

    def label(self) -> str:
        if self.status == "located":
            return f"{self.concurrency:.2f}"
        if self.status == "below_first":
            return f"<= {self.concurrency:g}"
        if self.status in ("beyond", "beyond_skipped"):
            return f"> {self.bound}"
        return "incomplete"

    def interval_label(self) -> str:
        if self.low is None or self.high is None:
            return "-"
        return f"{self.low.label()} to {self.high.label()}"


def locate_knee(
    levels: Sequence[int],
    point: Sequence[float | None],
    lower: Sequence[float | None] | None = None,
    upper: Sequence[float | None] | None = None,
    skipped_after: int | None = None,
) -> Knee:
    """The knee on the point estimates, with its interval from the bounds (when given).

    A None point (cell not usable) before the crossing leaves the knee incomplete,
    unless the stop bar skipped it (`skipped_after`: the highest measured level), when
    the knee is beyond it.
    """
    low = crossing(levels, lower) if lower is not None else None
    high = crossing(levels, upper, strict=True) if upper is not None else None
    where = f"; interval {low.label()} to {high.label()}" if low and high else ""
    for i, (c, v) in enumerate(zip(levels, point, strict=True)):
        if v is None or not math.isfinite(v):
            if i > 0 and skipped_after is not None and c > skipped_after:
                return Knee(
                    "beyond_skipped",
                    None,
                    None,
                    f"> {levels[i - 1]} (higher levels skipped by the stop bar){where}",
                    levels[i - 1],
                    low,
                    high,
                )
            return Knee("incomplete", None, None, f"no usable speedup at c={c}")
        if v <= 1.0:
            if i == 0:
                return Knee(
                    "below_first",
                    float(c),
                    None,
                    f"at or below 1.0 already at the first level ({c}): speedup {v:.3f}{where}",
                    None,
                    low,
                    high,
                )
            c0, v0 = levels[i - 1], point[i - 1]
            at = crossing(levels[i - 1 : i + 1], [v0, v]).at
            again = [
                lv
                for lv, p in zip(levels[i + 1 :], point[i + 1 :], strict=True)
                if p is not None and p > 1.0
            ]
            rises = f"; above 1.0 again at c={again[0]}" if again else ""
            return Knee(
                "located",
                at,
                (c0, c),
                f"between c={c0} (speedup {v0:.3f}) and c={c} (speedup {v:.3f}){where}{rises}",
                None,
                low,
                high,
            )
    return Knee(
        "beyond",
        None,
        None,
        f"speedup {point[-1]:.3f} > 1 still at c={levels[-1]}, the top level{where}",
        levels[-1],
        low,
        high,
    )


def _mixed_intervals(by_c: dict) -> str:
    """Said where the curve's intervals are of two kinds (sessions at some levels, one
    session at others: recording.sessions_for pass_cells): the knee's interval leans to
    the narrower one's side where they meet."""
    kinds: dict[str, list[int]] = {}
    for c, r in by_c.items():
        if r.status == "ok" and isinstance(r.interval_method, str):
            kinds.setdefault(r.interval_method, []).append(c)
    if len(kinds) < 2:
        return ""
    return (
        "; intervals of two kinds along the curve ("
        + ", ".join(f"{m} at c={'/'.join(map(str, cs))}" for m, cs in kinds.items())
        + ")"
    )


def _column(by_c: dict, levels: list[int], name: str) -> list[float | None]:
    """One figure along the curve, None where the level has no usable speedup."""
    return [
        float(getattr(by_c[c], name)) if c in by_c and by_c[c].status == "ok" else None
        for c in levels
    ]


def knee_table(run: RunData, speedups: pd.DataFrame) -> pd.DataFrame:
    """The knee per drafter arm and speed task. interval_low / interval_high: where the
    bounds cross 1.0 (NaN where that end is open: see `interval`)."""
    levels = list(run.study.loads.closed_loop.concurrency)
    skipped_after = None
    if run.stop_fired:
        skipped_after = max(run.study.bars.stop.concurrencies)
    rows = []
    for (arm, task), by_c in curves(rows_of(speedups, SpeedupRow)).items():
        # Only skipped cells may be read as "beyond"; a missing one is incomplete.
        skip_mark = skipped_after
        if skip_mark is not None:
            statuses = [by_c[c].status if c in by_c else "missing" for c in levels]
            if any(
                s not in ("ok", "skipped")
                for c, s in zip(levels, statuses, strict=True)
                if c > skip_mark
            ):
                skip_mark = None
        point, lower, upper = (
            _column(by_c, levels, name) for name in ("speedup", "ci_lower", "ci_upper")
        )
        knee = locate_knee(levels, point, lower, upper, skip_mark)
        rows.append(
            {
                "arm": arm,
                "task": task,
                "status": knee.status,
                "knee_concurrency": knee.concurrency,
                "bracket_low": knee.bracket[0] if knee.bracket else None,
                "bracket_high": knee.bracket[1] if knee.bracket else None,
                "label": knee.label(),
                "interval_low": knee.low.at if knee.low else None,
                "interval_high": knee.high.at if knee.high else None,
                "interval": knee.interval_label(),
                "note": knee.note + _mixed_intervals(by_c),
            }
        )
    return framed(rows, KneeRow)


def knee_span(row: KneeRow, levels: list[int]) -> tuple[float, float] | None:
    """A located knee's interval to draw: its ends, an open one at the levels' end."""
    if row.status != "located":
        return None
    low, high = row.interval_low, row.interval_high
    return (
        float(low) if low is not None and pd.notna(low) else float(levels[0]),
        float(high) if high is not None and pd.notna(high) else float(levels[-1]),
    )
