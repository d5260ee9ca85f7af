"""Acceptance: per second over each cell, per position, and measured against its parts."""

from __future__ import annotations

import math

import matplotlib
import numpy as np
from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.tables import Analysis
from harness.report.layout import empty_axes, new_page, save
from harness.report.views import arm_colours
from harness.report.views.acceptance import NO_SERIES, build_acceptance_view
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
                if not level.per_second.empty:
                    (h,) = top.plot(
                        level.per_second["t_s"],
                        level.per_second["acceptance_length"],
                        "-",
                        color=colours[c],
                        lw=1,
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
    """The engine's tokens per drafting round beside 1 + the sum of its per-position rates
    (two counters that must agree), and beside the client's tokens per decode step (which
    is lower when steps run without drafts: vLLM counts no round on those)."""
    colours = arm_colours(a)
    drafters = {x.name for x in a.run.study.arms if x.drafter is not None}
    cells = a.cells[
        (a.cells["kind"] == "speed")
        & a.cells["arm"].isin(drafters)
        & (a.cells["status"] == "complete")
    ]
    fig = new_page(
        "Acceptance length: measured against its parts",
        "one point per drafter speed cell; on the diagonal the two figures agree",
    )
    left, right = fig.subplots(1, 2)
    fig.subplots_adjust(left=0.07, right=0.98, top=0.84, bottom=0.2, wspace=0.25)
    handles = {}
    for ax, xcol, ycol, xlabel, ylabel in (
        (
            left,
            "accept_rate_sum",
            "accept_length_per_round_engine",
            "1 + sum of per-position acceptance rates",
            ("engine: tokens per round\n(1 + accepted / drafts)"),
        ),
        (
            right,
            "tokens_per_step_client",
            "accept_length_per_round_engine",
            "client: tokens per decode step (per streamed chunk)",
            "engine: tokens per round",
        ),
    ):
        lo, hi = math.inf, -math.inf
        for arm, grp in cells.groupby("arm", sort=False):
            x = grp[xcol].astype(float) + (1.0 if xcol == "accept_rate_sum" else 0.0)
            y = grp[ycol].astype(float)
            ok = ~(np.isnan(x) | np.isnan(y))
            if not ok.any():
                continue
            h = ax.scatter(x[ok], y[ok], color=colours[arm], s=22, label=arm)
            handles[arm] = h
            lo, hi = min(lo, x[ok].min(), y[ok].min()), max(hi, x[ok].max(), y[ok].max())
        if math.isfinite(lo):
            pad = 0.1 * max(hi - lo, 0.5)
            ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="gray", lw=0.8, ls="--")
            ax.set_xlim(lo - pad, hi + pad)
            ax.set_ylim(lo - pad, hi + pad)
        else:
            empty_axes(ax, "no cell has both figures (per-position rates are vLLM-only)")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    left.set_title("engine counters against each other", fontsize=11)
    right.set_title("per decode step (client) vs per engine round (engine_round)", fontsize=11)
    if handles:
        fig.legend(
            handles.values(), handles.keys(), loc="lower center", ncol=5, fontsize=8, frameon=False
        )
    save(pdf, fig)
    return 1
