"""Why each speedup is what it is (views/decomposition.py): one page per speed task, its
four panels against users over its table."""

from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.tables import Analysis
from harness.report.layout import MONO, empty_axes, log2_axis, new_page, save
from harness.report.views.decomposition import DecompositionTask, build_decomposition_view
from harness.report.views.speedups import DECOMPOSITION_TITLES
from harness.rundir.verdict import Verdict

ROWS_ON_PAGE = 14


def decomposition_pages(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    view = build_decomposition_view(a, verdict)
    for task in view.tasks:
        _task_page(pdf, view.formula, task)
    return len(view.tasks)


def _task_page(pdf: PdfPages, formula: str, task: DecompositionTask) -> None:
    panel = task.panel
    fig = new_page(task.title, formula)
    grid = fig.add_gridspec(
        2,
        4,
        height_ratios=[1.35, 1.0],
        left=0.05,
        right=0.98,
        top=0.84,
        bottom=0.05,
        wspace=0.32,
        hspace=0.32,
    )
    axes = [fig.add_subplot(grid[0, j]) for j in range(4)]
    for drafter in panel.arms:
        c, arm, x = drafter.colour, drafter.arm, drafter.users
        speedup, cost = drafter.speedup, drafter.round_cost
        axes[0].plot(x, speedup.value, "o-", color=c, ms=4, label=f"{arm} measured")
        axes[0].fill_between(
            x.astype(float), speedup.lower, speedup.upper, color=c, alpha=0.15, lw=0
        )
        axes[0].plot(x, drafter.explained, "x", color=c, ms=7, label=f"{arm} explained")
        axes[0].plot(x, drafter.predicted, ":", color=c, lw=1.4, label=f"{arm} predicted")
        axes[1].plot(x, drafter.tokens_per_round, "o-", color=c, ms=4, label=f"{arm} client")
        axes[1].plot(
            x, drafter.engine_tokens_per_round, "d:", color=c, ms=4, label=f"{arm} engine 1+sum(p)"
        )
        axes[2].plot(x, drafter.round_time_ms, "o-", color=c, ms=4, label=f"{arm} round")
        axes[2].plot(
            x,
            drafter.baseline_step_ms,
            "s--",
            color="black",
            ms=3,
            lw=0.9,
            label="baseline step" if drafter is panel.arms[0] else None,
        )
        axes[3].plot(x, cost.value, "o-", color=c, ms=4, label=f"{arm} measured")
        axes[3].fill_between(x.astype(float), cost.lower, cost.upper, color=c, alpha=0.15, lw=0)
        axes[3].plot(x, drafter.predicted_round_cost, ":", color=c, lw=1.4, label=f"{arm} roofline")
    for ax, title in zip(axes, DECOMPOSITION_TITLES, strict=True):
        log2_axis(ax, panel.levels)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("concurrent users", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        drawn = [np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()]
        top = max((max(y) for y in drawn if len(y)), default=1.0)
        ax.set_ylim(0, float(top) * 1.15 if top and top == top else 1.0)
        if panel.empty:
            empty_axes(ax, "no usable speed cells")
        elif ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, frameon=False, loc="best")
    axes[0].axhline(1.0, color="black", lw=0.7)
    text = fig.add_subplot(grid[1, :])
    text.axis("off")
    lines = task.lines
    if len(lines) > ROWS_ON_PAGE + 8:  # the rest is in speedups.csv, never cut silently
        lines = lines[: ROWS_ON_PAGE + 7] + [
            f"... {len(lines) - ROWS_ON_PAGE - 7} more lines: speedups.csv has every row and note"
        ]
    text.text(
        0,
        1,
        "\n".join(lines),
        va="top",
        ha="left",
        fontdict={**MONO, "size": 7},
        transform=text.transAxes,
        linespacing=1.3,
    )
    save(pdf, fig)
