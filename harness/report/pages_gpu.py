"""GPU telemetry across the run: clocks, power and temperature each second, throttling
marked, and per cell the figures the cell table holds."""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.gpu import gpu_series
from harness.analysis.tables import Analysis
from harness.report.layout import empty_axes, new_page, save, table_lines, text_pages
from harness.rundir.verdict import Verdict

_SUBTITLE = (
    "NVML, sampled with the engine's metrics during every cell (each cell's"
    " measured attempt); red marks: a reading with a power, thermal or hardware"
    " slowdown reason (SW power cap, HW slowdown, HW/SW thermal, HW power brake)"
)


def gpu_pages(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    series = gpu_series(a.run)
    ok = series[series["ok"]]
    entry = a.run.manifest.gpu_telemetry
    if ok.empty:
        why = (
            entry.reason
            if entry is not None and not entry.recorded
            else "no cell of this run has a GPU reading"
        )
        return text_pages(pdf, "GPU telemetry", [why or "no GPU telemetry"], _SUBTITLE)
    fig = new_page("GPU telemetry across the run", _SUBTITLE)
    axes = fig.subplots(3, 1, sharex=True)
    fig.subplots_adjust(left=0.08, right=0.97, top=0.86, bottom=0.08, hspace=0.15)
    start = float(ok["wall_time"].min())
    minutes = (ok["wall_time"] - start) / 60.0
    clocks, power, temp = axes
    for gpu, rows in ok.groupby("gpu"):
        x = minutes[rows.index]
        clocks.plot(x, rows["sm_clock_mhz"], ".-", ms=2, lw=0.8, label=f"GPU {gpu} SM")
        clocks.plot(
            x, rows["mem_clock_mhz"], ".-", ms=2, lw=0.8, alpha=0.6, label=f"GPU {gpu} memory"
        )
        power.plot(x, rows["power_w"], ".-", ms=2, lw=0.8, label=f"GPU {gpu} draw")
        power.plot(x, rows["power_limit_w"], "--", lw=0.8, label=f"GPU {gpu} limit")
        temp.plot(x, rows["temperature_c"], ".-", ms=2, lw=0.8, label=f"GPU {gpu}")
        hot = rows[rows["throttled"]]
        for ax, column in ((clocks, "sm_clock_mhz"), (power, "power_w"), (temp, "temperature_c")):
            ax.plot(minutes[hot.index], hot[column], "x", color="#c62828", ms=5)
    _shade_cells(axes, ok, minutes)
    for ax, label in ((clocks, "clock (MHz)"), (power, "power (W)"), (temp, "temperature (C)")):
        ax.set_ylabel(label, fontsize=9)
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=7, loc="upper right", ncol=4)
        else:
            empty_axes(ax, "not reported by this GPU")
    temp.set_xlabel(
        "minutes since the run's first GPU reading (alternate shading: cells)", fontsize=9
    )
    save(pdf, fig)
    return 1 + _cell_table(pdf, a)


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


def _shade_cells(axes, ok, minutes) -> None:
    for _cell, lo, hi in alternate_cell_spans(ok, minutes):
        for ax in axes:
            ax.axvspan(lo, hi, color="#000000", alpha=0.05, lw=0)


def _cell_table(pdf: PdfPages, a: Analysis) -> int:
    return text_pages(pdf, "GPU telemetry per cell", gpu_cell_lines(a), CELL_SUBTITLE)


CELL_SUBTITLE = "clocks in MHz, power in W, temperature in C, utilization in %"


def gpu_cell_lines(a: Analysis) -> list[str]:
    """Per cell with GPU readings: clocks, power, temperature, throttling."""
    cells = a.cells[a.cells["gpu_samples"].fillna(0) > 0]
    rows = []
    for r in cells.itertuples():
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
