"""Acceptance from scraped counters: a counter going backwards (engine restart) within a cell."""

from __future__ import annotations

import pytest

from harness.analysis.acceptance import cell_acceptance, monotone_snapshots, per_second_acceptance
from harness.records import EngineSnapshot, MetricSample


def sample(t: float, drafts: float, accepted: float, per_pos: list[float]) -> MetricSample:
    snap = EngineSnapshot(
        engine="vllm",
        drafts=drafts,
        draft_tokens=3 * drafts,
        accepted_tokens=accepted,
        accepted_per_position=per_pos,
        generation_tokens=drafts + accepted,
    )
    return MetricSample(cell_id="x/chat/speed/c001", t=t, wall_time=1e9 + t, ok=True, snapshot=snap)


# The engine restarts between t=1 and t=2, and by t=3 its counters have passed their
# values at t=0: last - first (250 drafts, 600 accepted: 3.4 a round) would be wrong
# without ever going negative.
RESTART = [
    sample(0, 1000, 1500, [900, 600]),
    sample(1, 1100, 1650, [990, 660]),  # +100 drafts, +150 accepted
    sample(2, 50, 100, [60, 40]),  # restarted: 50 and 100 since then
    sample(3, 1250, 2100, [1260, 840]),  # +1200, +2000
]


def test_acceptance_is_carried_across_a_counter_reset():
    acc = cell_acceptance(RESTART)
    assert acc.counter_resets == 1
    assert acc.drafts == pytest.approx(100 + 50 + 1200)
    assert acc.accept_length_per_round == pytest.approx(1 + (150 + 100 + 2000) / 1350)
    assert acc.per_position_rates == pytest.approx(
        [(90 + 60 + 1200) / 1350, (60 + 40 + 800) / 1350]
    )


def test_per_second_acceptance_never_goes_negative_across_a_reset():
    series = per_second_acceptance(RESTART)
    assert list(series["drafts"]) == [100, 50, 1200]
    assert list(series["acceptance_length"]) == pytest.approx([2.5, 3.0, 1 + 2000 / 1200])


def test_monotone_snapshots_leave_a_clean_series_alone():
    clean = [s.snapshot for s in RESTART[:2] if s.snapshot is not None]
    out, resets = monotone_snapshots(clean)
    assert resets == 0 and out == clean
