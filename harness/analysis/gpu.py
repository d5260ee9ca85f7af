"""GPU telemetry read back: each cell's columns in the cell table, and the run's series.

A cell without GPU samples (a host without NVML) has gpu_samples 0 and every other
gpu_ column empty: "not known", never "not throttled".
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.analysis.load import CellData, RunData
from harness.derived.throttle import THROTTLE_REASONS, gpu_throttle

GPU_COLUMNS = [
    "gpu_samples",
    "gpu_throttled",
    "gpu_throttle_reasons",
    "gpu_throttled_samples",
    "gpu_sm_clock_mhz_p50",
    "gpu_sm_clock_mhz_min",
    "gpu_power_w_p50",
    "gpu_power_w_max",
    "gpu_power_limit_w",
    "gpu_temperature_c_max",
    "gpu_util_pct_p50",
    "gpu_memory_used_mib_max",
    "gpu_gaps",
]

GPU_SERIES_COLUMNS = [
    "cell_id",
    "attempt",
    "wall_time",
    "t",
    "gpu",
    "uuid",
    "ok",
    "error",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "power_w",
    "power_limit_w",
    "temperature_c",
    "gpu_util_pct",
    "mem_util_pct",
    "memory_used_mib",
    "clock_events",
    "throttled",
]


def _stat(readings: list[float | None], how: str) -> float:
    values = [v for v in readings if v is not None and not math.isnan(v)]
    if not values:
        return math.nan
    if how == "p50":
        return float(np.median(values))
    return float({"max": max, "min": min}[how](values))


def gpu_columns(cell: CellData) -> dict:
    """The cell table's gpu_ columns for one cell's completed attempt."""
    readings = [r for s in cell.gpu_samples for r in s.gpus if r.ok]
    gaps = sum(1 for s in cell.gpu_samples if not s.ok)
    throttle = gpu_throttle(cell.gpu_samples)
    row: dict = dict.fromkeys(GPU_COLUMNS)
    row["gpu_samples"] = sum(1 for s in cell.gpu_samples if any(r.ok for r in s.gpus))
    row["gpu_gaps"] = gaps
    if throttle is None:
        return row
    row.update(
        gpu_throttled=throttle.throttled,
        gpu_throttle_reasons=";".join(throttle.reasons) or None,
        gpu_throttled_samples=throttle.throttled_ticks,
        gpu_sm_clock_mhz_p50=_stat([r.sm_clock_mhz for r in readings], "p50"),
        gpu_sm_clock_mhz_min=_stat([r.sm_clock_mhz for r in readings], "min"),
        gpu_power_w_p50=_stat([r.power_w for r in readings], "p50"),
        gpu_power_w_max=_stat([r.power_w for r in readings], "max"),
        gpu_power_limit_w=_stat([r.power_limit_w for r in readings], "max"),
        gpu_temperature_c_max=_stat([r.temperature_c for r in readings], "max"),
        gpu_util_pct_p50=_stat([r.gpu_util_pct for r in readings], "p50"),
        gpu_memory_used_mib_max=_stat([r.memory_used_mib for r in readings], "max"),
    )
    return row


def throttled_cells(run: RunData) -> list[dict]:
    """Every cell whose completed attempt saw the GPU throttle, with how, for the verdict."""
    out = []
    for cell in run.cells.values():
        throttle = gpu_throttle(cell.gpu_samples)
        if throttle is not None and throttle.throttled:
            out.append(
                {
                    "cell": cell.id,
                    "status": cell.status,
                    "reasons": list(throttle.reasons),
                    "throttled_samples": throttle.throttled_ticks,
                    "samples": throttle.ticks,
                    "gpus": list(throttle.gpus),
                    "summary": throttle.describe(),
                }
            )
    return out


def gpu_series(run: RunData) -> pd.DataFrame:
    """One row per GPU reading over the whole run (each cell's completed attempt), in time
    order: what the report's telemetry page plots."""
    rows = []
    for cell in run.cells.values():
        for s in cell.gpu_samples:
            for r in s.gpus:
                rows.append(
                    {
                        "cell_id": cell.id,
                        "attempt": s.attempt,
                        "wall_time": s.wall_time,
                        "t": s.t,
                        "gpu": r.index,
                        "uuid": r.uuid,
                        "ok": r.ok,
                        "error": r.error,
                        "sm_clock_mhz": r.sm_clock_mhz,
                        "mem_clock_mhz": r.mem_clock_mhz,
                        "power_w": r.power_w,
                        "power_limit_w": r.power_limit_w,
                        "temperature_c": r.temperature_c,
                        "gpu_util_pct": r.gpu_util_pct,
                        "mem_util_pct": r.mem_util_pct,
                        "memory_used_mib": r.memory_used_mib,
                        "clock_events": ";".join(r.clock_events),
                        "throttled": bool(set(r.clock_events) & set(THROTTLE_REASONS)),
                    }
                )
    frame = pd.DataFrame(rows, columns=GPU_SERIES_COLUMNS)
    return frame.sort_values("wall_time", kind="stable").reset_index(drop=True)
