"""One row of `specbench compare`: a drafter over its baseline in run A and in run B, each
run's sessions as the folder holds them, and B's speedup over A's with its interval.

Each session gives its drafter's and its baseline's median per-user speed (the medians
the run's speedup is built from: intervals.session_units over the cells of that session)
and their log ratio. B/A's interval is a t interval on the difference of the two runs'
mean session log ratios (two_sample.log_difference: Student's pooled t where the spreads
agree, Welch's where an F test says they differ); B/A is exp of that difference, the
ratio of the runs' geometric-mean session speedups, so it always lies in its interval.

- A run of one session beside one of several: its session variation is taken to be the
  other run's (the t on that run's df), and `warning` says so.
- One session in each run (or sessions that do not differ at all): no session variation
  is measured. The interval is then the within-session bootstrap of the four cells
  (users or time blocks resampled, as the run's own within-session interval) and leaves
  session variation out; the status says "within sessions only" and `warning` says what
  that means (at the lab's session variation it holds the truth 0.31 of the time:
  benchmarks/compare_schedule_coverage.py).

Which arm moved is the same test on each arm's own log session medians, B over A, at
1 - (1 - level) / 2 each (Bonferroni over the two arms): when neither moved, "neither arm
moved" is said at least `level` of the time.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

from harness.analysis.intervals import Units, draw_units, medians_under
from harness.analysis.two_sample import log_difference
from harness.prereg.schema import Intervals

WITHIN = "within"  # the interval_method of a row with no session variation measured
ONE_SESSION_WARNING = (
    "one session in each run: the interval resamples requests within the sessions and"
    " leaves out session-to-session variation (the lab's sessions differed as much as the"
    " effects), so a 'slower' or 'faster' here may be the sessions, not the change; measure"
    " both runs in recording.sessions >= 3 to compare them"
)


@dataclass(frozen=True)
class Side:
    """One run's sessions of a row: the drafter's and its baseline's, in session order."""

    drafter: list[Units]
    baseline: list[Units]

    @property
    def sessions(self) -> int:
        return len(self.drafter)

    def log_medians(self) -> tuple[np.ndarray, np.ndarray]:
        return (
            np.log([float(np.median(u.values)) for u in self.drafter]),
            np.log([float(np.median(u.values)) for u in self.baseline]),
        )


@dataclass(frozen=True)
class Shift:
    """B over A of one figure: the point and its interval, and how it was taken."""

    point: float
    lower: float
    upper: float
    method: str  # student | welch | a_spread | b_spread | within
    df: int | None = None
    p_value: float | None = None
    equal_spread_p: float | None = None

    @property
    def moved(self) -> bool:
        return self.upper < 1.0 or self.lower > 1.0


def _within_logs(a: Side, b: Side, intervals: Intervals, key: str) -> dict[str, np.ndarray]:
    """Each figure's log B over A per resample of the within-session bootstrap."""
    rng = np.random.default_rng([intervals.seed, zlib.crc32(key.encode())])
    resamples = intervals.bootstrap_resamples

    def arm(units: list[Units]) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.mean(
                [np.log(medians_under(u, draw_units(u, rng, resamples))) for u in units], axis=0
            )

    da, ba, db, bb = arm(a.drafter), arm(a.baseline), arm(b.drafter), arm(b.baseline)
    return {"ratio": (db - bb) - (da - ba), "drafter": db - da, "baseline": bb - ba}


def _percentile_shift(point: float, logs: np.ndarray, level: float) -> Shift:
    logs = logs[np.isfinite(logs)]
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(logs, [tail, 100.0 - tail]) if len(logs) else (math.nan, math.nan)
    return Shift(math.exp(point), math.exp(lo), math.exp(hi), WITHIN)


def compare_sides(a: Side, b: Side, intervals: Intervals, key: str = "") -> dict[str, Shift]:
    """B over A of the speedup ("ratio") at the study's level and of each arm's own speed
    ("drafter", "baseline") at the Bonferroni level, by the module's rule."""
    level = intervals.level
    arm_level = 1.0 - (1.0 - level) / 2.0
    (ad, ab), (bd, bb) = a.log_medians(), b.log_medians()
    figures = {
        "ratio": (ad - ab, bd - bb, level),
        "drafter": (ad, bd, arm_level),
        "baseline": (ab, bb, arm_level),
    }
    out: dict[str, Shift] = {}
    within: dict[str, np.ndarray] | None = None
    for name, (xa, xb, at) in figures.items():
        t = log_difference(xa, xb, at)
        if t is not None:
            point, lo, hi = t.ratio
            out[name] = Shift(point, lo, hi, t.method, t.df, t.p_value, t.equal_spread_p)
            continue
        within = within if within is not None else _within_logs(a, b, intervals, key)
        out[name] = _percentile_shift(float(np.mean(xb) - np.mean(xa)), within[name], at)
    return out


def moved_text(drafter: Shift, baseline: Shift) -> str:
    """Each arm's own speed B over A with its interval, and which of them moved."""
    parts = [
        f"{name} x{s.point:.2f} [{s.lower:.2f}, {s.upper:.2f}]"
        for name, s in (("drafter", drafter), ("baseline", baseline))
    ]
    moved = [name for name, s in (("drafter", drafter), ("baseline", baseline)) if s.moved]
    verdict = {0: "neither arm moved", 2: "both arms moved"}.get(
        len(moved), f"the {moved[0]} moved" if moved else ""
    )
    return f"{', '.join(parts)}: {verdict}"


def status_text(shift: Shift) -> str:
    said = (
        "B slower"
        if shift.upper < 1.0
        else "B faster"
        if shift.lower > 1.0
        else "same within the interval"
    )
    return f"{said} (within sessions only)" if shift.method == WITHIN else said


def warning_text(a: Side, b: Side, shift: Shift) -> str | None:
    if shift.method == WITHIN:
        return (
            ONE_SESSION_WARNING
            if max(a.sessions, b.sessions) == 1
            else ("the sessions did not differ at all: the interval resamples requests within them")
        )
    if shift.method in ("a_spread", "b_spread"):
        one, other = ("B", "A") if shift.method == "a_spread" else ("A", "B")
        n = a.sessions if shift.method == "a_spread" else b.sessions
        return (
            f"{one} measured one session: its session variation is taken to be {other}'s"
            f" ({n} sessions, t on {n - 1} df)"
        )
    return None


def compare_row(a: Side, b: Side, intervals: Intervals, key: str = "") -> dict:
    """The row's columns: B/A with its interval and test, each arm's shift, the status
    (before any family-wise reading) and the warning."""
    shifts = compare_sides(a, b, intervals, key)
    r, d, s = shifts["ratio"], shifts["drafter"], shifts["baseline"]
    return {
        "sessions_a": a.sessions,
        "sessions_b": b.sessions,
        "ratio": r.point,
        "ratio_lower": r.lower,
        "ratio_upper": r.upper,
        "interval_method": r.method,
        "df": r.df,
        "p_value": r.p_value,
        "equal_spread_p": r.equal_spread_p,
        "drafter_speed_ratio": d.point,
        "drafter_ratio_lower": d.lower,
        "drafter_ratio_upper": d.upper,
        "baseline_speed_ratio": s.point,
        "baseline_ratio_lower": s.lower,
        "baseline_ratio_upper": s.upper,
        "moved": moved_text(d, s),
        "status": status_text(r),
        "warning": warning_text(a, b, r),
    }
