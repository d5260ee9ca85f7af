"""Speedup vs concurrency with interval bands and the knee; per-user speed and throughput."""

from __future__ import annotations

import math

from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.bar_common import speed_tasks
from harness.analysis.knee import knee_span
from harness.analysis.tables import Analysis
from harness.report.layout import empty_axes, log2_axis, new_page, save
from harness.report.views import arm_colours
from harness.report.views.speed import build_speed_curves_view
from harness.rundir.verdict import Verdict

TASKS_PER_PAGE = 3


def _chunks(items: list[str], n: int) -> list[list[str]]:
    return [items[i : i + n] for i in range(0, len(items), n)] or [[]]


def speedup_pages(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    colours = arm_colours(a)
    note = speedup_note(a)
    pages = 0
    for tasks in _chunks(speed_tasks(a.run.study), TASKS_PER_PAGE):
        fig = new_page("Speedup vs concurrency", note)
        axes = fig.subplots(1, max(1, len(tasks)), squeeze=False)[0]
        fig.subplots_adjust(left=0.06, right=0.98, top=0.83, bottom=0.2, wspace=0.25)
        handles: dict = {}
        for ax, task in zip(axes, tasks, strict=False):
            speedup_axes(ax, a, task, handles, colours)
        speedup_legend(fig, axes[0], a, handles)
        save(pdf, fig)
        pages += 1
    return pages


def speedup_note(a: Analysis) -> str:
    """What the speedup figures show and how their intervals were made."""
    study = a.run.study
    bars = study.bars
    note = (
        f"median per-user speed ratio vs the same-engine baseline; band = "
        f"{bars.intervals.level:.0%} interval (within a session a bootstrap of"
        f" {bars.intervals.bootstrap_resamples} resamples); knee = where the speedup crosses"
        " 1.0, its interval (the bar at 1.0) where the band's edges do"
    )
    if study.recording.sessions > 1:
        # The band over sessions is by the registered method (harness.analysis.intervals).
        how: str = bars.intervals.method
        if how == "auto":
            how += " (below 30 sessions a t interval on the sessions' log ratios)"
        note += f"; over {study.recording.sessions} sessions by interval method {how}"
    marked = a.speedups["interval_caveat"].notna() & (a.speedups["status"] == "ok")
    if marked.any():
        note += f"; {int(marked.sum())} intervals marked (one session or < 20 requests: next page)"
    if a.run.stop_fired:
        note += "; STOP fired: higher levels skipped"
    return note


def speedup_axes(ax, a: Analysis, task: str, handles: dict, colours: dict[str, str]) -> None:
    """One task's speedup against users: every drafter with its interval band, the 1.0,
    pass and stop lines (the check line when in reach), each knee marked."""
    study = a.run.study
    levels = study.loads.closed_loop.concurrency
    bars = study.bars
    sp = a.speedups[(a.speedups["task"] == task) & (a.speedups["status"] == "ok")]
    top = 1.5
    for arm, grp in sp.groupby("arm", sort=False):
        grp = grp.sort_values("concurrency")
        c = colours[arm]
        (line,) = ax.plot(
            grp["concurrency"], grp["speedup"], "o-", color=c, label=arm, lw=1.6, ms=4
        )
        ax.fill_between(
            grp["concurrency"].astype(float),
            grp["ci_lower"].astype(float),
            grp["ci_upper"].astype(float),
            color=c,
            alpha=0.18,
            lw=0,
        )
        handles[arm] = line
        rerun = grp[grp["baseline_rerun_speed"].notna()]
        if len(rerun):  # the check bar's rerun, shown beside the original
            ratio = rerun["speed_drafter"].astype(float) / rerun["baseline_rerun_speed"].astype(
                float
            )
            handles["against the baseline rerun"] = ax.plot(
                rerun["concurrency"], ratio, "x", color=c, ms=9, mew=2
            )[0]
        top = max(top, float(grp["ci_upper"].max()))
        _mark_knee(ax, a, arm, task, c, levels)
    handles["no gain (1.0x)"] = ax.axhline(1.0, color="black", lw=0.8)
    handles[f"pass bar ({bars.pass_.speed.threshold:g}x)"] = ax.axhline(
        bars.pass_.speed.threshold, color="#1a7f37", ls="--", lw=1
    )
    handles[f"stop bar ({bars.stop.threshold:g}x)"] = ax.axhline(
        bars.stop.threshold, color="#b26a00", ls=":", lw=1.2
    )
    if top > bars.check.threshold * 0.9:
        handles[f"check bar ({bars.check.threshold:g}x)"] = ax.axhline(
            bars.check.threshold, color="#c62828", ls="-.", lw=1
        )
    log2_axis(ax, levels)
    ax.set_ylim(0, max(top, bars.pass_.speed.threshold) * 1.1)
    ax.set_title(f"task: {task}", fontsize=11)
    ax.set_xlabel("concurrent users (closed loop)")
    ax.set_ylabel("speedup (x, per-user speed ratio)")
    ax.grid(alpha=0.3)
    if sp.empty:
        empty_axes(ax, "no usable speed cells")


def speedup_legend(fig, ax, a: Analysis, handles: dict, bottom: float = 0.0) -> None:
    handles["knee (speedup crosses 1.0) and its interval"] = ax.plot(
        [], [], "v-", color="gray", ms=8
    )[0]
    if a.knees["status"].isin(["beyond", "beyond_skipped"]).any():
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


def _mark_knee(ax, a: Analysis, arm: str, task: str, colour: str, levels: list[int]) -> None:
    row = a.knees[(a.knees["arm"] == arm) & (a.knees["task"] == task)]
    if row.empty:
        return
    k = row.iloc[0]
    if k["status"] in ("located", "below_first") and not math.isnan(k["knee_concurrency"]):
        ax.axvline(k["knee_concurrency"], color=colour, ls="--", lw=0.8, alpha=0.7)
        ax.plot([k["knee_concurrency"]], [1.0], "v", color=colour, ms=8)
        if (span := knee_span(k, levels)) is not None:
            ax.plot(span, [1.0, 1.0], "-", color=colour, lw=4, alpha=0.35, solid_capstyle="butt")
    elif k["status"] in ("beyond", "beyond_skipped"):
        ax.annotate(
            "",
            xy=(levels[-1] * 1.22, 1.0),
            xytext=(levels[-1], 1.0),
            arrowprops={"arrowstyle": "->", "color": colour},
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
                rows, style = curve.rows, "o-" if curve.drafter else "s--"
                (h,) = up.plot(
                    rows["concurrency"],
                    rows["per_user_speed"],
                    style,
                    color=curve.colour,
                    label=curve.arm,
                    ms=4,
                )
                down.plot(
                    rows["concurrency"],
                    rows["output_throughput_tok_s"],
                    style,
                    color=curve.colour,
                    ms=4,
                )
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
