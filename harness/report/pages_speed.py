"""Speedup vs concurrency with interval bands and the knee; per-user speed and throughput."""

from __future__ import annotations

from typing import TypeVar

from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.tables import Analysis
from harness.report.layout import empty_axes, log2_axis, new_page, save
from harness.report.views.speed import build_speed_curves_view
from harness.report.views.speedups import ArmSpeedups, SpeedupPanel, build_speedups_view
from harness.rundir.verdict import Verdict

TASKS_PER_PAGE = 3
T = TypeVar("T")


def _chunks(items: list[T], n: int) -> list[list[T]]:
    return [items[i : i + n] for i in range(0, len(items), n)] or [[]]


def speedup_pages(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    view = build_speedups_view(a, verdict)
    pages = 0
    for panels in _chunks(view.panels, TASKS_PER_PAGE):
        fig = new_page(view.title, view.subtitle)
        axes = fig.subplots(1, max(1, len(panels)), squeeze=False)[0]
        fig.subplots_adjust(left=0.06, right=0.98, top=0.83, bottom=0.2, wspace=0.25)
        handles: dict = {}
        for ax, panel in zip(axes, panels, strict=False):
            speedup_axes(ax, panel, handles)
        speedup_legend(fig, axes[0], panels, handles)
        save(pdf, fig)
        pages += 1
    return pages


# How each registered bar's line is drawn: (line style, width).
BAR_STYLES = {"pass": ("--", 1.0), "stop": (":", 1.2), "check": ("-.", 1.0)}


def speedup_axes(ax, panel: SpeedupPanel, handles: dict) -> None:
    """One task's speedup against users: every drafter with its interval band, the 1.0,
    pass and stop lines (the check line when in reach), each knee marked."""
    for arm in panel.arms:
        c, speedup = arm.colour, arm.speedup
        (line,) = ax.plot(arm.users, speedup.value, "o-", color=c, label=arm.arm, lw=1.6, ms=4)
        ax.fill_between(
            arm.users.astype(float), speedup.lower, speedup.upper, color=c, alpha=0.18, lw=0
        )
        handles[arm.arm] = line
        if len(arm.rerun.users):  # the check bar's rerun, shown beside the original
            handles["against the baseline rerun"] = ax.plot(
                arm.rerun.users, arm.rerun.ratio, "x", color=c, ms=9, mew=2
            )[0]
        _mark_knee(ax, arm, panel.levels)
    handles["no gain (1.0x)"] = ax.axhline(1.0, color="black", lw=0.8)
    for bar in panel.bars:
        ls, lw = BAR_STYLES[bar.name]
        handles[f"{bar.name} bar ({bar.value:g}x)"] = ax.axhline(
            bar.value, color=bar.colour, ls=ls, lw=lw
        )
    log2_axis(ax, panel.levels)
    ax.set_ylim(0, max(panel.top, panel.bars[0].value) * 1.1)
    ax.set_title(f"task: {panel.task}", fontsize=11)
    ax.set_xlabel("concurrent users (closed loop)")
    ax.set_ylabel("speedup (x, per-user speed ratio)")
    ax.grid(alpha=0.3)
    if panel.empty:
        empty_axes(ax, "no usable speed cells")


def speedup_legend(fig, ax, panels: list[SpeedupPanel], handles: dict, bottom: float = 0.0) -> None:
    """The speedup figures' legend for the panels drawn on its page: the knee-beyond
    marker's entry only where one of them draws that marker."""
    handles["knee (speedup crosses 1.0) and its interval"] = ax.plot(
        [], [], "v-", color="gray", ms=8
    )[0]
    if any(arm.knee_beyond for panel in panels for arm in panel.arms):
        handles["knee beyond the highest level"] = ax.plot([], [], ">", color="gray", ms=6)[0]
    fig.legend(
        handles.values(),
        handles.keys(),
        loc="lower center",
        ncol=4,
        fontsize=8,
        frameon=False,
        bbox_to_anchor=(0.5, bottom),
    )


def _mark_knee(ax, arm: ArmSpeedups, levels: list[int]) -> None:
    if arm.knee is not None:
        ax.axvline(arm.knee, color=arm.colour, ls="--", lw=0.8, alpha=0.7)
        ax.plot([arm.knee], [1.0], "v", color=arm.colour, ms=8)
        if arm.knee_span is not None:
            ax.plot(
                arm.knee_span,
                [1.0, 1.0],
                "-",
                color=arm.colour,
                lw=4,
                alpha=0.35,
                solid_capstyle="butt",
            )
    elif arm.knee_beyond:
        ax.annotate(
            "",
            xy=(levels[-1] * 1.22, 1.0),
            xytext=(levels[-1], 1.0),
            arrowprops={"arrowstyle": "->", "color": arm.colour},
        )


def speed_curve_pages(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    """Per-user speed and output throughput vs concurrency, every arm, per task."""
    view = build_speed_curves_view(a, verdict)
    pages = 0
    for tasks in _chunks(list(view.tasks), TASKS_PER_PAGE):
        fig = new_page(view.title, view.subtitle)
        axes = fig.subplots(2, max(1, len(tasks)), squeeze=False)
        fig.subplots_adjust(left=0.07, right=0.98, top=0.85, bottom=0.14, wspace=0.28, hspace=0.4)
        handles = {}
        for j, task in enumerate(tasks):
            up, down = axes[0][j], axes[1][j]
            for curve in view.tasks[task]:
                style = "o-" if curve.drafter else "s--"
                (h,) = up.plot(
                    curve.users,
                    curve.per_user_speed,
                    style,
                    color=curve.colour,
                    label=curve.arm,
                    ms=4,
                )
                down.plot(curve.users, curve.throughput, style, color=curve.colour, ms=4)
                handles[curve.arm] = h
            for ax, ylabel in ((up, "per-user speed (tok/s)"), (down, "output throughput (tok/s)")):
                log2_axis(ax, view.levels)
                ax.set_ylabel(ylabel)
                ax.set_xlabel("concurrent users")
                ax.grid(alpha=0.3)
                ax.set_ylim(bottom=0)
            up.set_title(f"task: {task}", fontsize=11)
        fig.legend(
            handles.values(), handles.keys(), loc="lower center", ncol=6, fontsize=8, frameon=False
        )
        save(pdf, fig)
        pages += 1
    return pages
