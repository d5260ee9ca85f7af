"""The cell table: one row per cell with every figure the report and bars read."""

from __future__ import annotations

import json
import math
from dataclasses import fields

import numpy as np
import pandas as pd

from harness.analysis.acceptance import cell_acceptance
from harness.analysis.acceptance_requests import acceptance_disagreement, request_acceptance
from harness.analysis.cell_rows import CellRow, cell_frame
from harness.analysis.gpu import gpu_columns
from harness.analysis.load import CellData, RunData
from harness.derived.bursts import burst_share, is_burst
from harness.derived.itl import chunk_itl, tokens_per_chunk
from harness.plan_arms import schedule_arms, surface_arms
from harness.records import RequestRecord
from harness.rundir import gpu_key

PERCENTILES = (50, 90, 99)


def request_speed(rec: RequestRecord, num_draft_tokens: int | None = None) -> float | None:
    """Per-user speed = (completion_tokens - 1) / (end - first token) = 1 / TPOT.

    None for a burst (most tokens from several steps under one stamp): its span is not
    the engine's steps. num_draft_tokens: the arm's k, so one round's chunk is one step;
    None (unknown) judges every stamp, as before rounds were known (harness.derived.bursts)."""
    speed = rec.per_user_speed
    return None if speed is None or is_burst(rec, num_draft_tokens) else speed


def cell_speeds(cell: CellData) -> np.ndarray:
    """Per-user speeds of a cell's measured, successful requests (bursts judged with the
    cell's arm's k)."""
    speeds = [request_speed(r, cell.num_draft_tokens) for r in cell.requests]
    return np.array([s for s in speeds if s is not None], dtype=float)


def measure_span_s(records: list[RequestRecord]) -> float | None:
    """Wall time of the measured phase: first scheduled send to last end."""
    ends = [r.end_t for r in records if r.end_t is not None]
    if not records or not ends:
        return None
    span = max(ends) - min(r.scheduled_t for r in records)
    return span if span > 0 else None


def percentile_or_nan(values: list[float], p: float) -> float:
    return float(np.percentile(values, p)) if values else math.nan


def _request_stats(records: list[RequestRecord], num_draft_tokens: int | None) -> dict[str, float]:
    ok = [r for r in records if r.ok]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    tpot = [r.tpot_s for r in ok if r.tpot_s is not None]
    lat = [r.latency_s for r in ok if r.latency_s is not None]
    itl = [g for r in ok for g in chunk_itl(r)]
    speeds = [s for s in (request_speed(r, num_draft_tokens) for r in ok) if s is not None]
    e2e = [
        r.completion_tokens / r.latency_s
        for r in ok
        if r.completion_tokens and r.latency_s and r.latency_s > 0
    ]
    out: dict[str, float] = {
        "per_user_speed": float(np.median(speeds)) if speeds else math.nan,
        "e2e_tok_s": float(np.median(e2e)) if e2e else math.nan,
    }
    # sent - scheduled: open loop, client queueing (inside TTFT and latency); closed
    # loop, the client's turnaround from the user's previous request (outside them).
    queue = [r.queue_delay_s for r in records]
    for name, values in (
        ("ttft", ttft),
        ("tpot", tpot),
        ("itl", itl),
        ("latency", lat),
        ("queue", queue),
    ):
        for p in PERCENTILES:
            out[f"{name}_p{p}_s"] = percentile_or_nan(values, p)
    span = measure_span_s(records)
    tokens = sum(r.completion_tokens or 0 for r in ok)
    out["span_s"] = span if span is not None else math.nan
    out["request_throughput_rps"] = len(ok) / span if span else math.nan
    out["output_throughput_tok_s"] = tokens / span if span else math.nan
    # One streamed chunk is one decode step of that request (an engine that merges steps
    # into one chunk makes this an upper bound); the prefill's first chunk is left out.
    tpc = tokens_per_chunk(ok)
    out["tokens_per_step_client"] = tpc if tpc is not None else math.nan
    return out


def cell_row(cell: CellData, engine_round: str | None = None) -> CellRow:
    """The cell's row; `engine_round`: what its arm's engine's acceptance figures are per
    (engine_rounds; None for an arm without a drafter)."""
    num_draft_tokens = cell.num_draft_tokens  # the arm's k, for its bursts and speeds
    # A group the cell has not stays None, and out of its record (cell_rows.cell_record).
    row: dict = dict.fromkeys(f.name for f in fields(CellRow))
    row.update(
        cell_id=cell.id,
        arm=cell.arm,
        task=cell.task,
        kind=cell.kind,
        concurrency=cell.concurrency,
        rate_relative=cell.rate_relative,
        rate_rps=cell.open_loop.rate_rps if cell.open_loop else None,
        stage=cell.stage,
        session=cell.session,
        rerun_of=cell.rerun_of,
        shard=cell.where.shard if cell.where else None,
        host=cell.where.hostname if cell.where else None,
        gpu=gpu_key(cell.where).split(":", 1)[1] if cell.where else None,
        status=cell.status,
        reason=cell.reason,
        attempt=cell.complete.attempt if cell.complete else None,
        n_measured=len(cell.requests),
        n_ok=sum(1 for r in cell.requests if r.ok),
        n_errors=sum(1 for r in cell.requests if not r.ok),
        n_invalid_tpot=sum(1 for r in cell.requests if r.ok and r.tpot_s is None),
        burst_share=burst_share(cell.requests, num_draft_tokens),
    )
    if cell.complete is not None:
        row["aborted"] = cell.complete.outcome.aborted
        health = cell.complete.outcome.health
        row["client_valid"] = health.valid if health is not None else None
        row["client_lag_p99_ms"] = health.lag_p99_ms if health is not None else None
        row["client_stamp_bound_p99_ms"] = health.stamp_bound_p99_ms if health else None
        row["client_first_token_bound_p99_ms"] = health.first_token_bound_p99_ms if health else None
        row["client_send_lag_p99_ms"] = health.send_lag_p99_ms if health else None
        row["client_kernel_stamped"] = health.kernel_stamped_fraction if health else None
        for name in (
            "delivered_concurrency",
            "delivered_share",
            "turnaround_p50_ms",
            "turnaround_p99_ms",
            "turnaround_max_ms",
            "host_foreign_cpu_share",
            "host_steal_share",
        ):
            row[name] = getattr(health, name) if health else None
    stats = _request_stats(cell.requests, num_draft_tokens) if cell.requests else {}
    row.update(stats)
    acc = cell_acceptance(cell.samples)
    per_request = request_acceptance(cell.requests)
    row["accept_length_per_round_engine"] = acc.accept_length_per_round
    row["accept_length_per_round_requests"] = (
        per_request.accept_length_per_round if per_request else None
    )
    row["tokens_per_step_client"] = stats.get("tokens_per_step_client", math.nan)
    in_window = request_acceptance(cell.warmup + cell.requests, ("warmup", "measure"))
    agree, why = acceptance_disagreement(
        acc.accept_length_per_round,
        row["accept_length_per_round_requests"],
        row["tokens_per_step_client"],
        window=in_window.accept_length_per_round if in_window else None,
        engine_positions=acc.per_position_rates,
        window_positions=in_window.per_position_rates if in_window else None,
    )
    row["acceptance_agree"] = agree
    row["acceptance_disagreement"] = why
    row["spec_requests"] = per_request.requests if per_request else 0
    row["accept_rate_requests"] = per_request.acceptance_rate if per_request else None
    row["accept_histogram_requests"] = (
        json.dumps(per_request.histogram) if per_request and per_request.histogram else None
    )
    row["drafts"] = acc.drafts
    row["scrape_gaps"] = acc.gaps
    row["counter_resets"] = acc.counter_resets
    rates = acc.per_position_rates or []
    row["accept_rate_sum"] = sum(rates) if rates else None
    row["accept_rate_by_position"] = tuple(rates)
    # GPU telemetry: throttled for power, heat or a hardware slowdown, and the figures
    # beside it (all empty on a host without NVML).
    row.update(gpu_columns(cell))
    if cell.scores is not None:
        row["n_scored"] = len(cell.scores)
        row["accuracy"] = (sum(cell.scores.values()) / len(cell.scores)) if cell.scores else None
    row["engine_round"] = engine_round
    return CellRow(**row)


def cell_table(run: RunData) -> pd.DataFrame:
    """Every planned cell (missing and skipped ones too) and every rerun, in plan order."""
    rounds = engine_rounds(run)
    return cell_frame([cell_row(c, rounds.get(c.arm)) for c in run.cells.values()])


def engine_rounds(run: RunData) -> dict[str, str]:
    """Per drafter arm, what its engine's acceptance figures are per (EngineKind.
    engine_round), from the async scheduling its engine chose as recorded at its start."""
    from harness.engines import get_engine_kind

    out = {}
    for arm in [*run.study.arms, *surface_arms(run.study), *schedule_arms(run.study)]:
        if arm.drafter is not None:
            starts = run.manifest.engines.get(arm.name)
            chosen = starts[-1].settings.get("async_scheduling") if starts else None
            out[arm.name] = get_engine_kind(arm.engine).engine_round(arm, chosen)
    return out
