"""Why each speedup is what it is: one page per speed task.

Four panels against users: measured speedup with the two factors' explanation and the
roofline formula's prediction; tokens per round from the client and from the engine's
counters (1 + sum p_i); round time and the baseline's plain step in ms; measured and
predicted round cost. Beneath, a table per drafter and level, and which factor moved
the speedup from the lowest level to each higher one.
"""

from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.bar_common import speed_tasks
from harness.analysis.decompose import factor_shift
from harness.analysis.tables import Analysis
from harness.calibration import run_hardware
from harness.report.acceptance_series import is_nan
from harness.report.layout import MONO, empty_axes, log2_axis, new_page, save, table_lines
from harness.report.views.speedups import (
    DECOMPOSITION_TITLES,
    SpeedupPanel,
    build_speedup_panel,
)
from harness.rundir.verdict import Verdict

ROWS_ON_PAGE = 14


def decomposition_pages(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    pages = 0
    for task in speed_tasks(a.run.study):
        _task_page(pdf, a, build_speedup_panel(a, task))
        pages += 1
    return pages


def _task_page(pdf: PdfPages, a: Analysis, panel: SpeedupPanel) -> None:
    fig = new_page(
        f"Why this speedup: task {panel.task}",
        "speedup = (tokens per round / baseline's) / (round time / plain step), from the"
        " client's chunks (one chunk = one engine step); predicted = E[tokens] x"
        " t_target(B,1) / (s x t_draft(B) + t_target(B,k+1)) on the plan's roofline,"
        " E[tokens] = 1 + sum(p_i) from the engine's counters",
    )
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
        g, c, arm = drafter.rows, drafter.colour, drafter.arm
        x = g["concurrency"]
        axes[0].plot(x, g["speedup"], "o-", color=c, ms=4, label=f"{arm} measured")
        axes[0].fill_between(
            x.astype(float),
            g["ci_lower"].astype(float),
            g["ci_upper"].astype(float),
            color=c,
            alpha=0.15,
            lw=0,
        )
        axes[0].plot(x, g["explained_speedup"], "x", color=c, ms=7, label=f"{arm} explained")
        axes[0].plot(x, g["predicted_speedup"], ":", color=c, lw=1.4, label=f"{arm} predicted")
        axes[1].plot(x, g["tokens_per_round"], "o-", color=c, ms=4, label=f"{arm} client")
        axes[1].plot(
            x, g["engine_tokens_per_round"], "d:", color=c, ms=4, label=f"{arm} engine 1+sum(p)"
        )
        axes[2].plot(
            x, g["round_time_s"].astype(float) * 1e3, "o-", color=c, ms=4, label=f"{arm} round"
        )
        axes[2].plot(
            x,
            g["baseline_step_time_s"].astype(float) * 1e3,
            "s--",
            color="black",
            ms=3,
            lw=0.9,
            label="baseline step" if drafter is panel.arms[0] else None,
        )
        axes[3].plot(x, g["round_cost_ratio"], "o-", color=c, ms=4, label=f"{arm} measured")
        axes[3].fill_between(
            x.astype(float),
            g["round_cost_ratio_ci_lower"].astype(float),
            g["round_cost_ratio_ci_upper"].astype(float),
            color=c,
            alpha=0.15,
            lw=0,
        )
        axes[3].plot(
            x, g["predicted_round_cost_ratio"], ":", color=c, lw=1.4, label=f"{arm} roofline"
        )
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
    lines = decomposition_lines(a, panel.task)
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


def decomposition_lines(a: Analysis, task: str) -> list[str]:
    """The task's table per drafter and level, what moved it, and the notes."""
    sp = a.speedups[(a.speedups["task"] == task) & (a.speedups["status"] == "ok")]
    return _table(a, sp, a.run.study.bars.decomposition.tolerance)


def _table(a: Analysis, sp, tol: float) -> list[str]:
    rows = []
    notes: list[str] = []
    tokens_notes: dict[str, list[tuple[int, str]]] = {}  # one line per drafter, not per level
    for arm, grp in sp.groupby("arm", sort=False):
        g = grp.sort_values("concurrency")
        lo = g.iloc[0]
        for r in g.itertuples():
            moved = "-"
            if r.concurrency != lo["concurrency"]:
                shift = factor_shift(
                    _ratio(lo),
                    lo["round_cost_ratio"],
                    _ratio(r._asdict()),
                    r.round_cost_ratio,
                    min_change=tol,
                )
                moved = (
                    f"steady (within {tol:.0%})"
                    if shift is None
                    else (
                        f"{'tokens per round' if abs(shift[0]) >= abs(shift[1]) else 'round cost'}"
                        f" ({max(abs(shift[0]), abs(shift[1])):.0%} of it)"
                    )
                )
            rows.append(
                [
                    arm,
                    r.concurrency,
                    r.speedup,
                    r.explained_speedup,
                    _pct(r.explained_gap),
                    r.predicted_speedup,
                    _pct(r.prediction_gap),
                    r.tokens_per_round,
                    r.engine_tokens_per_round,
                    r.round_cost_ratio,
                    r.predicted_round_cost_ratio,
                    moved,
                    "FLAG" if r.decomposition_flag is True else "",
                ]
            )
            if r.decomposition_flag is True and r.decomposition_note:
                notes.append(f"  {arm} c={r.concurrency}: {r.decomposition_note}")
            if isinstance(r.prediction_note, str) and r.concurrency == lo["concurrency"]:
                notes.append(f"  {arm}: predicted: {r.prediction_note}")
            if isinstance(r.tokens_per_round_note, str):
                tokens_notes.setdefault(arm, []).append((r.concurrency, r.tokens_per_round_note))
    gaps = [float(g) for g in sp["prediction_gap"].dropna()]
    lines = table_lines(
        [
            "drafter",
            "users",
            "speedup",
            "explained",
            "gap",
            "predicted",
            "meas/pred",
            "tok/round",
            "engine",
            "cost",
            "cost pred",
            "what moved it since the lowest level",
            f"> {tol:.0%}",
        ],
        rows,
    )
    # The prediction's inputs, first so no cut of a long table loses them: measured at the
    # run's start, or why they are the registered ones.
    lines.insert(0, run_hardware(a.run.study, a.run.manifest).line())
    if gaps:
        mean = sum(gaps) / len(gaps)
        verdict = (
            " (the roofline flatters speculation by this much)"
            if mean < -tol
            else f" (within {tol:.0%} of the formula)"
            if mean <= tol
            else " (faster than the roofline predicts: check its hardware figures)"
        )
        lines.append(
            f"measured against predicted: mean {mean:+.1%}, range {min(gaps):+.1%} to"
            f" {max(gaps):+.1%}{verdict}"
        )
    for arm, found in tokens_notes.items():
        (c, note), rest = found[0], found[1:]
        notes.append(
            f"  {arm} c={c}: {note}"
            + (f"; likewise at c={', '.join(str(x) for x, _ in rest)}" if rest else "")
        )
    return lines + notes


def _ratio(r) -> float | None:
    t, b = r["tokens_per_round"], r["baseline_tokens_per_round"]
    if is_nan(t) or is_nan(b) or not b:
        return None
    return float(t) / float(b)


def _pct(v) -> str:
    return "-" if is_nan(v) else f"{float(v):+.1%}"
