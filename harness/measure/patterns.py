"""Load patterns as strategy objects (after GuideLLM's scheduler strategies).

A pattern decides *when* request number i is due and who sends it; the driver does
the sending and recording. `drive` calls `issue(index, scheduled_t, user)`, which returns
when the request ended. The driver holds `connections` connection slots; a request that
finds none free waits in the client, and that wait is recorded as sent_t - scheduled_t,
never hidden from open-loop latency.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

# How long before its scheduled instant an open-loop request is readied: more than the
# slowest build of a request measured on a contended 2-core VM (p99 ~15 ms).
READY_AHEAD_S = 0.025

Issue = Callable[[int, float, "int | None"], Coroutine[Any, Any, "float | None"]]
ShouldStop = Callable[[], bool]


@dataclass
class ClosedLoop:
    """N users; each sends its next request as soon as its previous one ends.

    A request is due when its user's previous one ended (the arrival of its last bytes),
    so sent - scheduled is the client's own turnaround: its send lag."""

    concurrency: int
    requests: int
    warmup: int = 0
    max_duration_s: float | None = None
    # The first round of warm-ups (one per user) cut to (u + 1) / N of max_tokens, so
    # users of equal-length requests leave lockstep before anything is measured.
    stagger_warmup: bool = False

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.requests < 0 or self.warmup < 0:
            raise ValueError("ClosedLoop needs concurrency >= 1, requests >= 0, warmup >= 0")

    def max_tokens_for(self, index: int, max_tokens: int) -> int:
        """Request `index`'s max_tokens: cut for a staggered first-round warm-up."""
        users = min(self.concurrency, self.warmup)
        if not self.stagger_warmup or index >= users or users < 2:
            return max_tokens
        return max(1, math.ceil(max_tokens * (index + 1) / users))

    @property
    def connections(self) -> int:
        return self.concurrency

    @property
    def total(self) -> int | None:
        return self.warmup + self.requests

    async def drive(self, issue: Issue, should_stop: ShouldStop) -> None:
        counter = itertools.count()
        total = self.warmup + self.requests
        deadline = None if self.max_duration_s is None else time.monotonic() + self.max_duration_s

        async def user(u: int) -> None:
            due = time.monotonic()
            while not should_stop():
                if deadline is not None and time.monotonic() >= deadline:
                    return
                i = next(counter)
                if i >= total:
                    return
                ended = await issue(i, due, u)
                due = ended if ended is not None else time.monotonic()

        await asyncio.gather(*(user(u) for u in range(self.concurrency)))


@dataclass
class OpenLoop:
    """Arrivals at `rate` per second, independent of completions (seeded).

    poisson: exponential gaps. gamma: gaps ~ Gamma(shape=burstiness, scale=1/(rate*b)),
    same mean rate; b < 1 is burstier, b = 1 is Poisson (vLLM bench's convention).
    At most `max_in_flight` requests are outstanding; later arrivals wait in the client,
    and that wait is their queueing delay.
    """

    rate: float
    requests: int | None = None
    duration_s: float | None = None
    arrival: Literal["poisson", "gamma"] = "poisson"
    burstiness: float = 1.0
    seed: int = 0
    warmup: int = 0
    max_in_flight: int = 256

    def __post_init__(self) -> None:
        if self.rate <= 0:
            raise ValueError("OpenLoop rate must be > 0")
        if self.requests is None and self.duration_s is None:
            raise ValueError("OpenLoop needs requests or duration_s")
        if self.arrival not in ("poisson", "gamma") or self.burstiness <= 0:
            raise ValueError("OpenLoop arrival must be poisson|gamma with burstiness > 0")

    @property
    def connections(self) -> int:
        return self.max_in_flight

    @property
    def total(self) -> int | None:
        return None if self.requests is None else self.warmup + self.requests

    def offsets(self) -> Iterator[float]:
        """Seconds after the cell's start at which each request is due."""
        rng = np.random.default_rng(self.seed)
        shape = 1.0 if self.arrival == "poisson" else self.burstiness
        t = 0.0
        for i in itertools.count():
            if self.total is not None and i >= self.total:
                return
            if self.duration_s is not None and t > self.duration_s:
                return
            yield t
            t += float(rng.gamma(shape, 1.0 / (self.rate * shape)))

    async def drive(self, issue: Issue, should_stop: ShouldStop) -> None:
        # Each request is handed to the driver READY_AHEAD_S before it is due; the driver
        # readies it and lets it leave at the scheduled instant (transport.SEND_NOT_BEFORE).
        start = time.monotonic() + READY_AHEAD_S
        tasks: list[asyncio.Task] = []
        for i, offset in enumerate(self.offsets()):
            due = start + offset
            delay = due - READY_AHEAD_S - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if should_stop():
                break
            tasks.append(asyncio.create_task(issue(i, due, None)))
        await asyncio.gather(*tasks)
