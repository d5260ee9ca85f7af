"""The HTML report's round-cost surface figures (plotly), each drawing what the surface page
draws: a round's cost and break-even acceptance per k, and the k schedule's verification."""

from __future__ import annotations

import plotly.graph_objects as go

from harness.analysis.tables import Analysis
from harness.report.html_plotly import band, empty, floats, grid, log2_x
from harness.report.pages_surface import placed_drafters
from harness.report.views import arm_colours
from harness.rundir.verdict import Verdict

K_DASHES = ["solid", "dash", "dashdot", "dot"]


def surface_figure(a: Analysis, verdict: Verdict, task: str) -> go.Figure:
    """A round's cost over a plain step per k; the break-even acceptance length per k, with
    each real drafter's measured tokens per round placed on it."""
    study = a.run.study
    assert study.surface is not None and verdict.surface is not None
    fig = grid(
        1,
        2,
        ["round cost (x plain step)", "acceptance a round needs to pay (tokens a round)"],
        height=420,
    )
    rows = a.surface[a.surface["task"] == task]
    for i, (k, grp) in enumerate(rows.groupby("k", sort=True)):
        g = grp.sort_values("concurrency")
        dash = K_DASHES[i % len(K_DASHES)]
        band(
            fig,
            g["concurrency"],
            g["round_cost_ratio_ci_lower"],
            g["round_cost_ratio_ci_upper"],
            "#808080",
            f"k={k}",
            1,
            1,
        )
        fig.add_trace(
            go.Scatter(
                x=g["concurrency"],
                y=floats(g["round_cost_ratio"]),
                mode="lines+markers",
                name=f"k={k}",
                legendgroup=f"k={k}",
                line={"color": "black", "dash": dash},
            ),
            row=1,
            col=1,
        )
        located = g[g["status"] == "located"]
        fig.add_trace(
            go.Scatter(
                x=located["concurrency"],
                y=floats(located["break_even_length"]),
                mode="lines+markers",
                name=f"break-even, k={k}",
                legendgroup=f"k={k}",
                marker={"symbol": "square"},
                line={"color": "black", "dash": dash},
            ),
            row=1,
            col=2,
        )
        for r in g.itertuples():  # v: every L measured pays; ^: none does
            lengths = [float(v) for v in str(r.lengths).split(",") if v]
            if r.status in ("below_measured", "above_measured") and lengths:
                below = r.status == "below_measured"
                fig.add_trace(
                    go.Scatter(
                        x=[r.concurrency],
                        y=[min(lengths) if below else max(lengths)],
                        mode="markers",
                        showlegend=False,
                        legendgroup=f"k={k}",
                        name="pays at every L measured" if below else "no L measured pays",
                        marker={
                            "symbol": "triangle-down" if below else "triangle-up",
                            "size": 11,
                            "color": "black",
                        },
                    ),
                    row=1,
                    col=2,
                )
    colours = arm_colours(a)
    for arm, drafter, mine in placed_drafters(a, verdict, task):
        if mine:
            fig.add_trace(
                go.Scatter(
                    x=[p.concurrency for p in mine],
                    y=[p.reaches for p in mine],
                    mode="markers",
                    name=f"{arm.name} (k={drafter.num_draft_tokens}) reaches",
                    text=[p.label for p in mine],
                    marker={
                        "symbol": "circle-open",
                        "size": 13,
                        "color": colours[arm.name],
                        "line": {"width": 2},
                    },
                ),
                row=1,
                col=2,
            )
    fig.add_hline(1.0, line={"color": "grey", "width": 1}, row=1, col=1)
    for col in (1, 2):
        log2_x(fig, study.surface.concurrency, 1, col, "users (closed loop)")
    if rows.empty or not rows["round_cost_ratio"].astype(float).notna().any():
        empty(fig, "no usable surface cell", 1, 1)
    return fig


def verification_figure(a: Analysis, verdict: Verdict, task: str) -> go.Figure:
    """The k schedule run at every registered level: measured speedup with its interval,
    the surface's prediction with its own, the drafter at its own k; thresholds dotted,
    collapses crossed."""
    study = a.run.study
    assert study.surface is not None and verdict.surface is not None
    fig = grid(1, 1, ["speedup over the baseline"], height=380)
    rows = [r for r in verdict.surface.verification if r.task == task]
    ok = [r for r in rows if r.status == "ok" and r.speedup is not None]
    band(
        fig,
        [r.concurrency for r in ok],
        [r.ci_lower for r in ok],
        [r.ci_upper for r in ok],
        "#000000",
        "measured",
        1,
        1,
    )
    fig.add_trace(
        go.Scatter(
            x=[r.concurrency for r in ok],
            y=[r.speedup for r in ok],
            mode="lines+markers",
            name="measured (95 % interval)",
            legendgroup="measured",
            text=[r.label for r in ok],
            line={"color": "black"},
        ),
        row=1,
        col=1,
    )
    predicted = [(r, p) for r in rows if (p := r.predicted_speedup) is not None]
    fig.add_trace(
        go.Scatter(
            x=[r.concurrency for r, _ in predicted],
            y=[p for _, p in predicted],
            mode="lines+markers",
            name="predicted from the surface",
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [(r.predicted_ci_upper or p) - p for r, p in predicted],
                "arrayminus": [p - (r.predicted_ci_lower or p) for r, p in predicted],
            },
            marker={"symbol": "square-open"},
            line={"color": "#636efa", "dash": "dash"},
        ),
        row=1,
        col=1,
    )
    own = a.speedups[
        (a.speedups["arm"] == study.surface.drafter)
        & (a.speedups["task"] == task)
        & (a.speedups["status"] == "ok")
    ]
    if len(own):
        fig.add_trace(
            go.Scatter(
                x=own["concurrency"],
                y=floats(own["speedup"]),
                mode="lines+markers",
                line={"color": "grey", "dash": "dot"},
                name=f"{study.surface.drafter} at its own k",
            ),
            row=1,
            col=1,
        )
    collapses = [r for r in ok if r.collapse]
    if collapses:
        fig.add_trace(
            go.Scatter(
                x=[r.concurrency for r in collapses],
                y=[r.speedup for r in collapses],
                mode="markers",
                name="collapse",
                text=[r.label for r in collapses],
                marker={"symbol": "x", "size": 14, "color": "#EF553B"},
            ),
            row=1,
            col=1,
        )
    for r in rows:
        if r.threshold:
            fig.add_vline(r.concurrency, line={"color": "grey", "width": 1, "dash": "dot"})
    fig.add_hline(1.0, line={"color": "grey", "width": 1}, row=1, col=1)
    log2_x(fig, study.loads.closed_loop.concurrency, 1, 1, "users (closed loop)")
    if not ok and not predicted:
        empty(fig, "no schedule was run", 1, 1)
    return fig
