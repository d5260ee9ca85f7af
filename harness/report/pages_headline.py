"""The verdict (views/verdict.py): page one, the answer and its reason in one figure,
then each bar's summary and its evidence on text pages.

Page one: speedup against users per speed task and drafter (interval band, the registered
pass and stop lines, the knee), and beneath it the decomposition's two factors (tokens per
round over the baseline's, and the round's cost over a plain step: analysis/decompose.py),
so a reader sees on page one whether a gain fell with fewer accepted drafts or with a
dearer round.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.tables import Analysis
from harness.report.layout import empty_axes, log2_axis, new_page, save, text_pages, wrap_lines
from harness.report.pages_speed import speedup_axes, speedup_legend
from harness.report.views.speedups import SpeedupPanel
from harness.report.views.verdict import VerdictView, build_verdict_view
from harness.rundir.verdict import Verdict

NOTICE_LINES = 6  # deviations shown on page one (all of them on the bars page)
# Lines of the verdict's reasons on page one: an unfinished verdict's causes and the
# command that finishes the run (harness.analysis.unfinished) must not be cut.
REASON_LINES = 9
LINE_HEIGHT = 0.02  # one 8.5 pt line at 1.4 spacing, as a share of the page's height


def verdict_page(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    """Page one; then each bar's status and summary, the smoke, deviations; then every
    figure each bar used."""
    view = build_verdict_view(a, verdict)
    pages = headline_page(pdf, a, view)
    pages += text_pages(
        pdf,
        f"{view.title}: the bars",
        wrap_lines(view.bar_lines, 140),
        "each registered bar, the smoke stage, deviations",
    )
    return pages + text_pages(
        pdf,
        "Bar evidence",
        view.evidence_lines,
        "every figure each bar used, as written to verdict.json",
    )


def headline_page(pdf: PdfPages, a: Analysis, view: VerdictView) -> int:
    fig = new_page(view.title, "  |  ".join(view.about))
    fig.text(0.03, 0.905, view.word, fontsize=26, fontweight="bold", color=view.colour, va="top")
    reasons = wrap_lines(view.reasons, 150)
    if len(reasons) > REASON_LINES:
        reasons = reasons[: REASON_LINES - 1] + [
            f"  ... {len(reasons) - REASON_LINES + 1} more lines on the next page"
        ]
    statuses = "   ".join(f"{name}: {status}" for name, status in view.statuses)
    # Below the verdict word, never beside it: a long word (INCOMPLETE) would overlap.
    fig.text(0.03, 0.845, "\n".join(reasons + [statuses]), fontsize=8.5, va="top", linespacing=1.4)
    below = LINE_HEIGHT * max(0, len(reasons) - 2)  # what the reasons take past two lines
    top = 0.74 - below
    if view.notice:
        shown = wrap_lines(view.notice, 170)
        if len(shown) > NOTICE_LINES:
            shown = shown[: NOTICE_LINES - 1] + [
                f"  ... {len(shown) - NOTICE_LINES + 1} more lines on the next page"
            ]
        fig.text(
            0.03,
            0.775 - below,
            "\n".join(shown),
            va="top",
            ha="left",
            color="#b26a00",
            fontdict={"family": "monospace", "size": 7},
            linespacing=1.3,
        )
        top -= 0.022 * len(shown)
    n = len(view.panels) or 1
    grid = fig.add_gridspec(
        2,
        n,
        height_ratios=[2.6, 1.0],
        left=0.06,
        right=0.98,
        top=top,
        bottom=0.13,
        hspace=0.42,
        wspace=0.25,
    )
    handles: dict = {}
    first = None
    for j, panel in enumerate(view.panels or [None]):
        ax = fig.add_subplot(grid[0, j])
        first = first or ax
        if panel is None:
            empty_axes(ax, "no speed task")
            continue
        speedup_axes(ax, panel, handles)
        ax.set_xlabel("")
        factors_axes(fig.add_subplot(grid[1, j], sharex=ax), panel, handles)
    speedup_legend(fig, first, view.panels, handles, bottom=0.0)
    save(pdf, fig)
    return 1


def factors_axes(ax, panel: SpeedupPanel, handles: dict) -> None:
    """The two factors against users: tokens per round over the baseline's (solid) and
    the round cost ratio (dashed); their quotient is the explained speedup."""
    top = 1.5
    for arm in panel.arms:
        f = arm.factors
        if f.empty:
            continue
        ax.plot(f.users, f.tokens, "o-", color=arm.colour, ms=3, lw=1.3)
        ax.plot(f.users, f.cost, "s--", color=arm.colour, ms=3, lw=1.1)
        top = max(top, _highest(f.tokens), _highest(f.cost))
    handles["tokens per round / baseline's (lower panel)"] = ax.plot(
        [], [], "o-", color="gray", ms=3
    )[0]
    handles["round cost / plain step (lower panel)"] = ax.plot([], [], "s--", color="gray", ms=3)[0]
    ax.axhline(1.0, color="black", lw=0.6)
    log2_axis(ax, panel.levels)
    ax.set_ylim(0, top * 1.15)
    ax.set_ylabel("factor (x)", fontsize=8)
    ax.set_xlabel("concurrent users (closed loop)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    ax.set_title("why: speedup = tokens factor / cost factor", fontsize=8, loc="left")
    if panel.no_factors:
        empty_axes(ax, "no decomposition (no chunk stamps)")


def _highest(values: np.ndarray) -> float:
    """The highest figure, NaN skipped (NaN: none)."""
    shown = values[~np.isnan(values)]
    return float(shown.max()) if len(shown) else math.nan
