"""What the GPU telemetry section shows: the run's clock, power and temperature readings,
the cells' shading, why there are none, and per cell the figures the cell table holds."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.analysis.gpu import gpu_series
from harness.analysis.tables import Analysis
from harness.report.layout import table_lines
from harness.rundir.verdict import Verdict


@dataclass(frozen=True)
class GpuTrace:
    """One GPU's usable readings across the run, in time order (a figure it did not report
    is NaN)."""

    gpu: int
    minutes: np.ndarray  # since the run's first reading
    sm_clock_mhz: np.ndarray
    mem_clock_mhz: np.ndarray
    power_w: np.ndarray
    power_limit_w: np.ndarray
    temperature_c: np.ndarray
    cells: tuple[str, ...]  # the cell each reading was taken in
    throttled: np.ndarray  # bool: taken with a power, thermal or hardware slowdown reason


@dataclass(frozen=True)
class GpuView:
    title: str
    subtitle: str
    why_none: str  # why there is no reading to draw; "" when there are
    traces: list[GpuTrace]  # one a GPU, by its index
    cell_spans: list[tuple[str, float, float]]  # the shading: every other cell
    cell_title: str
    cell_subtitle: str
    cell_lines: list[str]


def build_gpu_view(a: Analysis, v: Verdict) -> GpuView:
    series = gpu_series(a.run)
    ok = series[series["ok"]]
    entry = a.run.manifest.gpu_telemetry
    why = ""
    if ok.empty:
        why = (
            entry.reason
            if entry is not None and not entry.recorded
            else "no cell of this run has a GPU reading"
        ) or "no GPU telemetry"
    minutes = (ok["wall_time"] - float(ok["wall_time"].min())) / 60.0 if not why else pd.Series()
    return GpuView(
        "GPU telemetry" if why else "GPU telemetry across the run",
        "NVML, sampled with the engine's metrics during every cell (each cell's"
        " measured attempt); red marks: a reading with a power, thermal or hardware"
        " slowdown reason (SW power cap, HW slowdown, HW/SW thermal, HW power brake)",
        why,
        gpu_traces(ok, minutes) if not why else [],
        alternate_cell_spans(ok, minutes) if not why else [],
        "GPU telemetry per cell",
        "clocks in MHz, power in W, temperature in C, utilization in %",
        gpu_cell_lines(a),
    )


def gpu_traces(ok: pd.DataFrame, minutes: pd.Series) -> list[GpuTrace]:
    """The usable readings (analysis.gpu.gpu_series) one GPU a trace."""

    def figure(rows: pd.DataFrame, name: str) -> np.ndarray:
        return rows[name].to_numpy(dtype=float)

    return [
        GpuTrace(
            int(gpu),
            minutes[rows.index].to_numpy(dtype=float),
            figure(rows, "sm_clock_mhz"),
            figure(rows, "mem_clock_mhz"),
            figure(rows, "power_w"),
            figure(rows, "power_limit_w"),
            figure(rows, "temperature_c"),
            tuple(str(c) for c in rows["cell_id"]),
            rows["throttled"].to_numpy(dtype=bool),
        )
        for gpu, rows in ok.groupby("gpu")
    ]


def alternate_cell_spans(ok: pd.DataFrame, minutes: pd.Series) -> list[tuple[str, float, float]]:
    """Every other cell's (id, first, last reading in minutes), in the readings' order: the
    shading that tells one cell from the next (the PDF page and the HTML figure)."""
    spans = []
    for i, (cell, rows) in enumerate(ok.groupby("cell_id", sort=False)):
        if i % 2:
            spans.append(
                (str(cell), float(minutes[rows.index].min()), float(minutes[rows.index].max()))
            )
    return spans


def gpu_cell_lines(a: Analysis) -> list[str]:
    """Per cell with GPU readings: clocks, power, temperature, throttling."""
    rows = []
    for r in (r for r in a.cell_rows() if r.gpu_samples > 0):
        rows.append(
            [
                r.cell_id,
                r.status,
                int(r.gpu_samples),
                r.gpu_sm_clock_mhz_p50,
                r.gpu_sm_clock_mhz_min,
                r.gpu_power_w_p50,
                r.gpu_power_w_max,
                r.gpu_power_limit_w,
                r.gpu_temperature_c_max,
                r.gpu_util_pct_p50,
                _flag(r.gpu_throttled, r.gpu_throttle_reasons, r.gpu_throttled_samples),
            ]
        )
    policy = a.run.study.recording.gpu_throttle
    lines = [
        f"recording.gpu_throttle: {policy} ("
        + (
            "a timed cell measured while the GPU throttled was measured again within"
            " cell_retries, and is invalid if it still throttled)"
            if policy == "remeasure"
            else "a cell measured while the GPU throttled is flagged and still used)"
        ),
        "",
    ]
    lines += table_lines(
        [
            "cell",
            "status",
            "samples",
            "SM p50",
            "SM min",
            "W p50",
            "W max",
            "W limit",
            "C max",
            "util p50",
            "throttled",
        ],
        rows,
    )
    return lines


def _flag(throttled, reasons, n) -> str:
    if throttled is None or (isinstance(throttled, float) and math.isnan(throttled)):
        return "-"
    return f"YES: {reasons} ({int(n)})" if bool(throttled) else "no"
