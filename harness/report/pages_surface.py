"""The round-cost surface (issue 32), one page per surface task: a round's cost over a
plain step against load, one line per k; the break-even acceptance length against load,
one line per k, with each real drafter's measured tokens per round on it; beneath, where
each drafter pays and why its gain falls with load. Nothing here is read by a bar."""

from __future__ import annotations

import math

from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.tables import Analysis
from harness.report.layout import MONO, log2_axis, new_page, save, wrap_lines
from harness.report.pages_speed import arm_colours
from harness.rundir.verdict import Verdict

K_STYLES = ["-", "--", "-.", ":"]


def surface_pages(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    study = a.run.study
    if study.surface is None or verdict.surface is None:
        return 0
    for task in study.surface_tasks():
        _task_page(pdf, a, verdict, task)
    return len(study.surface_tasks())


def _task_page(pdf: PdfPages, a: Analysis, verdict: Verdict, task: str) -> None:
    study = a.run.study
    assert study.surface is not None and verdict.surface is not None
    levels = study.surface.concurrency
    fig = new_page(f"The round-cost surface: task {task}",
                   f"control arms of {study.surface.drafter} with acceptance set (k"
                   f" {study.surface.k}, L {study.surface.acceptance_length}); break-even L:"
                   " where the speedup's interval reaches 1.0, interpolated; read by no bar")
    grid = fig.add_gridspec(2, 2, height_ratios=[1.3, 1.0], left=0.07, right=0.98, top=0.84,
                            bottom=0.05, wspace=0.22, hspace=0.3)
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
        need.plot(located["concurrency"].astype(float),
                  located["break_even_length"].astype(float), f"s{style}", color="black",
                  ms=5, label=f"break-even, k={k}")
        for r in g.itertuples():
            lengths = [float(v) for v in str(r.lengths).split(",") if v]
            if r.status == "below_measured":  # pays everywhere measured: below the lowest L
                need.plot([r.concurrency], [min(lengths)], "v", color="black", ms=7)
            elif r.status == "above_measured":  # no L measured pays: above the highest
                need.plot([r.concurrency], [max(lengths)], "^", color="black", ms=7)
    colours = arm_colours(a)
    for arm in study.arms:
        if arm.drafter is None or arm.is_control:
            continue
        mine = [p for p in verdict.surface.placements if p.arm == arm.name and p.task == task
                and p.reaches is not None]
        if mine:
            need.plot([p.concurrency for p in mine], [p.reaches for p in mine], "o",
                      color=colours[arm.name], ms=8, mfc="none", mew=1.6,
                      label=f"{arm.name} (k={arm.drafter.num_draft_tokens}) reaches")
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
    lines = ["break-even (v: every L measured pays; ^: none does):"]
    lines += [f"  k={r.k} c={r.concurrency}: {r.label}; round x{_num(r.round_cost_ratio)}"
              f" [{_num(r.round_cost_ratio_ci_lower)}, {_num(r.round_cost_ratio_ci_upper)}]"
              for r in verdict.surface.break_even if r.task == task]
    lines += ["drafters placed on it:"]
    lines += [f"  {p.arm} (k={p.k}) c={p.concurrency}: {p.label}"
              for p in verdict.surface.placements if p.task == task]
    lines += [f"  {line}" for line in verdict.surface.loss_of_gain if f" / {task}," in line]
    lines += [f"k schedule proposed for {study.surface.drafter} (its own per-position acceptance"
              " over each k's round cost; not verified by a run):"]
    lines += [f"  c={r.concurrency}: {r.label}"
              + (f" [{_num(r.ci_lower)}, {_num(r.ci_upper)}]" if r.k else "")
              + "; " + ", ".join(f"k={k} x{v:.2f}" for k, v in r.candidates.items())
              for r in verdict.surface.schedule if r.task == task]
    if task in verdict.surface.schedule_settings:
        lines.append(f"  setting: {verdict.surface.schedule_settings[task]}")
    text.text(0.0, 1.0, "\n".join(wrap_lines(lines, 150)[:24]), va="top", ha="left",
              fontdict=MONO, transform=text.transAxes)
    save(pdf, fig)


def _num(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.2f}"


__all__ = ["surface_pages"]
