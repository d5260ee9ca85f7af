"""A client process's own CPU time and wake-up lags, measured the same way in both tools.

Standard library only: peer_parity.py runs it inside specbench's process and inside
`vllm bench serve` (in the engine's environment). Two probes:
- the event loop's wake-up lag: a task that sleeps 10 ms and records how late it woke
  (what a send waits for);
- a thread's wake-up lag: a thread that sleeps 10 ms and records how late it runs again
  (a CPU for the process, then the GIL: what the reader thread's stamps wait for);
and from the kernel's scheduler statistics, the share of the time the process's threads
were runnable but waited for a CPU, and how many time slices they got a second
(and per thread: peer_parity prints them with --threads).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

LOOP_TICK_S = 0.010
THREAD_TICK_S = 0.010


def _schedstat() -> tuple[int, int, int]:
    """(ns on a CPU, ns runnable but waiting for one, time slices), summed over this
    process's threads (/proc/PID/task/*/schedstat; zeros where there is none)."""
    totals = [0, 0, 0]
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return (0, 0, 0)
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as fh:
                values = [int(v) for v in fh.read().split()[:3]]
        except (OSError, ValueError):
            continue
        totals = [a + b for a, b in zip(totals, values, strict=False)]
    return tuple(totals)


def _p99(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def _per_thread() -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as fh:
                name = f"{tid}:{fh.read().strip()}"
            with open(f"/proc/self/task/{tid}/schedstat") as fh:
                out[name] = [int(v) for v in fh.read().split()[:3]]
        except (OSError, ValueError):
            continue
    return out


def _sched_fields() -> str:
    try:
        with open("/proc/self/sched") as fh:
            lines = fh.read().splitlines()
        with open("/proc/self/autogroup") as fh:
            group = fh.read().strip()
    except OSError:
        return ""
    keep = [
        ln.split(":")[0].strip() + "=" + ln.split(":")[1].strip()
        for ln in lines
        if ln.split(":")[0].strip() in ("policy", "prio", "se.load.weight")
    ]
    return " ".join(keep) + f" group={group} nice={os.getpriority(os.PRIO_PROCESS, 0)}"


class LagProbes:
    def __init__(self) -> None:
        self.loop_lags_ms: list[float] = []
        self.thread_lags_ms: list[float] = []
        self._stop = threading.Event()
        self._task: asyncio.Task | None = None
        self._thread: threading.Thread | None = None
        self._cpu0 = self._wall0 = 0.0

    def start(self) -> None:
        """Call inside the running loop the client uses."""
        self._cpu0, self._wall0 = time.process_time(), time.monotonic()
        self._sched0 = _schedstat()
        self._threads0 = _per_thread()
        self._thread = threading.Thread(target=self._sleeper, name="lag-probe", daemon=True)
        self._thread.start()
        self._task = asyncio.get_running_loop().create_task(self._loop_probe())

    def stop(self) -> dict[str, float | None]:
        cpu, wall = time.process_time() - self._cpu0, time.monotonic() - self._wall0
        sched = [b - a for a, b in zip(self._sched0, _schedstat(), strict=True)]
        threads = {}
        for name, now in _per_thread().items():
            was = self._threads0.get(name, [0, 0, 0])
            d = [b - a for a, b in zip(was, now, strict=True)]
            if d[2]:  # threads that ran at all in the window
                threads[name] = (
                    f"cpu {d[0] / 1e9 / wall:.3f} runq {d[1] / 1e9 / wall:.3f}"
                    f" slices/s {d[2] / wall:.1f}"
                )
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
        if self._thread is not None:
            self._thread.join(1.0)
        return {
            "cpu_share": cpu / wall if wall > 0 else None,
            # Runnable, waiting for a CPU: the scheduler's doing, not the client's.
            "runq_wait_share": sched[1] / 1e9 / wall if wall > 0 else None,
            "slices_per_s": sched[2] / wall if wall > 0 else None,
            "cpus": float(len(os.sched_getaffinity(0))),
            "sched": _sched_fields(),
            "threads": threads,
            "loop_lag_p99_ms": _p99(self.loop_lags_ms),
            "thread_lag_p99_ms": _p99(self.thread_lags_ms),
        }

    async def _loop_probe(self) -> None:
        while True:
            due = time.monotonic() + LOOP_TICK_S
            await asyncio.sleep(LOOP_TICK_S)
            self.loop_lags_ms.append(max(0.0, time.monotonic() - due) * 1e3)

    def _sleeper(self) -> None:
        while not self._stop.is_set():
            due = time.monotonic() + THREAD_TICK_S
            time.sleep(THREAD_TICK_S)
            self.thread_lags_ms.append(max(0.0, time.monotonic() - due) * 1e3)


def instrument_asyncio_run(out_path: str) -> None:
    """Wrap asyncio.run so the coroutine it runs (vllm bench's whole benchmark) is
    probed, and write the figures to `out_path` when it ends."""
    original = asyncio.run

    def run(main, **kwargs):
        async def probed():
            probes = LagProbes()
            probes.start()
            try:
                return await main
            finally:
                with open(out_path, "w") as fh:
                    json.dump(probes.stop(), fh)

        return original(probed(), **kwargs)

    asyncio.run = run


if os.environ.get("SPECBENCH_LAG_PROBES_OUT"):
    instrument_asyncio_run(os.environ["SPECBENCH_LAG_PROBES_OUT"])
