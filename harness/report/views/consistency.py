"""Acceptance length measured against its parts: one point per complete drafter speed
cell, the engine's tokens per round against 1 + the sum of its per-position rates (two
counters that must agree) and against the client's tokens per decode step (lower where
steps run without drafts: vLLM counts no round on those)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.analysis.cell_rows import CellRow
from harness.analysis.tables import Analysis
from harness.rundir.verdict import Verdict

NO_POINTS = "no cell has both figures (per-position rates are vLLM-only)"


@dataclass(frozen=True)
class ArmPoints:
    """An arm's complete speed cells with both figures, one point a cell."""

    arm: str
    x: np.ndarray  # the figure the engine's is set against
    y: np.ndarray  # the engine's tokens per round
    cells: tuple[str, ...]  # each point's cell id


@dataclass(frozen=True)
class ConsistencyPanel:
    title: str
    arms: list[ArmPoints]  # the arms with a point
    diagonal: tuple[float, float] | None  # where the two figures agree, padded; None: no point


@dataclass(frozen=True)
class ConsistencyView:
    title: str
    subtitle: str
    panels: list[ConsistencyPanel]  # the counters against each other; client against engine


def build_consistency_view(a: Analysis, v: Verdict) -> ConsistencyView:
    drafters = {x.name for x in a.run.study.arms if x.drafter is not None}
    by_arm: dict[str, list[CellRow]] = {}
    for r in a.cell_rows(arms=drafters, kinds=("speed",), status=("complete",)):
        by_arm.setdefault(r.arm, []).append(r)
    panels = []
    figures: tuple[tuple[str, Callable[[CellRow], float | None], float], ...] = (
        ("engine counters against each other", lambda r: r.accept_rate_sum, 1.0),
        (
            "per decode step (client) vs per engine round (engine_round)",
            lambda r: r.tokens_per_step_client,
            0.0,
        ),
    )
    for title, figure, plus in figures:
        arms, lo, hi = [], math.inf, -math.inf
        for arm, grp in by_arm.items():
            x = _series([figure(r) for r in grp]) + plus
            y = _series([r.accept_length_per_round_engine for r in grp])
            ok = ~(np.isnan(x) | np.isnan(y))
            if not ok.any():
                continue
            cells = tuple(r.cell_id for r, keep in zip(grp, ok, strict=True) if keep)
            arms.append(ArmPoints(arm, x[ok].to_numpy(), y[ok].to_numpy(), cells))
            lo, hi = min(lo, x[ok].min(), y[ok].min()), max(hi, x[ok].max(), y[ok].max())
        pad = 0.1 * max(hi - lo, 0.5)
        panels.append(
            ConsistencyPanel(title, arms, (lo - pad, hi + pad) if math.isfinite(lo) else None)
        )
    return ConsistencyView(
        "Acceptance length: measured against its parts",
        "one point per drafter speed cell; on the diagonal the two figures agree",
        panels,
    )


def _series(figures: list[float | None]) -> pd.Series:
    """Figures as floats, a missing one NaN (as the table's column read as float)."""
    return pd.Series([math.nan if f is None else f for f in figures], dtype=float)
