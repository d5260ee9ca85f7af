"""The round-cost surface (views/surface.py), one page per surface task: a round's cost
over a plain step and the break-even acceptance length against load, one line per k,
each real drafter placed on it, the text beneath; then the k schedule verified."""

from __future__ import annotations

import math

from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.tables import Analysis
from harness.report.layout import MONO, log2_axis, new_page, save, wrap_lines
from harness.report.views import arm_colours
from harness.report.views.surface import SurfaceTask, SurfaceView, Verification, build_surface_view
from harness.rundir.verdict import Verdict

K_STYLES = ["-", "--", "-.", ":"]


def surface_pages(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    view = build_surface_view(a, verdict)
    pages = 0
    for task in view.tasks:
        _task_page(pdf, a, view, task)
        pages += 1
        if task.verification is not None:
            _verification_page(pdf, view, task.verification)
            pages += 1
    return pages


def _task_page(pdf: PdfPages, a: Analysis, view: SurfaceView, task: SurfaceTask) -> None:
    fig = new_page(task.title, view.subtitle)
    grid = fig.add_gridspec(
        2,
        2,
        height_ratios=[1.3, 1.0],
        left=0.07,
        right=0.98,
        top=0.84,
        bottom=0.05,
        wspace=0.22,
        hspace=0.3,
    )
    cost, need = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    for i, line in enumerate(task.ks):
        c, k = line.cost, line.k
        style = K_STYLES[i % len(K_STYLES)]
        x = c.users.astype(float)
        cost.plot(x, c.ratio, f"o{style}", color="black", ms=4, label=f"k={k}")
        cost.fill_between(x, c.lower, c.upper, color="grey", alpha=0.15, lw=0)
        need.plot(
            line.break_even.users.astype(float),
            line.break_even.length,
            f"s{style}",
            color="black",
            ms=5,
            label=f"break-even, k={k}",
        )
        for users, length, below in line.bounds:
            need.plot([users], [length], "v" if below else "^", color="black", ms=7)
    colours = arm_colours(a)
    for drafter in task.drafters:
        mine = drafter.placements
        need.plot(
            [p.concurrency for p in mine],
            [math.nan if p.reaches is None else p.reaches for p in mine],
            "o",
            color=colours[drafter.arm],
            ms=8,
            mfc="none",
            mew=1.6,
            label=drafter.label,
        )
    cost.axhline(1.0, color="grey", lw=0.8)
    cost.set_title("round cost (x plain step)", fontsize=9)
    need.set_title("acceptance a round needs to pay (tokens a round)", fontsize=9)
    for ax in (cost, need):
        log2_axis(ax, view.levels)
        ax.set_xlabel("users (closed loop)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    if task.no_cell:
        cost.text(0.5, 0.5, "no usable surface cell", ha="center", transform=cost.transAxes)
    _text(fig.add_subplot(grid[1, :]), task.lines)
    save(pdf, fig)


def _verification_page(pdf: PdfPages, view: SurfaceView, v: Verification) -> None:
    """Measured speedup with its interval against the surface's prediction, each threshold
    marked, any collapse named."""
    fig = new_page(v.title, v.subtitle)
    grid = fig.add_gridspec(
        2, 1, height_ratios=[1.3, 1.0], left=0.07, right=0.98, top=0.84, bottom=0.05, hspace=0.3
    )
    ax = fig.add_subplot(grid[0, 0])
    ok = [(r, r.speedup) for r in v.ok if r.speedup is not None]
    if ok:
        ax.errorbar(
            [r.concurrency for r, _ in ok],
            [s for _, s in ok],
            yerr=[[s - (r.ci_lower or s) for r, s in ok], [(r.ci_upper or s) - s for r, s in ok]],
            fmt="o-",
            color="black",
            capsize=3,
            label="measured (95 % interval)",
        )
    # The drafter at its own fixed k, measured in the registered stages: what the
    # schedule is meant to beat where it drafts fewer.
    if len(v.own):
        ax.plot(
            [float(r.concurrency) for r in v.own],
            [math.nan if r.speedup is None else r.speedup for r in v.own],
            "^:",
            color="grey",
            label=f"{view.drafter} at its own k (registered cells)",
        )
    predicted = [(r, r.predicted_speedup) for r in v.predicted if r.predicted_speedup is not None]
    if predicted:
        ax.errorbar(
            [r.concurrency for r, _ in predicted],
            [p for _, p in predicted],
            yerr=[
                [p - (r.predicted_ci_lower or p) for r, p in predicted],
                [(r.predicted_ci_upper or p) - p for r, p in predicted],
            ],
            fmt="s--",
            color="tab:blue",
            mfc="none",
            capsize=3,
            label="predicted from the surface",
        )
    for r in v.rows:
        if r.threshold:
            ax.axvline(r.concurrency, color="grey", lw=0.8, ls=":")
        if r.collapse and r.speedup is not None:
            ax.plot([r.concurrency], [r.speedup], "x", color="tab:red", ms=12, mew=2)
    ax.axhline(1.0, color="grey", lw=0.8)
    log2_axis(ax, v.levels)
    ax.set_xlabel("users (closed loop)")
    ax.set_ylabel("speedup over the baseline")
    ax.grid(alpha=0.3)
    if ok or predicted or len(v.own):
        ax.legend(fontsize=7, loc="upper right")
    else:
        ax.text(0.5, 0.5, "no schedule was run (see below)", ha="center", transform=ax.transAxes)
    _text(fig.add_subplot(grid[1, 0]), v.lines)
    save(pdf, fig)


def _text(ax, lines: list[str]) -> None:
    ax.axis("off")
    ax.text(
        0.0,
        1.0,
        "\n".join(wrap_lines(lines, 150)[:24]),
        va="top",
        ha="left",
        fontdict=MONO,
        transform=ax.transAxes,
    )
