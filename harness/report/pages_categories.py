"""SPEED-Bench by category (the per-category acceptance matrix, with intervals) and, for
its throughput configurations, by input length."""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.tables import Analysis
from harness.report.layout import new_page, save, table_lines, text_pages
from harness.report.views import arm_colours
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
MARKERS = ("o", "s", "D", "^", "v", "P")
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


def _num(v: object) -> float:
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return f


def _panel(
    ax,
    rows: pd.DataFrame,
    categories: list[str],
    col: str,
    lo: str,
    hi: str,
    colours: dict[str, str],
) -> None:
    series = list(rows.groupby(["arm", "concurrency"], sort=False))
    width = 0.7 / max(1, len(series))
    for j, ((arm, c), grp) in enumerate(series):
        by_cat = {r.category: r for r in grp.itertuples()}
        xs, ys, los, his = [], [], [], []
        for i, cat in enumerate(categories):
            r = by_cat.get(cat)
            y = _num(getattr(r, col)) if r is not None else math.nan
            if math.isnan(y):
                continue
            xs.append(i - 0.35 + width * (j + 0.5))
            ys.append(y)
            low, high = _num(getattr(r, lo)), _num(getattr(r, hi))
            los.append(0.0 if math.isnan(low) else max(0.0, y - low))
            his.append(0.0 if math.isnan(high) else max(0.0, high - y))
        ax.errorbar(
            xs,
            ys,
            yerr=[los, his],
            fmt=MARKERS[j % len(MARKERS)],
            ms=4,
            capsize=2,
            lw=1,
            color=colours.get(str(arm), "#444444"),
            label=f"{arm} c={c}",
        )
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(categories, rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(categories) - 0.4)
    ax.grid(axis="y", alpha=0.3)


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


def category_pages(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    """Per SPEED-Bench task: speedup, tokens per round and acceptance by category, each
    with its interval, then the table; and the throughput configurations by input length."""
    df = a.categories
    if df is None or not len(df):
        return 0
    colours = arm_colours(a)
    pages = 0
    for task, rows in df.groupby("task", sort=False):
        config = rows["config"].iloc[0]
        unavailable = rows[rows["status"] == "unavailable"]
        if len(unavailable):
            pages += text_pages(
                pdf, f"SPEED-Bench by category: {task}", [str(unavailable["reason"].iloc[0])]
            )
            continue
        categories = list(dict.fromkeys(rows["category"]))
        fig = new_page(
            f"SPEED-Bench by category: {task} ({config})", category_subtitle(a, str(task))
        )
        axes = fig.subplots(1, len(PANELS), squeeze=False)[0]
        fig.subplots_adjust(left=0.06, right=0.98, top=0.83, bottom=0.2, wspace=0.25)
        for ax, (col, lo, hi, title) in zip(axes, PANELS, strict=True):
            _panel(ax, rows[rows["status"] == "ok"], categories, col, lo, hi, colours)
            ax.set_title(title, fontsize=10)
        axes[0].axhline(1.0, color="black", lw=0.8)
        handles, labels = axes[0].get_legend_handles_labels()
        if handles:
            fig.legend(
                handles,
                labels,
                loc="lower center",
                ncol=min(6, len(labels)),
                fontsize=8,
                frameon=False,
            )
        save(pdf, fig)
        pages += 1
        pages += text_pages(
            pdf, f"SPEED-Bench by category: {task}, the figures", category_table_lines(rows)
        )
    pages += _input_length_page(pdf, a)
    return pages


def _input_length_page(pdf: PdfPages, a: Analysis) -> int:
    """The throughput configurations' speedups (all categories) against input length."""
    lengths = {
        t.name: t.config.removeprefix("throughput_")
        for t in a.run.study.tasks
        if t.kind == "speed_bench"
        and t.config
        and t.config.startswith("throughput_")
        and "speed" in t.uses
    }
    if not lengths:
        return 0
    sp = a.speedups[a.speedups["task"].isin(lengths) & (a.speedups["status"] == "ok")].copy()
    sp["input_length"] = sp["task"].map(lengths)
    order = sorted(set(lengths.values()), key=lambda s: int(s.rstrip("k")))
    fig = new_page(
        "SPEED-Bench by input length",
        "speedup of each drafter arm per throughput configuration (its registered"
        " categories pooled), with its interval; one line per arm and concurrency",
    )
    ax = fig.subplots(1, 1)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.85, bottom=0.15)
    colours = arm_colours(a)
    series = list(sp.groupby(["arm", "concurrency"], sort=False))
    for j, ((arm, c), grp) in enumerate(series):
        # Side by side at each length, so that overlapping intervals stay readable.
        shift = (j - (len(series) - 1) / 2) * 0.3 / max(1, len(series))
        grp = grp.assign(x=grp["input_length"].map(order.index) + shift).sort_values("x")
        y = grp["speedup"].astype(float)
        ax.errorbar(
            grp["x"],
            y,
            yerr=[
                (y - grp["ci_lower"].astype(float)).clip(lower=0),
                (grp["ci_upper"].astype(float) - y).clip(lower=0),
            ],
            fmt=MARKERS[j % len(MARKERS)] + "-",
            ms=4,
            capsize=2,
            color=colours.get(str(arm)),
            label=f"{arm} c={c}",
        )
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(order)
    ax.set_xlabel("input length (configuration)")
    ax.set_ylabel("speedup")
    ax.legend(fontsize=8, frameon=False)
    save(pdf, fig)
    return 1
