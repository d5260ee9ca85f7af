"""The HTML report's round-cost surface figures (plotly), each drawing what the surface page
draws: a round's cost and break-even acceptance per k, and the k schedule's verification."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from harness.analysis.tables import Analysis
from harness.report.html_plotly import band, empty, floats, grid, log2_x
from harness.report.views import arm_colours
from harness.report.views.surface import SurfaceTask, SurfaceView, Verification

K_DASHES = ["solid", "dash", "dashdot", "dot"]


def surface_figure(a: Analysis, view: SurfaceView, task: SurfaceTask) -> go.Figure:
    """A round's cost over a plain step per k; the break-even acceptance length per k, with
    each real drafter's measured tokens per round placed on it."""
    fig = grid(
        1,
        2,
        ["round cost (x plain step)", "acceptance a round needs to pay (tokens a round)"],
        height=420,
    )
    for i, line in enumerate(task.ks):
        c, k = line.cost, line.k
        dash = K_DASHES[i % len(K_DASHES)]
        band(fig, c.users, c.lower, c.upper, "#808080", f"k={k}", 1, 1)
        fig.add_trace(
            go.Scatter(
                x=c.users,
                y=floats(c.ratio),
                mode="lines+markers",
                name=f"k={k}",
                legendgroup=f"k={k}",
                line={"color": "black", "dash": dash},
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=line.break_even.users,
                y=floats(line.break_even.length),
                mode="lines+markers",
                name=f"break-even, k={k}",
                legendgroup=f"k={k}",
                marker={"symbol": "square"},
                line={"color": "black", "dash": dash},
            ),
            row=1,
            col=2,
        )
        for users, length, below in line.bounds:  # v: every L measured pays; ^: none does
            fig.add_trace(
                go.Scatter(
                    x=[users],
                    y=[length],
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
    for drafter in task.drafters:
        mine = drafter.placements
        fig.add_trace(
            go.Scatter(
                x=[p.concurrency for p in mine],
                y=[p.reaches for p in mine],
                mode="markers",
                name=drafter.label,
                text=[p.label for p in mine],
                marker={
                    "symbol": "circle-open",
                    "size": 13,
                    "color": colours[drafter.arm],
                    "line": {"width": 2},
                },
            ),
            row=1,
            col=2,
        )
    fig.add_hline(1.0, line={"color": "grey", "width": 1}, row=1, col=1)
    for col in (1, 2):
        log2_x(fig, view.levels, 1, col, "users (closed loop)")
    if task.no_cell:
        empty(fig, "no usable surface cell", 1, 1)
    return fig


def verification_figure(view: SurfaceView, v: Verification) -> go.Figure:
    """The k schedule run at every registered level: measured speedup with its interval,
    the surface's prediction with its own, the drafter at its own k; thresholds dotted,
    collapses crossed."""
    fig = grid(1, 1, ["speedup over the baseline"], height=380)
    ok = v.ok
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
    predicted = [(r, p) for r in v.predicted if (p := r.predicted_speedup) is not None]
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
    own = v.own
    if len(own):
        fig.add_trace(
            go.Scatter(
                x=np.array([r.concurrency for r in own], dtype=np.int64),  # as the table held them
                y=floats(r.speedup for r in own),
                mode="lines+markers",
                line={"color": "grey", "dash": "dot"},
                name=f"{view.drafter} at its own k",
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
    for r in v.rows:
        if r.threshold:
            fig.add_vline(r.concurrency, line={"color": "grey", "width": 1, "dash": "dot"})
    fig.add_hline(1.0, line={"color": "grey", "width": 1}, row=1, col=1)
    log2_x(fig, v.levels, 1, 1, "users (closed loop)")
    if not ok and not predicted:
        empty(fig, "no schedule was run", 1, 1)
    return fig
