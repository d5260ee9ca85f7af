"""Why a speedup is what it is: tokens per round and the cost of a round, from the client.

A streamed chunk is one engine step of its request: vLLM 0.32 sends one output per
engine step unless `--stream-interval` (SchedulerConfig.stream_interval, default 1,
vllm/config/scheduler.py:213) holds tokens back (vllm/v1/engine/output_processor.py:324,
which sends only once `stream_interval` tokens are pending, the first token, or the
end). SGLang's scheduler sends a request's output when `decode_forward_ct %
stream_interval == 0` (one per decode forward pass at `--stream-interval 1`, the
default), besides its first token and its end: read in an older SGLang tree's scheduler,
not yet checked in 0.5.23's. So with the defaults, per request:

    tokens per round = tokens after the first chunk / chunks after the first
    round time       = (end - first token) / chunks after the first

and the per-user speed (tokens - 1) / (end - first token) is their ratio. A drafter
cell over its baseline's splits the speedup into two factors:

    explained_speedup = (tokens_per_round / baseline_tokens_per_round) / round_cost_ratio
    round_cost_ratio  = round_time_s / baseline_step_time_s

Each figure is, per session, the median over the cell's requests that have a per-user
speed (the requests the speedup uses); an arm's figure over repeated sessions is the mean
of its session medians, as its speed is. The intervals are the speedup's own: the same
draws of units (users, time blocks) within each session (intervals.draw_pair, resampled
once for both), and across sessions the same registered rule (a t interval on the
sessions' log figures, or the same session draws of the two-level bootstrap). A chunk
that carries several steps (stream_interval > 1, or a server that flushed late) makes
tokens per round an upper bound and the round time a multiple of the step; bursts are
already out of the speed (bursts.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from harness.analysis.cells import request_speed
from harness.analysis.intervals import (
    Figure,
    PairDraws,
    Units,
    arm_figure,
    combine,
    draw_pair,
    figure_bounds,
    measured_requests,
    medians_under,
    session_units,
)
from harness.analysis.load import CellData
from harness.prereg.schema import Intervals
from harness.records import RequestRecord

FACTORS = (
    "tokens_per_round",
    "baseline_tokens_per_round",
    "round_time_s",
    "baseline_step_time_s",
    "round_cost_ratio",
    "explained_speedup",
)


@dataclass(frozen=True)
class RequestRounds:
    """One request's rounds as the client saw them (NaN: no chunk after the first)."""

    tokens: float  # output tokens after the first chunk
    rounds: int  # chunks after the first
    span_s: float  # end - first token

    @property
    def tokens_per_round(self) -> float:
        return self.tokens / self.rounds if self.rounds else math.nan

    @property
    def round_time_s(self) -> float:
        return self.span_s / self.rounds if self.rounds else math.nan


def request_rounds(rec: RequestRecord) -> RequestRounds | None:
    """None without end or first token. A chunk without a token count (no usage stats)
    is taken as one token for the first chunk; the rest come from completion_tokens."""
    if rec.end_t is None or rec.first_token_t is None or not rec.chunk_times:
        return None
    first = rec.chunk_tokens[0] if rec.chunk_tokens and rec.chunk_tokens[0] is not None else 1
    counts = [n for n in rec.chunk_tokens if n is not None]
    if rec.chunk_tokens and len(counts) == len(rec.chunk_tokens):
        tokens = float(sum(counts[1:]))
    else:
        tokens = float((rec.completion_tokens or 0) - first)
    return RequestRounds(tokens, len(rec.chunk_times) - 1, rec.end_t - rec.first_token_t)


def cell_rounds(cell: CellData) -> np.ndarray:
    """(tokens per round, round time) per request with a per-user speed, in
    measured_requests order (the rows of the cell's Units, so the speedup's draws of
    units read these too)."""
    rows = []
    for rec, _ in measured_requests(cell):
        r = request_rounds(rec)
        rows.append((r.tokens_per_round, r.round_time_s) if r else (math.nan, math.nan))
    return np.array(rows, dtype=float).reshape(-1, 2)


def _pooled(cells: list[CellData]) -> tuple[float, float]:
    """Tokens per round and round time over all the cells' rounds together (sums, not
    medians): where a median departs from these, request-to-request spread moved it."""
    tokens = rounds = span = 0.0
    for cell in cells:
        for rec in cell.requests:
            if (
                request_speed(rec, cell.num_draft_tokens) is None
                or (r := request_rounds(rec)) is None
            ):
                continue
            tokens, rounds, span = tokens + r.tokens, rounds + r.rounds, span + r.span_s
    return (tokens / rounds, span / rounds) if rounds else (math.nan, math.nan)


def _arm_factors(
    cells: list[CellData], units: list[Units], counts: list[np.ndarray], draws: PairDraws
) -> tuple[Figure, Figure]:
    """An arm's tokens per round and round time over its sessions, under the draws."""
    figs = []
    for col in (0, 1):
        points, boots = [], []
        for cell, u, c in zip(cells, units, counts, strict=True):
            fu = u.with_values(cell_rounds(cell)[:, col])
            points.append(float(np.median(fu.values)) if fu.n else math.nan)
            boots.append(medians_under(fu, c))
        figs.append(arm_figure(points, boots, draws))
    return figs[0], figs[1]


def decompose(
    drafter: list[CellData],
    baseline: list[CellData],
    intervals: Intervals,
    speedup: float,
    tolerance: float,
    units: tuple[list[Units], list[Units]] | None = None,
    draws: PairDraws | None = None,
) -> dict:
    """The decomposition columns of one speedups row over its paired sessions.
    `units` and `draws` are the speedup's own (session_units, draw_pair); without them
    they are made here as the speedup makes them."""
    d_units, b_units = units or (
        [session_units(c) for c in drafter],
        [session_units(c) for c in baseline],
    )
    draws = draws or draw_pair(d_units, b_units, intervals)
    tpr_d, rt_d = _arm_factors(drafter, d_units, draws.drafter, draws)
    tpr_b, rt_b = _arm_factors(baseline, b_units, draws.baseline, draws)
    figs = {
        "tokens_per_round": tpr_d,
        "baseline_tokens_per_round": tpr_b,
        "round_time_s": rt_d,
        "baseline_step_time_s": rt_b,
        "round_cost_ratio": combine(np.divide, rt_d, rt_b),
    }
    figs["explained_speedup"] = combine(
        lambda a, b, c, d: (a / b) / (c / d), tpr_d, tpr_b, rt_d, rt_b
    )
    row: dict = {}
    for name in FACTORS:
        bounds = figure_bounds(figs[name], draws, intervals.level)
        row[name] = _finite(figs[name].point)
        lo, hi = bounds.ci or (None, None)
        row[f"{name}_ci_lower"], row[f"{name}_ci_upper"] = _finite(lo), _finite(hi)
    row["round_cost_ratio_sessions"] = json.dumps(
        [round(v, 6) if np.isfinite(v) else None for v in figs["round_cost_ratio"].per_session]
    )
    explained = row["explained_speedup"]
    if explained is None or not speedup:
        row.update(
            explained_gap=None,
            decomposition_flag=None,
            decomposition_note="no chunk after the first in some request: not decomposed",
        )
        return row
    gap = explained / speedup - 1.0
    row["explained_gap"] = gap
    row["decomposition_flag"] = bool(abs(gap) > tolerance)
    row["decomposition_note"] = (
        _which_factor(drafter, baseline, row, gap, tolerance) if row["decomposition_flag"] else None
    )
    return row


def _finite(x) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


def _which_factor(
    drafter: list[CellData], baseline: list[CellData], row: dict, gap: float, tolerance: float
) -> str:
    """Name the factor whose median departs most from its pooled value: the medians of
    two factors compose into the median speed only when requests are alike."""
    pooled_d, pooled_b = _pooled(drafter), _pooled(baseline)
    departures = {
        "tokens per round": row["tokens_per_round"] / pooled_d[0] - 1.0,
        "round time": row["round_time_s"] / pooled_d[1] - 1.0,
        "baseline tokens per round": row["baseline_tokens_per_round"] / pooled_b[0] - 1.0,
        "baseline step time": row["baseline_step_time_s"] / pooled_b[1] - 1.0,
    }
    name, dep = max(departures.items(), key=lambda kv: abs(kv[1]) if np.isfinite(kv[1]) else -1)
    return (
        f"explained {row['explained_speedup']:.3f}x vs measured "
        f"{row['explained_speedup'] / (1 + gap):.3f}x ({gap:+.1%}, tolerance "
        f"{tolerance:.0%}): {name} moved most, its median {dep:+.1%} off its value over "
        f"all rounds pooled (requests unlike each other)"
    )


def factor_shift(
    tpr_lo: float | None,
    cost_lo: float | None,
    tpr: float | None,
    cost: float | None,
    min_change: float = 0.005,
) -> tuple[float, float] | None:
    """How much of the explained speedup's change from the lowest level to this one
    each factor made, as shares of the change in log(explained speedup): (tokens per
    round over the baseline's, round cost ratio). Positive shares moved it the way it
    went. None when the explained speedup moved less than `min_change` (log), or a figure
    is missing or not positive."""
    if (
        tpr_lo is None
        or cost_lo is None
        or tpr is None
        or cost is None
        or not all(x > 0 for x in (tpr_lo, cost_lo, tpr, cost))
    ):
        return None
    from_tokens = math.log(tpr / tpr_lo)
    from_cost = -math.log(cost / cost_lo)
    total = from_tokens + from_cost
    if abs(total) < min_change:
        return None
    return from_tokens / total, from_cost / total
