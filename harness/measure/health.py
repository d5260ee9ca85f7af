"""Is the load generator itself distorting the measurement? Lag and CPU.

A probe thread sleeps to exact times (an hrtimer, not the loop's millisecond-rounded
epoll timeout) and at each due time:
- writes the due time into a socket the stream reader thread waits on, like any chunk;
  how late the reader stamps it is the **lag**: the delay any chunk stamp could carry
  (GIL, garbage collection, a busy CPU). A cell whose lag p99 passes the registered
  limit is marked invalid, with the reason, so no verdict rests on it;
- wakes the event loop through its self-pipe; how late the loop runs the callback is
  the **loop lag**, reported beside it: it delays sends (open loop: recorded as client
  queueing) and parsing, but no longer the stamps.
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import psutil

from harness.measure.transport import StampPathProbe
from harness.records import ClientHealth


class ClientHealthMonitor:
    def __init__(self, lag_limit_ms: float = 5.0, tick_s: float = 0.01) -> None:
        self.lag_limit_ms, self.tick_s = lag_limit_ms, tick_s
        self.loop_lags_ms: list[float] = []
        self._stamp_probe: StampPathProbe | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process = psutil.Process()

    def start(self) -> None:
        cpu = self._process.cpu_times()
        self._cpu0, self._t0 = cpu.user + cpu.system, time.monotonic()
        loop = asyncio.get_running_loop()
        self._stamp_probe = StampPathProbe()
        self._thread = threading.Thread(target=self._probe, args=(loop,), daemon=True,
                                        name="specbench-lag-probe")
        self._thread.start()

    def _probe(self, loop: asyncio.AbstractEventLoop) -> None:
        due = time.monotonic() + self.tick_s
        while not self._stop.is_set():
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._stamp_probe.tick(due)
            try:
                loop.call_soon_threadsafe(self._on_tick, due)
            except RuntimeError:  # the loop closed under us
                return
            now = time.monotonic()
            due += self.tick_s
            if due < now:  # the probe itself was held up: resume from now, no burst
                due = now + self.tick_s

    def _on_tick(self, due: float) -> None:
        if not self._stop.is_set():
            self.loop_lags_ms.append(max(0.0, (time.monotonic() - due) * 1e3))

    @property
    def lags_ms(self) -> list[float]:
        return self._stamp_probe.lags_ms if self._stamp_probe is not None else []

    async def stop(self) -> ClientHealth:
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 1.0)
        cpu = self._process.cpu_times()
        wall = max(1e-9, time.monotonic() - self._t0)
        cpu_percent = 100.0 * (cpu.user + cpu.system - self._cpu0) / wall
        if self._stamp_probe is not None:
            await asyncio.sleep(2 * self.tick_s)  # let the last ticks be stamped
            self._stamp_probe.close()
        lags = np.asarray(self.lags_ms or [0.0])
        p50, p99, worst = (float(np.percentile(lags, 50)), float(np.percentile(lags, 99)),
                           float(lags.max()))
        loop_p99 = float(np.percentile(self.loop_lags_ms, 99)) if self.loop_lags_ms else None
        valid = p99 <= self.lag_limit_ms
        reason = None if valid else (
            f"client stamp lag p99 {p99:.2f} ms exceeds the limit {self.lag_limit_ms:g} ms "
            f"(client CPU {cpu_percent:.0f}%): the load generator may have distorted timings")
        return ClientHealth(lag_p50_ms=p50, lag_p99_ms=p99, lag_max_ms=worst,
                            cpu_percent=cpu_percent, lag_limit_ms=self.lag_limit_ms,
                            valid=valid, reason=reason, loop_lag_p99_ms=loop_p99)
