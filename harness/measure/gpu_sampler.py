"""Sample an engine's GPUs during a cell, on the same monotonic grid as the metrics scraper.

NVML calls block (a reading is eight library calls per GPU), so they run in a thread
of their own, never on the client's event loop: ctypes lets go of the GIL for each
foreign call, so the loop waits at most for the binding's few Python lines per call.
Tick k is due at start + k * interval whatever earlier ticks cost; a tick the thread
was held past (a slow NVML call) becomes a recorded gap, and stopping takes one last
reading off the grid (final=True), as the scraper does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from harness.measure.gpu import Gpu, Nvml
from harness.records import GpuReading, GpuSample


def read_gpus(nvml: Nvml, gpus: Sequence[Gpu]) -> list[GpuReading]:
    """One reading per GPU. Anything a reading raises is that GPU's gap, so a binding
    that misbehaves costs a sample, never the cell."""
    out = []
    for gpu in gpus:
        try:
            out.append(GpuReading.model_validate(nvml.read(gpu)))
        except Exception as err:  # the sampler must outlive any fault of the binding
            out.append(
                GpuReading(
                    index=gpu.index, uuid=gpu.uuid, ok=False, error=f"{type(err).__name__}: {err}"
                )
            )
    return out


class GpuSampler:
    """A thread that samples `gpus` every `interval_s` until stopped; each sample goes to
    `on_sample` (from the sampler's thread) until stop() returns, never after."""

    def __init__(
        self,
        *,
        nvml: Nvml,
        gpus: Sequence[Gpu],
        interval_s: float,
        cell_id: str,
        attempt: int,
        on_sample: Callable[[GpuSample], None],
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self._nvml, self._gpus, self._interval = nvml, list(gpus), interval_s
        self._cell_id, self._attempt = cell_id, attempt
        self._on_sample = on_sample
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._open = True
        self._thread = threading.Thread(
            target=self._run, name=f"gpu-sampler {cell_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop, wait for the final sample (bounded: a hung NVML call is left behind)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s if timeout_s is not None else self._interval * 5 + 5)
        with self._lock:
            self._open = False

    def _emit(self, sample: GpuSample) -> None:
        with self._lock:
            if self._open:
                self._on_sample(sample)

    def _sample(self, due: float, final: bool = False) -> GpuSample:
        wall = time.time() - (time.monotonic() - due)
        began = time.monotonic()
        readings = read_gpus(self._nvml, self._gpus)
        return GpuSample(
            cell_id=self._cell_id,
            attempt=self._attempt,
            t=due,
            wall_time=wall,
            took_s=time.monotonic() - began,
            ok=all(r.ok for r in readings),
            gpus=readings,
            final=final,
        )

    def _run(self) -> None:
        start = time.monotonic()
        k = 0
        while not self._stop.is_set():
            due = start + k * self._interval
            wait = due - time.monotonic()
            if wait > 0 and self._stop.wait(wait):
                break  # stopped while waiting for the tick
            now = time.monotonic()
            missed = int((now - due) // self._interval)
            for j in range(missed):  # held up past whole ticks: gaps, not shifted ticks
                skipped = due + j * self._interval
                self._emit(
                    GpuSample(
                        cell_id=self._cell_id,
                        attempt=self._attempt,
                        t=skipped,
                        wall_time=time.time() - (now - skipped),
                        ok=False,
                        error="GPU tick missed (the previous NVML reading ran past it)",
                    )
                )
            k += missed
            self._emit(self._sample(start + k * self._interval))
            k += 1
        self._emit(self._sample(time.monotonic(), final=True))
