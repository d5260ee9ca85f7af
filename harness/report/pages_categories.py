"""SPEED-Bench by category (views/categories.py): per task, speedup, tokens per round and
acceptance by category with their intervals, then the table; and by input length."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.tables import Analysis
from harness.report.layout import new_page, save, text_pages
from harness.report.views import arm_colours
from harness.report.views.categories import PANELS, InputLengths, build_categories_view
from harness.rundir.verdict import Verdict

MARKERS = ("o", "s", "D", "^", "v", "P")


def _num(v: object) -> float:
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return f


def _panel(
    ax,
    rows: pd.DataFrame,
    categories: list[str],
    col: str,
    lo: str,
    hi: str,
    colours: dict[str, str],
) -> None:
    series = list(rows.groupby(["arm", "concurrency"], sort=False))
    width = 0.7 / max(1, len(series))
    for j, ((arm, c), grp) in enumerate(series):
        by_cat = {r.category: r for r in grp.itertuples()}
        xs, ys, los, his = [], [], [], []
        for i, cat in enumerate(categories):
            r = by_cat.get(cat)
            y = _num(getattr(r, col)) if r is not None else math.nan
            if math.isnan(y):
                continue
            xs.append(i - 0.35 + width * (j + 0.5))
            ys.append(y)
            low, high = _num(getattr(r, lo)), _num(getattr(r, hi))
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
            color=colours.get(str(arm), "#444444"),
            label=f"{arm} c={c}",
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
        categories = list(dict.fromkeys(t.rows["category"]))
        fig = new_page(f"{view.title}: {t.title}", t.subtitle)
        axes = fig.subplots(1, len(PANELS), squeeze=False)[0]
        fig.subplots_adjust(left=0.06, right=0.98, top=0.83, bottom=0.2, wspace=0.25)
        for ax, (col, lo, hi, title) in zip(axes, PANELS, strict=True):
            _panel(ax, t.rows, categories, col, lo, hi, colours)
            ax.set_title(title, fontsize=10)
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
    for j, (arm, c, rows) in enumerate(view.series):
        # Side by side at each length, so that overlapping intervals stay readable.
        shift = (j - (len(view.series) - 1) / 2) * 0.3 / max(1, len(view.series))
        y = np.array([r.speedup for r in rows], dtype=float)
        lo = np.array([r.ci_lower for r in rows], dtype=float)
        hi = np.array([r.ci_upper for r in rows], dtype=float)
        ax.errorbar(
            np.array([view.order.index(view.lengths[r.task]) for r in rows]) + shift,
            y,
            yerr=[(y - lo).clip(min=0), (hi - y).clip(min=0)],
            fmt=MARKERS[j % len(MARKERS)] + "-",
            ms=4,
            capsize=2,
            color=colours.get(arm),
            label=f"{arm} c={c}",
        )
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(view.order)))
    ax.set_xticklabels(view.order)
    ax.set_xlabel("input length (configuration)")
    ax.set_ylabel("speedup")
    ax.legend(fontsize=8, frameon=False)
    save(pdf, fig)
    return 1
