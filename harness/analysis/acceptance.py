"""Speculation seen from the engine's counters: per cell and per second.

What the engine's figure counts: vLLM counts a draft only on steps where a request had
draft tokens, so `1 + accepted / drafts` is tokens per *drafting round*, not per decode
step (n-gram finds no match on many steps), and SGLang's generated / verify calls is
its own per-round figure. Tokens per decode step come from the client's chunks instead
(cells.py); the tables show both, labelled.

Counters are cumulative since engine start. One that goes backwards means the engine
restarted (or its counters were reset) between two scrapes: as Prometheus's increase()
does, the increase over that interval is the new value (counted from zero), so a
window never goes negative, and never silently spans a reset as one delta.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import pandas as pd

from harness.engines.readout.metrics import acceptance_window
from harness.records import EngineSnapshot, MetricSample

COUNTERS = (
    "drafts",
    "draft_tokens",
    "accepted_tokens",
    "generation_tokens",
    "prompt_tokens",
    "preemptions",
    "requests_finished",
)


def ok_samples(samples: list[MetricSample]) -> list[MetricSample]:
    return sorted((s for s in samples if s.ok and s.snapshot is not None), key=lambda s: s.t)


def _went_back(before: EngineSnapshot, after: EngineSnapshot) -> bool:
    for name in COUNTERS:
        b, a = getattr(before, name), getattr(after, name)
        if b is not None and a is not None and a < b:
            return True
    bp, ap = before.accepted_per_position or [], after.accepted_per_position or []
    return any(a < b for a, b in zip(ap, bp, strict=False))


def monotone_snapshots(snaps: list[EngineSnapshot]) -> tuple[list[EngineSnapshot], int]:
    """The snapshots with counters carried across resets (each reset adds the last value
    before it to every later one), and how many resets there were."""
    if not snaps:
        return [], 0
    offset = dict.fromkeys(COUNTERS, 0.0)
    pos_offset: list[float] = []
    out, resets = [snaps[0]], 0
    for before, after in pairwise(snaps):
        if _went_back(before, after):
            resets += 1
            for name in COUNTERS:
                offset[name] += getattr(before, name) or 0.0
            prev = before.accepted_per_position or []
            n = max(len(pos_offset), len(prev))
            pos_offset = [
                (pos_offset[i] if i < len(pos_offset) else 0.0)
                + (prev[i] if i < len(prev) else 0.0)
                for i in range(n)
            ]
        fields = {
            name: (None if getattr(after, name) is None else getattr(after, name) + offset[name])
            for name in COUNTERS
        }
        per_pos = after.accepted_per_position
        if per_pos is not None:
            per_pos = [
                v + (pos_offset[i] if i < len(pos_offset) else 0.0) for i, v in enumerate(per_pos)
            ]
        out.append(after.model_copy(update=fields | {"accepted_per_position": per_pos}))
    return out, resets


@dataclass(frozen=True)
class CellAcceptance:
    drafts: float | None  # drafting rounds (vLLM num_drafts; SGLang verify calls)
    accept_length_per_round: float | None  # the engine's tokens per drafting round
    per_position_rates: list[float] | None
    gaps: int  # failed scrapes within the cell
    counter_resets: int  # counters that went backwards within the cell (engine restarts)


def cell_acceptance(samples: list[MetricSample]) -> CellAcceptance:
    """acceptance_window(first ok snapshot, last ok snapshot), counters carried across
    any reset in between."""
    good = ok_samples(samples)
    gaps = sum(1 for s in samples if not s.ok)
    snaps, resets = monotone_snapshots([s.snapshot for s in good if s.snapshot is not None])
    if len(snaps) < 2:
        return CellAcceptance(None, None, None, gaps, resets)
    win = acceptance_window(snaps[0], snaps[-1])
    if win is None:
        return CellAcceptance(None, None, None, gaps, resets)
    return CellAcceptance(win.drafts, win.acceptance_length, win.per_position_rates, gaps, resets)


def per_second_acceptance(samples: list[MetricSample]) -> pd.DataFrame:
    """One row per pair of consecutive successful scrapes: seconds since the first
    scrape and the tokens per drafting round over that interval (NaN when no drafts ran)."""
    good = ok_samples(samples)
    snaps, _ = monotone_snapshots([s.snapshot for s in good if s.snapshot is not None])
    rows = []
    if good:
        t0 = good[0].t
        for (_, before), (sample, after) in pairwise(zip(good, snaps, strict=True)):
            win = acceptance_window(before, after)
            rows.append(
                {
                    "t_s": sample.t - t0,
                    "acceptance_length": (win.acceptance_length if win is not None else None),
                    "drafts": win.drafts if win is not None else None,
                    "engine_gauge": sample.snapshot.engine_accept_length
                    if sample.snapshot
                    else None,
                }
            )
    return pd.DataFrame(rows, columns=["t_s", "acceptance_length", "drafts", "engine_gauge"])
