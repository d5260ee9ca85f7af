"""SPEED-Bench by category (the per-category acceptance matrix, with intervals) and, for
its throughput configurations, by input length."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.analysis.rows import CategoryRow, SpeedupRow
from harness.analysis.tables import Analysis
from harness.report.layout import table_lines
from harness.report.views.series import Estimates, figures
from harness.rundir.verdict import Verdict

ValueWithBounds = tuple[
    float | None, float | None, float | None
]  # a figure and its interval's edges
# Each panel's title, and the figure of a category's row it draws.
PANELS: tuple[tuple[str, Callable[[CategoryRow], ValueWithBounds]], ...] = (
    ("speedup", lambda r: (r.speedup, r.ci_lower, r.ci_upper)),
    (
        "tokens per round (client)",
        lambda r: (r.tokens_per_round, r.tokens_per_round_ci_lower, r.tokens_per_round_ci_upper),
    ),
    (
        "acceptance rate (engine, per request)",
        lambda r: (r.acceptance_rate, r.acceptance_ci_lower, r.acceptance_ci_upper),
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


def category_table_lines(rows: list[CategoryRow]) -> list[str]:
    table = [[getattr(r, c) for c in TABLE_COLUMNS] for r in rows]
    return table_lines(TABLE_COLUMNS, table)


@dataclass(frozen=True)
class CategorySeries:
    """One drafter arm at one level: a figure per category, with its interval."""

    arm: str
    concurrency: int
    categories: tuple[str, ...]  # in table order
    figures: Estimates


@dataclass(frozen=True)
class CategoryPanel:
    title: str
    series: list[CategorySeries]  # one a drafter arm and level, in table order


@dataclass(frozen=True)
class TaskCategories:
    task: str
    title: str  # the task and its configuration
    unavailable: str  # why the task has no category figures; "" when it has
    subtitle: str
    categories: list[str]  # those with a usable row (status ok), in table order
    panels: list[CategoryPanel]  # one a PANELS entry, over the usable rows
    table_lines: list[str]


def category_panels(usable: list[CategoryRow]) -> list[CategoryPanel]:
    """Each panel's series: one a drafter arm and level, its categories in table order."""
    by_series: dict[tuple[str, int], list[CategoryRow]] = {}
    for r in usable:
        by_series.setdefault((r.arm, r.concurrency), []).append(r)
    panels = []
    for title, figure in PANELS:
        series = []
        for (arm, c), rows in by_series.items():
            value, lower, upper = zip(*(figure(r) for r in rows), strict=True)
            series.append(
                CategorySeries(
                    arm,
                    c,
                    tuple(r.category for r in rows),
                    Estimates(figures(value), figures(lower), figures(upper)),
                )
            )
        panels.append(CategoryPanel(title, series))
    return panels


@dataclass(frozen=True)
class LengthSeries:
    """A drafter arm's speedups at one level, a throughput configuration each."""

    arm: str
    concurrency: int
    lengths: tuple[str, ...]  # each speedup's input length, shortest first
    speedup: Estimates


@dataclass(frozen=True)
class InputLengths:
    """The throughput configurations' speedups (their categories pooled) by input length."""

    title: str
    subtitle: str
    order: list[str]  # the input lengths, shortest first
    series: list[LengthSeries]  # one a drafter arm and level


@dataclass(frozen=True)
class CategoriesView:
    title: str
    subtitle: str
    none: str  # why there is no category figure at all; "" when there is
    tasks: list[TaskCategories]
    lengths: InputLengths | None


def build_categories_view(a: Analysis, v: Verdict) -> CategoriesView:
    by_task: dict[str, list[CategoryRow]] = {}
    for r in a.rows("categories", CategoryRow):
        by_task.setdefault(r.task, []).append(r)
    tasks = []
    for task, rows in by_task.items():
        unavailable = [r for r in rows if r.status == "unavailable"]
        usable = [r for r in rows if r.status == "ok"]
        tasks.append(
            TaskCategories(
                str(task),
                f"{task} ({rows[0].config})",
                str(unavailable[0].reason) if unavailable else "",
                category_subtitle(a, str(task)),
                list(dict.fromkeys(r.category for r in usable)),
                category_panels(usable),
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
        [_length_series(arm, c, rows, lengths, order) for (arm, c), rows in series.items()],
    )


def _length_series(
    arm: str, c: int, rows: list[SpeedupRow], lengths: dict[str, str], order: list[str]
) -> LengthSeries:
    rows = sorted(rows, key=lambda r: order.index(lengths[r.task]))
    return LengthSeries(
        arm,
        c,
        tuple(lengths[r.task] for r in rows),
        Estimates(
            figures(r.speedup for r in rows),
            figures(r.ci_lower for r in rows),
            figures(r.ci_upper for r in rows),
        ),
    )
