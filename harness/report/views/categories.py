"""SPEED-Bench by category (the per-category acceptance matrix, with intervals) and, for
its throughput configurations, by input length."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.analysis.rows import SpeedupRow
from harness.analysis.tables import Analysis
from harness.report.layout import table_lines
from harness.rundir.verdict import Verdict

# (column, its interval's columns, the panel's title)
PANELS = (
    ("speedup", "ci_lower", "ci_upper", "speedup"),
    (
        "tokens_per_round",
        "tokens_per_round_ci_lower",
        "tokens_per_round_ci_upper",
        "tokens per round (client)",
    ),
    (
        "acceptance_rate",
        "acceptance_ci_lower",
        "acceptance_ci_upper",
        "acceptance rate (engine, per request)",
    ),
)
TABLE_COLUMNS = [
    "arm",
    "concurrency",
    "category",
    "n_items",
    "n_drafter",
    "speedup",
    "ci_lower",
    "ci_upper",
    "tokens_per_round",
    "tokens_per_round_ci_lower",
    "tokens_per_round_ci_upper",
    "acceptance_rate",
    "acceptance_ci_lower",
    "acceptance_ci_upper",
    "status",
]


def category_subtitle(a: Analysis, task: str) -> str:
    level = a.run.study.bars.intervals.level
    turns = (
        "every turn of a multi-turn item, sent as one session (turns: all)"
        if a.run.study.task(task).turns == "all"
        else "a multi-turn item's first turn only (turns: first)"
    )
    dropped = a.run.manifest.speed_bench_placeholders.get(task, {})
    held = [f"{c} {h} of {n}" for c, (h, n) in dropped.items() if h]
    empty = [c for c, (h, n) in dropped.items() if h == n]
    return (
        f"per drafter arm and concurrency; bars = {level:.0%} intervals (speedup and"
        " tokens per round: the speedup's registered rule; acceptance: a bootstrap over"
        f" the category's requests); {turns}"
        + (
            f". Placeholder rows dropped, never sent (placeholders: drop): {', '.join(held)}"
            + (f"; categories left empty: {', '.join(empty)}" if empty else "")
            if held
            else ""
        )
    )


def category_table_lines(rows: pd.DataFrame) -> list[str]:
    table = [[r.get(c) for c in TABLE_COLUMNS] for r in rows.to_dict("records")]
    return table_lines(TABLE_COLUMNS, table)


@dataclass(frozen=True)
class TaskCategories:
    task: str
    title: str  # the task and its configuration
    unavailable: str  # why the task has no category figures; "" when it has
    subtitle: str
    rows: pd.DataFrame  # the task's usable rows (status ok)
    table_lines: list[str]


@dataclass(frozen=True)
class InputLengths:
    """The throughput configurations' speedups (their categories pooled) by input length."""

    title: str
    subtitle: str
    order: list[str]  # the input lengths, shortest first
    lengths: dict[str, str]  # each throughput task's input length
    series: list[tuple[str, int, list[SpeedupRow]]]  # (arm, c, its rows, shortest first)


@dataclass(frozen=True)
class CategoriesView:
    title: str
    subtitle: str
    none: str  # why there is no category figure at all; "" when there is
    tasks: list[TaskCategories]
    lengths: InputLengths | None


def build_categories_view(a: Analysis, v: Verdict) -> CategoriesView:
    df = a.categories
    tasks = []
    for task, rows in (df if df is not None else pd.DataFrame({"task": []})).groupby(
        "task", sort=False
    ):
        unavailable = rows[rows["status"] == "unavailable"]
        tasks.append(
            TaskCategories(
                str(task),
                f"{task} ({rows['config'].iloc[0]})",
                str(unavailable["reason"].iloc[0]) if len(unavailable) else "",
                category_subtitle(a, str(task)),
                rows[rows["status"] == "ok"],
                category_table_lines(rows),
            )
        )
    return CategoriesView(
        "SPEED-Bench by category",
        "the per-category acceptance matrix, with intervals; a throughput"
        " configuration is one input length",
        "" if tasks else "the study has no SPEED-Bench speed task",
        tasks,
        _input_lengths(a) if tasks else None,
    )


def _input_lengths(a: Analysis) -> InputLengths | None:
    lengths = {
        t.name: t.config.removeprefix("throughput_")
        for t in a.run.study.tasks
        if t.kind == "speed_bench"
        and t.config
        and t.config.startswith("throughput_")
        and "speed" in t.uses
    }
    if not lengths:
        return None
    order = sorted(set(lengths.values()), key=lambda s: int(s.rstrip("k")))
    series: dict[tuple[str, int], list[SpeedupRow]] = {}
    for r in a.speedups_of(usable=True):
        if r.task in lengths:
            series.setdefault((r.arm, r.concurrency), []).append(r)
    return InputLengths(
        "SPEED-Bench by input length",
        "speedup of each drafter arm per throughput configuration (its registered"
        " categories pooled), with its interval; one line per arm and concurrency",
        order,
        lengths,
        [
            (arm, c, sorted(rows, key=lambda r: order.index(lengths[r.task])))
            for (arm, c), rows in series.items()
        ],
    )
