"""The cell table's row model (analysis/cells.py `cell_row`): its fields are the table's
columns in order, as rows.py's models are, with two things the table holds that a fixed
list of columns cannot say:

- the engine's per-position acceptance rates, one `accept_rate_pos<i>` column per
  position measured (k of them for a drafter with per-position counters, none without):
  the row holds them as `accept_rate_by_position`, and the table spreads them into those
  columns at that field's place;
- groups only some cells have: a completed attempt's outcome (`aborted` ..
  `host_steal_share`), the measured requests' figures (`per_user_speed` ..
  `output_throughput_tok_s`) and an accuracy cell's scores (`n_scored`, `accuracy`). A
  cell without one leaves its columns out of its record, and a table no cell of which has
  it has not those columns, as the table was written before the model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import pandas as pd

from harness.analysis.frame import missing_text_as_none

POSITION_PREFIX = "accept_rate_pos"


@dataclass(frozen=True)
class CellRow:
    """One cell of the run (planned, missing and skipped ones too, and every rerun)."""

    cell_id: str
    arm: str
    task: str
    kind: str
    concurrency: int | None
    rate_relative: float | None
    rate_rps: float | None
    stage: int | None
    session: int | None  # repeated sessions: 1..N (None: measured once)
    rerun_of: str | None
    # Where it was measured (cell.json's `where`): a sharded run's shard, the host, and
    # the GPUs by UUID (or the ids Ray gave, without NVML).
    shard: str | None
    host: str | None
    gpu: str | None
    status: str
    reason: str | None
    attempt: int | None  # the completed attempt (None: none completed)
    n_measured: int
    n_ok: int
    n_errors: int
    n_invalid_tpot: int
    burst_share: float | None
    # The completed attempt's outcome and the client's health (a cell with one).
    aborted: bool | None
    client_valid: bool | None
    client_lag_p99_ms: float | None
    client_stamp_bound_p99_ms: float | None
    client_first_token_bound_p99_ms: float | None
    client_send_lag_p99_ms: float | None
    client_kernel_stamped: float | None
    # Closed loop: the load the users delivered, beside the registered concurrency.
    delivered_concurrency: float | None
    delivered_share: float | None
    turnaround_p50_ms: float | None
    turnaround_p99_ms: float | None
    turnaround_max_ms: float | None
    # The host's CPU time that went elsewhere (measure/host_cpu.py).
    host_foreign_cpu_share: float | None
    host_steal_share: float | None
    # The measured requests' figures (a cell with measured requests).
    per_user_speed: float | None
    e2e_tok_s: float | None
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    tpot_p90_s: float | None
    tpot_p99_s: float | None
    itl_p50_s: float | None
    itl_p90_s: float | None
    itl_p99_s: float | None
    latency_p50_s: float | None
    latency_p90_s: float | None
    latency_p99_s: float | None
    queue_p50_s: float | None
    queue_p90_s: float | None
    queue_p99_s: float | None
    span_s: float | None
    request_throughput_rps: float | None
    output_throughput_tok_s: float | None
    # Acceptance three ways: per round as the engine counts rounds (`engine_round`) from
    # its counters and from its per-request figures, and per decode step from the client's
    # chunks.
    accept_length_per_round_engine: float | None
    accept_length_per_round_requests: float | None
    tokens_per_step_client: float | None
    acceptance_agree: bool | None
    acceptance_disagreement: str | None
    spec_requests: int
    accept_rate_requests: float | None
    accept_histogram_requests: str | None  # a JSON object
    drafts: float | None
    scrape_gaps: int
    counter_resets: int
    accept_rate_sum: float | None
    # GPU telemetry (analysis/gpu.py GPU_COLUMNS; all empty on a host without NVML).
    gpu_samples: int
    gpu_throttled: bool | None
    gpu_throttle_reasons: str | None
    gpu_throttled_samples: int | None
    gpu_sm_clock_mhz_p50: float | None
    gpu_sm_clock_mhz_min: float | None
    gpu_power_w_p50: float | None
    gpu_power_w_max: float | None
    gpu_power_limit_w: float | None
    gpu_temperature_c_max: float | None
    gpu_util_pct_p50: float | None
    gpu_memory_used_mib_max: float | None
    gpu_gaps: int
    # The engine's acceptance rate at each draft position, 1 first: the table's
    # accept_rate_pos1.. columns.
    accept_rate_by_position: tuple[float, ...]
    # An accuracy cell's scores.
    n_scored: int | None
    accuracy: float | None
    engine_round: str | None  # what the arm's engine's acceptance figures are per


def _span(first: str, last: str) -> tuple[str, ...]:
    names = [f.name for f in fields(CellRow)]
    return tuple(names[names.index(first) : names.index(last) + 1])


# Each group only some cells have, and whether a row has it.
OPTIONAL_GROUPS: dict[tuple[str, ...], Callable[[CellRow], bool]] = {
    _span("aborted", "host_steal_share"): lambda r: r.attempt is not None,
    _span("per_user_speed", "output_throughput_tok_s"): lambda r: r.n_measured > 0,
    ("n_scored", "accuracy"): lambda r: r.n_scored is not None,
}
_GROUP_OF = {name: group for group in OPTIONAL_GROUPS for name in group}


def cell_record(row: CellRow) -> dict[str, Any]:
    """The row as the table holds it: the per-position rates spread into their columns,
    a group the cell has not left out (its columns NaN in a table where others have it)."""
    record: dict[str, Any] = {}
    for f in fields(CellRow):
        group = _GROUP_OF.get(f.name)
        if f.name == "accept_rate_by_position":
            for i, rate in enumerate(row.accept_rate_by_position, 1):
                record[f"{POSITION_PREFIX}{i}"] = rate
        elif group is None or OPTIONAL_GROUPS[group](row):
            record[f.name] = getattr(row, f.name)
    return record


def cell_columns(rows: list[CellRow]) -> list[str]:
    """The table's columns: the model's, in order, with as many position columns as the
    most positions any cell measured, and a group only where some cell has it."""
    positions = max((len(r.accept_rate_by_position) for r in rows), default=0)
    out: list[str] = []
    for f in fields(CellRow):
        group = _GROUP_OF.get(f.name)
        if f.name == "accept_rate_by_position":
            out += [f"{POSITION_PREFIX}{i}" for i in range(1, positions + 1)]
        elif group is None or any(OPTIONAL_GROUPS[group](r) for r in rows):
            out.append(f.name)
    return out


def cell_frame(rows: list[CellRow]) -> pd.DataFrame:
    """The cell table from its rows."""
    df = pd.DataFrame([cell_record(r) for r in rows], columns=cell_columns(rows))
    for col in ("concurrency", "stage", "session", "attempt"):
        df[col] = df[col].astype("Int64")
    # Per arm, as the column was always filled (a baseline arm's NaN, not None).
    rounds = {r.arm: r.engine_round for r in rows if r.engine_round is not None}
    df["engine_round"] = df["arm"].map(rounds) if len(df) else None
    return df


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def cell_rows_of(df: pd.DataFrame) -> list[CellRow]:
    """The table's rows as CellRows, in table order: the position columns gathered back
    (up to the first a cell has not), a column the table lacks (a hand-made one, a group
    no cell has) None, a missing integer (the table's Int64 NA) None and any other
    missing figure as the table holds it (NaN or None), a missing text None."""
    names = [f.name for f in fields(CellRow)]
    out = []
    for record in df.to_dict("records"):
        values = {n: record.get(n) for n in names}
        values = {n: None if v is pd.NA else v for n, v in values.items()}
        rates = []
        for i in range(1, len(record) + 1):
            rate = record.get(f"{POSITION_PREFIX}{i}")
            if _missing(rate):
                break
            rates.append(float(rate))
        values["accept_rate_by_position"] = tuple(rates)
        out.append(CellRow(**missing_text_as_none(values, CellRow)))
    return out
