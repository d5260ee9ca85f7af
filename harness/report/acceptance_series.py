"""What the acceptance page (PDF) and figure (HTML) draw for one drafter arm and task: each
usable speed cell's per-second tokens per round and its per-position acceptance rates, by
level, and why a figure without per-position data is empty. One walk for both outputs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from harness.analysis.acceptance import per_second_acceptance
from harness.analysis.tables import Analysis
from harness.engines import get_engine_kind
from harness.prereg.schema import Arm


@dataclass(frozen=True)
class LevelAcceptance:
    concurrency: int
    per_second: pd.DataFrame  # t_s, acceptance_length: the seconds with a round
    position_rates: list[float]  # acceptance rate at draft position 1, 2, ... (may be [])


def is_nan(v: object) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def acceptance_by_level(a: Analysis, arm: Arm, task: str) -> list[LevelAcceptance]:
    """Each registered closed-loop level whose speed cell of `arm` and `task` is usable."""
    out = []
    for c in a.run.study.loads.closed_loop.concurrency:
        cell = a.run.find(arm.name, task, "speed", c)
        if not cell.usable:
            continue
        series = per_second_acceptance(cell.samples).dropna(subset=["acceptance_length"])
        row = a.cells[a.cells["cell_id"] == cell.id].iloc[0]
        rates = [
            float(row[k])
            for k in row.index
            if k.startswith("accept_rate_pos") and not is_nan(row[k])
        ]
        out.append(LevelAcceptance(c, series, rates))
    return out


NO_SERIES = "no per-second acceptance (no usable cells or no drafts)"


def no_positions_line(arm: Arm) -> str:
    # SGLang's dialect exports no per-position counters (whatever the kind's name).
    if get_engine_kind(arm.engine).dialect_for(arm) == "sglang":
        return f"per-position acceptance not exported by {arm.engine}"
    return "no per-position data"
