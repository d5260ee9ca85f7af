"""Speedup intervals that respect how requests depend on each other.

Within one engine session requests are not independent draws: in a closed loop a user's
requests are sequential and the users' requests share batches, so the bootstrap resamples
users (each with all its requests); in an open loop, and in a closed loop of one user
(nothing to resample across), it resamples contiguous time blocks of requests. Across
repeated sessions (`recording.sessions`) the session is the coarser unit: the two-level
bootstrap draws sessions first (paired: session s of the drafter with session s of the
baseline, measured next to each other), then units within each drawn session.

An arm's figure over sessions is the mean of its session medians, so every session
weighs the same however many requests it measured; with one session it is the median.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

from harness.analysis.cells import request_speed
from harness.analysis.load import CellData
from harness.prereg.schema import Intervals

MIN_REQUESTS = 20  # an interval on fewer measured requests (per arm) is marked as such


@dataclass(frozen=True)
class Units:
    """One session's per-user speeds grouped into the units the bootstrap resamples."""

    values: np.ndarray  # sorted speeds
    unit_of: np.ndarray  # each sorted speed's unit, 0..n_units-1
    n_units: int
    kind: str  # user | time block | request

    @property
    def n(self) -> int:
        return len(self.values)


def _blocks(n: int) -> np.ndarray:
    """Unit numbers for n requests in time order cut into ceil(sqrt(n)) contiguous blocks."""
    k = max(1, math.ceil(math.sqrt(n)))
    return np.concatenate([np.full(len(part), i) for i, part in
                           enumerate(np.array_split(np.arange(n), k))]) if n else np.array([])


def session_units(cell: CellData) -> Units:
    """The cell's measured requests with a per-user speed, grouped for resampling."""
    rows = [(r, s) for r in cell.requests if (s := request_speed(r)) is not None]
    rows.sort(key=lambda rs: (rs[0].scheduled_t, rs[0].index))
    speeds = np.array([s for _, s in rows], dtype=float)
    users = [r.user for r, _ in rows]
    closed = cell.kind != "open"
    if closed and all(u is not None for u in users) and len(set(users)) >= 2:
        labels = {u: i for i, u in enumerate(dict.fromkeys(users))}
        unit, kind = np.array([labels[u] for u in users]), "user"
    elif closed and any(u is None for u in users):
        # Records without users (hand-made folders): each request its own unit.
        unit, kind = np.arange(len(rows)), "request"
    else:
        unit, kind = _blocks(len(rows)), "time block"
    order = np.argsort(speeds, kind="stable")
    n_units = int(unit.max()) + 1 if len(unit) else 0
    return Units(speeds[order], unit[order].astype(int), n_units, kind)


def bootstrap_medians(units: Units, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Medians of `resamples` cluster-bootstrap resamples (units drawn with replacement,
    each with all its requests), as weighted medians over the sorted speeds."""
    k = units.n_units
    counts = rng.multinomial(k, np.full(k, 1.0 / k), size=resamples)  # draws per unit
    cum = np.cumsum(counts[:, units.unit_of], axis=1)
    total = cum[:, -1]
    lo = np.argmax(cum >= ((total + 1) // 2)[:, None], axis=1)
    hi = np.argmax(cum >= (total // 2 + 1)[:, None], axis=1)
    return (units.values[lo] + units.values[hi]) / 2.0


@dataclass(frozen=True)
class SessionRatio:
    point: float
    ci_lower: float  # sessions first, then units within them (one session: units only)
    ci_upper: float
    within_lower: float  # units within each session, the sessions held fixed
    within_upper: float
    speeds_drafter: list[float]  # each session's median
    speeds_baseline: list[float]
    unit: str  # what the within-session bootstrap resampled
    sessions: int


def _percentiles(ratios: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(ratios, [tail, 100.0 - tail])
    return float(lo), float(hi)


def session_ratio(drafter: list[Units], baseline: list[Units], intervals: Intervals,
                  key: str = "") -> SessionRatio | None:
    """The speedup of paired sessions (drafter[s] beside baseline[s]) with both intervals;
    None when a session has no request with a speed."""
    if not drafter or len(drafter) != len(baseline) or any(u.n == 0 for u in drafter + baseline):
        return None
    rng = np.random.default_rng([intervals.seed, zlib.crc32(key.encode())])
    b, n = intervals.bootstrap_resamples, len(drafter)
    med_d = [float(np.median(u.values)) for u in drafter]
    med_b = [float(np.median(u.values)) for u in baseline]
    point = float(np.mean(med_d) / np.mean(med_b))
    # n x b draws per session: column j*b + i serves the j-th draw of resample i, so a
    # session drawn twice into one resample gets two independent within-session draws.
    boot_d = np.stack([bootstrap_medians(u, rng, n * b) for u in drafter])
    boot_b = np.stack([bootstrap_medians(u, rng, n * b) for u in baseline])
    within = boot_d[:, :b].mean(axis=0) / boot_b[:, :b].mean(axis=0)
    w_lo, w_hi = _percentiles(within, intervals.level)
    if n == 1:
        lo, hi = w_lo, w_hi
    else:
        drawn = rng.integers(0, n, size=(b, n))  # paired: one index picks both arms' session
        cols = np.arange(n)[None, :] * b + np.arange(b)[:, None]
        two = boot_d[drawn, cols].mean(axis=1) / boot_b[drawn, cols].mean(axis=1)
        lo, hi = _percentiles(two, intervals.level)
    kinds = dict.fromkeys(u.kind for u in drafter + baseline)
    return SessionRatio(point, lo, hi, w_lo, w_hi, med_d, med_b, " and ".join(kinds), n)


def session_spread(speeds: list[float]) -> float | None:
    """(max - min) / mean of an arm's session medians (None for one session)."""
    if len(speeds) < 2:
        return None
    return (max(speeds) - min(speeds)) / float(np.mean(speeds))


def interval_caveat(sessions: int, n_drafter: int, n_baseline: int) -> str | None:
    """What an interval rests on too little of, or None."""
    notes = []
    if sessions <= 1:
        notes.append("one session")
    if min(n_drafter, n_baseline) < MIN_REQUESTS:
        notes.append(f"fewer than {MIN_REQUESTS} measured requests"
                     f" (drafter {n_drafter}, baseline {n_baseline})")
    return "; ".join(notes) or None
