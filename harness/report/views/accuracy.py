"""Accuracy with intervals and paired comparisons; greedy identity."""

from __future__ import annotations

from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.accuracy import compare_accuracy
from harness.analysis.tables import Analysis
from harness.report.layout import empty_axes, new_page, save, table_lines, text_pages
from harness.report.views import arm_colours
from harness.rundir.verdict import Verdict


def accuracy_pages(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    acc = a.accuracy[a.accuracy["status"] == "complete"]
    tasks = list(dict.fromkeys(a.accuracy["task"])) or ["(none)"]
    colours = arm_colours(a)
    judged = a.run.study.bars.pass_.accuracy
    level = judged.level if judged else 0.95
    fig = new_page(
        "Accuracy",
        f"each arm's accuracy with its Wilson {level:.0%} interval;"
        " bar-judged tasks: " + (", ".join(judged.tasks) if judged else "none"),
    )
    axes = fig.subplots(1, len(tasks), squeeze=False)[0]
    fig.subplots_adjust(left=0.07, right=0.98, top=0.84, bottom=0.28, wspace=0.3)
    for ax, task in zip(axes, tasks, strict=True):
        rows = acc[acc["task"] == task]
        if rows.empty:
            empty_axes(ax, "no usable accuracy cells")
            ax.set_title(f"task: {task}", fontsize=11)
            continue
        xs = range(len(rows))
        for x, r in zip(xs, rows.itertuples(), strict=True):
            ax.errorbar(
                [x],
                [r.accuracy],
                yerr=[[r.accuracy - r.ci_lower], [r.ci_upper - r.accuracy]],
                fmt="o",
                color=colours.get(r.arm, "black"),
                capsize=4,
            )
        ax.set_xticks(list(xs))
        ax.set_xticklabels(rows["arm"], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("accuracy (share correct)")
        mark = " (judged)" if judged and task in judged.tasks else " (reported)"
        ax.set_title(f"task: {task}{mark}", fontsize=11)
        ax.grid(alpha=0.3, axis="y")
        ax.set_xlim(-0.5, len(rows) - 0.5)
        ax.set_ylim(
            max(0, rows["ci_lower"].min() - 0.1) - 0.02, min(1, rows["ci_upper"].max() + 0.1) + 0.02
        )
    save(pdf, fig)
    return 1 + text_pages(pdf, "Accuracy: paired comparisons", paired_lines(a))


def paired_lines(a: Analysis) -> list[str]:
    """Each drafter against its baseline on the same items (exact McNemar)."""
    judged = a.run.study.bars.pass_.accuracy
    level = judged.level if judged else 0.95
    lines = [
        (
            "Paired comparisons, each drafter arm (A) against its baseline (B) on the same items;"
            " exact McNemar p over the discordant pairs."
        ),
        "",
    ]
    rows_out = []
    for arm, baseline in (
        (x, x.baseline) for x in a.run.study.arms if x.baseline is not None and not x.is_control
    ):
        for task in dict.fromkeys(a.accuracy["task"]):
            d, b = a.run.find(arm.name, task, "accuracy"), a.run.find(baseline, task, "accuracy")
            if not (d.usable and b.usable and d.scores is not None and b.scores is not None):
                rows_out.append(
                    [
                        task,
                        arm.name,
                        arm.baseline,
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                        "cells not usable",
                    ]
                )
                continue
            cmp = compare_accuracy(d, b, level)
            p = cmp.paired
            lo, hi = cmp.baseline_interval
            rows_out.append(
                [
                    task,
                    arm.name,
                    arm.baseline,
                    cmp.n,
                    f"{cmp.accuracy:.3f}",
                    f"{cmp.baseline_accuracy:.3f}",
                    f"[{lo:.3f}, {hi:.3f}]",
                    p.both_right,
                    p.only_a,
                    p.only_b,
                    p.both_wrong,
                    f"{p.mcnemar_p:.3g}" + ("" if cmp.within else "  OUTSIDE"),
                ]
            )
    lines += table_lines(
        [
            "task",
            "arm A",
            "baseline B",
            "n",
            "acc A",
            "acc B",
            "B interval",
            "both right",
            "only A",
            "only B",
            "both wrong",
            "McNemar p",
        ],
        rows_out,
    )
    return lines
