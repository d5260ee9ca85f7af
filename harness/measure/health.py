"""Is the load generator itself distorting the measurement? Lag and CPU.

Three things can put the client into what it measures, and each is measured per cell:
- the **stamp lag**: how late an arrival is stamped. A probe thread writes into a
  loopback connection the stream reader waits on like any chunk, stamped the same way
  (`arrival_stamps.StampPathProbe`); the stamp's delay is the delay any chunk stamp could
  carry. With the kernel's receive stamps it stays near zero however busy the client
  is; on the fallback (the reader thread's clock) it is the wait for a CPU and the GIL;
- the **stamp bound**: a client that falls a whole engine step behind reads two chunks
  of a stream at once, and both get the later one's stamp; per chunk, how late its
  stamp could be for that reason (`stamp_bounds`, zero for a client that keeps up).
  Judged on each request's first output chunk, the one stamp of a figure that can be
  late (the end's is its read's last segment: exact); over all chunks it is reported;
- the **send lag**: how late each request left against when the load pattern wanted
  it, less any wait for a free connection slot (that wait is client queueing, part of
  the load, and reported as such). In an open loop a late send shifts the registered
  arrival process and sits inside TTFT and latency, which run from the schedule, so it
  is judged. In a closed loop it is the client's turnaround between one request's end
  and its user's next send: reported, not judged, because closed-loop latency runs
  from the send; what a closed loop's turnaround distorts is the load itself, below;
- the **delivered load** (closed loop): the time-averaged requests in flight over the
  measured window against the registered users, and the user turnaround (a request's
  end to its user's next send) p50/p99/max (`delivered.py`). A user that idles between
  requests leaves the engine with fewer than N: per-user speed flatters, TTFT rises.
A cell where a judged p99 passes the registered limit, or whose delivered concurrency
falls below the registered share of its users, is marked invalid, with the reason, so
no verdict rests on it. The event loop's own wake-up lag (the probe also
wakes it through its self-pipe) is reported beside them: it is what send lag comes from.
A speed cell is also invalid when more than the registered share of its measured
requests arrived in bursts (`bursts`: most of a request's tokens from several steps
under one stamp; one drafter round is one step), since those requests have no per-user
speed.
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import psutil

from harness.measure.arrival_stamps import StampPathProbe
from harness.measure.delivered import Span, delivered_load
from harness.records import ClientHealth


class ClientHealthMonitor:
    def __init__(
        self,
        lag_limit_ms: float = 5.0,
        tick_s: float = 0.01,
        judge_send_lag: bool = True,
        concurrency: int | None = None,
        min_delivered_share: float = 0.97,
        burst_limit: float | None = None,
        judge_timing: bool = True,
    ) -> None:
        self.lag_limit_ms, self.tick_s = lag_limit_ms, tick_s
        self.judge_send_lag = judge_send_lag
        # Closed loop: the registered users, whose delivered load is judged.
        self.concurrency, self.min_delivered_share = concurrency, min_delivered_share
        self.spans: list[Span] = []
        self.burst_limit = burst_limit  # None: bursts are counted, not judged
        # False for cells read for their texts or scores (identity, accuracy): a late
        # stamp changes no figure of theirs, so it is reported, never a reason to redo them.
        self.judge_timing = judge_timing
        self.requests_seen = self.requests_burst = 0
        self.loop_lags_ms: list[float] = []
        self.send_lags_ms: list[float] = []
        self.stamp_bounds_ms: list[float] = []
        self.first_token_bounds_ms: list[float] = []  # each measured request's first output chunk
        self._stamp_probe: StampPathProbe | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._process = psutil.Process()

    def start(self) -> None:
        cpu = self._process.cpu_times()
        self._cpu0, self._t0 = cpu.user + cpu.system, time.monotonic()
        loop = asyncio.get_running_loop()
        probe = self._stamp_probe = StampPathProbe()
        reader = probe.reader
        self._stamped0 = (reader.kernel_stamped, reader.thread_stamped)
        if probe.in_loop:
            # The loop reads (and the kernel stamps) every stream: its own timer ticks,
            # with no second thread to wake 100 times a second and take the GIL (on a
            # starved host each such hand-over waits for the scheduler once more).
            due = time.monotonic() + self.tick_s
            self._timer = loop.call_at(due, self._tick_in_loop, loop, due, probe)
            return
        self._thread = threading.Thread(
            target=self._probe, args=(loop, probe), daemon=True, name="specbench-lag-probe"
        )
        self._thread.start()

    def _tick_in_loop(
        self, loop: asyncio.AbstractEventLoop, due: float, probe: StampPathProbe
    ) -> None:
        if self._stop.is_set():
            return
        now = time.monotonic()  # the loop's clock: asyncio's loop.time() is monotonic
        self.loop_lags_ms.append(max(0.0, (now - due) * 1e3))
        probe.tick(due)
        due += self.tick_s
        if due < now:  # held up: resume from now, no burst of catch-up ticks
            due = now + self.tick_s
        self._timer = loop.call_at(due, self._tick_in_loop, loop, due, probe)

    def _probe(self, loop: asyncio.AbstractEventLoop, probe: StampPathProbe) -> None:
        due = time.monotonic() + self.tick_s
        while not self._stop.is_set():
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            probe.tick(due)
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

    def request_sent(self, late_s: float) -> None:
        """A request left late_s after it was due, not counting a wait for a slot."""
        self.send_lags_ms.append(max(0.0, late_s * 1e3))

    def request_done(self, span: Span) -> None:
        """A request ended (warm-ups too: they are load while they run)."""
        self.spans.append(span)

    def chunks_received(self, bounds_s: list[float]) -> None:
        """A measured request's chunks: how late each one's stamp could be."""
        self.stamp_bounds_ms.extend(b * 1e3 for b in bounds_s)
        if bounds_s:
            self.first_token_bounds_ms.append(bounds_s[0] * 1e3)

    def request_received(self, burst: bool) -> None:
        """A measured, successful request; burst: most of its tokens came from several
        steps under one stamp (harness.derived.bursts)."""
        self.requests_seen += 1
        self.requests_burst += burst

    def _bursts(self) -> tuple[float | None, str | None]:
        """The burst share and, when it passes the registered limit, why the cell is invalid."""
        if not self.requests_seen:
            return None, None
        share = self.requests_burst / self.requests_seen
        if self.burst_limit is None or share <= self.burst_limit:
            return share, None
        return share, (
            f"{self.requests_burst}/{self.requests_seen} requests arrived in bursts"
            f" (most tokens from several steps under one stamp): share {share:.2f}"
            f" passes the limit {self.burst_limit:g}, so the cell has too few"
            " per-user speeds"
        )

    @property
    def lags_ms(self) -> list[float]:
        return self._stamp_probe.lags_ms if self._stamp_probe is not None else []

    async def stop(self) -> ClientHealth:
        self._stop.set()
        if self._timer is not None:
            self._timer.cancel()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 1.0)
        cpu = self._process.cpu_times()
        wall = max(1e-9, time.monotonic() - self._t0)
        cpu_percent = 100.0 * (cpu.user + cpu.system - self._cpu0) / wall
        kernel_fraction = None
        if self._stamp_probe is not None:
            await asyncio.sleep(2 * self.tick_s)  # let the last ticks be stamped
            self._stamp_probe.close()
            reader = self._stamp_probe.reader
            kernel = reader.kernel_stamped - self._stamped0[0]
            thread = reader.thread_stamped - self._stamped0[1]
            kernel_fraction = kernel / (kernel + thread) if kernel + thread else None
        lags = np.asarray(self.lags_ms or [0.0])
        p50, p99, worst = (
            float(np.percentile(lags, 50)),
            float(np.percentile(lags, 99)),
            float(lags.max()),
        )
        loop_p99 = float(np.percentile(self.loop_lags_ms, 99)) if self.loop_lags_ms else None
        send_p99 = float(np.percentile(self.send_lags_ms, 99)) if self.send_lags_ms else None
        bound_p99 = float(np.percentile(self.stamp_bounds_ms, 99)) if self.stamp_bounds_ms else None
        first_p99 = (
            float(np.percentile(self.first_token_bounds_ms, 99))
            if self.first_token_bounds_ms
            else None
        )
        problems = []
        if p99 > self.lag_limit_ms:
            problems.append(f"client stamp lag p99 {p99:.2f} ms")
        # Judged on the stamps that enter a figure. TTFT and per-user speed read a
        # request's first output chunk and its end; the end is the last segment of its
        # read, whose kernel stamp is its arrival, so only the first chunk's can be late.
        # A pair read together mid-stream (a client a step behind, or a server that wrote
        # two steps back to back: the stamps cannot tell) moves no figure; it is reported
        # (stamp_bound_p99_ms, over every chunk) and distorts only the ITL column.
        if first_p99 is not None and first_p99 > self.lag_limit_ms:
            problems.append(
                f"first tokens read together with the next, first-token stamp"
                f" bound p99 {first_p99:.2f} ms"
            )
        if self.judge_send_lag and send_p99 is not None and send_p99 > self.lag_limit_ms:
            problems.append(f"client send lag p99 {send_p99:.2f} ms")
        load = delivered_load(self.spans) if self.concurrency is not None else None
        if load is not None and (load.turnaround_p99_ms or 0.0) > self.lag_limit_ms:
            problems.append(f"user turnaround p99 {load.turnaround_p99_ms:.2f} ms")
        parts = (
            [f"{' and '.join(problems)} exceeds the limit {self.lag_limit_ms:g} ms"]
            if problems
            else []
        )
        share = None
        if load is not None and load.concurrency is not None and self.concurrency:
            share = load.concurrency / self.concurrency
            if share < self.min_delivered_share:
                parts.append(
                    f"delivered concurrency {load.concurrency:.2f} of "
                    f"{self.concurrency} users ({share:.1%}) is below the registered "
                    f"{self.min_delivered_share:.0%}"
                )
        if not self.judge_timing:
            parts = []
        valid = not parts
        reason = (
            None
            if valid
            else (
                f"{'; '.join(parts)} (client CPU {cpu_percent:.0f}%): the load generator may have"
                " distorted timings"
            )
        )
        bursts, burst_reason = self._bursts()
        if burst_reason:
            valid, reason = False, "; ".join(r for r in (reason, burst_reason) if r)
        return ClientHealth(
            lag_p50_ms=p50,
            lag_p99_ms=p99,
            lag_max_ms=worst,
            cpu_percent=cpu_percent,
            lag_limit_ms=self.lag_limit_ms,
            valid=valid,
            reason=reason,
            loop_lag_p99_ms=loop_p99,
            send_lag_p99_ms=send_p99,
            stamp_bound_p99_ms=bound_p99,
            first_token_bound_p99_ms=first_p99,
            kernel_stamped_fraction=kernel_fraction,
            registered_concurrency=self.concurrency,
            delivered_concurrency=load.concurrency if load else None,
            delivered_share=share,
            min_delivered_share=(
                self.min_delivered_share if self.concurrency is not None else None
            ),
            turnaround_p50_ms=load.turnaround_p50_ms if load else None,
            turnaround_p99_ms=load.turnaround_p99_ms if load else None,
            turnaround_max_ms=load.turnaround_max_ms if load else None,
            burst_share=bursts,
            burst_limit=self.burst_limit,
            timing_judged=self.judge_timing,
        )
