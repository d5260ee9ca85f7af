"""Accuracy (views/accuracy.py): each arm's accuracy with its interval, then the paired
comparisons."""

from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.tables import Analysis
from harness.report.layout import empty_axes, new_page, save, text_pages
from harness.report.views import arm_colours
from harness.report.views.accuracy import build_accuracy_view
from harness.rundir.verdict import Verdict


def accuracy_pages(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    view = build_accuracy_view(a, verdict)
    colours = arm_colours(a)
    fig = new_page(view.title, view.subtitle)
    axes = fig.subplots(1, len(view.panels), squeeze=False)[0]
    fig.subplots_adjust(left=0.07, right=0.98, top=0.84, bottom=0.28, wspace=0.3)
    for ax, panel in zip(axes, view.panels, strict=True):
        if panel.empty:
            empty_axes(ax, "no usable accuracy cells")
            ax.set_title(f"task: {panel.task}", fontsize=11)
            continue
        xs = range(len(panel.arms))
        for x, arm, acc, lo, hi in zip(
            xs, panel.arms, panel.accuracy, panel.lower, panel.upper, strict=True
        ):
            ax.errorbar(
                [x],
                [acc],
                yerr=[[acc - lo], [hi - acc]],
                fmt="o",
                color=colours.get(arm, "black"),
                capsize=4,
            )
        ax.set_xticks(list(xs))
        ax.set_xticklabels(panel.arms, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("accuracy (share correct)")
        ax.set_title(panel.title, fontsize=11)
        ax.grid(alpha=0.3, axis="y")
        ax.set_xlim(-0.5, len(panel.arms) - 0.5)
        ax.set_ylim(
            max(0, np.nanmin(panel.lower) - 0.1) - 0.02,
            min(1, np.nanmax(panel.upper) + 0.1) + 0.02,
        )
    save(pdf, fig)
    return 1 + text_pages(pdf, view.paired_title, view.paired_lines)
