"""Is the load generator itself distorting the measurement? Event-loop lag and CPU.

A probe thread sleeps to exact times (an hrtimer, not the loop's millisecond-rounded
epoll timeout) and at each scheduled instant wakes the loop through its self-pipe, as
a chunk's arrival would; the lag is how late the loop runs the probe's callback after
the scheduled instant. That is the delay a chunk stamp could suffer, whatever holds the
loop (parsing, GC, a busy CPU). A cell whose lag p99 passes the registered limit is
marked invalid, with the reason, so no verdict rests on it.
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import psutil

from harness.records import ClientHealth


class ClientHealthMonitor:
    def __init__(self, lag_limit_ms: float = 5.0, tick_s: float = 0.01) -> None:
        self.lag_limit_ms, self.tick_s = lag_limit_ms, tick_s
        self.lags_ms: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process = psutil.Process()

    def start(self) -> None:
        cpu = self._process.cpu_times()
        self._cpu0, self._t0 = cpu.user + cpu.system, time.monotonic()
        loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._probe, args=(loop,), daemon=True,
                                        name="specbench-lag-probe")
        self._thread.start()

    def _probe(self, loop: asyncio.AbstractEventLoop) -> None:
        due = time.monotonic() + self.tick_s
        while not self._stop.is_set():
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
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
            self.lags_ms.append(max(0.0, (time.monotonic() - due) * 1e3))

    async def stop(self) -> ClientHealth:
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 1.0)
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
