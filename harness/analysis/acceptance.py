"""Speculation seen from the engine's counters: per cell and per second."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import pandas as pd

from harness.engines.metrics import acceptance_window
from harness.records import MetricSample


def ok_samples(samples: list[MetricSample]) -> list[MetricSample]:
    return sorted((s for s in samples if s.ok and s.snapshot is not None), key=lambda s: s.t)


@dataclass(frozen=True)
class CellAcceptance:
    drafts: float | None
    acceptance_length: float | None  # engine's tokens per verification
    per_position_rates: list[float] | None
    tokens_per_verification: float | None  # generation_tokens delta / drafts delta
    gaps: int  # failed scrapes within the cell


def cell_acceptance(samples: list[MetricSample]) -> CellAcceptance:
    """acceptance_window(first ok snapshot, last ok snapshot) over the cell's samples."""
    good = ok_samples(samples)
    gaps = sum(1 for s in samples if not s.ok)
    if len(good) < 2:
        return CellAcceptance(None, None, None, None, gaps)
    win = acceptance_window(good[0].snapshot, good[-1].snapshot)
    if win is None:
        return CellAcceptance(None, None, None, None, gaps)
    tpv = None
    if win.generation_tokens is not None and win.drafts > 0:
        tpv = win.generation_tokens / win.drafts
    return CellAcceptance(win.drafts, win.acceptance_length, win.per_position_rates, tpv, gaps)


def per_second_acceptance(samples: list[MetricSample]) -> pd.DataFrame:
    """One row per pair of consecutive successful scrapes: seconds since the first
    scrape and the acceptance length over that interval (NaN when no drafts ran)."""
    good = ok_samples(samples)
    rows = []
    if good:
        t0 = good[0].t
        for before, after in pairwise(good):
            win = acceptance_window(before.snapshot, after.snapshot)
            rows.append({
                "t_s": after.t - t0,
                "acceptance_length": (win.acceptance_length if win is not None else None),
                "drafts": win.drafts if win is not None else None,
                "engine_gauge": after.snapshot.engine_accept_length,
            })
    return pd.DataFrame(rows, columns=["t_s", "acceptance_length", "drafts", "engine_gauge"])
