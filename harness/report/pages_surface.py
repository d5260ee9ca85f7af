"""The round-cost surface (issue 32), one page per surface task: a round's cost over a
plain step against load, one line per k; the break-even acceptance length against load,
one line per k, with each real drafter's measured tokens per round on it; beneath, where
each drafter pays and why its gain falls with load. Nothing here is read by a bar."""

from __future__ import annotations

import math

from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.tables import Analysis
from harness.prereg.schema import Arm, Drafter, schedule_arm_name
from harness.report.layout import MONO, log2_axis, new_page, save, wrap_lines
from harness.report.views import arm_colours
from harness.rundir.verdict import Placement, Verdict

K_STYLES = ["-", "--", "-.", ":"]


def surface_pages(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    study = a.run.study
    if study.surface is None or verdict.surface is None:
        return 0
    pages = 0
    for task in study.surface_tasks():
        _task_page(pdf, a, verdict, task)
        pages += 1
        if study.surface.verify_schedule:
            _verification_page(pdf, a, verdict, task)
            pages += 1
    return pages


def _task_page(pdf: PdfPages, a: Analysis, verdict: Verdict, task: str) -> None:
    study = a.run.study
    assert study.surface is not None and verdict.surface is not None
    levels = study.surface.concurrency
    fig = new_page(
        f"The round-cost surface: task {task}",
        f"control arms of {study.surface.drafter} with acceptance set (k"
        f" {study.surface.k}, L {study.surface.acceptance_length}); break-even L:"
        " where the speedup's interval reaches 1.0, interpolated; read by no bar",
    )
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
    rows = a.surface[a.surface["task"] == task]
    for i, (k, grp) in enumerate(rows.groupby("k", sort=True)):
        g = grp.sort_values("concurrency")
        style = K_STYLES[i % len(K_STYLES)]
        x = g["concurrency"].astype(float)
        y = g["round_cost_ratio"].astype(float)
        lo = g["round_cost_ratio_ci_lower"].astype(float)
        hi = g["round_cost_ratio_ci_upper"].astype(float)
        cost.plot(x, y, f"o{style}", color="black", ms=4, label=f"k={k}")
        cost.fill_between(x, lo, hi, color="grey", alpha=0.15, lw=0)
        located = g[g["status"] == "located"]
        need.plot(
            located["concurrency"].astype(float),
            located["break_even_length"].astype(float),
            f"s{style}",
            color="black",
            ms=5,
            label=f"break-even, k={k}",
        )
        for r in g.itertuples():
            lengths = [float(v) for v in str(r.lengths).split(",") if v]
            if r.status == "below_measured":  # pays everywhere measured: below the lowest L
                need.plot([r.concurrency], [min(lengths)], "v", color="black", ms=7)
            elif r.status == "above_measured":  # no L measured pays: above the highest
                need.plot([r.concurrency], [max(lengths)], "^", color="black", ms=7)
    colours = arm_colours(a)
    for arm, drafter, mine in placed_drafters(a, verdict, task):
        if mine:
            reaches = [math.nan if p.reaches is None else p.reaches for p in mine]
            need.plot(
                [p.concurrency for p in mine],
                reaches,
                "o",
                color=colours[arm.name],
                ms=8,
                mfc="none",
                mew=1.6,
                label=f"{arm.name} (k={drafter.num_draft_tokens}) reaches",
            )
    cost.axhline(1.0, color="grey", lw=0.8)
    cost.set_title("round cost (x plain step)", fontsize=9)
    need.set_title("acceptance a round needs to pay (tokens a round)", fontsize=9)
    for ax in (cost, need):
        log2_axis(ax, levels)
        ax.set_xlabel("users (closed loop)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    if not math.isfinite(float(rows["round_cost_ratio"].astype(float).max() or math.nan)):
        cost.text(0.5, 0.5, "no usable surface cell", ha="center", transform=cost.transAxes)
    text = fig.add_subplot(grid[1, :])
    text.axis("off")
    lines = surface_text_lines(a, verdict, task)
    text.text(
        0.0,
        1.0,
        "\n".join(wrap_lines(lines, 150)[:24]),
        va="top",
        ha="left",
        fontdict=MONO,
        transform=text.transAxes,
    )
    save(pdf, fig)


def _verification_page(pdf: PdfPages, a: Analysis, verdict: Verdict, task: str) -> None:
    """The proposed k schedule run at every registered level: its measured speedup with
    its interval against the surface's prediction, each threshold marked, any collapse
    named."""
    study = a.run.study
    assert study.surface is not None and verdict.surface is not None
    rows = [r for r in verdict.surface.verification if r.task == task]
    fig = new_page(
        f"The k schedule verified: task {task}",
        f"{study.surface.drafter}'s engine running the k the surface proposed per"
        " running batch size, at every registered level, against its baseline;"
        " read by no bar",
    )
    grid = fig.add_gridspec(
        2, 1, height_ratios=[1.3, 1.0], left=0.07, right=0.98, top=0.84, bottom=0.05, hspace=0.3
    )
    ax = fig.add_subplot(grid[0, 0])
    ok = [(r, s) for r in rows if r.status == "ok" and (s := r.speedup) is not None]
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
    own = a.speedups[
        (a.speedups["arm"] == study.surface.drafter)
        & (a.speedups["task"] == task)
        & (a.speedups["status"] == "ok")
    ]
    if len(own):
        ax.plot(
            own["concurrency"].astype(float),
            own["speedup"].astype(float),
            "^:",
            color="grey",
            label=f"{study.surface.drafter} at its own k (registered cells)",
        )
    predicted = [(r, p) for r in rows if (p := r.predicted_speedup) is not None]
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
    for r in rows:
        if r.threshold:
            ax.axvline(r.concurrency, color="grey", lw=0.8, ls=":")
        if r.collapse and r.speedup is not None:
            ax.plot([r.concurrency], [r.speedup], "x", color="tab:red", ms=12, mew=2)
    ax.axhline(1.0, color="grey", lw=0.8)
    log2_axis(ax, study.loads.closed_loop.concurrency)
    ax.set_xlabel("users (closed loop)")
    ax.set_ylabel("speedup over the baseline")
    ax.grid(alpha=0.3)
    if ok or predicted or len(own):
        ax.legend(fontsize=7, loc="upper right")
    else:
        ax.text(0.5, 0.5, "no schedule was run (see below)", ha="center", transform=ax.transAxes)
    text = fig.add_subplot(grid[1, 0])
    text.axis("off")
    lines = verification_lines(a, verdict, task)
    text.text(
        0.0,
        1.0,
        "\n".join(wrap_lines(lines, 150)[:24]),
        va="top",
        ha="left",
        fontdict=MONO,
        transform=text.transAxes,
    )
    save(pdf, fig)


def placed_drafters(
    a: Analysis, verdict: Verdict, task: str
) -> list[tuple[Arm, Drafter, list[Placement]]]:
    """Each real drafter arm (with its drafter) and its placements on a task's surface that
    reach a figure."""
    assert verdict.surface is not None
    return [
        (
            arm,
            drafter,
            [
                p
                for p in verdict.surface.placements
                if p.arm == arm.name and p.task == task and p.reaches is not None
            ],
        )
        for arm in a.run.study.arms
        if (drafter := arm.drafter) is not None and not arm.is_control
    ]


def surface_text_lines(a: Analysis, verdict: Verdict, task: str) -> list[str]:
    """The text beneath a task's surface figures (the PDF page and the HTML section)."""
    study = a.run.study
    s = verdict.surface
    assert s is not None and study.surface is not None
    lines = ["break-even (v: every L measured pays; ^: none does):"]
    lines += [
        f"  k={r.k} c={r.concurrency}: {r.label}; round x{_num(r.round_cost_ratio)}"
        f" [{_num(r.round_cost_ratio_ci_lower)}, {_num(r.round_cost_ratio_ci_upper)}]"
        for r in s.break_even
        if r.task == task
    ]
    lines += ["drafters placed on it:"]
    lines += [
        f"  {p.arm} (k={p.k}) c={p.concurrency}: {p.label}" for p in s.placements if p.task == task
    ]
    lines += [f"  {line}" for line in s.loss_of_gain if f" / {task}," in line]
    verified = (
        "verified below"
        if study.surface.verify_schedule
        else "not verified by a run: surface.verify_schedule is off"
    )
    lines += [
        f"k schedule proposed for {study.surface.drafter} (its own per-position acceptance"
        f" over each k's round cost; {verified}):"
    ]
    lines += [
        f"  c={r.concurrency}: {r.label}"
        + (f" [{_num(r.ci_lower)}, {_num(r.ci_upper)}]" if r.k else "")
        + "; "
        + ", ".join(f"k={k} x{v:.2f}" for k, v in r.candidates.items())
        for r in s.schedule
        if r.task == task
    ]
    if task in s.schedule_settings:
        lines.append(f"  setting: {s.schedule_settings[task]}")
    return lines


def verification_lines(a: Analysis, verdict: Verdict, task: str) -> list[str]:
    """The k schedule run for a task: its ranges, its setting, each level's label."""
    assert verdict.surface is not None
    record = a.run.manifest.k_schedules.get(schedule_arm_name(task))
    if record is not None:
        lines = [
            "schedule (batch sizes: k): "
            + ", ".join(
                f"{lo}-{hi if hi is not None else ''}: k={k}" for lo, hi, k in record.ranges
            ),
            f"  setting: {record.setting}",
        ]
    else:
        lines = ["no k schedule was proposed for this task (the run's skipped cells say why)"]
    return lines + [f"  {r.label}" for r in verdict.surface.verification if r.task == task]


def _num(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.2f}"


__all__ = ["placed_drafters", "surface_pages", "surface_text_lines", "verification_lines"]
