"""Acceptance (views/acceptance.py): per second over each cell and per position; and
measured against its parts (views/consistency.py)."""

from __future__ import annotations

import matplotlib
from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.tables import Analysis
from harness.report.layout import empty_axes, new_page, save
from harness.report.views import arm_colours
from harness.report.views.acceptance import NO_SERIES, build_acceptance_view
from harness.report.views.consistency import NO_POINTS, build_consistency_view
from harness.rundir.verdict import Verdict


def acceptance_pages(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    view = build_acceptance_view(a, verdict)
    colours = {c: matplotlib.colormaps["viridis"](s) for c, s in view.shades.items()}
    for arm in view.arms:
        fig = new_page(
            f"Acceptance: {arm.heading}",
            f"top: the engine's tokens per {arm.round} each"
            " second of each speed cell (counter deltas between scrapes: what its"
            " engine counts as a round); bottom: share of rounds keeping >= i drafts",
        )
        axes = fig.subplots(2, max(1, len(arm.tasks)), squeeze=False)
        fig.subplots_adjust(left=0.07, right=0.98, top=0.85, bottom=0.14, wspace=0.28, hspace=0.4)
        handles = {}
        for j, (task, levels) in enumerate(arm.tasks.items()):
            top, bottom = axes[0][j], axes[1][j]
            any_series = any_pos = False
            for level in levels:
                c = level.concurrency
                if not level.no_seconds:
                    (h,) = top.plot(
                        level.seconds, level.tokens_per_round, "-", color=colours[c], lw=1
                    )
                    handles[f"c={c}"] = h
                    any_series = True
                if level.position_rates:
                    rates = level.position_rates
                    bottom.plot(range(1, len(rates) + 1), rates, "o-", color=colours[c], ms=4)
                    any_pos = True
            top.set_title(f"task: {task}", fontsize=11)
            top.set_xlabel("seconds since the cell's first scrape")
            top.set_ylabel(f"tokens per {arm.round} (engine)")
            top.grid(alpha=0.3)
            bottom.set_xlabel("draft position i")
            bottom.set_ylabel("acceptance rate at position i")
            bottom.set_ylim(0, 1.05)
            bottom.grid(alpha=0.3)
            if not any_series:
                empty_axes(top, NO_SERIES)
            if not any_pos:
                empty_axes(bottom, arm.no_positions)
            else:
                bottom.set_xticks(range(1, arm.k + 1))
        fig.legend(
            handles.values(),
            handles.keys(),
            loc="lower center",
            ncol=len(handles) or 1,
            fontsize=8,
            frameon=False,
            title="concurrency",
            title_fontsize=8,
        )
        save(pdf, fig)
    return len(view.arms)


def consistency_page(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    view = build_consistency_view(a, verdict)
    colours = arm_colours(a)
    fig = new_page(view.title, view.subtitle)
    axes = fig.subplots(1, 2)
    fig.subplots_adjust(left=0.07, right=0.98, top=0.84, bottom=0.2, wspace=0.25)
    handles = {}
    for ax, panel, xlabel, ylabel in zip(
        axes,
        view.panels,
        (
            "1 + sum of per-position acceptance rates",
            "client: tokens per decode step (per streamed chunk)",
        ),
        ("engine: tokens per round\n(1 + accepted / drafts)", "engine: tokens per round"),
        strict=True,
    ):
        for points in panel.arms:
            h = ax.scatter(points.x, points.y, color=colours[points.arm], s=22, label=points.arm)
            handles[points.arm] = h
        if panel.diagonal is not None:
            lo, hi = panel.diagonal
            ax.plot([lo, hi], [lo, hi], color="gray", lw=0.8, ls="--")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
        else:
            empty_axes(ax, NO_POINTS)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.set_title(panel.title, fontsize=11)
    if handles:
        fig.legend(
            handles.values(), handles.keys(), loc="lower center", ncol=5, fontsize=8, frameon=False
        )
    save(pdf, fig)
    return 1
