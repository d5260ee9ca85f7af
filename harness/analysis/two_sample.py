"""Two sets of per-session log figures compared: the t interval on the difference of
their means, the test of equal spread that picks Student's or Welch's, and Holm's
adjustment across a table's rows (`specbench compare`, harness/analysis/compare.py).

- Both sides with two or more sessions: Student's pooled t (df n_a + n_b - 2) where the
  spreads agree, Welch's (Satterthwaite's df, rounded down: conservative, and the exact
  integer-df t quantile of intervals.py serves both) where an F test says they differ at
  SPREADS_DIFFER_P. With equal session counts (every registered design) Student's and
  Welch's statistic are the same and Welch's df are fewer, so every row moved to Welch's
  is a row that finds less: at 3 sessions a side, a 10 % slowdown at the lab's session
  variation is found 12.7 % of the time by Student's, 12.2 % with the switch at 5 %,
  12.7 % at 1 %, 6.6 % by Welch's always (20,000 draws of normal session log ratios).
  The F test on 2 and 2 df flags only gross differences (a variance ratio past 199 at
  1 %), so at 3 sessions the switch guards against a run whose sessions swung wildly;
  with more sessions it has the power to catch milder ones.
- One side of one session: its spread is not measured; the other side's is taken for
  both (Student's t with that side's df), and the caller says so.
- One session a side, or sessions that do not differ at all: None (no spread to scale).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.analysis.intervals import _t_central, t_quantile

SPREADS_DIFFER_P = 0.01  # the F test's level for "the spreads differ" (module docstring)


@dataclass(frozen=True)
class LogDifference:
    estimate: float  # mean(b) - mean(a)
    half_width: float  # at the level asked for
    df: int
    p_value: float  # two-sided, of "no difference"
    method: str  # student | welch | a_spread | b_spread (the side whose spread is used)
    equal_spread_p: float | None  # the F test's two-sided p (both sides with a spread)

    @property
    def ratio(self) -> tuple[float, float, float]:
        """exp of the estimate and its bounds: a ratio B over A with its interval."""
        e, h = self.estimate, self.half_width
        return math.exp(e), math.exp(e - h), math.exp(e + h)


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for aa in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def equal_spread_p(var_a: float, df_a: int, var_b: float, df_b: int) -> float:
    """Two-sided p of the F test that two variances are equal."""
    if var_a <= 0.0 or var_b <= 0.0:
        return 0.0 if var_a != var_b else 1.0
    f = var_b / var_a
    below = regularized_beta(df_b * f / (df_b * f + df_a), df_b / 2.0, df_a / 2.0)
    return min(1.0, 2.0 * min(below, 1.0 - below))


def t_p_value(t: float, df: int) -> float:
    """Two-sided p of Student's t with integer df."""
    return max(0.0, 1.0 - _t_central(abs(t), df))


def log_difference(a: Sequence[float], b: Sequence[float], level: float) -> LogDifference | None:
    """mean(b) - mean(a) of per-session logs with its t interval at `level` (the module's
    rule); None where no spread is measured."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    na, nb = len(xa), len(xb)
    if na == 0 or nb == 0 or not (np.all(np.isfinite(xa)) and np.all(np.isfinite(xb))):
        return None
    va = float(np.var(xa, ddof=1)) if na > 1 else math.nan
    vb = float(np.var(xb, ddof=1)) if nb > 1 else math.nan
    spread_p = None
    if na > 1 and nb > 1:
        spread_p = equal_spread_p(va, na - 1, vb, nb - 1)
        if spread_p < SPREADS_DIFFER_P:
            method = "welch"
            se2 = va / na + vb / nb
            # Satterthwaite; a side without spread adds nothing to it (its term is 0).
            terms = (va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1)
            df = max(1, math.floor(se2**2 / terms)) if terms > 0 else na + nb - 2
        else:
            method = "student"
            pooled = ((na - 1) * va + (nb - 1) * vb) / (na + nb - 2)
            se2, df = pooled * (1 / na + 1 / nb), na + nb - 2
    elif na > 1 or nb > 1:
        method, var, df = ("a_spread", va, na - 1) if na > 1 else ("b_spread", vb, nb - 1)
        se2 = var * (1 / na + 1 / nb)
    else:
        return None
    if not se2 > 1e-24:  # sessions equal up to rounding: nothing to scale
        return None
    se = math.sqrt(se2)
    estimate = float(xb.mean() - xa.mean())
    return LogDifference(
        estimate, t_quantile(level, df) * se, df, t_p_value(estimate / se, df), method, spread_p
    )


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (a row holds family-wise at alpha when its
    adjusted p is below alpha: the chance of any false one is at most alpha, whatever
    the rows' dependence)."""
    m = len(p_values)
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda j: p_values[j])):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out
