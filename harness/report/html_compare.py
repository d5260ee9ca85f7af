"""`specbench compare RUN_A RUN_B --html PATH`: the comparison as a page of its own, one
self-contained file like the run's HTML report: B's speedup over A's with its interval per
arm x task x level (a figure, then the table with which arm moved), acceptance and round
cost side by side, and what differs in the runs' records."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from harness.analysis.compare import family_label, family_summary, interval_label, row_warnings
from harness.analysis.frame import rows_of
from harness.analysis.rows import CompareRow
from harness.numbers import number_text
from harness.report.html_page import html_page
from harness.report.html_plotly import empty, figure_div, floats, grid, log2_x
from harness.report.html_text import escape, table_html

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]


@dataclass(frozen=True)
class RatioCurve:
    """One arm's B/A at each level of a task compared, with its interval."""

    arm: str
    users: np.ndarray  # the levels, ascending (int)
    ratio: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    status: tuple[str, ...]  # each level's reading, and which arm moved
    moved: tuple[str | None, ...]


def ratio_curves(rows: list[CompareRow]) -> list[RatioCurve]:
    """Per arm (in the rows' order), its rows with an interval, by level."""
    compared = [r for r in rows if _present(r.ratio_lower)]
    curves = []
    for arm in dict.fromkeys(r.arm for r in compared):
        mine = sorted((r for r in compared if r.arm == arm), key=lambda r: r.concurrency)
        curves.append(
            RatioCurve(
                arm,
                np.array([r.concurrency for r in mine], dtype=np.int64),
                _figures(r.ratio for r in mine),
                _figures(r.ratio_lower for r in mine),
                _figures(r.ratio_upper for r in mine),
                tuple(r.status for r in mine),
                tuple(r.moved for r in mine),
            )
        )
    return curves


def _present(v: float | None) -> bool:
    return v is not None and v == v


def _figures(values: Iterable[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def ratio_figure(rows: list[CompareRow]) -> go.Figure:
    """B/A per level with its interval, one line per arm, a panel per task."""
    tasks = list(dict.fromkeys(r.task for r in rows)) or ["(no shared cell)"]
    fig = grid(1, len(tasks), [f"task: {t}" for t in tasks], height=420)
    arms = list(dict.fromkeys(r.arm for r in rows))
    colours = {arm: PALETTE[i % len(PALETTE)] for i, arm in enumerate(arms)}
    for col, task in enumerate(tasks, start=1):
        mine = [r for r in rows if r.task == task]
        curves = ratio_curves(mine)
        for c in curves:
            fig.add_trace(
                go.Scatter(
                    x=c.users,
                    y=floats(c.ratio),
                    mode="lines+markers",
                    name=c.arm,
                    legendgroup=c.arm,
                    showlegend=col == 1,
                    line={"color": colours[c.arm]},
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": floats(c.upper - c.ratio),
                        "arrayminus": floats(c.ratio - c.lower),
                    },
                    customdata=list(zip(c.status, c.moved, strict=True)),
                    hovertemplate=(
                        f"{c.arm}<br>users %{{x}}<br>B/A %{{y:.3f}}<br>%{{customdata[0]}}"
                        "<br>%{customdata[1]}<extra></extra>"
                    ),
                ),
                row=1,
                col=col,
            )
        fig.add_hline(1.0, line={"color": "black", "width": 1}, row=1, col=col)
        log2_x(fig, sorted({int(r.concurrency) for r in mine}), 1, col)
        fig.update_yaxes(title_text="B's speedup / A's", row=1, col=col)
        if not curves:
            empty(fig, "no level compared (a status is not ok, or an interval is missing)", 1, col)
    return fig


def _with_interval(v: object, lo: object, hi: object, spec: str = ".2f") -> str:
    return f"{number_text(v, spec)} [{number_text(lo, spec)}, {number_text(hi, spec)}]"


def speedup_table_html(rows: list[CompareRow], level: float) -> str:
    headers = [
        "task",
        "arm",
        "users",
        f"A speedup [{level:.0%}]",
        f"B speedup [{level:.0%}]",
        "B/A",
        "B/A interval",
        "test",
        "family-wise",
        "status",
        "which arm moved",
    ]
    body = [
        [
            r.task,
            r.arm,
            r.concurrency,
            _with_interval(r.speedup_a, r.ci_lower_a, r.ci_upper_a),
            _with_interval(r.speedup_b, r.ci_lower_b, r.ci_upper_b),
            number_text(r.ratio, ".3f"),
            f"[{number_text(r.ratio_lower, '.3f')}, {number_text(r.ratio_upper, '.3f')}]",
            interval_label(r),
            family_label(r),
            r.status,
            r.moved,
        ]
        for r in rows
    ]
    return table_html(headers, body, numeric=("users", "B/A"))


def acceptance_table(rows: list[CompareRow]) -> str:
    headers = [
        "task",
        "arm",
        "users",
        "tokens/round A",
        "tokens/round B",
        "engine 1+sum(p) A",
        "engine 1+sum(p) B",
        "round cost A",
        "round cost B",
    ]
    body = [
        [
            r.task,
            r.arm,
            r.concurrency,
            number_text(r.tokens_per_round_a),
            number_text(r.tokens_per_round_b),
            number_text(r.engine_tokens_per_round_a),
            number_text(r.engine_tokens_per_round_b),
            number_text(r.round_cost_ratio_a),
            number_text(r.round_cost_ratio_b),
        ]
        for r in rows
    ]
    return table_html(headers, body, numeric=headers[2:])


def compare_page(
    table: pd.DataFrame, env: list[tuple[str, str, str]], run_a: str, run_b: str, level: float
) -> str:
    """The page; table from analysis.compare.compare_speedups (read as its rows), env from
    environment_differences."""
    rows = rows_of(table, CompareRow)
    z_note = (
        f"each run's speedup with its {level:.0%} interval; B/A with a t interval on the"
        " difference of the runs' session log ratios (Student's, or Welch's where the"
        " spreads differ); one session in each run: within sessions only"
    )
    moved = [
        f"{r.arm}/{r.task} c={r.concurrency}: {r.status} ({r.moved})"
        for r in rows
        if str(r.status).startswith(("B slower", "B faster"))
    ]
    summary = (
        "".join(f'<p class="note">{escape(w)}</p>' for w in row_warnings(table)) if rows else ""
    )
    summary += (
        f"<p>{len(rows)} arm x task x level rows shared;"
        f" {len(moved)} outside the interval of 1.0."
        + (f" {escape(family_summary(table, level))}.</p>" if rows else "</p>")
    )
    if moved:
        summary += "<ul>" + "".join(f"<li>{escape(m)}</li>" for m in moved) + "</ul>"
    env_html = (
        table_html(["what differs", "A", "B"], [list(e) for e in env])
        if env
        else '<p class="note">nothing recorded differs (seal, host, engine versions and'
        " settings)</p>"
    )
    sections = [
        (
            "ratios",
            "B's speedup over A's",
            z_note,
            summary + f'<div class="figure">{figure_div(ratio_figure(rows), "fig-1")}</div>',
        ),
        (
            "speedups",
            "Speedups per arm x task x level",
            z_note,
            speedup_table_html(rows, level) if rows else '<p class="note">no shared cell</p>',
        ),
        (
            "acceptance",
            "Acceptance and round cost side by side",
            "tokens per round from the client's chunks and from the engine's counters; a round's"
            " cost over the baseline's plain step",
            acceptance_table(rows) if rows else "",
        ),
        ("environment", "What differs in the environment", "manifest.json of each run", env_html),
    ]
    return html_page(
        f"specbench compare: {run_a} vs {run_b}", f"A = {run_a}, B = {run_b}", sections
    )
