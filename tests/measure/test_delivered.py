"""Delivered load: requests in flight over the measured window, turnaround, arrivals.
Hand-made spans, so every figure is known exactly; and a driver cell whose users are
held back between requests by far more than the lag limit."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from harness.measure.delivered import (
    Span,
    arrival_statistics,
    delivered_load,
    measured_window,
    turnarounds_s,
)
from harness.measure.patterns import ClosedLoop
from harness.testengine.server import serve_in_thread
from harness.testengine.spec import ScriptedEngineSpec

from .cells import FAST, run


def _loop(users: int, per_user: int, length: float, gap: float, warmup: int = 0) -> list[Span]:
    """Every user sends back to back: requests of `length` s, `gap` s between them."""
    spans = []
    for u in range(users):
        t = 0.0
        for i in range(per_user):
            spans.append(Span(t, t + length, u, measured=i >= warmup))
            t += length + gap
    return spans


def test_users_with_no_turnaround_deliver_every_user() -> None:
    load = delivered_load(_loop(users=4, per_user=5, length=1.0, gap=0.0))
    assert load.concurrency == pytest.approx(4.0)
    assert load.turnaround_max_ms == 0.0 and load.n_turnarounds == 16


def test_turnaround_is_the_shortfall_and_the_ramp_down_does_not_count() -> None:
    # Users offset in time, so they run dry one after another: the window ends when the
    # first one does, and inside it each user idles 0.1 s per 1.1 s.
    spans = [
        Span(s.sent_t + 0.25 * (s.user or 0), s.end_t + 0.25 * (s.user or 0), s.user, s.measured)
        for s in _loop(users=4, per_user=6, length=1.0, gap=0.1)
    ]
    window = measured_window(spans)
    assert window is not None
    start, end = window
    assert start == 0.0 and end == pytest.approx(6 * 1.1 - 0.1)  # user 0's last end
    load = delivered_load(spans)
    assert load.turnaround_p50_ms == pytest.approx(100.0)
    # Busy time inside [0, 6.5]: user 0 six whole requests, users 1-3 lose their offset
    # at the start and the part of their last request past the window.
    assert load.concurrency == pytest.approx((6.0 + 5.75 + 5.5 + 5.25) / 6.5)


def test_warmups_count_as_load_but_open_no_window() -> None:
    spans = _loop(users=2, per_user=3, length=1.0, gap=0.0, warmup=1)
    window = measured_window(spans)
    assert window is not None and window[0] == 1.0  # the first measured send, after the warm-ups
    assert delivered_load(spans).concurrency == pytest.approx(2.0)
    assert len(turnarounds_s(spans)) == 4  # only sends of measured requests


def test_arrival_statistics_of_a_poisson_process() -> None:
    rng = np.random.default_rng(0)
    times = np.cumsum(rng.exponential(1 / 5.0, size=20_000))
    rate, cv = arrival_statistics(times)
    assert rate == pytest.approx(5.0, rel=0.03) and cv == pytest.approx(1.0, abs=0.03)
    assert arrival_statistics(np.arange(100) * 0.5) == (pytest.approx(2.0), pytest.approx(0.0))


class SlowTurnaroundLoop(ClosedLoop):
    """A closed loop whose users wait `delay_s` after each request before the next
    one: a client that turns around slowly, injected."""

    delay_s = 0.5

    async def drive(self, issue, should_stop) -> None:
        first: set[int | None] = set()

        async def slow(index: int, due: float, user: int | None):
            if user in first:
                await asyncio.sleep(self.delay_s)
            first.add(user)
            return await issue(index, due, user)

        await super().drive(slow, should_stop)


def test_a_slow_turnaround_makes_a_closed_loop_cell_invalid() -> None:
    # 0.5 s of idle user between ~20 ms requests: 100 times the 5 ms limit, and the users
    # keep under 97% of their load in flight unless a request took over 16 s.
    with serve_in_thread(ScriptedEngineSpec(**FAST)) as eng:
        outcome, _ = run(eng.base_url, SlowTurnaroundLoop(concurrency=2, requests=6))
        fine, _ = run(eng.base_url, ClosedLoop(concurrency=2, requests=6))
    health = outcome.health
    assert health is not None
    assert not health.valid
    assert health.reason is not None
    assert "user turnaround p99" in health.reason and "delivered concurrency" in health.reason
    assert health.turnaround_p50_ms is not None
    assert health.delivered_share is not None
    assert health.turnaround_p50_ms >= 499 and health.delivered_share < 0.97
    assert health.registered_concurrency == 2
    # The same cell without the delay reports its delivered load too.
    assert fine.health is not None
    assert fine.health.delivered_concurrency is not None
    assert fine.health.registered_concurrency == 2
