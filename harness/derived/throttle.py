"""Did the GPU throttle during a cell? Read from the cell's GPU samples (gpu.jsonl).

A cell is throttled when any reading of any of its GPUs, over the whole attempt (the
warm-up too: it is the state the measurement starts from), reports a clock-event
reason that slows the GPU for power, heat or a hardware signal. Idle, application or
user clock settings, sync boost and display clocks are the GPU doing as configured,
and are recorded but never flag a cell. Whether a throttled cell is only flagged or
measured again is the study's `recording.gpu_throttle` (harness.derived.usable).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.records import GpuSample

THROTTLE_REASONS = ("sw_power_cap", "hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake")


@dataclass(frozen=True)
class GpuThrottle:
    """A cell's throttling: over its ticks with at least one reading."""

    ticks: int
    throttled_ticks: int
    reasons: tuple[str, ...]  # every counted reason seen, in THROTTLE_REASONS order
    gpus: tuple[int, ...]  # the NVML indices that reported one

    @property
    def throttled(self) -> bool:
        return self.throttled_ticks > 0

    def describe(self) -> str:
        where = ", ".join(f"GPU {g}" for g in self.gpus)
        return (
            f"{'/'.join(self.reasons)} in {self.throttled_ticks} of {self.ticks} samples ({where})"
        )


def gpu_throttle(samples: Sequence[GpuSample]) -> GpuThrottle | None:
    """None when the cell has no GPU readings (no telemetry on the host)."""
    ticks = throttled = 0
    reasons: set[str] = set()
    gpus: set[int] = set()
    for sample in samples:
        readings = [r for r in sample.gpus if r.ok]
        if not readings:
            continue
        ticks += 1
        hit = False
        for reading in readings:
            counted = set(reading.clock_events) & set(THROTTLE_REASONS)
            if counted:
                hit = True
                reasons |= counted
                gpus.add(reading.index)
        throttled += hit
    if ticks == 0:
        return None
    return GpuThrottle(
        ticks, throttled, tuple(r for r in THROTTLE_REASONS if r in reasons), tuple(sorted(gpus))
    )
