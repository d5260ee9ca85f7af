"""What the accuracy section shows: each arm's accuracy with its interval per task, and
each drafter against its baseline on the same items."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.analysis.accuracy import compare_accuracy
from harness.analysis.tables import Analysis
from harness.report.layout import table_lines
from harness.rundir.verdict import Verdict


@dataclass(frozen=True)
class AccuracyPanel:
    task: str
    title: str  # the task, and whether a bar judges it
    rows: pd.DataFrame  # each arm's complete accuracy cell: arm, accuracy, ci_lower, ci_upper


@dataclass(frozen=True)
class AccuracyView:
    title: str
    subtitle: str
    panels: list[AccuracyPanel]
    paired_title: str
    paired_lines: list[str]


def build_accuracy_view(a: Analysis, v: Verdict) -> AccuracyView:
    acc = a.accuracy[a.accuracy["status"] == "complete"]
    judged = a.run.study.bars.pass_.accuracy
    level = judged.level if judged else 0.95
    tasks = list(dict.fromkeys(a.accuracy["task"]))
    panels = [
        AccuracyPanel(
            task,
            f"task: {task}" + (" (judged)" if judged and task in judged.tasks else " (reported)"),
            acc[acc["task"] == task],
        )
        for task in tasks
    ] or [AccuracyPanel("(none)", "task: (none)", acc)]
    return AccuracyView(
        "Accuracy",
        f"each arm's accuracy with its Wilson {level:.0%} interval;"
        " bar-judged tasks: " + (", ".join(judged.tasks) if judged else "none"),
        panels,
        "Accuracy: paired comparisons",
        paired_lines(a),
    )


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
