"""The HTML report's per-cell figures (plotly), each drawing what its PDF page draws:
acceptance over each cell and per draft position, acceptance measured against its parts,
accuracy with its intervals, open loop against offered rate, and GPU telemetry."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from harness.analysis.tables import Analysis
from harness.report.html_plotly import empty, floats, grid
from harness.report.views import arm_colours
from harness.report.views.acceptance import NO_SERIES, AcceptanceView, ArmAcceptance
from harness.report.views.accuracy import AccuracyView
from harness.report.views.consistency import NO_POINTS, ConsistencyView
from harness.report.views.gpu import GpuView
from harness.report.views.open_loop import OpenLoopView


def acceptance_figure(view: AcceptanceView, arm: ArmAcceptance, task: str) -> go.Figure:
    """Top: the engine's tokens per drafting round each second of each speed cell;
    bottom: the share of rounds keeping >= i drafts, one line per level."""
    shades = sample_colorscale("Viridis", list(view.shades.values()))
    colours = dict(zip(view.shades, shades, strict=True))
    fig = grid(
        2,
        1,
        [
            f"{task}: tokens per round as its engine counts them, each second",
            f"{task}: acceptance rate at draft position i",
        ],
        height=620,
    )
    any_series = any_pos = False
    for level in arm.tasks[task]:
        c = level.concurrency
        if not level.no_seconds:
            fig.add_trace(
                go.Scatter(
                    x=floats(level.seconds),
                    y=floats(level.tokens_per_round),
                    mode="lines",
                    name=f"c={c}",
                    legendgroup=f"c={c}",
                    line={"color": colours[c], "width": 1.5},
                ),
                row=1,
                col=1,
            )
            any_series = True
        if level.position_rates:
            rates = level.position_rates
            fig.add_trace(
                go.Scatter(
                    x=list(range(1, len(rates) + 1)),
                    y=floats(rates),
                    mode="lines+markers",
                    name=f"c={c}",
                    legendgroup=f"c={c}",
                    showlegend=not any_series,
                    line={"color": colours[c]},
                ),
                row=2,
                col=1,
            )
            any_pos = True
    fig.update_xaxes(title_text="seconds since the cell's first scrape", row=1, col=1)
    fig.update_xaxes(title_text="draft position i", dtick=1, row=2, col=1)
    fig.update_yaxes(range=[0, 1.05], row=2, col=1)
    if not any_series:
        empty(fig, NO_SERIES, 1, 1)
    if not any_pos:
        empty(fig, arm.no_positions, 2, 1)
    return fig


def consistency_figure(a: Analysis, view: ConsistencyView) -> go.Figure:
    """One point per drafter speed cell: the engine's tokens per round against 1 + the sum
    of its per-position rates, and against the client's tokens per decode step."""
    colours = arm_colours(a)
    fig = grid(1, 2, [p.title for p in view.panels], height=440)
    for col, panel, xlabel in zip(
        (1, 2),
        view.panels,
        ("1 + sum of per-position acceptance rates", "client: tokens per decode step"),
        strict=True,
    ):
        for points in panel.arms:
            fig.add_trace(
                go.Scatter(
                    x=points.x,
                    y=points.y,
                    mode="markers",
                    name=points.arm,
                    legendgroup=points.arm,
                    showlegend=col == 1,
                    text=points.cells,
                    marker={"color": colours[points.arm], "size": 9},
                ),
                row=1,
                col=col,
            )
        fig.update_xaxes(title_text=xlabel, row=1, col=col)
        fig.update_yaxes(title_text="engine: tokens per round", row=1, col=col)
        if panel.diagonal is not None:
            fig.add_trace(
                go.Scatter(
                    x=list(panel.diagonal),
                    y=list(panel.diagonal),
                    mode="lines",
                    line={"color": "grey", "dash": "dash", "width": 1},
                    name="agree",
                    showlegend=col == 1,
                ),
                row=1,
                col=col,
            )
        else:
            empty(fig, NO_POINTS, 1, col)
    return fig


def accuracy_figure(a: Analysis, view: AccuracyView) -> go.Figure:
    """Each arm's accuracy with its Wilson interval, one panel per task."""
    colours = arm_colours(a)
    fig = grid(1, len(view.panels), [p.title for p in view.panels], height=400)
    for col, panel in enumerate(view.panels, start=1):
        if panel.empty:
            empty(fig, "no usable accuracy cells", 1, col)
            continue
        for arm, acc, lo, hi in zip(
            panel.arms,
            panel.accuracy.tolist(),
            panel.lower.tolist(),
            panel.upper.tolist(),
            strict=True,
        ):
            fig.add_trace(
                go.Scatter(
                    x=[arm],
                    y=[acc],
                    mode="markers",
                    name=arm,
                    legendgroup=arm,
                    showlegend=False,
                    marker={"color": colours.get(arm, "#000000"), "size": 10},
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": [hi - acc],
                        "arrayminus": [acc - lo],
                    },
                ),
                row=1,
                col=col,
            )
        fig.update_yaxes(title_text="accuracy (share correct)", row=1, col=col)
    return fig


def open_loop_figure(view: OpenLoopView) -> go.Figure:
    """Per engine group: the objective's latency against offered rate, and the client's
    queueing beneath."""
    groups = view.groups
    fig = grid(
        2,
        len(groups),
        [f"engine group: {b}" for b in groups] + [""] * len(groups),
        height=560,
        shared_xaxes=True,
        row_heights=[0.65, 0.35],
    )
    for col, curves in enumerate(groups.values(), start=1):
        for c in curves:
            kw = {"name": c.arm, "legendgroup": c.arm, "line": {"color": c.colour}}
            for row, latency in ((1, c.objective_s), (2, c.queue_p99_s)):
                fig.add_trace(
                    go.Scatter(
                        x=c.rate_rps,
                        y=floats(latency),
                        mode="lines+markers",
                        **({} if row == 1 else {"showlegend": False}),
                        **kw,
                    ),
                    row=row,
                    col=col,
                )
        fig.add_hline(
            view.max_s,
            line={"color": "#c62828", "dash": "dash"},
            row=1,
            col=col,
            annotation_text=f"objective {view.max_s:g} s",
        )
        fig.update_yaxes(title_text=f"{view.objective} (s)", row=1, col=col)
        fig.update_yaxes(title_text="client queueing p99 (s)", row=2, col=col)
        fig.update_xaxes(title_text="offered rate (requests/s)", row=2, col=col)
        if not curves:
            empty(fig, "no usable open-loop cells", 1, col)
    return fig


def gpu_figure(view: GpuView) -> go.Figure:
    """Clocks, power and temperature across the run, throttled readings marked."""
    fig = grid(3, 1, ["clock (MHz)", "power (W)", "temperature (C)"], height=820, shared_xaxes=True)
    for t in view.traces:
        x, gpu = floats(t.minutes), t.gpu
        for row, figure, name in (
            (1, t.sm_clock_mhz, "SM"),
            (1, t.mem_clock_mhz, "memory"),
            (2, t.power_w, "draw"),
            (2, t.power_limit_w, "limit"),
            (3, t.temperature_c, "temperature"),
        ):
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=floats(figure),
                    mode="lines+markers",
                    marker={"size": 3},
                    name=f"GPU {gpu} {name}",
                    text=list(t.cells),
                ),
                row=row,
                col=1,
            )
        for row, figure in ((1, t.sm_clock_mhz), (2, t.power_w), (3, t.temperature_c)):
            if t.throttled.any():
                fig.add_trace(
                    go.Scatter(
                        x=floats(t.minutes[t.throttled]),
                        y=floats(figure[t.throttled]),
                        mode="markers",
                        name=f"GPU {gpu} throttled",
                        showlegend=row == 1,
                        legendgroup=f"hot{gpu}",
                        marker={"symbol": "x", "color": "#c62828", "size": 8},
                    ),
                    row=row,
                    col=1,
                )
    for _cell, lo, hi in view.cell_spans:
        fig.add_vrect(
            x0=lo, x1=hi, fillcolor="#000000", opacity=0.05, line_width=0, row="all", col=1
        )
    fig.update_xaxes(
        title_text="minutes since the run's first GPU reading (alternate shading: cells)",
        row=3,
        col=1,
    )
    return fig
