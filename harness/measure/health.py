"""Is the load generator itself distorting the measurement? Event-loop lag and CPU.

A ticker asks to wake every `tick_s`; how late it actually wakes is the lag every
stamp taken on this loop could suffer. A cell whose lag p99 passes the registered
limit is marked invalid, with the reason, so no verdict rests on it.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import psutil

from harness.records import ClientHealth


class ClientHealthMonitor:
    def __init__(self, lag_limit_ms: float = 5.0, tick_s: float = 0.01) -> None:
        self.lag_limit_ms, self.tick_s = lag_limit_ms, tick_s
        self.lags_ms: list[float] = []
        self._task: asyncio.Task | None = None
        self._process = psutil.Process()

    def start(self) -> None:
        cpu = self._process.cpu_times()
        self._cpu0, self._t0 = cpu.user + cpu.system, time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        due = time.monotonic() + self.tick_s
        while True:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            now = time.monotonic()
            self.lags_ms.append(max(0.0, (now - due) * 1e3))
            due += self.tick_s
            if due < now:  # after a long stall, measure from now on rather than burst
                due = now + self.tick_s

    async def stop(self) -> ClientHealth:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        cpu = self._process.cpu_times()
        wall = max(1e-9, time.monotonic() - self._t0)
        cpu_percent = 100.0 * (cpu.user + cpu.system - self._cpu0) / wall
        lags = np.asarray(self.lags_ms or [0.0])
        p50, p99, worst = (float(np.percentile(lags, 50)), float(np.percentile(lags, 99)),
                           float(lags.max()))
        valid = p99 <= self.lag_limit_ms
        reason = None if valid else (
            f"client event-loop lag p99 {p99:.2f} ms exceeds the limit {self.lag_limit_ms:g} ms "
            f"(client CPU {cpu_percent:.0f}%): the load generator may have distorted timings")
        return ClientHealth(lag_p50_ms=p50, lag_p99_ms=p99, lag_max_ms=worst,
                            cpu_percent=cpu_percent, lag_limit_ms=self.lag_limit_ms,
                            valid=valid, reason=reason)
