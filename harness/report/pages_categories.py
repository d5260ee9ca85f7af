"""SPEED-Bench by category (views/categories.py): per task, speedup, tokens per round and
acceptance by category with their intervals, then the table; and by input length."""

from __future__ import annotations

import math

import numpy as np
from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.tables import Analysis
from harness.report.layout import new_page, save, text_pages
from harness.report.views import arm_colours
from harness.report.views.categories import CategoryPanel, InputLengths, build_categories_view
from harness.rundir.verdict import Verdict

MARKERS = ("o", "s", "D", "^", "v", "P")


def _panel(ax, panel: CategoryPanel, categories: list[str], colours: dict[str, str]) -> None:
    width = 0.7 / max(1, len(panel.series))
    for j, series in enumerate(panel.series):
        at = {cat: k for k, cat in enumerate(series.categories)}
        figures = series.figures
        xs, ys, los, his = [], [], [], []
        for i, cat in enumerate(categories):
            k = at.get(cat)
            y = float(figures.value[k]) if k is not None else math.nan
            if k is None or math.isnan(y):
                continue
            xs.append(i - 0.35 + width * (j + 0.5))
            ys.append(y)
            low, high = float(figures.lower[k]), float(figures.upper[k])
            los.append(0.0 if math.isnan(low) else max(0.0, y - low))
            his.append(0.0 if math.isnan(high) else max(0.0, high - y))
        ax.errorbar(
            xs,
            ys,
            yerr=[los, his],
            fmt=MARKERS[j % len(MARKERS)],
            ms=4,
            capsize=2,
            lw=1,
            color=colours.get(series.arm, "#444444"),
            label=f"{series.arm} c={series.concurrency}",
        )
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(categories, rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(categories) - 0.4)
    ax.grid(axis="y", alpha=0.3)


def category_pages(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    """Per SPEED-Bench task: speedup, tokens per round and acceptance by category, each
    with its interval, then the table; and the throughput configurations by input length."""
    view = build_categories_view(a, verdict)
    colours = arm_colours(a)
    pages = 0
    for t in view.tasks:
        if t.unavailable:
            pages += text_pages(pdf, f"{view.title}: {t.task}", [t.unavailable])
            continue
        fig = new_page(f"{view.title}: {t.title}", t.subtitle)
        axes = fig.subplots(1, len(t.panels), squeeze=False)[0]
        fig.subplots_adjust(left=0.06, right=0.98, top=0.83, bottom=0.2, wspace=0.25)
        for ax, panel in zip(axes, t.panels, strict=True):
            _panel(ax, panel, t.categories, colours)
            ax.set_title(panel.title, fontsize=10)
        axes[0].axhline(1.0, color="black", lw=0.8)
        handles, labels = axes[0].get_legend_handles_labels()
        if handles:
            fig.legend(
                handles,
                labels,
                loc="lower center",
                ncol=min(6, len(labels)),
                fontsize=8,
                frameon=False,
            )
        save(pdf, fig)
        pages += 1
        pages += text_pages(pdf, f"{view.title}: {t.task}, the figures", t.table_lines)
    return pages + (_input_length_page(pdf, a, view.lengths) if view.lengths else 0)


def _input_length_page(pdf: PdfPages, a: Analysis, view: InputLengths) -> int:
    fig = new_page(view.title, view.subtitle)
    ax = fig.subplots(1, 1)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.85, bottom=0.15)
    colours = arm_colours(a)
    for j, series in enumerate(view.series):
        # Side by side at each length, so that overlapping intervals stay readable.
        shift = (j - (len(view.series) - 1) / 2) * 0.3 / max(1, len(view.series))
        y, lo, hi = series.speedup.value, series.speedup.lower, series.speedup.upper
        ax.errorbar(
            np.array([view.order.index(length) for length in series.lengths]) + shift,
            y,
            yerr=[(y - lo).clip(min=0), (hi - y).clip(min=0)],
            fmt=MARKERS[j % len(MARKERS)] + "-",
            ms=4,
            capsize=2,
            color=colours.get(series.arm),
            label=f"{series.arm} c={series.concurrency}",
        )
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(view.order)))
    ax.set_xticklabels(view.order)
    ax.set_xlabel("input length (configuration)")
    ax.set_ylabel("speedup")
    ax.legend(fontsize=8, frameon=False)
    save(pdf, fig)
    return 1
