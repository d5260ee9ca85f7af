"""`specbench compare RUN_A RUN_B --html PATH`: the comparison as a page of its own, one
self-contained file like the run's HTML report: B's speedup over A's with its interval per
arm x task x level (a figure, then the table with which arm moved), acceptance and round
cost side by side, and what differs in the runs' records."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from harness.analysis.compare import family_label, family_summary, interval_label, row_warnings
from harness.numbers import number_text
from harness.report.html_page import html_page
from harness.report.html_plotly import empty, figure_div, floats, grid, log2_x
from harness.report.html_text import escape, table_html

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]


def ratio_figure(rows: pd.DataFrame) -> go.Figure:
    """B/A per level with its interval, one line per arm, a panel per task."""
    tasks = list(dict.fromkeys(rows["task"])) if len(rows) else ["(no shared cell)"]
    fig = grid(1, len(tasks), [f"task: {t}" for t in tasks], height=420)
    arms = list(dict.fromkeys(rows["arm"])) if len(rows) else []
    colours = {arm: PALETTE[i % len(PALETTE)] for i, arm in enumerate(arms)}
    for col, task in enumerate(tasks, start=1):
        mine = rows[rows["task"] == task] if len(rows) else rows
        compared = mine[mine["ratio_lower"].notna()] if len(mine) else mine
        for arm, g in compared.groupby("arm", sort=False) if len(compared) else []:
            g = g.sort_values("concurrency")
            ratio = g["ratio"].astype(float)
            fig.add_trace(
                go.Scatter(
                    x=g["concurrency"],
                    y=floats(ratio),
                    mode="lines+markers",
                    name=arm,
                    legendgroup=arm,
                    showlegend=col == 1,
                    line={"color": colours[arm]},
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": floats(g["ratio_upper"].astype(float) - ratio),
                        "arrayminus": floats(ratio - g["ratio_lower"].astype(float)),
                    },
                    customdata=list(zip(g["status"], g["moved"], strict=True)),
                    hovertemplate=(
                        f"{arm}<br>users %{{x}}<br>B/A %{{y:.3f}}<br>%{{customdata[0]}}"
                        "<br>%{customdata[1]}<extra></extra>"
                    ),
                ),
                row=1,
                col=col,
            )
        fig.add_hline(1.0, line={"color": "black", "width": 1}, row=1, col=col)
        levels = sorted({int(c) for c in mine["concurrency"]}) if len(mine) else []
        log2_x(fig, levels, 1, col)
        fig.update_yaxes(title_text="B's speedup / A's", row=1, col=col)
        if compared.empty:
            empty(fig, "no level compared (a status is not ok, or an interval is missing)", 1, col)
    return fig


def _with_interval(v: object, lo: object, hi: object, spec: str = ".2f") -> str:
    return f"{number_text(v, spec)} [{number_text(lo, spec)}, {number_text(hi, spec)}]"


def speedup_table_html(rows: pd.DataFrame, level: float) -> str:
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
        for r in rows.itertuples()
    ]
    return table_html(headers, body, numeric=("users", "B/A"))


def acceptance_table(rows: pd.DataFrame) -> str:
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
        for r in rows.itertuples()
    ]
    return table_html(headers, body, numeric=headers[2:])


def compare_page(
    rows: pd.DataFrame, env: list[tuple[str, str, str]], run_a: str, run_b: str, level: float
) -> str:
    """The page; rows from analysis.compare.compare_speedups, env from
    environment_differences."""
    z_note = (
        f"each run's speedup with its {level:.0%} interval; B/A with a t interval on the"
        " difference of the runs' session log ratios (Student's, or Welch's where the"
        " spreads differ); one session in each run: within sessions only"
    )
    moved = [
        f"{r.arm}/{r.task} c={r.concurrency}: {r.status} ({r.moved})"
        for r in rows.itertuples()
        if str(r.status).startswith(("B slower", "B faster"))
    ]
    summary = (
        "".join(f'<p class="note">{escape(w)}</p>' for w in row_warnings(rows)) if len(rows) else ""
    )
    summary += (
        f"<p>{len(rows)} arm x task x level rows shared;"
        f" {len(moved)} outside the interval of 1.0."
        + (f" {escape(family_summary(rows, level))}.</p>" if len(rows) else "</p>")
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
            speedup_table_html(rows, level) if len(rows) else '<p class="note">no shared cell</p>',
        ),
        (
            "acceptance",
            "Acceptance and round cost side by side",
            "tokens per round from the client's chunks and from the engine's counters; a round's"
            " cost over the baseline's plain step",
            acceptance_table(rows) if len(rows) else "",
        ),
        ("environment", "What differs in the environment", "manifest.json of each run", env_html),
    ]
    return html_page(
        f"specbench compare: {run_a} vs {run_b}", f"A = {run_a}, B = {run_b}", sections
    )
