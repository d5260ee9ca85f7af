"""Speedup intervals that respect how requests depend on each other.

Within one engine session requests are not independent draws: in a closed loop a user's
requests are sequential and the users' requests share batches, so the bootstrap resamples
users (each with all its requests); in an open loop, and in a closed loop of one user
(nothing to resample across), it resamples contiguous time blocks of requests.

Across repeated sessions (`recording.sessions`) the session is the coarser unit, and the
rule is registered (`bars.intervals.method`):
- t_sessions: a t interval on the paired sessions' log ratios (session s of the drafter
  over session s of the baseline, measured next to each other): exp(mean +- t_{n-1} sd /
  sqrt(n)). Each session's ratio carries its requests' noise too, so both levels are in it.
- bootstrap: the two-level percentile bootstrap (sessions first, then units within each).
  Over n top-level units it cannot reach past the extreme sessions and shrinks their
  variance by (n-1)/n: at 3 sessions its "95 %" covered ~75 % (benchmarks/interval_coverage.py).
- auto (the default): t_sessions below BOOTSTRAP_FROM_SESSIONS sessions, bootstrap from there.
One session has no between-session interval: the within-session one is all there is.

An arm's figure over sessions is the mean of its session medians, so every session
weighs the same however many requests it measured; with one session it is the median.
The within-session interval (the sessions held fixed) is computed beside it always, from
the same draws of units that the decomposition (decompose.py) reads its factors under.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from harness.analysis.cells import request_speed
from harness.analysis.load import CellData
from harness.prereg.schema import Intervals
from harness.records import RequestRecord

MIN_REQUESTS = 20  # an interval on fewer measured requests (per arm) is marked as such
# Where "auto" turns from the t interval to the two-level bootstrap. The percentile
# bootstrap's half-width is about z * sqrt((n-1)/n) session sds against the t's t_{n-1};
# the two come within 0.93-0.95 coverage of each other only near 30 sessions (at 10 the
# bootstrap covers ~0.90), and below that the t is exact for normal session effects.
BOOTSTRAP_FROM_SESSIONS = 30


@dataclass(frozen=True)
class Units:
    """One session's per-user speeds grouped into the units the bootstrap resamples."""

    values: np.ndarray  # sorted speeds
    unit_of: np.ndarray  # each sorted speed's unit, 0..n_units-1
    n_units: int
    kind: str  # user | time block | request
    # Each sorted speed's row in measured_requests order (None: built by hand), so another
    # per-request figure can be read under the same draws of units (with_values).
    row_of: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.values)

    def with_values(self, by_row: np.ndarray) -> Units:
        """Another figure of the same requests (in measured_requests order) grouped in the
        same units, sorted by itself; NaN (no figure for a request) left out."""
        assert self.row_of is not None, "units built without their rows"
        unit_by_row = np.empty(len(self.row_of), dtype=int)
        unit_by_row[self.row_of] = self.unit_of
        keep = np.flatnonzero(np.isfinite(by_row))
        order = keep[np.argsort(by_row[keep], kind="stable")]
        return Units(by_row[order], unit_by_row[order], self.n_units, self.kind, order)


def _blocks(n: int) -> np.ndarray:
    """Unit numbers for n requests in time order cut into ceil(sqrt(n)) contiguous blocks."""
    k = max(1, math.ceil(math.sqrt(n)))
    return (
        np.concatenate(
            [np.full(len(part), i) for i, part in enumerate(np.array_split(np.arange(n), k))]
        )
        if n
        else np.array([])
    )


def measured_requests(cell: CellData) -> list[tuple[RequestRecord, float]]:
    """The cell's requests with a per-user speed, in time order: the rows of its Units."""
    rows = [
        (r, s) for r in cell.requests if (s := request_speed(r, cell.num_draft_tokens)) is not None
    ]
    rows.sort(key=lambda rs: (rs[0].scheduled_t, rs[0].index))
    return rows


def session_units(cell: CellData) -> Units:
    """The cell's measured requests with a per-user speed, grouped for resampling."""
    rows = measured_requests(cell)
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
    return Units(speeds[order], unit[order].astype(int), n_units, kind, order)


def draw_units(units: Units, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """(resamples, n_units): how often each unit is drawn (with replacement) per resample."""
    k = units.n_units
    return rng.multinomial(k, np.full(k, 1.0 / k), size=resamples)


def medians_under(units: Units, counts: np.ndarray) -> np.ndarray:
    """Each resample's median as a weighted median over the sorted values (a unit drawn
    twice counts its requests twice); NaN where the drawn units hold no value."""
    if units.n == 0:
        return np.full(counts.shape[0], np.nan)
    cum = np.cumsum(counts[:, units.unit_of], axis=1)
    total = cum[:, -1]
    lo = np.argmax(cum >= ((total + 1) // 2)[:, None], axis=1)
    hi = np.argmax(cum >= (total // 2 + 1)[:, None], axis=1)
    return np.where(total > 0, (units.values[lo] + units.values[hi]) / 2.0, np.nan)


def bootstrap_medians(units: Units, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Medians of `resamples` cluster-bootstrap resamples (units drawn with replacement,
    each with all its requests)."""
    return medians_under(units, draw_units(units, rng, resamples))


# --- the t quantile (no scipy: exact for integer degrees of freedom) -------------------


def _t_central(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer df (Abramowitz and Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df == 1:
        return 2.0 * theta / math.pi
    if df % 2:  # odd: 2/pi (theta + sin cos (1 + 2/3 cos^2 + 2.4/3.5 cos^4 + ...))
        term = total = 1.0
        for j in range(1, (df - 1) // 2):
            term *= c2 * (2 * j) / (2 * j + 1)
            total += term
        return 2.0 / math.pi * (theta + s * math.cos(theta) * total)
    term = total = 1.0  # even: sin (1 + 1/2 cos^2 + 1.3/2.4 cos^4 + ...)
    for j in range(1, df // 2):
        term *= c2 * (2 * j - 1) / (2 * j)
        total += term
    return s * total


def t_quantile(level: float, df: int) -> float:
    """The two-sided t critical value: P(|T_df| <= q) = level (bisection, to 1e-10)."""
    lo, hi = 0.0, 1.0
    while _t_central(hi, df) < level:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if _t_central(mid, df) < level:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return (lo + hi) / 2.0


def t_interval(logs: np.ndarray, level: float) -> tuple[float, float] | None:
    """exp(mean +- t_{n-1} sd / sqrt(n)) of per-session logs; None below two sessions or
    where the sessions do not differ at all (no spread measured: nothing to scale)."""
    logs = np.asarray(logs, dtype=float)
    n = len(logs)
    if n < 2 or not np.all(np.isfinite(logs)):
        return None
    sd = float(np.std(logs, ddof=1))
    if sd < 1e-12:  # equal up to rounding
        return None
    half = t_quantile(level, n - 1) * sd / math.sqrt(n)
    mean = float(np.mean(logs))
    return math.exp(mean - half), math.exp(mean + half)


# --- one pair's draws, shared by its speedup and its decomposition ---------------------


def interval_method(intervals: Intervals, sessions: int) -> str:
    """The rule an interval over `sessions` paired sessions follows: t_sessions,
    bootstrap (two-level), or within (one session: the session's variation not in it)."""
    if sessions < 2:
        return "within"
    if intervals.method == "auto":
        return "bootstrap" if sessions >= BOOTSTRAP_FROM_SESSIONS else "t_sessions"
    return intervals.method


@dataclass(frozen=True)
class PairDraws:
    """The resampled units of each session of a pair, one row a draw. Resample i of the
    within-session bootstrap takes row i of every session; the two-level bootstrap's
    resample i takes session sessions[i, j] at row j * resamples + i."""

    drafter: list[np.ndarray]
    baseline: list[np.ndarray]
    sessions: np.ndarray | None  # (resamples, n) sessions drawn (two-level bootstrap only)
    resamples: int
    method: str


def draw_pair(
    drafter: list[Units], baseline: list[Units], intervals: Intervals, key: str = ""
) -> PairDraws:
    """Seeded by the study's seed and the pair's key: a figure never depends on the order
    pairs are analysed in."""
    rng = np.random.default_rng([intervals.seed, zlib.crc32(key.encode())])
    b, n = intervals.bootstrap_resamples, len(drafter)
    method = interval_method(intervals, n)
    rows = n * b if method == "bootstrap" else b
    d = [draw_units(u, rng, rows) for u in drafter]
    s = [draw_units(u, rng, rows) for u in baseline]
    picks = rng.integers(0, n, size=(b, n)) if method == "bootstrap" else None
    return PairDraws(d, s, picks, b, method)


@dataclass(frozen=True)
class Figure:
    """One figure of a pair over its sessions: the point (a function of the sessions'
    means), each session's own value, and its resamples at either level."""

    point: float
    per_session: np.ndarray
    within: np.ndarray  # (resamples,) the sessions held fixed
    two_level: np.ndarray | None  # (resamples,) sessions drawn first (bootstrap only)


def arm_figure(points: list[float], boots: list[np.ndarray], draws: PairDraws) -> Figure:
    """An arm's figure: the mean of its sessions' values, and its resamples."""
    stack = np.stack(boots) if boots else np.empty((0, draws.resamples))
    b, n = draws.resamples, len(points)
    within = stack[:, :b].mean(axis=0)
    two = None
    if draws.sessions is not None:
        cols = np.arange(n)[None, :] * b + np.arange(b)[:, None]
        two = stack[draws.sessions, cols].mean(axis=1)
    return Figure(float(np.mean(points)), np.asarray(points, dtype=float), within, two)


def combine(fn: Callable[..., np.ndarray | float], *figs: Figure) -> Figure:
    """A figure composed of others (a ratio of two arms' figures, say), at every level."""
    with np.errstate(all="ignore"):
        two = (
            None
            if any(f.two_level is None for f in figs)
            else np.asarray(fn(*(f.two_level for f in figs)), dtype=float)
        )
        return Figure(
            float(fn(*(f.point for f in figs))),
            np.asarray(fn(*(f.per_session for f in figs)), dtype=float),
            np.asarray(fn(*(f.within for f in figs)), dtype=float),
            two,
        )


def _percentiles(values: np.ndarray, level: float) -> tuple[float, float] | None:
    values = values[np.isfinite(values)]
    if not len(values):
        return None
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(values, [tail, 100.0 - tail])
    return float(lo), float(hi)


@dataclass(frozen=True)
class Bounds:
    ci: tuple[float, float] | None  # by the pair's method (within for one session)
    within: tuple[float, float] | None
    method: str  # what ci is: t_sessions | bootstrap | within


def figure_bounds(fig: Figure, draws: PairDraws, level: float) -> Bounds:
    within = _percentiles(fig.within, level)
    if draws.method == "t_sessions":
        with np.errstate(all="ignore"):
            t = t_interval(np.log(fig.per_session), level)
        # Sessions that agree exactly (a scripted engine) measured no spread: the
        # within-session interval is the only one there is.
        return Bounds(t, within, "t_sessions") if t else Bounds(within, within, "within")
    if draws.method == "bootstrap" and fig.two_level is not None:
        return Bounds(_percentiles(fig.two_level, level), within, "bootstrap")
    return Bounds(within, within, "within")


# --- the speedup of paired sessions -------------------------------------------------------


@dataclass(frozen=True)
class SessionRatio:
    point: float
    ci_lower: float  # by `method`: over sessions, or (one session) units only
    ci_upper: float
    within_lower: float  # units within each session, the sessions held fixed
    within_upper: float
    speeds_drafter: list[float]  # each session's median
    speeds_baseline: list[float]
    unit: str  # what the within-session bootstrap resampled
    sessions: int
    method: str = "within"  # t_sessions | bootstrap | within (interval_method)


def session_ratio(
    drafter: list[Units],
    baseline: list[Units],
    intervals: Intervals,
    key: str = "",
    draws: PairDraws | None = None,
) -> SessionRatio | None:
    """The speedup of paired sessions (drafter[s] beside baseline[s]) with both intervals;
    None when a session has no request with a speed. `draws` (draw_pair's for the same
    units and key) lets the decomposition share them."""
    if not drafter or len(drafter) != len(baseline) or any(u.n == 0 for u in drafter + baseline):
        return None
    draws = draws or draw_pair(drafter, baseline, intervals, key)
    med_d = [float(np.median(u.values)) for u in drafter]
    med_b = [float(np.median(u.values)) for u in baseline]
    fd = arm_figure(
        med_d, [medians_under(u, c) for u, c in zip(drafter, draws.drafter, strict=True)], draws
    )
    fb = arm_figure(
        med_b, [medians_under(u, c) for u, c in zip(baseline, draws.baseline, strict=True)], draws
    )
    ratio = combine(np.divide, fd, fb)
    bounds = figure_bounds(ratio, draws, intervals.level)
    # Every speed is a positive 1/TPOT, so every resampled ratio is finite: both exist.
    assert bounds.ci is not None and bounds.within is not None
    (lo, hi), (w_lo, w_hi) = bounds.ci, bounds.within
    kinds = dict.fromkeys(u.kind for u in drafter + baseline)
    return SessionRatio(
        ratio.point,
        lo,
        hi,
        w_lo,
        w_hi,
        med_d,
        med_b,
        " and ".join(kinds),
        len(drafter),
        bounds.method,
    )


def session_spread(speeds: list[float]) -> float | None:
    """(max - min) / mean of an arm's session medians (None for one session)."""
    if len(speeds) < 2:
        return None
    return (max(speeds) - min(speeds)) / float(np.mean(speeds))


def interval_caveat(sessions: int, n_drafter: int, n_baseline: int) -> str | None:
    """What an interval rests on too little of, or None."""
    notes = []
    if sessions <= 1:
        # Said plainly: the lab's sessions differed as much as the effects.
        notes.append("one session (session variation not in the interval)")
    if min(n_drafter, n_baseline) < MIN_REQUESTS:
        notes.append(
            f"fewer than {MIN_REQUESTS} measured requests"
            f" (drafter {n_drafter}, baseline {n_baseline})"
        )
    return "; ".join(notes) or None
