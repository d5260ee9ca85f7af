"""Load patterns: seeded arrivals, request order, warm-up."""

from __future__ import annotations

import numpy as np
import pytest

from harness.measure.patterns import ClosedLoop, OpenLoop


def gaps(pattern: OpenLoop) -> np.ndarray:
    return np.diff(list(pattern.offsets()))


def test_open_loop_arrivals_are_seeded_and_have_the_registered_rate() -> None:
    a = OpenLoop(rate=20.0, requests=4000, seed=7)
    assert list(a.offsets()) == list(OpenLoop(rate=20.0, requests=4000, seed=7).offsets())
    assert list(a.offsets()) != list(OpenLoop(rate=20.0, requests=4000, seed=8).offsets())
    assert gaps(a).mean() == pytest.approx(1 / 20, rel=0.05)
    # Poisson: exponential gaps, coefficient of variation 1.
    assert gaps(a).std() / gaps(a).mean() == pytest.approx(1.0, rel=0.08)


def test_gamma_burstiness_keeps_the_rate_and_changes_the_spread() -> None:
    bursty = gaps(OpenLoop(rate=20.0, requests=4000, arrival="gamma", burstiness=0.25, seed=1))
    smooth = gaps(OpenLoop(rate=20.0, requests=4000, arrival="gamma", burstiness=4.0, seed=1))
    for g in (bursty, smooth):
        assert g.mean() == pytest.approx(1 / 20, rel=0.1)
    assert bursty.std() / bursty.mean() == pytest.approx(2.0, rel=0.15)  # 1/sqrt(b)
    assert smooth.std() / smooth.mean() == pytest.approx(0.5, rel=0.1)


def test_open_loop_counts_warmup_and_stops_at_duration() -> None:
    assert len(list(OpenLoop(rate=5.0, requests=10, warmup=3).offsets())) == 13
    offsets = list(OpenLoop(rate=50.0, duration_s=2.0).offsets())
    assert offsets[-1] <= 2.0 and len(offsets) == pytest.approx(100, rel=0.35)


def test_patterns_reject_nonsense() -> None:
    with pytest.raises(ValueError):
        OpenLoop(rate=0, requests=1)
    with pytest.raises(ValueError):
        OpenLoop(rate=1.0)
    with pytest.raises(ValueError):
        ClosedLoop(concurrency=0, requests=1)
