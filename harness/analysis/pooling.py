"""Session variance pooled across levels where it holds (bars.intervals.pooling).

Each level's t interval rests on its own sessions (3 sessions: 2 degrees of freedom, t =
4.30). But one engine start serves an arm's whole session of a plan stage (harness/plan.py:
every task and level of the stage), so the paired sessions' log ratios of one drafter arm
and stage form a sessions x cells table: R[s, j] = mu_j + e_s + eps_sj, e_s the session's
shared effect (the two engine starts' difference) and eps the cell's own noise. Every
cell's variance is estimated by the mean of the cells' sample variances,

    var = (SS_sessions + SS_residual) / (J (n - 1)),

whose degrees of freedom come from the two-way decomposition by Satterthwaite's rule
(the session mean square counted twice, a margin for its own few df): n - 1 when the
shared effect dominates (more cells cannot tell more about as many engine starts), up
to J (n - 1) when the cells' own noise does. That holds only if every cell varies alike,
so the residuals' spread is tested equal across the cells (Bartlett's statistic, its p
from its null distribution simulated for the table's shape, at 1 - bars.intervals.level);
where it fails, with fewer than 3 sessions, or where the cells are not measured in the
same sessions, each level keeps its own interval. Stages are not pooled with each other: their
engine starts differ, and 2 + 2 degrees of freedom cannot show their variance equal. Arms
are not either: arms of one engine share their baseline's sessions, so their tables are
not independent. Coverage: benchmarks/bar_characteristics.py.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.analysis.intervals import t_quantile
from harness.plan import speed_stage
from harness.prereg.schema import Study

NULL_DRAWS = 4000  # tables drawn for the test's null distribution (its p to ~0.004 at 0.05)
# The session mean square counts twice in the degrees of freedom: a margin for its own
# n - 1 df. Plain Satterthwaite covered 0.93 where the cells' own noise is a fifth to half
# the shared effect (3 sessions x 9 cells); counted twice, 0.94-0.97 from a shared effect
# alone to none, at 3 x 3, 3 x 9, 3 x 12 and 5 x 9 (tests/analysis/test_pooling.py).
SESSION_WEIGHT = 2.0
MIN_SESSIONS = 3  # with 2, its 1 df left the pooled interval covering 0.92


def _residuals(logs: np.ndarray) -> np.ndarray:
    """The two-way residuals of (..., sessions, cells) tables: each table less its session
    and cell means."""
    return (
        logs
        - logs.mean(axis=-1, keepdims=True)
        - logs.mean(axis=-2, keepdims=True)
        + logs.mean(axis=(-2, -1), keepdims=True)
    )


def _spread_statistic(resid: np.ndarray) -> np.ndarray:
    """Bartlett's statistic on the cells' residual variances (without its correction: its
    null distribution is simulated, not read from a chi-square)."""
    ss = (resid**2).sum(axis=-2)
    with np.errstate(divide="ignore"):
        return ss.shape[-1] * np.log(ss.mean(axis=-1)) - np.log(ss).sum(axis=-1)


@functools.cache
def _null_spread(n: int, j: int) -> np.ndarray:
    """The statistic over NULL_DRAWS tables of equal spread. Free of the cells' means and
    of any effect shared by a session's cells (the residuals remove both) and of the
    scale, so it depends on the table's shape alone."""
    draws = np.random.default_rng([n, j]).normal(size=(NULL_DRAWS, n, j))
    return np.sort(_spread_statistic(_residuals(draws)))


def spread_p(resid: np.ndarray) -> float:
    """P(a table of equal spread shows a statistic this large), by simulation."""
    n, j = resid.shape
    null = _null_spread(n, j)
    stat = float(_spread_statistic(resid))
    above = len(null) - int(np.searchsorted(null, stat, side="left"))
    return (1 + above) / (len(null) + 1)


@dataclass(frozen=True)
class Pooled:
    """One arm and stage's cells, pooled or not, and why."""

    variance: float | None  # the pooled log-ratio variance (None: not pooled)
    df: float | None  # its Satterthwaite degrees of freedom
    spread_p: float | None  # Bartlett's p for equal residual spread (None: not tested)
    note: str

    @property
    def pooled(self) -> bool:
        return self.variance is not None


def pool(logs: np.ndarray, level: float) -> Pooled:
    """The pooled variance of a (sessions x cells) table of session log ratios."""
    n, j = logs.shape
    if j < 3:  # two cells' residuals mirror each other: their spread cannot differ
        return Pooled(
            None,
            None,
            None,
            f"{j} cell{'s' * (j > 1)}: too few to test their"
            " spread equal, each level keeps its own interval",
        )
    if n < MIN_SESSIONS:
        return Pooled(
            None,
            None,
            None,
            f"fewer than {MIN_SESSIONS} sessions: each level keeps its own interval",
        )
    resid = _residuals(logs)
    ss_sess = j * float(((logs.mean(axis=1) - logs.mean()) ** 2).sum())
    ss_res = float((resid**2).sum())
    df_res = (n - 1) * (j - 1)
    if ss_res <= 1e-24:
        return Pooled(None, None, None, "no residual spread to test")
    p = spread_p(resid)
    if p < 1.0 - level:
        return Pooled(
            None, None, p, f"equal spread rejected (p={p:.3g}): each level keeps its own interval"
        )
    total = j * (n - 1)
    t1, t2 = ss_sess / total, ss_res / total
    w1 = SESSION_WEIGHT * t1
    df = (w1 + t2) ** 2 / (w1**2 / (n - 1) + t2**2 / df_res)
    return Pooled(t1 + t2, df, p, f"pooled over {j} cells, {df:.1f} df; equal spread p={p:.2f}")


def _logs(row) -> np.ndarray | None:
    if not isinstance(row.session_speeds_drafter, str):
        return None
    d = np.array(json.loads(row.session_speeds_drafter), dtype=float)
    b = np.array(json.loads(row.session_speeds_baseline), dtype=float)
    with np.errstate(all="ignore"):
        out = np.log(d / b)
    return out if np.all(np.isfinite(out)) else None


def pool_session_variance(speedups: pd.DataFrame, study: Study) -> pd.DataFrame:
    """The speedup table with ci_lower/ci_upper over the pooled variance where the study
    registers `pooling: stage_cells` and it holds (interval_method t_pooled); each
    level's own t interval kept in ci_*_level, the outcome in `pooling`."""
    out = speedups.copy()
    out["ci_lower_level"], out["ci_upper_level"] = out["ci_lower"], out["ci_upper"]
    iv = study.bars.intervals
    sessions = out["interval_method"] == "t_sessions"
    out["interval_df"] = np.where(sessions, out["sessions"].astype(float) - 1, np.nan)
    if iv.pooling != "stage_cells" or not sessions.any():
        return out
    sub = out[sessions]
    stages = sub["concurrency"].map(lambda c: speed_stage(study, int(c)))
    for (_arm, stage), grp in sub.groupby([sub["arm"], stages], sort=False):
        logs = [x for r in grp.itertuples() if (x := _logs(r)) is not None]
        if len(logs) < len(grp) or len({len(x) for x in logs}) != 1:
            out.loc[grp.index, "pooling"] = (
                f"stage {stage}: cells not in the same sessions: each level keeps its own interval"
            )
            continue
        table = np.stack(logs, axis=1)
        p = pool(table, iv.level)
        out.loc[grp.index, "pooling"] = f"stage {stage}: {p.note}"
        if p.variance is None or p.df is None:  # not pooled
            continue
        n = table.shape[0]
        half = t_quantile(iv.level, max(n - 1, math.floor(p.df))) * math.sqrt(p.variance / n)
        mean = table.mean(axis=0)
        out.loc[grp.index, "ci_lower"] = np.exp(mean - half)
        out.loc[grp.index, "ci_upper"] = np.exp(mean + half)
        out.loc[grp.index, "interval_df"] = p.df
        out.loc[grp.index, "interval_method"] = "t_pooled"
    return out
