"""What the accuracy section shows: each arm's accuracy with its interval per task, and
each drafter against its baseline on the same items."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.analysis.accuracy import compare_accuracy
from harness.analysis.rows import AccuracyRow
from harness.analysis.tables import Analysis
from harness.report.layout import table_lines
from harness.rundir.verdict import Verdict


@dataclass(frozen=True)
class AccuracyPanel:
    """A task's complete accuracy cells, one an arm: its accuracy with its interval."""

    task: str
    title: str  # the task, and whether a bar judges it
    arms: tuple[str, ...]
    accuracy: np.ndarray
    lower: np.ndarray
    upper: np.ndarray

    @property
    def empty(self) -> bool:
        return not self.arms


def _panel(task: str, title: str, cells: list[AccuracyRow]) -> AccuracyPanel:
    def figures(values: list[float | None]) -> np.ndarray:
        return np.array([np.nan if v is None else v for v in values], dtype=float)

    return AccuracyPanel(
        task,
        title,
        tuple(r.arm for r in cells),
        figures([r.accuracy for r in cells]),
        figures([r.ci_lower for r in cells]),
        figures([r.ci_upper for r in cells]),
    )


@dataclass(frozen=True)
class AccuracyView:
    title: str
    subtitle: str
    panels: list[AccuracyPanel]
    paired_title: str
    paired_lines: list[str]


def build_accuracy_view(a: Analysis, v: Verdict) -> AccuracyView:
    cells = a.rows("accuracy", AccuracyRow)
    complete = [r for r in cells if r.status == "complete"]
    judged = a.run.study.bars.pass_.accuracy
    level = judged.level if judged else 0.95
    tasks = list(dict.fromkeys(r.task for r in cells))
    panels = [
        _panel(
            task,
            f"task: {task}" + (" (judged)" if judged and task in judged.tasks else " (reported)"),
            [r for r in complete if r.task == task],
        )
        for task in tasks
    ] or [_panel("(none)", "task: (none)", complete)]
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
    rows_out: list[list[object]] = []
    for arm, baseline in (
        (x, x.baseline) for x in a.run.study.arms if x.baseline is not None and not x.is_control
    ):
        for task in dict.fromkeys(r.task for r in a.rows("accuracy", AccuracyRow)):
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
