"""GPU telemetry across the run (views/gpu.py): clocks, power and temperature each second,
throttling marked, and per cell the figures the cell table holds."""

from __future__ import annotations

from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.tables import Analysis
from harness.report.layout import empty_axes, new_page, save, text_pages
from harness.report.views.gpu import build_gpu_view
from harness.rundir.verdict import Verdict


def gpu_pages(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    view = build_gpu_view(a, verdict)
    if view.why_none:
        return text_pages(pdf, view.title, [view.why_none], view.subtitle)
    fig = new_page(view.title, view.subtitle)
    axes = fig.subplots(3, 1, sharex=True)
    fig.subplots_adjust(left=0.08, right=0.97, top=0.86, bottom=0.08, hspace=0.15)
    clocks, power, temp = axes
    for t in view.traces:
        x, gpu = t.minutes, t.gpu
        clocks.plot(x, t.sm_clock_mhz, ".-", ms=2, lw=0.8, label=f"GPU {gpu} SM")
        clocks.plot(x, t.mem_clock_mhz, ".-", ms=2, lw=0.8, alpha=0.6, label=f"GPU {gpu} memory")
        power.plot(x, t.power_w, ".-", ms=2, lw=0.8, label=f"GPU {gpu} draw")
        power.plot(x, t.power_limit_w, "--", lw=0.8, label=f"GPU {gpu} limit")
        temp.plot(x, t.temperature_c, ".-", ms=2, lw=0.8, label=f"GPU {gpu}")
        for ax, figure in ((clocks, t.sm_clock_mhz), (power, t.power_w), (temp, t.temperature_c)):
            ax.plot(x[t.throttled], figure[t.throttled], "x", color="#c62828", ms=5)
    for _cell, lo, hi in view.cell_spans:
        for ax in axes:
            ax.axvspan(lo, hi, color="#000000", alpha=0.05, lw=0)
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
    return 1 + text_pages(pdf, view.cell_title, view.cell_lines, view.cell_subtitle)
