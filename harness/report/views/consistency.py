"""Acceptance length measured against its parts: one point per complete drafter speed
cell, the engine's tokens per round against 1 + the sum of its per-position rates (two
counters that must agree) and against the client's tokens per decode step (lower where
steps run without drafts: vLLM counts no round on those)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

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
    # The cells table is still read by its columns here (its row model is another change's).
    cells = a.cells[
        (a.cells["kind"] == "speed")
        & a.cells["arm"].isin(drafters)
        & (a.cells["status"] == "complete")
    ]
    panels = []
    for title, xcol, plus in (
        ("engine counters against each other", "accept_rate_sum", 1.0),
        (
            "per decode step (client) vs per engine round (engine_round)",
            "tokens_per_step_client",
            0.0,
        ),
    ):
        arms, lo, hi = [], math.inf, -math.inf
        for arm, grp in cells.groupby("arm", sort=False):
            x = grp[xcol].astype(float) + plus
            y = grp["accept_length_per_round_engine"].astype(float)
            ok = ~(np.isnan(x) | np.isnan(y))
            if not ok.any():
                continue
            arms.append(
                ArmPoints(str(arm), x[ok].to_numpy(), y[ok].to_numpy(), tuple(grp["cell_id"][ok]))
            )
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
