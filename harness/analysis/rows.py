"""Every analysis table's row model: the table's columns, in order, are its fields
(harness/analysis/frame.py `columns`), and the bars read its rows back as it
(`rows_of`, Analysis's queries). A figure a row has not is NaN or None, as in the table.

Groups compose as inspect's column lists do (analysis/_dataframe/evals/columns.py): a
dataclass's fields come base first, so `class B(Later, Earlier)` has Earlier's columns
then Later's."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class SpeedupFigures:
    """One drafter arm x speed task x level over its same-engine baseline
    (analysis/speedup.py)."""

    arm: str
    baseline: str
    task: str
    concurrency: int
    drafter_cell: str
    baseline_cell: str
    status: str  # ok, or missing / invalid / skipped naming the cell that is not usable
    reason: str | None
    speed_drafter: float | None  # mean of the sessions' median per-user speeds
    speed_baseline: float | None
    n_drafter: int | None  # requests with a per-user speed, over the sessions
    n_baseline: int | None
    speedup: float | None
    ci_lower: float | None
    ci_upper: float | None
    # The check bar's reruns of the baseline ("; "-joined ids), the worst status, and
    # (all usable) their speed and its ratio to the original's.
    baseline_rerun_cell: str | None
    baseline_rerun_status: str | None
    baseline_rerun_speed: float | None
    baseline_rerun_ratio: float | None
    gpu_throttled_cells: str | None  # the pair's cells measured while the GPU throttled
    # Repeated sessions and what the interval rests on (harness.analysis.intervals):
    # ci_lower/ci_upper by interval_method (t_sessions: a t interval on the sessions' log
    # ratios; bootstrap: sessions first; within: one session); the *_within pair holds
    # the sessions fixed.
    sessions: int
    interval_method: str | None
    ci_lower_within: float | None
    ci_upper_within: float | None
    session_speeds_drafter: str | None  # a JSON list in session order
    session_speeds_baseline: str | None
    session_spread_drafter: float | None
    session_spread_baseline: float | None
    resample_unit: str | None
    interval_caveat: str | None
    # bars.intervals.pooling (harness.analysis.pooling): each level's own t interval, the
    # degrees of freedom the interval rests on, and whether its variance was pooled.
    ci_lower_level: float | None
    ci_upper_level: float | None
    interval_df: float | None
    pooling: str | None


@dataclass(frozen=True)
class DecompositionFigures:
    """The speedup as tokens per round over the round's cost (analysis/decompose.py),
    each factor with its interval under the speedup's own draws."""

    tokens_per_round: float | None
    tokens_per_round_ci_lower: float | None
    tokens_per_round_ci_upper: float | None
    baseline_tokens_per_round: float | None
    baseline_tokens_per_round_ci_lower: float | None
    baseline_tokens_per_round_ci_upper: float | None
    round_time_s: float | None
    round_time_s_ci_lower: float | None
    round_time_s_ci_upper: float | None
    baseline_step_time_s: float | None
    baseline_step_time_s_ci_lower: float | None
    baseline_step_time_s_ci_upper: float | None
    round_cost_ratio: float | None  # a round's time over a baseline step's
    round_cost_ratio_ci_lower: float | None
    round_cost_ratio_ci_upper: float | None
    explained_speedup: float | None  # tokens per round over the round cost ratio
    explained_speedup_ci_lower: float | None
    explained_speedup_ci_upper: float | None
    explained_gap: float | None  # the explained speedup over the measured one, less 1
    decomposition_flag: bool | None  # the gap beyond bars.decomposition.tolerance
    decomposition_note: str | None
    # Each session's round cost ratio (a JSON list in session order): the k schedule's
    # interval pairs it with the drafter's acceptance in the same session (k_schedule.py).
    round_cost_ratio_sessions: str | None


@dataclass(frozen=True)
class MeasuredSpeedup(DecompositionFigures, SpeedupFigures):
    """speedup_table's row: the figures, then their decomposition."""


@dataclass(frozen=True)
class Prediction:
    """Beside each measured speedup, the roofline formula's (analysis/predict.py)."""

    engine_tokens_per_round: float | None  # from the engine's counters (predict.engine_tokens)
    engine_tokens_source: str | None
    predicted_speedup: float | None
    predicted_round_cost_ratio: float | None
    prediction_gap: float | None
    round_cost_gap: float | None
    prediction_note: str | None
    tokens_per_round_note: str | None


@dataclass(frozen=True)
class SpeedupRow(Prediction, MeasuredSpeedup):
    """The speedups table's row (Analysis.speedups, speedups.parquet)."""


@dataclass(frozen=True)
class KneeRow:
    """Where a drafter's speedup crosses 1.0 on one task (analysis/knee.py)."""

    arm: str
    task: str
    status: str  # located, beyond, beyond_skipped, below_first or incomplete
    knee_concurrency: float | None
    bracket_low: int | None  # the levels the crossing lies between
    bracket_high: int | None
    label: str
    interval_low: float | None  # where the bounds cross 1.0 (NaN: that end is open)
    interval_high: float | None
    interval: str
    note: str


@dataclass(frozen=True)
class SurfaceCellRow:
    """One surface control arm x task x level against the baseline (analysis/surface.py)."""

    arm: str
    baseline: str
    task: str
    concurrency: int
    k: int
    acceptance_length: float  # the synthetic acceptance the arm sets
    status: str
    reason: str | None
    speedup: float | None
    ci_lower: float | None
    ci_upper: float | None
    tokens_per_round: float | None
    tokens_per_round_ci_lower: float | None
    tokens_per_round_ci_upper: float | None
    round_cost_ratio: float | None
    round_cost_ratio_ci_lower: float | None
    round_cost_ratio_ci_upper: float | None
    round_cost_ratio_sessions: str | None
    sessions: int
    interval_method: str | None
    speed_drafter: float | None
    speed_baseline: float | None
    drafter_cell: str
    baseline_cell: str


@dataclass(frozen=True)
class PlacementRow:
    """A real drafter at one surface level: its measured tokens per round against the
    break-even L for its k (surface.drafter_placements; the verdict's Placement)."""

    arm: str
    task: str
    concurrency: int
    k: int
    reaches: float | None  # its own tokens per round there (None: not measured)
    status: str  # pays, does_not_pay, unknown or k_not_on_surface
    needs: float | None  # the break-even L (None: not located)
    needs_below: float | None  # every L measured pays here: the need is at most the lowest
    label: str


@dataclass(frozen=True)
class ProposedScheduleRow:
    """The k the surface's drafter would best run at one task and surface level,
    predicted (k_schedule.proposed_schedule; the verdict's ScheduleRow)."""

    task: str
    concurrency: int
    candidates: dict[str, float]  # k -> predicted speedup ("0": no drafts, 1.0)
    k: int | None  # None: its per-position acceptance there is not measured
    predicted_speedup: float | None
    ci_lower: float | None
    ci_upper: float | None
    own_k_measured: float | None  # the drafter's measured speedup there, at its own k
    label: str


@dataclass(frozen=True)
class CategoryRow:
    """A SPEED-Bench task's speedup by category (analysis/categories.py)."""

    arm: str
    baseline: str
    task: str
    config: str | None  # the SPEED-Bench config (throughput_8k, qualitative)
    input_length: str | None  # "8k" from throughput_8k; None: prompts of every length
    category: str
    concurrency: int
    drafter_cell: str
    baseline_cell: str
    n_items: int  # the category's prompts
    status: str
    reason: str | None
    sessions: int | None
    n_drafter: int | None
    n_baseline: int | None
    speedup: float | None
    ci_lower: float | None
    ci_upper: float | None
    interval_method: str | None
    tokens_per_round: float | None
    tokens_per_round_ci_lower: float | None
    tokens_per_round_ci_upper: float | None
    baseline_tokens_per_round: float | None
    round_cost_ratio: float | None
    round_cost_ratio_ci_lower: float | None
    round_cost_ratio_ci_upper: float | None
    acceptance_rate: float | None  # the engine's per-request figures
    acceptance_ci_lower: float | None
    acceptance_ci_upper: float | None
    accept_length: float | None
    spec_requests: int | None


@dataclass(frozen=True)
class CompareRow:
    """Two runs' speedups at one arm x task x level, and B's over A's (analysis/compare.py);
    _a / _b: each run's own figure."""

    arm: str
    task: str
    concurrency: int
    status_a: str | None
    speedup_a: float | None
    ci_lower_a: float | None
    ci_upper_a: float | None
    tokens_per_round_a: float | None
    round_cost_ratio_a: float | None
    engine_tokens_per_round_a: float | None
    status_b: str | None
    speedup_b: float | None
    ci_lower_b: float | None
    ci_upper_b: float | None
    tokens_per_round_b: float | None
    round_cost_ratio_b: float | None
    engine_tokens_per_round_b: float | None
    level: float
    sessions_a: int | None
    sessions_b: int | None
    ratio: float | None  # B's speedup over A's, with its interval
    ratio_lower: float | None
    ratio_upper: float | None
    interval_method: str | None
    df: float | None
    p_value: float | None
    equal_spread_p: float | None  # the test that the runs' session spreads are equal
    family_p: float | None  # Holm's adjusted p over the rows compared over sessions
    family_wise: bool | None
    # Which arm moved: each arm's own per-user speed, B's over A's, with its interval.
    drafter_speed_ratio: float | None
    drafter_ratio_lower: float | None
    drafter_ratio_upper: float | None
    baseline_speed_ratio: float | None
    baseline_ratio_lower: float | None
    baseline_ratio_upper: float | None
    moved: str | None
    status: str
    warning: str | None


@dataclass(frozen=True)
class IdentityRow:
    """A drafter arm's outputs against its baseline's on one identity task."""

    arm: str
    baseline: str
    task: str
    drafter_cell: str
    baseline_cell: str
    status: str  # ok, missing or invalid
    n_compared: int | None
    n_identical: int | None
    n_numeric: int | None  # mismatches whose first divergence was a near tie of the target's
    share: float | None  # identical over compared
    n_not_compared: int | None
    mismatches: list  # each mismatch as a dict (identity.Mismatch)


@dataclass(frozen=True)
class AccuracyRow:
    """One accuracy cell: its accuracy with a Wilson interval at the bars' level."""

    arm: str
    task: str
    cell_id: str
    status: str
    level: float
    n: int | None
    correct: int | None
    accuracy: float | None
    ci_lower: float | None
    ci_upper: float | None


@dataclass(frozen=True)
class OpenLoopRow:
    """One open-loop cell: offered rate, achieved throughput, the objective's figure."""

    arm: str
    cell_id: str
    status: str
    rate_relative: float | None
    rate_rps: float | None
    reference_rps: float | None  # the rate the relative ones are fractions of
    throughput_rps: float | None
    objective_value_s: float | None
    objective_holds: bool | None
    per_user_speed: float | None
    queue_p50_s: float | None  # client queueing, scheduled to sent
    queue_p99_s: float | None


@dataclass(frozen=True)
class FleetRow:
    """Per arm: the rate one GPU sustains under the objective, and the GPUs the study's
    traffic needs, against the arm's baseline."""

    arm: str
    baseline: str | None
    sustainable_rps: float
    gpus: int | None
    traffic_rps: float
    baseline_sustainable_rps: float | None
    baseline_gpus: int | None
    gpus_saved: int | None
    cells_usable: int
    cells_planned: int


def curves(rows: Iterable[SpeedupRow]) -> dict[tuple[str, str], dict[int, SpeedupRow]]:
    """Each arm x task's rows by level, in the order the pairs first appear."""
    out: dict[tuple[str, str], dict[int, SpeedupRow]] = {}
    for r in rows:
        out.setdefault((r.arm, r.task), {})[int(r.concurrency)] = r
    return out
