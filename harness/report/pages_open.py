"""Open loop (views/open_loop.py): the latency objective against offered rate, and the fleet
figure."""

from __future__ import annotations

import math

from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.tables import Analysis
from harness.report.layout import empty_axes, new_page, save
from harness.report.views.open_loop import build_open_loop_view
from harness.rundir.verdict import Verdict


def open_loop_page(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    view = build_open_loop_view(a, verdict)
    fig = new_page(view.title, view.subtitle)
    if not view.registered:
        save(pdf, fig)
        return 1
    groups = view.groups
    grid = fig.subplots(
        2, max(1, len(groups)), squeeze=False, sharex="col", gridspec_kw={"height_ratios": [2, 1]}
    )
    axes, queue_axes = grid[0], grid[1]
    fig.subplots_adjust(left=0.07, right=0.98, top=0.84, bottom=0.40, wspace=0.25, hspace=0.08)
    for ax, qax, (baseline, curves) in zip(axes, queue_axes, groups.items(), strict=True):
        for c in curves:
            y = [v if math.isfinite(v) else float("nan") for v in c.objective_s]
            ax.plot(c.rate_rps, y, "o-", color=c.colour, label=c.arm, ms=4)
        ax.axhline(
            view.max_s, color="#c62828", ls="--", lw=1, label=f"objective ({view.max_s:g} s)"
        )
        ax.set_title(f"engine group: {baseline}", fontsize=11)
        ax.set_ylabel(f"{view.objective} (s)")
        ax.grid(alpha=0.3)
        if curves:
            ax.legend(fontsize=8, loc="upper left")
        else:
            empty_axes(ax, "no usable open-loop cells")
        for c in curves:
            qax.plot(c.rate_rps, c.queue_p99_s, "o-", color=c.colour, ms=3)
        qax.set_xlabel("offered rate (requests/s)")
        qax.set_ylabel("client queueing\np99 (s)", fontsize=8)
        qax.grid(alpha=0.3)
    fig.text(
        0.03,
        0.32,
        "\n".join(view.fleet_lines),
        va="top",
        ha="left",
        fontdict={"family": "monospace", "size": 8},
        linespacing=1.35,
    )
    save(pdf, fig)
    return 1
