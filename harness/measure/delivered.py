"""Did the load pattern deliver the load it registers? Requests in flight, and turnaround.

A closed loop at N users is meant to keep N requests in flight. What it delivered is
the time-average of requests in flight over the measured window: from the first
measured send until the first user runs out of requests (the first request to end after
the last send), so the ramp-down, when users run dry one by one, does not count. Inside
that window every user is either waiting on a request or turning around to send its
next one, so the shortfall from N is exactly the users' turnaround: the time from a
request's end to the same user's next send.

The same figures apply to any tool's per-request (send, end) times (benchmarks compare
specbench with `vllm bench serve` this way), so nothing here knows about records.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Span:
    """One request as the load saw it: when it left, when it ended, who sent it."""

    sent_t: float
    end_t: float
    user: int | None = None
    measured: bool = True  # False: a warm-up request (in flight, but before the window)


@dataclass(frozen=True)
class DeliveredLoad:
    concurrency: float | None  # time-averaged requests in flight over the window
    window_s: float | None
    turnaround_p50_ms: float | None
    turnaround_p99_ms: float | None
    turnaround_max_ms: float | None
    n_turnarounds: int


def measured_window(spans: Sequence[Span]) -> tuple[float, float] | None:
    """[first measured send, first end after the last send], or None when empty."""
    measured = [s for s in spans if s.measured]
    if not measured:
        return None
    start = min(s.sent_t for s in measured)
    last_send = max(s.sent_t for s in spans)
    ends = [s.end_t for s in spans if s.end_t > last_send]
    if not ends:
        return None
    end = min(ends)
    return (start, end) if end > start else None


def in_flight_average(spans: Sequence[Span], window: tuple[float, float]) -> float:
    """Time-averaged number of spans in flight over the window (warm-ups count too:
    a warm-up still running when the window opens is load the engine carries)."""
    start, end = window
    busy = sum(max(0.0, min(s.end_t, end) - max(s.sent_t, start)) for s in spans)
    return busy / (end - start)


def turnarounds_s(spans: Sequence[Span]) -> list[float]:
    """Per user, each measured send's time since that user's previous request ended."""
    by_user: dict[int, list[Span]] = {}
    for s in spans:
        if s.user is not None:
            by_user.setdefault(s.user, []).append(s)
    out: list[float] = []
    for own in by_user.values():
        own.sort(key=lambda s: s.sent_t)
        out += [b.sent_t - a.end_t for a, b in itertools.pairwise(own) if b.measured]
    return out


def delivered_load(spans: Sequence[Span]) -> DeliveredLoad:
    window = measured_window(spans)
    turns = np.asarray(turnarounds_s(spans), dtype=float) * 1e3
    has_turns = turns.size > 0
    return DeliveredLoad(
        concurrency=in_flight_average(spans, window) if window else None,
        window_s=window[1] - window[0] if window else None,
        turnaround_p50_ms=float(np.percentile(turns, 50)) if has_turns else None,
        turnaround_p99_ms=float(np.percentile(turns, 99)) if has_turns else None,
        turnaround_max_ms=float(turns.max()) if has_turns else None,
        n_turnarounds=int(turns.size),
    )


def arrival_statistics(
    send_times: Sequence[float] | np.ndarray,
) -> tuple[float | None, float | None]:
    """(mean arrival rate per second, coefficient of variation of the gaps) of an open
    loop's sends: seed-independent checks of a Poisson process (CV 1 for exponential
    gaps), for comparing tools that draw different schedules at the same rate."""
    times = np.sort(np.asarray(send_times, dtype=float))
    if times.size < 3:
        return None, None
    gaps = np.diff(times)
    mean = float(gaps.mean())
    if mean <= 0:
        return None, None
    return 1.0 / mean, float(gaps.std(ddof=1) / mean)
