"""What the acceptance section shows, per drafter arm and speed task (the first three):
each usable speed cell's per-second tokens per round and its per-position acceptance
rates, by level, and why a panel without them is empty."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.analysis.acceptance import per_second_acceptance
from harness.analysis.bar_common import speed_tasks
from harness.analysis.cells import engine_rounds
from harness.analysis.tables import Analysis
from harness.engines import get_engine_kind
from harness.prereg.schema import Arm
from harness.rundir.verdict import Verdict

MAX_TASKS = 3
NO_SERIES = "no per-second acceptance (no usable cells or no drafts)"


@dataclass(frozen=True)
class LevelAcceptance:
    concurrency: int
    seconds: np.ndarray  # since the cell's first scrape: each second with a round
    tokens_per_round: np.ndarray  # the engine's, that second (counter deltas)
    position_rates: list[float]  # acceptance rate at draft position 1, 2, ... (may be [])

    @property
    def no_seconds(self) -> bool:
        return not len(self.seconds)


@dataclass(frozen=True)
class ArmAcceptance:
    arm: Arm
    heading: str  # the arm, its engine, method and k
    round: str  # what its engine counts as a round (EngineKind.engine_round)
    k: int
    no_positions: str  # why a bottom panel is empty
    tasks: dict[str, list[LevelAcceptance]]  # task -> its usable levels


@dataclass(frozen=True)
class AcceptanceView:
    title: str
    subtitle: str
    shades: dict[int, float]  # level -> its place on the viridis scale
    arms: list[ArmAcceptance]


def build_acceptance_view(a: Analysis, v: Verdict) -> AcceptanceView:
    study = a.run.study
    levels = study.loads.closed_loop.concurrency
    n = max(1, len(levels) - 1)
    tasks, rounds = speed_tasks(study)[:MAX_TASKS], engine_rounds(a.run)
    arms = [
        ArmAcceptance(
            arm,
            f"{arm.name} ({arm.engine}, {arm.drafter.method}, k={arm.drafter.num_draft_tokens})",
            rounds.get(arm.name, "round"),
            arm.drafter.num_draft_tokens,
            no_positions_line(arm),
            {task: acceptance_by_level(a, arm, task) for task in tasks},
        )
        for arm in study.arms
        if arm.drafter is not None
    ]
    return AcceptanceView(
        "Acceptance",
        "top: the engine's tokens per round (as its engine counts rounds) each second of each"
        " speed cell (counter deltas between scrapes); bottom: share of rounds keeping >= i"
        " drafts",
        {c: 0.9 * i / n for i, c in enumerate(levels)},
        arms,
    )


def acceptance_by_level(a: Analysis, arm: Arm, task: str) -> list[LevelAcceptance]:
    """Each registered closed-loop level whose speed cell of `arm` and `task` is usable."""
    out = []
    for c in a.run.study.loads.closed_loop.concurrency:
        cell = a.run.find(arm.name, task, "speed", c)
        if not cell.usable:
            continue
        series = per_second_acceptance(cell.samples).dropna(subset=["acceptance_length"])
        row = a.cell(cell.id)
        rates = list(row.accept_rate_by_position) if row is not None else []
        out.append(
            LevelAcceptance(
                c,
                series["t_s"].to_numpy(dtype=float),
                series["acceptance_length"].to_numpy(dtype=float),
                rates,
            )
        )
    return out


def no_positions_line(arm: Arm) -> str:
    # SGLang's dialect exports no per-position counters (whatever the kind's name).
    if get_engine_kind(arm.engine).dialect_for(arm) == "sglang":
        return f"per-position acceptance not exported by {arm.engine}"
    return "no per-position data"
